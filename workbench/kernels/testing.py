"""Arrays as the kernels receive them in practice, for tests: each kernel reads them all, or refuses by name.

Shared memory keeps the writer's byte order and is attached read-only; slices are strided; arrays
written by other programs may be Fortran-ordered. The dtypes listed last are refused by every kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only copy, as an attached shared segment is."""
    copy = array.copy()
    copy.setflags(write=False)
    return copy


def big_endian(array: np.ndarray) -> np.ndarray:
    """A writeable big-endian copy (non-native byte order on the machines the project runs on)."""
    return array.astype(array.dtype.newbyteorder(">"))


def strided(array: np.ndarray) -> np.ndarray:
    """The same values as a view of every other element along the last axis of a wider array."""
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    wide[..., ::2] = array
    return wide[..., ::2]


LAYOUTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "big-endian-read-only": lambda a: read_only(big_endian(a)),
    "big-endian-writeable": big_endian,
    "read-only": read_only,
    "strided": strided,
    "fortran": np.asfortranarray,
}

# float16 always; longdouble only where it is wider than float64 (it is float64 on some platforms)
ODD_FLOATS = [np.dtype(np.float16)] + ([np.dtype(np.longdouble)] if np.dtype(np.longdouble).itemsize > 8 else [])
NOT_REAL = [np.dtype(np.complex128), np.dtype(np.bool_), np.dtype(object)]


def refused_dtypes(floats_only: bool) -> list[tuple[np.dtype, str]]:
    """(dtype, words of the refusal) for kernels of float32/float64 only, or of any real numbers."""
    odd = [(d, f"has dtype {d.name}, but the kernels compute in float32 or float64 only") for d in ODD_FLOATS]
    if floats_only:
        return odd + [(d, f"must have dtype float32 or float64, got {d}") for d in NOT_REAL]
    return odd + [(d, f"must hold real numbers (int, uint or float), got dtype {d}") for d in NOT_REAL]
