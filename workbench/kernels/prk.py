"""Parallel Research Kernels: nstream, transpose, star stencil and vector reduce.

Each kernel performs one PRK iteration in place. The ``*_expected`` / ``*_error`` functions are the
PRK's own closed-form verification (an external oracle, independent of any implementation here):
run iteration 0 as warm-up plus ``iterations`` timed ones, then check.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from workbench.kernels._checks import (
    as_array,
    native,
    positive_int,
    require_apart,
    require_float,
    require_native,
    require_ndim,
    require_same_dtype,
    require_shape,
    require_writeable,
)

TRANSPOSE_TILE = 32  # 32 x 32 doubles = 8 KiB per tile: two tiles sit in L1


# -- nstream: a += b + scalar * c --------------------------------------------------------------
@njit(nogil=True, cache=True, parallel=True)
def _nstream(a, b, c, scalar):
    for i in prange(a.size):
        a[i] += b[i] + scalar * c[i]


def nstream(a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float) -> None:
    """One STREAM-triad-like update ``a += b + scalar * c`` over three equal 1-D vectors."""
    a, b, c = as_array("a", a), as_array("b", b), as_array("c", c)
    require_ndim("a", a, 1)
    for name, array in (("a", a), ("b", b), ("c", c)):
        require_float(name, array)
    require_shape("b", b, a.shape)
    require_shape("c", c, a.shape)
    require_native("a", a)
    require_writeable("a", a)
    b, c = native(b), native(c)
    require_same_dtype(("a", "b", "c"), (a, b, c))
    require_apart(("b", "a"), (b, a), same_ok=True)  # element-wise: a += a + s*c is still right
    require_apart(("c", "a"), (c, a), same_ok=True)
    _nstream(a, b, c, float(scalar))


def nstream_init(length: int, dtype: np.dtype | type = np.float64) -> tuple[np.ndarray, ...]:
    """PRK start values: a = 0, b = 2, c = 2 (use scalar = 3)."""
    length = positive_int("length", length)
    return np.zeros(length, dtype), np.full(length, 2.0, dtype), np.full(length, 2.0, dtype)


def nstream_expected_sum(length: int, iterations: int) -> float:
    """sum(a) after warm-up + ``iterations`` updates with b = c = 2 and scalar = 3."""
    return 8.0 * (iterations + 1) * length


def _square_pair(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    """Two float matrices, square, of one shape and dtype (transpose and stencil operands)."""
    a, b = as_array("a", a), as_array("b", b)
    require_ndim("a", a, 2)
    require_float("a", a)
    require_float("b", b)
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"a must be square, got shape {a.shape}")
    require_shape("b", b, a.shape)
    require_native("b", b)  # written by both kernels
    require_apart(("a", "b"), (a, b))  # b gets a's transpose / a's neighbours: a must not change meanwhile
    return a, b


# -- transpose: B += A^T; A += 1 ---------------------------------------------------------------
@njit(nogil=True, cache=True, parallel=True)
def _transpose(a, b, tile):
    n = a.shape[0]
    n_tiles = (n + tile - 1) // tile
    for ti in prange(n_tiles):
        i0 = ti * tile
        for j0 in range(0, n, tile):
            for i in range(i0, min(n, i0 + tile)):
                for j in range(j0, min(n, j0 + tile)):
                    b[i, j] += a[j, i]
    # A += 1 after the whole of B is updated: rows of A are read by every tile above.
    for i in prange(n):
        for j in range(n):
            a[i, j] += 1.0


def transpose(a: np.ndarray, b: np.ndarray, tile: int = TRANSPOSE_TILE) -> None:
    """One PRK transpose iteration on square matrices: ``B += A.T; A += 1``, cache-tiled."""
    a, b = _square_pair(a, b)
    require_native("a", a)  # A += 1 in place
    require_same_dtype(("a", "b"), (a, b))
    require_writeable("a", a)
    require_writeable("b", b)
    _transpose(a, b, positive_int("tile", tile))


def transpose_init(order: int) -> tuple[np.ndarray, np.ndarray]:
    """PRK start values: A[i, j] = i * order + j, B = 0."""
    order = positive_int("order", order)
    a = np.arange(order * order, dtype=np.float64).reshape(order, order)
    return a, np.zeros_like(a)


def transpose_error(b: np.ndarray, iterations: int) -> float:
    """Sum of |B - expected| after warm-up + ``iterations``; the PRK accepts < 1e-8."""
    order = b.shape[0]
    i = np.arange(order, dtype=np.float64)[:, None]
    j = np.arange(order, dtype=np.float64)[None, :]
    expected = (order * j + i) * (iterations + 1) + iterations * (iterations + 1) / 2.0
    return float(np.abs(b - expected).sum())


# -- star stencil of radius r: B[r:n-r, r:n-r] += W * A ----------------------------------------
def stencil_weights(radius: int) -> np.ndarray:
    """The PRK star weights: W[0, +-i] = W[+-i, 0] = +-1 / (2 i r), centre at [r, r]."""
    radius = positive_int("radius", radius)
    weights = np.zeros((2 * radius + 1, 2 * radius + 1))
    for i in range(1, radius + 1):
        w = 1.0 / (2.0 * i * radius)
        weights[radius, radius + i] = w
        weights[radius, radius - i] = -w
        weights[radius + i, radius] = w
        weights[radius - i, radius] = -w
    return weights


@njit(nogil=True, cache=True, parallel=True)
def _stencil_star(a, b, weights, radius):
    rows, cols = a.shape
    for i in prange(radius, rows - radius):
        for j in range(radius, cols - radius):
            acc = 0.0
            for k in range(1, radius + 1):
                acc += weights[radius, radius + k] * a[i, j + k]
                acc += weights[radius, radius - k] * a[i, j - k]
                acc += weights[radius + k, radius] * a[i + k, j]
                acc += weights[radius - k, radius] * a[i - k, j]
            b[i, j] += acc


def stencil_star(a: np.ndarray, b: np.ndarray, radius: int = 2) -> None:
    """Apply the star stencil of ``radius`` to ``a``, adding into the interior of ``b``."""
    a, b = _square_pair(a, b)
    a = native(a)
    require_same_dtype(("a", "b"), (a, b))
    require_writeable("b", b)
    radius = positive_int("radius", radius)
    if a.shape[0] <= 2 * radius:
        raise ValueError(f"a must be larger than 2 * radius = {2 * radius} per side, got {a.shape[0]}")
    _stencil_star(a, b, stencil_weights(radius), radius)


def stencil_star_rows(a: np.ndarray, b: np.ndarray, radius: int = 2) -> None:
    """The star stencil on a block of rows (with ``radius`` halo rows above and below): adds into the
    interior of ``b``, of ``a``'s shape (a rank's part of a row-decomposed grid)."""
    a, b = as_array("a", a), as_array("b", b)
    for name, array in (("a", a), ("b", b)):
        require_ndim(name, array, 2)
        require_float(name, array)
    require_shape("b", b, a.shape)
    a = native(a)
    require_native("b", b)
    require_same_dtype(("a", "b"), (a, b))
    require_writeable("b", b)
    require_apart(("a", "b"), (a, b))
    radius = positive_int("radius", radius)
    if min(a.shape) <= 2 * radius:
        raise ValueError(f"a must be larger than 2 * radius = {2 * radius} in both dimensions, got {a.shape}")
    _stencil_star(a, b, stencil_weights(radius), radius)


def stencil_init(n: int) -> tuple[np.ndarray, np.ndarray]:
    """PRK start values: A[i, j] = i + j, B = 0."""
    n = positive_int("n", n)
    idx = np.arange(n, dtype=np.float64)
    return idx[:, None] + idx[None, :], np.zeros((n, n))


def stencil_norm(b: np.ndarray, radius: int) -> float:
    """sum(|B|) over the interior divided by its size; expected ``stencil_expected_norm``."""
    n = b.shape[0]
    return float(np.abs(b[radius : n - radius, radius : n - radius]).sum() / (n - 2 * radius) ** 2)


def stencil_expected_norm(iterations: int) -> float:
    """The norm the star stencil's output must have after ``iterations`` (PRK's closed form)."""
    return 2.0 * (iterations + 1)


# -- reduce: sum P vectors into one ------------------------------------------------------------
@njit(nogil=True, cache=True, parallel=True)
def _vector_reduce(vectors, out):
    for j in prange(vectors.shape[1]):
        acc = 0.0
        for p in range(vectors.shape[0]):
            acc += vectors[p, j]
        out[j] = acc


def vector_reduce(vectors: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise sum of the rows of ``vectors`` (P ranks x n), written to ``out`` (n,).

    ``out`` may be one of the rows (the PRK's root keeps its vector there); any other overlap with
    ``vectors`` is refused.
    """
    vectors = as_array("vectors", vectors)
    require_ndim("vectors", vectors, 2)
    require_float("vectors", vectors)
    vectors = native(vectors)
    if out is None:
        out = np.empty(vectors.shape[1], dtype=vectors.dtype)
    else:
        out = as_array("out", out)
        require_float("out", out)
        require_shape("out", out, (vectors.shape[1],))
        require_native("out", out)
        require_same_dtype(("vectors", "out"), (vectors, out))
        require_writeable("out", out)
        if not _is_row_of(out, vectors):  # a row is safe: each column is summed before its element is written
            require_apart(("vectors", "out"), (vectors, out))
    _vector_reduce(vectors, out)
    return out


