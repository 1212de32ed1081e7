import numpy as np
import pytest

import kernels


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("n,d,k", [(1, 1, 1), (1000, 2, 3), (20_001, 16, 5), (500, 64, 4)])
def test_kmeans_partial_equals_numpy(rng, parallel, n, d, k):
    points, centres = rng.random((n, d)), rng.random((k, d))
    labels, sums, counts = kernels.kmeans_partial(points, centres, parallel=parallel)
    ref_labels, ref_sums, ref_counts = kernels.kmeans_partial_reference(points, centres)
    assert np.array_equal(labels, ref_labels)
    assert np.array_equal(counts, ref_counts) and counts.sum() == n
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-12, atol=1e-12)


def test_kmeans_ties_go_to_the_lowest_centre_and_empty_blocks_are_fine():
    centres = np.array([[0.0, 0.0], [2.0, 0.0]])
    labels, _, counts = kernels.kmeans_partial(np.array([[1.0, 0.0]]), centres)
    assert labels[0] == 0 and list(counts) == [1, 0]
    labels, sums, counts = kernels.kmeans_partial(np.empty((0, 2)), centres)
    assert labels.size == 0 and not sums.any() and not counts.any()


def test_kmeans_float32_points_and_update_keeps_empty_centres(rng):
    points = rng.random((3000, 4)).astype(np.float32)
    centres = np.vstack([rng.random((2, 4)), [[50.0] * 4]])  # the third centre attracts no point
    labels, sums, counts = kernels.kmeans_partial(points, centres)
    assert np.array_equal(labels, kernels.kmeans_partial_reference(points, centres)[0])
    new = kernels.kmeans_update(sums, counts, centres)
    np.testing.assert_array_equal(new[2], centres[2])
    np.testing.assert_allclose(new[0], points[labels == 0].mean(axis=0, dtype=np.float64), rtol=1e-6)


@pytest.mark.parametrize(
    "points,centres,error,words",
    [
        (np.zeros((4, 3)), np.zeros((2, 2)), ValueError, "centres must have shape (2, 3)"),
        (np.zeros(4), np.zeros((2, 1)), ValueError, "points must be 2-D"),
        (np.zeros((4, 3), int), np.zeros((2, 3)), TypeError, "points must have dtype float32 or float64"),
        (np.zeros((4, 3)), np.zeros((0, 3)), ValueError, "centres must hold at least one centre"),
        ([[0.0]], np.zeros((1, 1)), TypeError, "points must be a numpy.ndarray"),
    ],
)
def test_kmeans_bad_input(points, centres, error, words):
    with pytest.raises(error) as info:
        kernels.kmeans_partial(points, centres)
    assert words in str(info.value)


@pytest.mark.parametrize("parallel", [False, True])
def test_matrix_add_with_and_without_out(rng, parallel):
    a, b = rng.random((65, 33)), rng.random((65, 33))
    np.testing.assert_array_equal(kernels.matrix_add(a, b, parallel=parallel), a + b)
    out = np.empty_like(a)
    assert kernels.matrix_add(a, b, out, parallel=parallel) is out
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_multiply_accumulate_is_in_place(rng, dtype):
    a, b = rng.random((40, 30)).astype(dtype), rng.random((30, 20)).astype(dtype)
    c = rng.random((40, 20)).astype(dtype)
    expected = c + a @ b
    assert kernels.multiply_accumulate(a, b, c) is c
    np.testing.assert_allclose(c, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    empty = np.zeros((3, 0))
    c0 = np.ones((3, 2))
    kernels.multiply_accumulate(empty, np.zeros((0, 2)), c0)
    assert (c0 == 1).all()


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: kernels.matrix_add(np.zeros((2, 2)), np.zeros((2, 3))), ValueError, "b must have shape (2, 2)"),
        (lambda: kernels.matrix_add(np.zeros((2, 2)), np.zeros((2, 2), np.float32)), TypeError, "a and b must share one dtype"),
        (lambda: kernels.matrix_add(np.zeros((2, 2)), np.zeros((2, 2)), [[0.0, 0.0], [0.0, 0.0]]), TypeError, "out must be a numpy.ndarray"),
        (lambda: kernels.multiply_accumulate(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3))), ValueError, "b must have 3 rows"),
        (lambda: kernels.multiply_accumulate(np.zeros((2, 3)), np.zeros((3, 4)), np.zeros((2, 3))), ValueError, "c must have shape (2, 4)"),
    ],
)
def test_linalg_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_read_only_output_is_refused_before_any_write():
    c = np.zeros((2, 2))
    c.setflags(write=False)
    with pytest.raises(ValueError, match="c is read-only"):
        kernels.multiply_accumulate(np.ones((2, 2)), np.ones((2, 2)), c)
