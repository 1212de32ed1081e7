"""The Parallel Research Kernels checked with the PRK's own closed-form verification."""
import numpy as np
import pytest

from kernels import prk

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
        (lambda: prk.stencil_star(np.zeros((9, 9)), np.zeros((9, 9)), 0), ValueError, "radius must be a positive integer"),
        (lambda: prk.vector_reduce(np.zeros((3, 4)), np.zeros(5)), ValueError, "out must have shape (4,)"),
        (lambda: prk.nstream_init(0), ValueError, "length must be a positive integer"),
    ],
)
def test_prk_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
