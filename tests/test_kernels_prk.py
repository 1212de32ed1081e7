"""The Parallel Research Kernels checked with the PRK's own closed-form verification."""

import numpy as np
import pytest

from workbench.kernels import prk, stream_sum
from workbench.kernels.testing import LAYOUTS, read_only, refused_dtypes

ITERATIONS = 6  # iteration 0 (warm-up) + 6 timed ones, as the PRK counts them


@pytest.mark.parametrize("length", [1, 1000, 100_003])
def test_nstream_sum_matches_prk_formula(length):
    a, b, c = prk.nstream_init(length)
    for _ in range(ITERATIONS + 1):
        prk.nstream(a, b, c, 3.0)
    expected = prk.nstream_expected_sum(length, ITERATIONS)
    assert abs(a.sum() - expected) / expected <= 1e-8


@pytest.mark.parametrize("order,tile", [(1, 32), (37, 8), (100, 32), (64, 64)])
def test_transpose_matches_prk_formula(order, tile):
    a, b = prk.transpose_init(order)
    for _ in range(ITERATIONS + 1):
        prk.transpose(a, b, tile)
    assert prk.transpose_error(b, ITERATIONS) < 1e-8


@pytest.mark.parametrize("n,radius", [(10, 1), (50, 2), (41, 3), (7, 3)])
def test_stencil_matches_prk_formula(n, radius):
    a, b = prk.stencil_init(n)
    for _ in range(ITERATIONS + 1):
        prk.stencil_star(a, b, radius)
        a += 1.0
    assert abs(prk.stencil_norm(b, radius) - prk.stencil_expected_norm(ITERATIONS)) < 1e-8


def test_stencil_equals_numpy_reference(rng):
    a = rng.random((60, 60))
    b1, b2 = np.zeros_like(a), np.zeros_like(a)
    prk.stencil_star(a, b1, 3)
    prk.stencil_star_reference(a, b2, 3)
    np.testing.assert_allclose(b1, b2, rtol=1e-12, atol=1e-14)
    assert not b1[:3].any() and not b1[:, -3:].any()  # the border is left alone


@pytest.mark.parametrize("ranks", [1, 2, 5])
def test_reduce_matches_prk_formula(ranks):
    """Ranks as rows: each iteration every rank adds ones locally, then the root gets the sum."""
    vectors = np.ones((ranks, 257))
    ones = np.ones(257)
    root = vectors[0]
    for _ in range(ITERATIONS + 1):
        vectors += ones
        prk.vector_reduce(vectors, out=root)  # root's vector is overwritten with the reduction
    assert np.all(np.abs(root - prk.reduce_expected(ITERATIONS, ranks)) < 1e-8)


def test_references_agree_with_kernels(rng):
    a1, b1 = rng.random((33, 33)), rng.random((33, 33))
    a2, b2 = a1.copy(), b1.copy()
    prk.transpose(a1, b1)
    prk.transpose_reference(a2, b2)
    np.testing.assert_array_equal(b1, b2)
    np.testing.assert_array_equal(a1, a2)
    v = rng.random((4, 100))
    np.testing.assert_allclose(prk.vector_reduce(v), prk.vector_reduce_reference(v), rtol=1e-14)
    x, y, z = rng.random(10), rng.random(10), rng.random(10)
    x2 = x.copy()
    prk.nstream(x, y, z, 3.0)
    prk.nstream_reference(x2, y, z, 3.0)
    np.testing.assert_allclose(x, x2, rtol=1e-15)


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: prk.nstream(np.zeros(3), np.zeros(4), np.zeros(3), 3.0), ValueError, "b must have shape (3,)"),
        (lambda: prk.transpose(np.zeros((3, 4)), np.zeros((3, 4))), ValueError, "a must be square"),
        (lambda: prk.stencil_star(np.zeros((4, 4)), np.zeros((4, 4)), 2), ValueError, "larger than 2 * radius = 4"),
        (
            lambda: prk.stencil_star(np.zeros((9, 9)), np.zeros((9, 9)), 0),
            ValueError,
            "radius must be a positive integer",
        ),
        (lambda: prk.vector_reduce(np.zeros((3, 4)), np.zeros(5)), ValueError, "out must have shape (4,)"),
        (lambda: prk.nstream_init(0), ValueError, "length must be a positive integer"),
    ],
)
def test_prk_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


# -- operands that share memory ---------------------------------------------------------------------
def test_transpose_and_stencil_refuse_aliased_operands():
    """transpose(a, a) and stencil_star(a, a) used to run and give wrong answers."""
    a, _ = prk.transpose_init(8)
    for call, words in [
        (lambda: prk.transpose(a, a), "a and b overlap in memory"),
        (lambda: prk.transpose(a, a.T), "a and b overlap in memory"),
        (lambda: prk.stencil_star(a, a, 2), "a and b overlap in memory"),
        (lambda: prk.stencil_star(a[1:, 1:], a[:-1, :-1], 2), "a and b overlap in memory"),
    ]:
        before = a.copy()
        with pytest.raises(ValueError, match=words):
            call()
        np.testing.assert_array_equal(a, before)  # refused before anything was written


