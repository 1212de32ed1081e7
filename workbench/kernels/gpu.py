"""Device kernels (numba's CUDA target) for the seed applications: the same answers as the CPU kernels.

Every kernel takes its large operands as **device arrays** (numba's ``DeviceNDArray``, or any object
with ``__cuda_array_interface__``, such as a CuPy array) and refuses host arrays: when bytes cross
the bus is the caller's decision (and the caller's count), never a side effect of a kernel call.
Small results come back to the host (a histogram's counts, k-means' sums and counts: kilobytes);
array results (matrix add, multiply-accumulate, the STREAM triad) stay on the device.

- :func:`histogram1d`: ``numpy.histogram``'s counts to the last one, as
  :func:`workbench.kernels.histogram.histogram1d`: the same edges, the same sure estimate and the same one-step
  correction (the constants come from that module), counted with atomics into a per-block table in
  shared memory, then added to the device total.
- :func:`kmeans_partial`: the nearest centre of each point (first of the smallest, a NaN distance
  never wins, as the CPU kernel) and each centre's sums and counts. Counts are exact; sums are
  added with float64 atomics in an order the hardware picks, so they equal the CPU's to rounding.
- :func:`matrix_add`, :func:`multiply_accumulate` (``C += A @ B``, thesis ch. 6's FMA) and
  :func:`stream_triad` (``a = b + s * c``: the device memory bandwidth floor). Overlapping operands
  are treated as the CPU kernels treat them: an output may be an input itself, ``C`` may even overlap
  ``A`` or ``B`` (the overlapping one is copied on the device first), and an element-wise output that
  partly overlaps an input is refused (``numpy.shares_memory`` on the device addresses).

Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in numba's CUDA simulator (how CI, which has
no GPU, checks them): right answers, times that mean nothing. :func:`simulated` says which.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from workbench.kernels import histogram as cpu_histogram
from workbench.kernels import kmeans as cpu_kmeans
from workbench.kernels._checks import bin_range, is_device_array, positive_int, require_apart
from workbench.kernels.histogram import _line_cached, _range_key

THREADS = 256  # threads per block
MAX_BLOCKS = 1024  # blocks of a grid-stride launch; more add scheduling, not bandwidth
SHARED_BINS = 2048  # a histogram of at most this many bins counts in shared memory first (16 KiB of int64)


def available() -> bool:
    """Whether a CUDA device (or the simulator) can run these kernels."""
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver install raises instead of saying no
        return False


def devices() -> list[tuple[str, int]]:
    """(name, bytes of memory) of each CUDA device numba sees; empty without one (or its driver)."""
    if not available() or simulated():
        return []
    found = []
    for device in cuda.list_devices():
        with device:
            _, total = cuda.current_context().get_memory_info()
            name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
            found.append((name, int(total)))
    return found


def simulated() -> bool:
    """Whether these kernels run in numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def device_array(name: str, value: object, ndim: int) -> Any:
    """``value`` as a device array of ``ndim`` dimensions and a float dtype; TypeError for a host array
    (saying how to put it on the device) or another dtype, ValueError for another shape."""
    if not is_device_array(value):
        raise TypeError(
            f"{name} must be a device array (numba.cuda.to_device(...), a CuPy array, or an array placed "
            f"in the gpu tier), got {type(value).__name__}: copying it here would hide the transfer"
        )
    array = value if simulated() else cuda.as_cuda_array(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    dtype = np.dtype(array.dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must hold float32 or float64 values, got {dtype}")
    return array


class _Addresses:
    """The addresses a device array spans, in numpy's array interface: an ndarray made from it is
    only ever compared (``numpy.shares_memory``), never read or written."""

    def __init__(self, interface: dict[str, Any]):
        self.__array_interface__ = {
            "version": 3,
            "data": (int(interface["data"][0]), True),
            "shape": tuple(interface["shape"]),
            "strides": interface.get("strides"),
            "typestr": interface["typestr"],
        }


def _addresses(array: Any) -> np.ndarray | None:
    """A host ndarray standing for the device memory ``array`` covers (its start, shape, strides and
    dtype), to ask numpy whether two device arrays overlap; None for an empty array (it covers none).
    The simulator's device arrays are host arrays inside: those are used as they are."""
    if not array.size:
        return None
    if simulated():
        return array._ary
    return np.asarray(_Addresses(array.__cuda_array_interface__))


def _apart(names: tuple[str, str], arrays: tuple[Any, Any], *, same_ok: bool = False) -> None:
    """:func:`workbench.kernels._checks.require_apart` for device arrays: a read operand and a written one that
    overlap are refused (``same_ok``: unless they are the very same elements, for element-wise kernels)."""
    read, written = _addresses(arrays[0]), _addresses(arrays[1])
    if read is not None and written is not None:
        require_apart(names, (read, written), same_ok=same_ok)


def _overlap(a: Any, b: Any) -> bool:
    """Whether device arrays ``a`` and ``b`` share any element's bytes."""
    first, second = _addresses(a), _addresses(b)
    return first is not None and second is not None and bool(np.shares_memory(first, second))


def _grid(n: int) -> int:
    return max(1, min(MAX_BLOCKS, math.ceil(n / THREADS)))


# -- histogram ---------------------------------------------------------------------------------
# The CPU kernels' own rules, compiled a second time for the device: one definition of each.
_estimate = cuda.jit(device=True, inline=True)(cpu_histogram._estimate.py_func)
_numpy_1d_bin = cuda.jit(device=True, inline=True)(cpu_histogram._numpy_1d_bin.py_func)
_nearest = cuda.jit(device=True, inline=True)(cpu_kmeans._nearest.py_func)


@cuda.jit(device=True, inline=True)
def _count(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, n_bins, table, failed):
    """This thread's share of ``x`` (a grid-stride loop) counted into ``table`` as the CPU kernel's
    ``_count_values`` counts it; a value numpy's own indexing would fail on is counted in ``failed``."""
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.size, stride):
        v = x[i]
        if not (v >= keep_low and v <= keep_high):  # numpy's `keep`
            continue
        k, sure = _estimate((v - low) * scale, top, limit)
        if not sure:
            k = _numpy_1d_bin(v, ((v - first) / denom) * n_scale, edges, n_bins)
        if k >= 0:
            cuda.atomic.add(table, k, 1)
        else:
            cuda.atomic.add(failed, 0, 1)


@cuda.jit
def _histogram_shared(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, counts, failed):
    table = cuda.shared.array(SHARED_BINS, dtype=np.int64)
    n_bins = counts.size
    for b in range(cuda.threadIdx.x, n_bins, cuda.blockDim.x):
        table[b] = 0
    cuda.syncthreads()
    _count(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, n_bins, table, failed)
    cuda.syncthreads()
    for b in range(cuda.threadIdx.x, n_bins, cuda.blockDim.x):
        if table[b]:
            cuda.atomic.add(counts, b, table[b])


@cuda.jit
def _histogram_global(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, counts, failed):
    _count(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, counts.size, counts, failed)


def histogram1d(x: Any, bins: int, range: tuple[float, float]) -> np.ndarray:
    """Counts (int64, on the host) of the device array ``x`` in ``bins`` equal bins over ``range``:
    ``numpy.histogram(x, bins, range)[0]`` exactly, as :func:`workbench.kernels.histogram.histogram1d`."""
    x = device_array("x", x, 1)
    bins = positive_int("bins", bins)
    low, high = bin_range("range", range)
    line = _line_cached(np.dtype(x.dtype), bins, _range_key(low), _range_key(high))
    counts = cuda.to_device(np.zeros(bins, dtype=np.int64))
    failed = cuda.to_device(np.zeros(1, dtype=np.int64))
    if x.size:
        kernel = _histogram_shared if bins <= SHARED_BINS else _histogram_global
        kernel[_grid(x.size), THREADS](
            x, cuda.to_device(line.edges), line.keep_low, line.keep_high, line.first, line.denom, line.n_scale,
            line.low, line.scale, line.top, line.limit, counts, failed,
        )  # fmt: skip
    n_failed = int(failed.copy_to_host()[0])
    if n_failed:
        raise ValueError(
            f"{n_failed} values of x lie inside range {range} as numpy compares them but outside its "
            f"{line.edges.dtype} bin edges, where numpy.histogram fails too; give both range ends as the same type"
        )
    return counts.copy_to_host()


# -- k-means -----------------------------------------------------------------------------------
@cuda.jit
def _kmeans_partial(points, centres, sums, counts):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, points.shape[0], stride):
        best = _nearest(points, i, centres)  # first of the smallest; a NaN distance never wins
        cuda.atomic.add(counts, best, 1)
        for j in range(points.shape[1]):
            cuda.atomic.add(sums, (best, j), np.float64(points[i, j]))


