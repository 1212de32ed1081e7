"""Argument checks shared by the kernels.

numba reports a wrong argument as a long typing dump; these checks run first, in plain Python,
so a caller reads which argument was wrong and what was expected instead.

Arrays reach the kernels from shared memory and files as they were written: big-endian, read-only,
strided. numba cannot type a non-native byte order and, once a native signature is compiled, its
dispatcher matches a byte-swapped array to it and reads garbage. So an input goes through ``native``
(``read_array`` does all of an input's checks) and an array updated in place through
``require_native``: refused, since a converted copy would not be the caller's array.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

REAL_KINDS = "iuf"  # signed, unsigned, floating: what the numeric kernels accept
FLOAT_SIZES = (4, 8)  # float32 and float64: the only floats the kernels compute in


def as_array(name: str, value: object) -> np.ndarray:
    """Return ``value`` as an ndarray or raise TypeError naming the argument."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    return value


def require_ndim(name: str, array: np.ndarray, ndim: int) -> None:
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {array.ndim}-D array of shape {array.shape}")


def _refuse_odd_float(name: str, dtype: np.dtype) -> None:
    """float16 and longdouble are floats numba cannot compute in (or not exactly): say what to do."""
    if dtype.kind == "f" and dtype.itemsize not in FLOAT_SIZES:
        raise TypeError(
            f"{name} has dtype {dtype.name}, but the kernels compute in float32 or float64 only; "
            f"convert it first, e.g. {name}.astype(numpy.float64)"
        )


def require_float(name: str, array: np.ndarray) -> None:
    """Float32/float64 only: in-place kernels must not silently change the caller's dtype."""
    _refuse_odd_float(name, array.dtype)
    if array.dtype.kind != "f":
        raise TypeError(f"{name} must have dtype float32 or float64, got {array.dtype}")


def require_real(name: str, array: np.ndarray) -> None:
    """Integers or float32/float64 (bool, complex, object, strings are refused)."""
    if array.dtype.kind not in REAL_KINDS:
        raise TypeError(f"{name} must hold real numbers (int, uint or float), got dtype {array.dtype}")
    _refuse_odd_float(name, array.dtype)


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


def native(array: np.ndarray) -> np.ndarray:
    """``array`` in the machine's byte order: itself when it already is, else a converted copy."""
    if array.dtype.isnative:
        return array
    return array.astype(array.dtype.newbyteorder("="))


def read_array(name: str, value: object, ndim: int, *, floats_only: bool = False) -> np.ndarray:
    """An input the kernel only reads: checked, and in native byte order (read-only arrays too)."""
    array = as_array(name, value)
    require_ndim(name, array, ndim)
    if floats_only:
        require_float(name, array)
    else:
        require_real(name, array)
    return native(array)


def require_native(name: str, array: np.ndarray) -> None:
    """Refuse a non-native byte order for an array written in place (a copy would lose the writes)."""
    if not array.dtype.isnative:
        raise ValueError(
            f"{name} has non-native byte order ({array.dtype.str}) but this kernel updates it in place; "
            f"pass an array in native order, e.g. {name}.astype({name}.dtype.newbyteorder('='))"
        )


def same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` are the very same elements (same start, strides, shape and dtype)."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.strides == b.strides
        and a.shape == b.shape
        and a.dtype == b.dtype
    )


def require_apart(names: tuple[str, str], arrays: tuple[np.ndarray, np.ndarray], *, same_ok: bool = False) -> None:
    """Refuse a read operand and a written one (in that order) that overlap in memory.

    The kernel would change the input while still reading it. ``same_ok``: an element-wise kernel may
    read and write the very same view (each element is read before it is written); a partial overlap
    is refused even then.
    """
    (read, written), (array, out) = names, arrays
    if not np.may_share_memory(array, out):  # bounds only: cheap, and enough for the common case
        return
    if same_ok and same_view(array, out):
        return
    if np.shares_memory(array, out):
        raise ValueError(
            f"{read} and {written} overlap in memory, but this kernel writes {written} while it reads {read}, "
            f"so the answer would be wrong; pass separate arrays (e.g. {read}.copy())"
        )


def positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _is_real_scalar(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def bin_range(name: str, value: object) -> tuple[Any, Any]:
    """numpy's outer edges for an explicit range: the (low, high) pair, types kept.

    Types are kept because numpy's edges depend on them (a float32 scalar gives float32 edges).
    As in numpy, ``low == high`` widens to ``(low - 0.5, high + 0.5)``.
    """
    try:
        low, high = value  # type: ignore[misc]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {value!r}") from None
    if not (_is_real_scalar(low) and _is_real_scalar(high)):
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {value!r}")
    for end in (low, high):
        if isinstance(end, np.generic) and end.dtype.kind == "f" and end.dtype.itemsize > 8:
            raise TypeError(f"{name} holds a {end.dtype.name} value; give float64 (or Python) numbers")
    try:
        finite = math.isfinite(low) and math.isfinite(high)
    except OverflowError:  # a Python int beyond float64
        finite = False
    if not finite:
        raise ValueError(f"{name} must be finite, got ({low}, {high})")
    if not low <= high:
        raise ValueError(f"{name} must have low <= high, got ({low}, {high})")
    if low == high:  # numpy widens an empty range rather than divide by zero
        low, high = low - 0.5, high + 0.5
    return low, high


def is_device_array(value: object) -> bool:
    """Whether ``value`` lives in device memory: it exports ``__cuda_array_interface__`` (numba, CuPy,
    PyTorch), or it is numba's simulator's device array (which exports nothing). Imports nothing, so the
    runtime can ask it of any value without loading numba's CUDA module."""
    if isinstance(value, np.ndarray):
        return False
    return hasattr(value, "__cuda_array_interface__") or type(value).__module__.startswith("numba.cuda.simulator")
