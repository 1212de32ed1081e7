"""Dense block kernels: matrix addition and the blocked multiply-accumulate ``C += A @ B``.

These are the task bodies of the blocked matrix applications: one call per block (or block triple).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from workbench.kernels._checks import (
    as_array,
    native,
    require_apart,
    require_float,
    require_native,
    require_ndim,
    require_same_dtype,
    require_shape,
    require_writeable,
)


@njit(nogil=True, cache=True, parallel=True)
def _add(a, b, out, n_chunks):
    rows = a.shape[0]
    chunk = (rows + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        for i in range(c * chunk, min(rows, (c + 1) * chunk)):
            for j in range(a.shape[1]):
                out[i, j] = a[i, j] + b[i, j]


@njit(nogil=True, cache=True)
def _multiply_accumulate(a, b, c):
    # BLAS gemm through numba; the product is added in place so C's buffer is reused.
    c += a @ b


def matrix_add(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *, parallel: bool = False) -> np.ndarray:
    """``a + b`` for two 2-D float blocks of one shape, written to ``out`` when given."""
    a, b = as_array("a", a), as_array("b", b)
    require_ndim("a", a, 2)
    require_float("a", a)
    require_float("b", b)
    require_shape("b", b, a.shape)
    a, b = native(a), native(b)
    require_same_dtype(("a", "b"), (a, b))
    if out is None:
        out = np.empty(a.shape, dtype=a.dtype)
    else:
        out = as_array("out", out)
        require_float("out", out)
        require_shape("out", out, a.shape)
        require_native("out", out)
        require_same_dtype(("a", "out"), (a, out))
        require_writeable("out", out)
        require_apart(("a", "out"), (a, out), same_ok=True)  # out = a is element-wise: fine
        require_apart(("b", "out"), (b, out), same_ok=True)
    _add(a, b, out, numba.get_num_threads() if parallel else 1)
    return out


def multiply_accumulate(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``C += A @ B`` in place on ``c``: (n, m) @ (m, p) into (n, p); returns ``c``."""
    a, b, c = as_array("a", a), as_array("b", b), as_array("c", c)
    for name, array in (("a", a), ("b", b), ("c", c)):
        require_ndim(name, array, 2)
        require_float(name, array)
    require_native("c", c)
    a, b = native(a), native(b)  # (a @ b is made apart first, so c may even be a or b)
    require_same_dtype(("a", "b", "c"), (a, b, c))
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"b must have {a.shape[1]} rows to multiply a of shape {a.shape}, got {b.shape}")
    require_shape("c", c, (a.shape[0], b.shape[1]))
    require_writeable("c", c)
    if min(a.shape + b.shape) == 0:
        return c  # an empty product adds nothing (and BLAS rejects zero-size operands)
    _multiply_accumulate(np.ascontiguousarray(a), np.ascontiguousarray(b), c)
    return c


def matrix_add_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's ``a + b``: what ``matrix_add`` is checked against."""
    return np.add(a, b)


def multiply_accumulate_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """numpy's ``c += a @ b`` (returns ``c``): what ``multiply_accumulate`` is checked against."""
    c += a @ b
    return c