def kmeans_partial(points: Any, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sums, counts)`` on the host of the device points (n, d) against ``centres`` (k, d; a host
    array: it changes every iteration and is small), as :func:`workbench.kernels.kmeans.kmeans_partial_blocks`."""
    points = device_array("points", points, 2)
    centres = cpu_kmeans._centres(centres)
    if centres.shape[1] != points.shape[1]:
        raise ValueError(f"centres must have shape ({centres.shape[0]}, {points.shape[1]}) to match points")
    sums = cuda.to_device(np.zeros(centres.shape))
    counts = cuda.to_device(np.zeros(centres.shape[0], dtype=np.int64))
    if points.shape[0]:
        _kmeans_partial[_grid(points.shape[0]), THREADS](points, cuda.to_device(centres), sums, counts)
    return sums.copy_to_host(), counts.copy_to_host()


# -- matrix add, multiply-accumulate, STREAM triad ---------------------------------------------
@cuda.jit
def _add(a, b, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    columns = a.shape[1]
    for flat in range(start, a.shape[0] * columns, stride):
        i, j = flat // columns, flat % columns
        out[i, j] = a[i, j] + b[i, j]


@cuda.jit
def _copy(a, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    columns = a.shape[1]
    for flat in range(start, a.shape[0] * columns, stride):
        i, j = flat // columns, flat % columns
        out[i, j] = a[i, j]


@cuda.jit
def _multiply_accumulate(a, b, c):
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        total = c[i, j]
        for m in range(a.shape[1]):
            total += a[i, m] * b[m, j]
        c[i, j] = total


@cuda.jit
def _triad(a, b, c, scalar):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        a[i] = b[i] + scalar * c[i]


def _apart_copy(operand: Any, written: Any) -> Any:
    """``operand`` itself, or a copy of it on the device when it overlaps ``written``."""
    if not _overlap(operand, written):
        return operand
    copy = cuda.device_array(operand.shape, dtype=operand.dtype)
    _copy[_grid(operand.size), THREADS](operand, copy)
    return copy


def _same(names: tuple[str, ...], arrays: tuple[Any, ...], shape: tuple[int, ...]) -> None:
    for name, array in zip(names, arrays, strict=True):
        if array.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
        if np.dtype(array.dtype) != np.dtype(arrays[0].dtype):
            raise TypeError(f"{name} must have dtype {arrays[0].dtype} as {names[0]}, got {array.dtype}")


def matrix_add(a: Any, b: Any, out: Any = None) -> Any:
    """``a + b`` of two device matrices of one shape and dtype, into ``out`` (made on the device when
    not given); returns the device result. ``out`` may be ``a`` or ``b`` itself (each element is read
    before it is written); one that partly overlaps either is refused, as the CPU kernel refuses it."""
    a, b = device_array("a", a, 2), device_array("b", b, 2)
    out = cuda.device_array(a.shape, dtype=a.dtype) if out is None else device_array("out", out, 2)
    _same(("a", "b", "out"), (a, b, out), a.shape)
    _apart(("a", "out"), (a, out), same_ok=True)
    _apart(("b", "out"), (b, out), same_ok=True)
    if a.size:
        _add[_grid(a.size), THREADS](a, b, out)
    return out


def multiply_accumulate(a: Any, b: Any, c: Any) -> Any:
    """``C += A @ B`` in place on the device matrix ``c`` ((n, m) @ (m, p) into (n, p)); returns ``c``.

    ``c`` may be (or overlap) ``a`` or ``b``, as on the CPU, where ``a @ b`` is made apart first: an
    operand that overlaps ``c`` is copied on the device first (device memory, no bus crossing), since
    threads would otherwise read elements of it that other threads have already updated."""
    a, b, c = device_array("a", a, 2), device_array("b", b, 2), device_array("c", c, 2)
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"b must have {a.shape[1]} rows to multiply a of shape {a.shape}, got {b.shape}")
    if c.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"c must have shape {(a.shape[0], b.shape[1])}, got {c.shape}")
    if not (np.dtype(a.dtype) == np.dtype(b.dtype) == np.dtype(c.dtype)):
        raise TypeError(f"a, b and c must share one dtype, got {a.dtype}, {b.dtype} and {c.dtype}")
    if c.size:
        same = b is a
        a = _apart_copy(a, c)
        b = a if same else _apart_copy(b, c)
        side = 16
        blocks = (math.ceil(c.shape[0] / side), math.ceil(c.shape[1] / side))
        _multiply_accumulate[blocks, (side, side)](a, b, c)
    return c


def stream_triad(a: Any, b: Any, c: Any, scalar: float) -> Any:
    """STREAM's triad ``a = b + scalar * c`` on three device vectors of one length and dtype: it
    moves 3 x 8 bytes per float64 element, the device memory bandwidth floor. Returns ``a``."""
    a, b, c = device_array("a", a, 1), device_array("b", b, 1), device_array("c", c, 1)
    _same(("a", "b", "c"), (a, b, c), a.shape)
    _apart(("b", "a"), (b, a), same_ok=True)  # a may be b or c itself (element-wise), not partly either
    _apart(("c", "a"), (c, a), same_ok=True)
    if not np.isfinite(scalar):
        raise ValueError(f"scalar must be a finite number, got {scalar!r}")
    if a.size:
        _triad[_grid(a.size), THREADS](a, b, c, np.dtype(a.dtype).type(scalar))
    return a
