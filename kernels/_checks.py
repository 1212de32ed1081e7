"""Argument checks shared by the kernels.

numba reports a wrong argument as a long typing dump; these checks run first, in plain Python,
so a caller reads which argument was wrong and what was expected instead.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

REAL_KINDS = "iuf"  # signed, unsigned, floating: what the numeric kernels accept


def as_array(name: str, value: object) -> np.ndarray:
    """Return ``value`` as an ndarray or raise TypeError naming the argument."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    return value


def require_ndim(name: str, array: np.ndarray, ndim: int) -> None:
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {array.ndim}-D array of shape {array.shape}")


def require_float(name: str, array: np.ndarray) -> None:
    """Float32/float64 only: in-place kernels must not silently change the caller's dtype."""
    if array.dtype.kind != "f" or array.dtype.itemsize not in (4, 8):
        raise TypeError(f"{name} must have dtype float32 or float64, got {array.dtype}")


def require_real(name: str, array: np.ndarray) -> None:
    if array.dtype.kind not in REAL_KINDS:
        raise TypeError(f"{name} must hold real numbers (int, uint or float), got dtype {array.dtype}")


def require_same_dtype(names: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        listed = ", ".join(f"{n}: {a.dtype}" for n, a in zip(names, arrays))
        raise TypeError(f"{' and '.join(names)} must share one dtype, got {listed}")


def require_shape(name: str, array: np.ndarray, shape: tuple[int, ...]) -> None:
    if array.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {array.shape}")


def require_writeable(name: str, array: np.ndarray) -> None:
    if not array.flags.writeable:
        raise ValueError(f"{name} is read-only but this kernel updates it in place; pass a writeable copy")


def positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def bin_range(name: str, value: object) -> tuple[float, float]:
    """A (low, high) pair of finite numbers with low < high."""
    try:
        low, high = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} must be finite, got ({low}, {high})")
    if not low < high:
        raise ValueError(f"{name} must have low < high, got ({low}, {high})")
    return low, high
