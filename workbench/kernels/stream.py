"""A streaming read over an array: the practical memory-bandwidth limit kernels are compared to."""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from workbench.kernels._checks import as_array, native, require_float, require_ndim


@njit(nogil=True, cache=True, parallel=True)
def _stream_sum(x, n_chunks):
    chunk = (x.size + n_chunks - 1) // n_chunks
    partial = np.zeros(n_chunks)
    for c in prange(n_chunks):
        total = 0.0
        for i in range(c * chunk, min(x.size, (c + 1) * chunk)):
            total += x[i]
        partial[c] = total
    return partial.sum()


def stream_sum(x: np.ndarray, *, parallel: bool = True) -> float:
    """Sum a 1-D float array: every byte is read once, nothing is written."""
    x = as_array("x", x)
    require_ndim("x", x, 1)
    require_float("x", x)
    return float(_stream_sum(native(x), numba.get_num_threads() if parallel else 1))