def test_nstream_accepts_the_same_vector_and_refuses_partial_overlap(rng):
    a, c = rng.random(100), rng.random(100)
    expected = a + (a + 3.0 * c)
    prk.nstream(a, a, c, 3.0)  # element-wise: a[i] is read before it is written
    np.testing.assert_allclose(a, expected, rtol=1e-15)
    buffer = rng.random(101)
    with pytest.raises(ValueError, match="b and a overlap in memory"):
        prk.nstream(buffer[:-1], buffer[1:], c, 3.0)
    with pytest.raises(ValueError, match="c and a overlap in memory"):
        prk.nstream(buffer[1:], c, buffer[:-1], 3.0)


def test_vector_reduce_into_a_row_is_right_and_into_a_column_is_refused(rng):
    vectors = rng.random((4, 4))
    expected = vectors.sum(axis=0)
    prk.vector_reduce(vectors, out=vectors[2])
    np.testing.assert_allclose(vectors[2], expected, rtol=1e-14)
    with pytest.raises(ValueError, match="vectors and out overlap in memory"):
        prk.vector_reduce(vectors, out=vectors[:, 1])
    with pytest.raises(ValueError, match="vectors and out overlap in memory"):
        prk.vector_reduce(vectors, out=vectors.reshape(-1)[2:6])


# -- every kind of array ----------------------------------------------------------------------------
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_prk_and_stream_read_any_layout_and_byte_order(rng, layout):
    """Inputs only read: converted when byte-swapped, used as they are otherwise."""
    arrange = LAYOUTS[layout]
    x = rng.random(1000)
    assert stream_sum(read_only(x)) == pytest.approx(x.sum(), rel=1e-12)  # native read-only first
    assert stream_sum(arrange(x)) == pytest.approx(x.sum(), rel=1e-12)
    a, b, c = np.zeros(1000), rng.random(1000), rng.random(1000)
    prk.nstream(a, arrange(b), arrange(c), 3.0)
    np.testing.assert_allclose(a, b + 3.0 * c, rtol=1e-15)
    m = rng.random((20, 20))
    out = np.zeros((20, 20))
    prk.stencil_star(arrange(m), out, 2)
    expected = np.zeros((20, 20))
    prk.stencil_star_reference(m, expected, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(prk.vector_reduce(arrange(m)), m.sum(axis=0), rtol=1e-14)


@pytest.mark.parametrize("layout", ["strided", "fortran"])
def test_prk_updates_strided_and_fortran_arrays_in_place(rng, layout):
    arrange = LAYOUTS[layout]
    a0, b0 = rng.random((9, 9)), rng.random((9, 9))
    a, b = arrange(a0.copy()), arrange(b0.copy())
    prk.transpose(a, b)
    np.testing.assert_array_equal(b, b0 + a0.T)
    np.testing.assert_array_equal(a, a0 + 1)
    x = arrange(np.zeros((10, 1)))[:, 0]
    prk.nstream(x, np.ones(10), np.ones(10), 3.0)
    np.testing.assert_array_equal(x, np.full(10, 4.0))


def test_prk_refuses_in_place_arrays_in_non_native_order_orread_only():
    swapped = np.zeros((4, 4), ">f8")
    fine = np.zeros((4, 4))
    for call, name in [
        (lambda: prk.transpose(swapped, fine), "a"),
        (lambda: prk.transpose(fine, swapped), "b"),
        (lambda: prk.stencil_star(fine, swapped, 1), "b"),
        (lambda: prk.nstream(swapped[0], fine[0], fine[1], 3.0), "a"),
        (lambda: prk.vector_reduce(fine, swapped[0]), "out"),
    ]:
        with pytest.raises(ValueError, match=f"{name} has non-native byte order"):
            call()
    frozen = read_only(fine)
    with pytest.raises(ValueError, match="a is read-only"):
        prk.transpose(frozen, fine.copy())


@pytest.mark.parametrize("dtype,words", refused_dtypes(floats_only=True), ids=str)
def test_prk_and_stream_refuse_odd_dtypes_by_name(dtype, words):
    odd, fine = np.zeros((5, 5), dtype), np.zeros((5, 5))
    for call, name in [
        (lambda: stream_sum(odd[0]), "x"),
        (lambda: prk.nstream(fine[0], odd[0], fine[1], 3.0), "b"),
        (lambda: prk.nstream(fine[0], fine[1], odd[0], 3.0), "c"),
        (lambda: prk.transpose(odd, fine), "a"),
        (lambda: prk.transpose(fine, odd), "b"),
        (lambda: prk.stencil_star(fine, odd, 1), "b"),
        (lambda: prk.vector_reduce(odd), "vectors"),
        (lambda: prk.vector_reduce(fine, odd[0]), "out"),
    ]:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value).startswith(name) and words in str(info.value), (name, str(info.value))
