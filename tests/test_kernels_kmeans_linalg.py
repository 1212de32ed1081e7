import numpy as np
import pytest

from workbench import kernels
from workbench.kernels.testing import LAYOUTS, read_only, refused_dtypes


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
        (
            lambda: kernels.matrix_add(np.zeros((2, 2)), np.zeros((2, 2), np.float32)),
            TypeError,
            "a and b must share one dtype",
        ),
        (
            lambda: kernels.matrix_add(np.zeros((2, 2)), np.zeros((2, 2)), [[0.0, 0.0], [0.0, 0.0]]),
            TypeError,
            "out must be a numpy.ndarray",
        ),
        (
            lambda: kernels.multiply_accumulate(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3))),
            ValueError,
            "b must have 3 rows",
        ),
        (
            lambda: kernels.multiply_accumulate(np.zeros((2, 3)), np.zeros((3, 4)), np.zeros((2, 3))),
            ValueError,
            "c must have shape (2, 4)",
        ),
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


# -- NaN centres -----------------------------------------------------------------------------------
def test_nan_distance_never_wins_in_kernel_and_reference_alike():
    """numpy.argmin alone would send every point to a NaN centre; both sides follow one rule."""
    centres = np.array([[np.nan, 0.0], [0.0, 0.0], [5.0, 5.0]])
    points = np.array([[0.1, 0.0], [4.0, 4.0], [np.nan, 1.0], [1e200, 1e200]])
    labels, sums, counts = kernels.kmeans_partial(points, centres)
    ref_labels, ref_sums, ref_counts = kernels.kmeans_partial_reference(points, centres)
    assert labels.tolist() == ref_labels.tolist() == [1, 2, 0, 0]  # all-NaN (and all-inf) distances: centre 0
    assert np.array_equal(counts, ref_counts)
    np.testing.assert_array_equal(sums, ref_sums)
    assert np.argmin([np.nan, 1.0]) == 0  # what the reference masks


# -- many blocks, one call --------------------------------------------------------------------------
@pytest.mark.parametrize("parallel", [False, True])
def test_kmeans_partial_blocks_equals_the_sum_of_per_block_results(rng, parallel):
    centres = rng.random((5, 3))
    blocks = [rng.random((int(n), 3)) for n in (0, 1, 700, 33, 0, 4096)]
    blocks[2] = blocks[2].astype(np.float32)  # mixed float dtypes
    sums, counts = kernels.kmeans_partial_blocks(blocks, centres, parallel=parallel)
    expected_sums, expected_counts = np.zeros((5, 3)), np.zeros(5, np.int64)
    for block in blocks:
        _, block_sums, block_counts = kernels.kmeans_partial(block, centres, parallel=parallel)
        expected_sums += block_sums
        expected_counts += block_counts
    np.testing.assert_array_equal(sums, expected_sums)  # to the last bit: the same additions
    np.testing.assert_array_equal(counts, expected_counts)
    assert counts.sum() == sum(len(b) for b in blocks)
    ref_sums = sum(kernels.kmeans_partial_reference(b, centres)[1] for b in blocks)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-12)
    empty_sums, empty_counts = kernels.kmeans_partial_blocks([], centres)
    assert empty_sums.shape == (5, 3) and not empty_sums.any() and not empty_counts.any()


@pytest.mark.parametrize(
    "blocks,error,words",
    [
        ([np.zeros((2, 3)), np.zeros((2, 2))], ValueError, "centres must have shape (1, 2) to match blocks[1]"),
        ([np.zeros((2, 3), int)], TypeError, "blocks[0] must have dtype float32 or float64"),
        ([np.zeros((2, 3), np.float16)], TypeError, "blocks[0] has dtype float16"),
        ([[[0.0, 0.0, 0.0]]], TypeError, "blocks[0] must be a numpy.ndarray"),
        (np.zeros((2, 3)), TypeError, "blocks must be a sequence of 2-D arrays"),
    ],
)
def test_kmeans_partial_blocks_bad_input_names_the_block(blocks, error, words):
    with pytest.raises(error) as info:
        kernels.kmeans_partial_blocks(blocks, np.zeros((1, 3)))
    assert words in str(info.value)


