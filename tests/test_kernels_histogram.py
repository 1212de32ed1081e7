import numpy as np
import pytest

import kernels
from kernels.histogram import _one_step_suffices, _dd_layout

PARALLEL = [False, True]


@pytest.mark.parametrize("parallel", PARALLEL)
@pytest.mark.parametrize("bins,low,high", [(1, 0.0, 1.0), (10, 0.0, 1.0), (37, -1.5, 2.25), (1000, 0.1, 0.3)])
def test_histogram1d_equals_numpy_on_random_values(rng, parallel, bins, low, high):
    x = rng.normal(0.5, 1.0, 100_003)  # many values outside every range tried
    got = kernels.histogram1d(x, bins, (low, high), parallel=parallel)
    assert got.dtype == np.int64
    assert np.array_equal(got, kernels.histogram1d_reference(x, bins, (low, high)))


@pytest.mark.parametrize("parallel", PARALLEL)
def test_histogram1d_edges_nan_and_inf(parallel):
    bins, rng_ = 7, (0.1, 0.8)
    edges = np.linspace(*rng_, bins + 1)
    x = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [np.nan, np.inf, -np.inf]])
    got = kernels.histogram1d(x, bins, rng_, parallel=parallel)
    assert np.array_equal(got, np.histogram(x[np.isfinite(x)], bins, rng_)[0])
    # numpy puts the right edge into the last bin
    assert kernels.histogram1d(np.array([0.8]), bins, rng_)[-1] == 1


def test_histogram1d_float32_int_and_empty(rng):
    x32 = rng.random(50_000).astype(np.float32)
    assert np.array_equal(kernels.histogram1d(x32, 13, (0.05, 0.95)), np.histogram(x32, 13, (0.05, 0.95))[0])
    ints = rng.integers(-5, 20, 10_000)
    assert np.array_equal(kernels.histogram1d(ints, 5, (0, 10)), np.histogram(ints, 5, (0, 10))[0])
    assert np.array_equal(kernels.histogram1d(np.empty(0), 4, (0, 1)), np.zeros(4, np.int64))


@pytest.mark.parametrize("parallel", PARALLEL)
@pytest.mark.parametrize("dims,bins", [(1, 4), (2, (3, 5)), (3, 6), (5, 8), (5, (2, 3, 4, 5, 6))])
def test_histogramdd_equals_numpy_on_random_points(rng, parallel, dims, bins):
    points = rng.normal(0.5, 0.4, (20_011, dims))
    ranges = [(0.0, 1.0)] * (dims - 1) + [(-0.25, 0.75)]
    got = kernels.histogramdd(points, bins, ranges, parallel=parallel)
    assert np.array_equal(got, kernels.histogramdd_reference(points, bins, ranges))


@pytest.mark.parametrize("parallel", PARALLEL)
def test_histogramdd_edge_values_nan_and_float32(rng, parallel):
    edges = np.linspace(-1.0, 1.0, 9)
    grid = np.array(np.meshgrid(edges, edges)).reshape(2, -1).T  # every edge pair, right edges too
    extra = np.array([[np.nan, 0.0], [0.0, np.inf], [1.0, 1.0], [-1.0, -1.0], [1.0 + 1e-16, 0.0]])
    points = np.vstack([grid, extra, rng.uniform(-1.2, 1.2, (1000, 2))])
    expected = np.histogramdd(points, 8, [(-1, 1), (-1, 1)])[0]
    assert np.array_equal(kernels.histogramdd(points, 8, [(-1, 1), (-1, 1)], parallel=parallel), expected)
    p32 = points.astype(np.float32)
    assert np.array_equal(kernels.histogramdd(p32, 8, [(-1, 1), (-1, 1)], parallel=parallel), np.histogramdd(p32, 8, [(-1, 1), (-1, 1)])[0])


def test_histogramdd_bins_a_few_ulps_wide_take_the_exact_path():
    eps = np.finfo(float).eps
    ranges = [(1.0 - 40 * eps, 1.0 + 40 * eps)]
    edges, n_bins, _ = _dd_layout(1, 64, ranges)
    assert not _one_step_suffices(edges, n_bins)
    x = (1.0 + np.arange(-50, 50) * eps)[:, None]
    assert np.array_equal(kernels.histogramdd(x, 64, ranges), kernels.histogramdd_reference(x, 64, ranges))


def test_histogramdd_empty_and_shape():
    counts = kernels.histogramdd(np.empty((0, 3)), (2, 3, 4), [(0, 1)] * 3)
    assert counts.shape == (2, 3, 4) and counts.sum() == 0


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: kernels.histogram1d([1.0, 2.0], 4, (0, 1)), TypeError, "x must be a numpy.ndarray"),
        (lambda: kernels.histogram1d(np.zeros((2, 2)), 4, (0, 1)), ValueError, "x must be 1-D"),
        (lambda: kernels.histogram1d(np.zeros(3, complex), 4, (0, 1)), TypeError, "x must hold real numbers"),
        (lambda: kernels.histogram1d(np.zeros(3), 0, (0, 1)), ValueError, "bins must be a positive integer"),
        (lambda: kernels.histogram1d(np.zeros(3), 2.5, (0, 1)), ValueError, "bins must be a positive integer"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (1, 1)), ValueError, "range must have low < high"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (0, np.inf)), ValueError, "range must be finite"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, 5), ValueError, "range must be a (low, high) pair"),
        (lambda: kernels.histogramdd(np.zeros(3), 4, [(0, 1)]), ValueError, "points must be 2-D"),
        (lambda: kernels.histogramdd(np.zeros((3, 2)), (4, 4, 4), [(0, 1)] * 2), ValueError, "one count per dimension (2)"),
        (lambda: kernels.histogramdd(np.zeros((3, 2)), 4, [(0, 1)]), ValueError, "one (low, high) pair per dimension (2)"),
        (lambda: kernels.histogramdd(np.zeros((3, 2)), 4, [(0, 1), (2, 1)]), ValueError, "range[1] must have low < high"),
        (lambda: kernels.histogramdd(np.zeros((3, 2)), (4, -1), [(0, 1)] * 2), ValueError, "bins[1] must be a positive integer"),
        (lambda: kernels.histogramdd(np.zeros((3, 2), object), 4, [(0, 1)] * 2), TypeError, "points must hold real numbers"),
    ],
)
def test_histogram_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_histogramdd_adds_to_a_table(rng):
    a, b = rng.random((1000, 3)), rng.random((777, 3))
    table = kernels.histogramdd(a, 4, [(0, 1)] * 3)
    assert kernels.histogramdd(b, 4, [(0, 1)] * 3, add_to=table) is table
    np.testing.assert_array_equal(table, kernels.histogramdd_reference(np.vstack([a, b]), 4, [(0, 1)] * 3))
    with pytest.raises(ValueError, match="add_to must be a C-contiguous int64 array of shape \\(4, 4, 4\\)"):
        kernels.histogramdd(a, 4, [(0, 1)] * 3, add_to=np.zeros((4, 4), np.int64))
    frozen = np.zeros((4, 4, 4), np.int64)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="add_to is read-only"):
        kernels.histogramdd(a, 4, [(0, 1)] * 3, add_to=frozen)