def _is_row_of(out: np.ndarray, vectors: np.ndarray) -> bool:
    """True when ``out`` is one row of ``vectors`` (``out[j]`` is ``vectors[p, j]`` for one ``p``)."""
    offset = out.__array_interface__["data"][0] - vectors.__array_interface__["data"][0]
    step = vectors.strides[0]
    row = offset // step if step else 0
    return (
        out.dtype == vectors.dtype
        and 0 <= row < vectors.shape[0]
        and row * step == offset
        and (vectors.shape[1] <= 1 or out.strides == vectors.strides[1:])
    )


def reduce_expected(iterations: int, ranks: int) -> float:
    """Every root element after warm-up + ``iterations`` of (local += 1; root = sum of ranks)."""
    return iterations + 2.0 + (iterations**2 + 5.0 * iterations + 4.0) * (ranks - 1) / 2.0


# -- numpy references --------------------------------------------------------------------------
def nstream_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float) -> None:
    """numpy's nstream update ``a += b + scalar * c``, in place."""
    a += b + scalar * c


def transpose_reference(a: np.ndarray, b: np.ndarray) -> None:
    """numpy's PRK transpose step: ``b += a.T``, then ``a += 1``, in place."""
    b += a.T
    a += 1.0


def stencil_star_reference(a: np.ndarray, b: np.ndarray, radius: int = 2) -> None:
    """numpy's star stencil of ``radius`` on ``a``, added into ``b``'s interior."""
    n = a.shape[0]
    weights = stencil_weights(radius)
    interior = b[radius : n - radius, radius : n - radius]
    for k in range(1, radius + 1):
        interior += weights[radius, radius + k] * a[radius : n - radius, radius + k : n - radius + k]
        interior += weights[radius, radius - k] * a[radius : n - radius, radius - k : n - radius - k]
        interior += weights[radius + k, radius] * a[radius + k : n - radius + k, radius : n - radius]
        interior += weights[radius - k, radius] * a[radius - k : n - radius - k, radius : n - radius]


def vector_reduce_reference(vectors: np.ndarray) -> np.ndarray:
    """numpy's sum of the vectors (rows)."""
    return vectors.sum(axis=0)