# -- every kind of array ----------------------------------------------------------------------------
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kmeans_reads_any_layout_and_byte_order(rng, layout):
    """A native read-only call compiles first; a byte-swapped array must not reuse its code."""
    points, centres = rng.random((500, 4)), rng.random((3, 4))
    expected = kernels.kmeans_partial_reference(points, centres)
    first = kernels.kmeans_partial(read_only(points), read_only(centres))
    assert np.array_equal(first[0], expected[0])
    arrange = LAYOUTS[layout]
    labels, sums, counts = kernels.kmeans_partial(arrange(points), arrange(centres))
    assert np.array_equal(labels, expected[0]) and np.array_equal(counts, expected[2])
    np.testing.assert_allclose(sums, expected[1], rtol=1e-12)
    block_sums, block_counts = kernels.kmeans_partial_blocks([arrange(points)], arrange(centres))
    np.testing.assert_allclose(block_sums, expected[1], rtol=1e-12)
    assert np.array_equal(block_counts, expected[2])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_linalg_reads_any_layout_and_byte_order(rng, layout):
    a, b, c = rng.random((30, 20)), rng.random((20, 10)), rng.random((30, 10))
    kernels.matrix_add(read_only(a), read_only(a))  # a native read-only signature compiled first
    arrange = LAYOUTS[layout]
    np.testing.assert_array_equal(kernels.matrix_add(arrange(a), arrange(a[::-1])), a + a[::-1])
    out = c.copy()
    kernels.multiply_accumulate(arrange(a), arrange(b), out)
    np.testing.assert_allclose(out, c + a @ b, rtol=1e-12)


@pytest.mark.parametrize("layout", ["strided", "fortran"])
def test_linalg_writes_into_strided_and_fortran_outputs(rng, layout):
    a, b = rng.random((30, 20)), rng.random((30, 20))
    out = LAYOUTS[layout](np.zeros((30, 20)))
    assert kernels.matrix_add(a, b, out) is out
    np.testing.assert_array_equal(out, a + b)
    c0 = rng.random((30, 30))
    c = LAYOUTS[layout](c0)
    kernels.multiply_accumulate(a, b.T.copy(), c)
    np.testing.assert_allclose(c, c0 + a @ b.T, rtol=1e-12)


def test_in_place_outputs_refuse_non_native_byte_order():
    a = np.ones((2, 2))
    for call, name in [
        (lambda: kernels.matrix_add(a, a, np.zeros((2, 2), ">f8")), "out"),
        (lambda: kernels.multiply_accumulate(a, a, np.zeros((2, 2), ">f8")), "c"),
    ]:
        with pytest.raises(
            ValueError, match=f"{name} has non-native byte order \\(>f8\\) but this kernel updates it in place"
        ):
            call()


@pytest.mark.parametrize("dtype,words", refused_dtypes(floats_only=True), ids=str)
def test_kmeans_and_linalg_refuse_odd_dtypes_by_name(dtype, words):
    odd, fine = np.zeros((3, 3), dtype), np.zeros((3, 3))
    for call, name in [
        (lambda: kernels.kmeans_partial(odd, fine), "points"),
        (lambda: kernels.kmeans_partial(fine, odd), "centres"),
        (lambda: kernels.kmeans_partial_blocks([fine, odd], fine), "blocks[1]"),
        (lambda: kernels.matrix_add(fine, odd), "b"),
        (lambda: kernels.matrix_add(fine, fine, odd), "out"),
        (lambda: kernels.multiply_accumulate(odd, fine, fine), "a"),
        (lambda: kernels.multiply_accumulate(fine, fine, odd), "c"),
    ]:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value).startswith(name) and words in str(info.value), (name, str(info.value))


# -- operands that share memory ---------------------------------------------------------------------
def test_matrix_add_into_an_operand_is_right_and_partial_overlap_is_refused(rng):
    a, b = rng.random((6, 5)), rng.random((6, 5))
    expected = a + b
    assert kernels.matrix_add(a, b, a) is a  # element-wise: each element is read before it is written
    np.testing.assert_array_equal(a, expected)
    big = rng.random((7, 5))
    with pytest.raises(ValueError, match="a and out overlap in memory"):
        kernels.matrix_add(big[1:], b, big[:-1])
    with pytest.raises(ValueError, match="b and out overlap in memory"):
        kernels.matrix_add(b, big[:-1], big[1:])


def test_multiply_accumulate_into_an_operand_equals_numpy():
    """The product is formed before it is added, so c may be a (or b): no refusal needed."""
    c = np.arange(16.0).reshape(4, 4)
    b = np.eye(4) * 2 + 1
    expected = c + c @ b
    kernels.multiply_accumulate(c, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-12)
