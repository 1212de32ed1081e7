"""The device kernels (workbench/kernels/gpu.py) against the CPU kernels, in numba's CUDA simulator.

Not collected by the suite itself (its name does not start with ``test_``):
``tests/test_kernels_gpu.py`` runs it in a pytest process of its own with ``NUMBA_ENABLE_CUDASIM=1``,
which must be set before numba's CUDA module is first imported (Dask imports it in the suite's
process). On a machine with a GPU, ``pytest tests/gpu_sim_cases.py`` without that variable runs the
same cases on the device. Sizes are small: the simulator runs each GPU thread as a Python thread.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from workbench.kernels import gpu
from workbench.kernels.histogram import histogram1d as cpu_histogram1d
from workbench.kernels.kmeans import kmeans_partial as cpu_kmeans_partial
from workbench.kernels.linalg import matrix_add_reference, multiply_accumulate_reference

RNG = np.random.default_rng(39)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_histogram_counts_equal_numpys_edges_and_outliers_included(dtype):
    low, high, bins = -2.0, 2.0, 40
    edges = np.linspace(low, high, bins + 1).astype(dtype)
    values = np.concatenate(
        [
            RNG.normal(size=700).astype(dtype),
            edges,  # every edge exactly, and its neighbours
            np.nextafter(edges, dtype(np.inf)),
            np.nextafter(edges, dtype(-np.inf)),
            np.array([np.nan, np.inf, -np.inf, 1e30, -1e30], dtype=dtype),
        ]
    )
    counts = gpu.histogram1d(cuda.to_device(values), bins, (low, high))
    assert counts.dtype == np.int64
    np.testing.assert_array_equal(counts, np.histogram(values, bins, (low, high))[0])
    np.testing.assert_array_equal(counts, cpu_histogram1d(values, bins, (low, high)))


def test_a_histogram_wider_than_shared_memory_counts_in_device_memory():
    bins = gpu.SHARED_BINS + 1
    values = RNG.uniform(0.0, 1.0, size=500)
    counts = gpu.histogram1d(cuda.to_device(values), bins, (0.0, 1.0))
    np.testing.assert_array_equal(counts, np.histogram(values, bins, (0.0, 1.0))[0])


def test_an_empty_array_has_zero_counts():
    np.testing.assert_array_equal(gpu.histogram1d(cuda.to_device(np.empty(0)), 3, (0, 1)), np.zeros(3, np.int64))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kmeans_partial_sums_and_counts_equal_the_cpu_kernels(dtype):
    points = RNG.normal(size=(400, 3)).astype(dtype)
    points[7] = np.nan  # a NaN distance never wins: the point goes to centre 0, as on the CPU
    centres = RNG.normal(size=(5, 3))
    centres[3] = centres[1]  # a tie: the first of the nearest centres takes the point, as on the CPU
    sums, counts = gpu.kmeans_partial(cuda.to_device(points), centres)
    _, cpu_sums, cpu_counts = cpu_kmeans_partial(points, centres)
    np.testing.assert_array_equal(counts, cpu_counts)
    assert counts[1] > 0 and counts[3] == 0
    np.testing.assert_allclose(sums, cpu_sums, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matrix_add_multiply_accumulate_and_triad_equal_the_references(dtype):
    a, b = RNG.normal(size=(24, 17)).astype(dtype), RNG.normal(size=(17, 9)).astype(dtype)
    c = RNG.normal(size=(24, 9)).astype(dtype)
    added = gpu.matrix_add(cuda.to_device(a), cuda.to_device(a)).copy_to_host()
    np.testing.assert_array_equal(added, matrix_add_reference(a, a))
    product = gpu.multiply_accumulate(cuda.to_device(a), cuda.to_device(b), cuda.to_device(c.copy())).copy_to_host()
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(product, multiply_accumulate_reference(a, b, c.copy()), rtol=tolerance, atol=tolerance)
    x, y = np.arange(300, dtype=dtype), np.ones(300, dtype=dtype)
    out = gpu.stream_triad(cuda.to_device(np.zeros(300, dtype)), cuda.to_device(y), cuda.to_device(x), 3.0)
    np.testing.assert_array_equal(out.copy_to_host(), y + dtype(3.0) * x)


def test_bad_operands_are_refused_with_what_to_do():
    with pytest.raises(TypeError, match="must be a device array .*to_device"):
        gpu.histogram1d(np.zeros(3), 3, (0, 1))
    with pytest.raises(TypeError, match="float32 or float64"):
        gpu.histogram1d(cuda.to_device(np.zeros(3, np.int32)), 3, (0, 1))
    with pytest.raises(ValueError, match="must be 1-D"):
        gpu.histogram1d(cuda.to_device(np.zeros((3, 3))), 3, (0, 1))
    with pytest.raises(ValueError, match="centres must have shape"):
        gpu.kmeans_partial(cuda.to_device(np.zeros((4, 3))), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="b must have 3 rows"):
        gpu.multiply_accumulate(*(cuda.to_device(np.zeros(s)) for s in ((2, 3), (4, 2), (2, 2))))
    with pytest.raises(TypeError, match="must have dtype float64"):
        gpu.matrix_add(cuda.to_device(np.zeros((2, 2))), cuda.to_device(np.zeros((2, 2), np.float32)))
    with pytest.raises(ValueError, match="finite"):
        gpu.stream_triad(*(cuda.to_device(np.zeros(4)) for _ in range(3)), np.nan)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_operands_that_are_the_output_give_the_cpu_kernels_answers(dtype):
    x = RNG.normal(size=(20, 20)).astype(dtype)
    y = RNG.normal(size=(20, 20)).astype(dtype)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for a_is_c, b_is_c in ((True, False), (False, True), (True, True)):
        c = cuda.to_device(x)
        a = c if a_is_c else cuda.to_device(x)
        b = c if b_is_c else cuda.to_device(y)
        expected = x + (x @ (x if b_is_c else y))
        np.testing.assert_allclose(
            gpu.multiply_accumulate(a, b, c).copy_to_host(), expected, rtol=tolerance, atol=tolerance
        )
    big = cuda.to_device(RNG.normal(size=(20, 30)).astype(dtype))  # c overlaps a by half: still the CPU's answer
    host = big.copy_to_host()
    square_a, square_c = big[:, 0:20], big[:, 10:30]
    expected = host[:, 10:30] + host[:, 0:20] @ y
    np.testing.assert_allclose(
        gpu.multiply_accumulate(square_a, cuda.to_device(y), square_c).copy_to_host(),
        expected,
        rtol=tolerance,
        atol=tolerance,
    )
    a, b = cuda.to_device(x), cuda.to_device(y)
    np.testing.assert_array_equal(gpu.matrix_add(a, b, a).copy_to_host(), x + y)  # out = a: element-wise, fine
    np.testing.assert_array_equal(gpu.matrix_add(b, a, a[:, :]).copy_to_host(), (x + y) + y)  # the same view
    v = cuda.to_device(np.arange(50, dtype=dtype))
    gpu.stream_triad(v, v, v, 2.0)
    np.testing.assert_array_equal(v.copy_to_host(), np.arange(50, dtype=dtype) * 3)


def test_an_output_partly_overlapping_an_input_is_refused_as_on_the_cpu():
    from workbench.kernels.linalg import matrix_add as cpu_matrix_add

    host = RNG.normal(size=(8, 12))
    with pytest.raises(ValueError, match="a and out overlap in memory"):
        cpu_matrix_add(host[:, 0:8], host[:, 0:8], host[:, 4:12])
    device = cuda.to_device(host)
    before = device.copy_to_host()
    with pytest.raises(ValueError, match="a and out overlap in memory.*copy"):
        gpu.matrix_add(device[:, 0:8], cuda.to_device(np.ones((8, 8))), device[:, 4:12])
    with pytest.raises(ValueError, match="b and out overlap in memory"):
        gpu.matrix_add(cuda.to_device(np.ones((8, 6))), device[:, 0:12:2], device[:, 0:12:2][:, ::-1])  # reversed
    vector = cuda.to_device(np.arange(40.0))
    with pytest.raises(ValueError, match="c and a overlap in memory"):
        gpu.stream_triad(vector[0:20], cuda.to_device(np.ones(20)), vector[10:30], 1.0)
    np.testing.assert_array_equal(device.copy_to_host(), before)  # refused before anything ran
    interleaved_a, interleaved_out = device[:, 0:12:2], device[:, 1:12:2]  # the same bytes' span, no element shared
    np.testing.assert_array_equal(
        gpu.matrix_add(interleaved_a, interleaved_a, interleaved_out).copy_to_host(), 2 * before[:, 0:12:2]
    )
