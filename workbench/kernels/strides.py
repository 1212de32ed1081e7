"""Memory-access kernels for lesson 09: one array, visited in different orders.

``sum_by_rows`` and ``sum_by_columns`` add up every element of a C-ordered (row-major) matrix: the
first walks memory one element after the other (stride 1), the second jumps a whole row between
two loads (stride = the row's length). ``sum_passes`` reads a vector from start to end several
times, so its working set is exactly the vector (what a cache-size sweep needs).

All three run on the calling thread (no ``parallel``): the lesson compares access orders on one
core. The additions may be reordered (``reassoc``), so the compiler is free to use several partial
sums and SIMD in every variant; what still differs between them is how memory is visited.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from workbench.kernels._checks import as_array, native, positive_int, require_float, require_ndim

REORDER = {"reassoc", "nsz"}  # may reorder float additions (SIMD, several partial sums); no NaN/Inf assumptions


@njit(nogil=True, cache=True, fastmath=REORDER)
def _sum_by_rows(a):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            total += a[i, j]
    return total


@njit(nogil=True, cache=True, fastmath=REORDER)
def _sum_by_columns(a):
    total = 0.0
    for j in range(a.shape[1]):
        for i in range(a.shape[0]):
            total += a[i, j]
    return total


@njit(nogil=True, cache=True, fastmath=REORDER)
def _sum_passes(x, passes):
    total = 0.0
    for _ in range(passes):
        partial = 0.0
        for i in range(x.size):
            partial += x[i]
        total += partial
    return total


def _row_major(name: str, value: object) -> np.ndarray:
    """A 2-D float matrix laid out by rows (C order): the traversal kernels mean nothing otherwise."""
    array = as_array(name, value)
    require_ndim(name, array, 2)
    require_float(name, array)
    if not array.flags.c_contiguous:
        raise ValueError(
            f"{name} must be C-ordered (rows contiguous in memory), got strides {array.strides} for shape "
            f"{array.shape}; pass numpy.ascontiguousarray({name})"
        )
    return native(array)


def sum_by_rows(a: np.ndarray) -> float:
    """Sum of a C-ordered float matrix, visited row after row: consecutive loads are adjacent (stride 1)."""
    return float(_sum_by_rows(_row_major("a", a)))


def sum_by_columns(a: np.ndarray) -> float:
    """Sum of a C-ordered float matrix, visited column after column: consecutive loads are a row apart."""
    return float(_sum_by_columns(_row_major("a", a)))


def sum_passes(x: np.ndarray, passes: int = 1) -> float:
    """Sum of a contiguous 1-D float vector read ``passes`` times from start to end (``passes * x.sum()``)."""
    x = as_array("x", x)
    require_ndim("x", x, 1)
    require_float("x", x)
    if not x.flags.c_contiguous:
        raise ValueError(f"x must be contiguous, got stride {x.strides[0]} bytes; pass numpy.ascontiguousarray(x)")
    return float(_sum_passes(native(x), positive_int("passes", passes)))
