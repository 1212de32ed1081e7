"""Histograms with uniform bins: 1-D and n-D, equal to numpy's to the last count.

numpy bins differently in its two functions, and each kernel follows its own:

- ``numpy.histogramdd`` finds a value's bin exactly among edges ``numpy.linspace(low, high, n + 1)``
  (``searchsorted``; the right edge belongs to the last bin).
- ``numpy.histogram`` estimates ``((v - low) / (high - low)) * n`` in the dtypes numpy picks for the
  data and the range scalars (float32 data with Python-float range: float32 edges and subtraction),
  then corrects the estimate by one step against its edges. ``histogram1d`` repeats these steps, so
  it agrees with numpy even where one step would not reach the exact bin (none found: numpy refuses
  bins under one ULP), and fails where numpy's indexing fails.

**The fast path, and why it is exact.** Each kernel computes ``t(v) = (v - low) * scale`` in float64
(the arithmetic bin before truncation) and takes bin ``k = floor(t)`` without looking at any edge
when ``t`` is more than ``delta`` from every integer. ``t`` is two correctly rounded IEEE operations
with a positive factor, so it is monotone in ``v``: ``v <= e`` implies ``t(v) <= t(e)``. Python computes
``T_i = t(e_i)`` for every edge with the same operations (numpy ufuncs, no fused multiply-add; numba
does not contract either without fastmath) and sets ``delta >= max_i |T_i - i|``. Then
``k + delta < t(v) < k + 1 - delta`` gives ``T_k < t(v) < T_(k+1)``, so ``e_k < v < e_(k+1)``: bin ``k``
exactly, strictly inside. For ``histogram1d`` the fast path is used only where numpy's own estimate
is within one bin of every edge, hence (being monotone too) of every value: its one-step correction
then lands on that same exact bin. ``delta`` is a few ULPs of ``n``, so about ``2 * delta`` of the
values (10**-12 or fewer) take the exact path. Bins only a few ULPs wide bring ``delta`` near 0.5
and most values to the exact path; a scale that overflows (a subnormal width) sends all. No error
analysis of the edges is assumed: the bound is measured on the edges numpy actually uses (float32
edges included), and tests check every edge and its neighbours up to 4 ULPs away against numpy.

**The exact path** is numpy's own rule: a binary search over the edges for ``histogramdd``, numpy's
estimate-and-one-step for ``histogram1d``. Bin indices are clamped before any conversion or write,
so no float (inf, NaN, subnormal scale) can index outside the table.

Values outside the range (and NaN) are dropped. Counts are int64 (``numpy.histogramdd`` returns the
same counts as float64). The counting loop is written once (``_count_values``, ``_count_points``):
called directly for a serial call, and inlined into a ``parallel=True`` kernel that runs it over
chunks with a table each. A serial call never wakes numba's thread pool, which costs a small block
several times its counting on a loaded machine (inside Dask workers numba has one thread per worker
thread).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from workbench.kernels._checks import (
    as_array,
    bin_range,
    positive_int,
    read_array,
    require_apart,
    require_native,
    require_writeable,
)

MIN_CHUNK = 1 << 16  # values per parallel chunk at least: fewer cost more in table zeroing than they save


# -- shared: the sure estimate -----------------------------------------------------------------
@njit(nogil=True, cache=True, inline="always")
def _estimate(t, top, limit):
    """(k, sure): ``floor(t)`` clamped to ``[0, top]``, and whether it is provably the exact bin.

    ``sure`` is ``|t - k - 0.5| < limit`` with ``limit = 0.5 - delta``: ``t - k`` is exact (Sterbenz) for
    ``t`` in ``[0, top + 1)``, and any other ``t`` (negative, too large, inf, NaN) fails the test.
    """
    tc = t if t > 0.0 else 0.0  # NaN becomes 0: int() below only ever sees a value in [0, top]
    tc = tc if tc < top else top
    k = int(tc)
    return k, abs(t - k - 0.5) < limit


def _deviation(positions: np.ndarray) -> float:
    """An upper bound of ``max_i |T_i - i|`` for the positions ``T_i`` of edges ``0..n`` (inf if any is NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        deviation = np.max(np.abs(positions.astype(np.float64) - np.arange(positions.size, dtype=np.float64)))
    if not np.isfinite(deviation):
        return math.inf
    return float(np.nextafter(deviation, np.inf))  # covers the rounding of the subtraction just above


def _sure_limit(positions: np.ndarray) -> float:
    """``0.5 - delta`` for the positions ``T_i`` of edges ``0..n``; negative (never sure) if none is safe."""
    delta = _deviation(positions)
    return float(np.float64(0.5) - delta) if math.isfinite(delta) else -1.0


def _chunks(parallel: bool, n_values: int, table_size: int) -> int:
    """Parallel chunks: all numba threads, but none smaller than its own table is worth zeroing."""
    if not parallel:
        return 1
    return max(1, min(numba.get_num_threads(), n_values // max(MIN_CHUNK, table_size)))


# -- 1-D: numpy.histogram's estimate, fast path, numpy's one-step correction ------------------
@njit(nogil=True, cache=True, inline="always")
def _numpy_1d_bin(v, f, edges, n_bins):
    """numpy.histogram's bin of kept value ``v`` with estimate ``f``; -1 where numpy's indexing fails."""
    if not (f > -1.0 and f < n_bins + 1.0):  # numpy would index outside its edges (or convert NaN)
        return -1
    k = int(f)  # truncation toward zero, as numpy's astype(intp)
    if k == n_bins:
        k = n_bins - 1
    if v < edges[k]:
        k -= 1
    if k < 0:  # numpy's bincount refuses a negative index
        return -1
    if k != n_bins - 1 and v >= edges[k + 1]:
        k += 1
    return k


@njit(nogil=True, cache=True, inline="always")
def _count_values(x, start, stop, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, table):
    """Count ``x[start:stop]`` into ``table`` as numpy.histogram does; returns how many values numpy
    would fail on (its indexing leaves its edges).

    The sure estimate is ``(v - low) * scale`` in float64 (a multiplication: 1.2x faster than numpy's
    division on one thread). Where it is not sure, numpy's own estimate: ``first``, ``denom`` and
    ``n_scale`` carry numpy's dtypes, so ``((v - first) / denom) * n_scale`` rounds as numpy's does
    (numba promotes float32/float64 as numpy does), and numpy's one-step correction follows.
    """
    n_bins = table.size
    failed = 0
    for i in range(start, stop):
        v = x[i]
        if not (v >= keep_low and v <= keep_high):  # numpy's `keep`, compared in numpy's dtype
            continue
        k, sure = _estimate((v - low) * scale, top, limit)
        if not sure:
            k = _numpy_1d_bin(v, ((v - first) / denom) * n_scale, edges, n_bins)
            if k < 0:
                failed += 1
                continue
        table[k] += 1
    return failed


@njit(nogil=True, cache=True, parallel=True)
def _hist1d(x, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, counts, n_chunks):
    """``_count_values`` over ``n_chunks`` parallel chunks, each into its own table, then summed."""
    chunk = (x.size + n_chunks - 1) // n_chunks
    local = np.zeros((n_chunks, counts.size), dtype=np.int64)
    failed = np.zeros(n_chunks, dtype=np.int64)
    for c in prange(n_chunks):
        stop = min(x.size, (c + 1) * chunk)
        failed[c] = _count_values(
            x, c * chunk, stop, edges, keep_low, keep_high, first, denom, n_scale, low, scale, top, limit, local[c]
        )
    for c in range(n_chunks):
        counts += local[c]
    return failed.sum()


@dataclass(frozen=True)
class _Line:
    """numpy.histogram's uniform bins for one data dtype and range, and the fast-path bound."""

    edges: np.ndarray  # in numpy's bin dtype
    keep_low: float  # the range ends as numpy compares them with the data (in the comparison dtype)
    keep_high: float
    first: np.generic  # the low end, estimate numerator, in the bin dtype
    denom: np.generic  # high - low, in the dtype numpy divides in
    n_scale: np.generic  # the bin count, in the dtype numpy multiplies in
    low: float  # the sure estimate (v - low) * scale, in float64
    scale: float
    top: float
    limit: float


def _unsigned_subtract(a: Any, b: Any) -> Any:
    """numpy.histogram's own ``a - b`` (from numpy/lib/_histograms_impl.py): signed ints go unsigned."""
    dtype = np.result_type(a, b)
    if dtype.kind == "i":
        unsigned = np.dtype(f"u{dtype.itemsize}")
        return np.subtract(np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype), casting="unsafe", dtype=unsigned)
    return np.subtract(a, b, dtype=dtype)


def _compare_value(data: np.dtype, end: Any) -> float:
    """The range end as numpy's ``data >= end`` sees it: rounded to the comparison dtype, as float64."""
    dtype = np.result_type(np.empty(0, data), end)
    if dtype.kind != "f":
        return float(end)  # integer data with an integer end: exact below 2**53
    with np.errstate(over="ignore"):  # numpy compares a float32 array with 1e300 as with inf
        return float(np.asarray(end).astype(dtype))


@functools.lru_cache(maxsize=64)
def _line_cached(data: np.dtype, bins: int, low: tuple[type, Any], high: tuple[type, Any]) -> _Line:
    return _line(data, bins, low[1], high[1])


def _line(data: np.dtype, bins: int, low: Any, high: Any) -> _Line:
    """numpy.histogram's steps before its loop, for data of dtype ``data`` (numpy 2 promotion rules)."""
    probe = np.empty(1, data)
    bin_type = np.result_type(low, high, probe[:0])
    if bin_type.kind != "f":
        bin_type = np.result_type(bin_type, float)  # numpy bins integer data in float64
    if bin_type.itemsize not in (4, 8):
        raise TypeError(f"range and x give numpy bin edges of dtype {bin_type}; use float32 or float64")
    with np.errstate(all="ignore"):  # a width that overflows gives NaN edges: refused just below
        edges = np.linspace(low, high, bins + 1, endpoint=True, dtype=bin_type)
        if np.any(edges[:-1] >= edges[1:]):  # numpy.histogram's own test (NaN edges pass it there too)
            raise ValueError(
                f"range ({low}, {high}) cannot hold {bins} bins of nonzero width in {bin_type} (bins narrower "
                f"than the spacing of {bin_type} numbers, or a width that overflows); numpy.histogram refuses "
                f"it too: use fewer bins or a wider (or narrower) range"
            )
        denom = _unsigned_subtract(high, low)
        lows = _unsigned_subtract(edges, low)  # numpy's estimate for every edge, in its dtypes
        quotient = lows / denom
        positions = quotient * bins
        # low as numpy's subtract casts it to the bin dtype (0 - (0 - low): exact, and +0.0 for 0)
        first = np.subtract(0, np.subtract(0, low, dtype=bin_type), dtype=bin_type)
        denom_q = np.asarray(denom).astype(quotient.dtype)[()]
        # The sure estimate: its own positions bound it; it may stand in for numpy's only where
        # numpy's estimate is within one bin at every edge (so within one bin for every value, both
        # being monotone): then numpy's one-step correction lands on the exact bin, as the sure one.
        within_one = np.isfinite(denom_q) and denom_q > 0 and _deviation(positions) < 1.0
        low64 = float(edges[0])
        scale = bins / (float(edges[-1]) - low64)
        mine = (edges.astype(np.float64) - low64) * scale
    edges.setflags(write=False)  # shared by every call through the cache
    return _Line(
        edges=edges,
        keep_low=_compare_value(data, low),
        keep_high=_compare_value(data, high),
        first=bin_type.type(first),
        denom=denom_q,
        n_scale=positions.dtype.type(bins),
        low=low64,
        scale=scale,
        top=float(bins - 1),
        limit=_sure_limit(mine) if within_one and math.isfinite(scale) and scale > 0 else -1.0,
    )


def _holds_every(floats: np.dtype, integers: np.dtype) -> bool:
    """Whether float dtype ``floats`` represents every value of integer dtype ``integers`` exactly
    (numpy's ``can_cast`` calls int64 to float64 safe; it is not beyond 2**53)."""
    value_bits = 8 * integers.itemsize - (integers.kind == "i")
    return value_bits <= np.finfo(floats).nmant + 1


def _range_key(end: Any) -> tuple[type, Any]:
    """Cache key of a range end: its type too, since numpy's edges depend on it (0.5 == float32(0.5))."""
    return (type(end), end)


def histogram1d(x: np.ndarray, bins: int, range: tuple[float, float], *, parallel: bool = False) -> np.ndarray:
    """Count the values of ``x`` in ``bins`` equal-width bins over ``range`` (int64 counts).

    Same counts as ``numpy.histogram(x, bins, range)[0]``, including its dtype rules (float32 data with
    Python-float range ends bins in float32; numpy float64 ends in float64) and ``low == high``
    (widened by 0.5). Integer data is compared with the range ends as numpy compares it (exactly,
    where the bin dtype cannot hold every value: int64 beyond 2**53, int32 with float32 ends), then
    converted to numpy's bin dtype for the estimate, as numpy does. ``parallel=True`` uses all numba
    threads.
    """
    x = read_array("x", x, 1)
    bins = positive_int("bins", bins)
    low, high = bin_range("range", range)
    line = _line_cached(x.dtype, bins, _range_key(low), _range_key(high))
    keep_low, keep_high = line.keep_low, line.keep_high
    if x.dtype.kind != "f":
        if not _holds_every(line.edges.dtype, x.dtype):
            # numpy compares integers with the range ends before it converts them, exactly (2**53 + 1 is
            # above 2**53, though both convert to the same float64): the same comparison, here, first
            inside = (x >= low) & (x <= high)
            if not inside.all():
                x = x[inside]
            keep_low, keep_high = -math.inf, math.inf  # every value left is inside
        x = x.astype(line.edges.dtype)  # numpy converts integer data to its bin dtype before the estimate
    x = np.ascontiguousarray(x)
    counts = np.zeros(bins, dtype=np.int64)
    constants = (
        line.edges, keep_low, keep_high, line.first, line.denom, line.n_scale,
        line.low, line.scale, line.top, line.limit,
    )  # fmt: skip
    chunks = _chunks(parallel, x.size, bins)
    if chunks == 1:  # on this thread, without waking numba's thread pool
        failed = _count_values(x, 0, x.size, *constants, counts)
    else:
        failed = _hist1d(x, *constants, counts, chunks)
    if failed:
        raise ValueError(
            f"{failed} values of x lie inside range {range} as numpy compares them but outside its {line.edges.dtype} "
            f"bin edges, where numpy.histogram fails too; give both range ends as the same type"
        )
    return counts


# -- n-D: exact bins among numpy.histogramdd's edges -------------------------------------------
@njit(nogil=True, cache=True, inline="always")
def _edge_bin(v, row, n_bins):
    """numpy.histogramdd's bin of ``row[0] <= v <= row[n_bins]``: last edge <= v, right edge in the last bin."""
    lo = 0
    hi = n_bins + 1  # row[lo] <= v < row[hi], with row[n_bins + 1] read as +inf
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if row[mid] <= v:
            lo = mid
        else:
            hi = mid
    return lo if lo < n_bins else n_bins - 1


@njit(nogil=True, cache=True, inline="always")
def _exact_flat(points, i, edges, n_bins, low, high):
    """Flat bin of point ``i`` by binary search in every dimension; -1 when it lies outside (or NaN)."""
    flat = 0
    for d in range(len(n_bins)):
        v = points[i, d]
        if not (v >= low[d] and v <= high[d]):
            return -1
        flat = flat * n_bins[d] + _edge_bin(v, edges[d], n_bins[d])
    return flat


@njit(nogil=True, cache=True, inline="always")
def _count_points(points, start, stop, edges, n_bins, low, high, scale, top, limit, table):
    """Count ``points[start:stop]`` into flat row-major ``table``.

    Point at a time: every dimension takes the arithmetic bin, and one rarely taken branch sends a
    point with any unsure coordinate to the exact search. The per-dimension constants are tuples,
    so numba compiles one loop per dimension count, unrolled with its constants at hand (measured
    1.3x faster than arrays of constants, and faster than passes of 256 points per dimension).
    """
    for i in range(start, stop):
        flat = 0
        sure = True
        for d in range(len(n_bins)):
            k, s = _estimate((points[i, d] - low[d]) * scale[d], top[d], limit[d])
            sure &= s
            flat = flat * n_bins[d] + k
        if not sure:  # some coordinate is near an edge, outside the range, or NaN
            flat = _exact_flat(points, i, edges, n_bins, low, high)
        if flat >= 0:
            table[flat] += 1


@njit(nogil=True, cache=True, parallel=True)
def _histdd(points, edges, n_bins, low, high, scale, top, limit, counts, n_chunks):
    """``_count_points`` over ``n_chunks`` parallel chunks, each into its own table, then summed."""
    n = points.shape[0]
    chunk = (n + n_chunks - 1) // n_chunks
    local = np.zeros((n_chunks, counts.size), dtype=np.int64)
    for c in prange(n_chunks):
        _count_points(points, c * chunk, min(n, (c + 1) * chunk), edges, n_bins, low, high, scale, top, limit, local[c])
    for c in range(n_chunks):
        counts += local[c]


@dataclass(frozen=True)
class _Grid:
    """numpy.histogramdd's edges for given bins and range, with the kernel's per-dimension constants."""

    edges: np.ndarray  # (dims, max bins + 1) float64, padded with +inf
    n_bins: tuple[int, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    scale: tuple[float, ...]
    top: tuple[float, ...]
    limit: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.n_bins

    @property
    def size(self) -> int:
        return math.prod(self.n_bins)


def _grid_arguments(
    dims: int, bins: int | Sequence[int], range: object
) -> tuple[tuple[int, ...], list[tuple[Any, Any]]]:
    """Checked bins (one per dimension) and numpy's outer edges per dimension."""
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        bins = [bins] * dims
    try:
        bins = list(bins)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"bins must be a positive integer or one per dimension, got {bins!r}") from None
    checked = tuple(positive_int(f"bins[{d}]", b) for d, b in enumerate(bins))
    if len(checked) != dims:
        raise ValueError(f"bins must give one count per dimension ({dims}), got {len(checked)}")
    try:
        pairs = list(range)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"range must be a sequence of (low, high) pairs, one per dimension, got {range!r}") from None
    if len(pairs) != dims:
        raise ValueError(f"range must give one (low, high) pair per dimension ({dims}), got {len(pairs)}")
    return checked, [bin_range(f"range[{d}]", r) for d, r in enumerate(pairs)]


@functools.lru_cache(maxsize=64)
def _grid_cached(bins: tuple[int, ...], limits: tuple[tuple[tuple[type, Any], tuple[type, Any]], ...]) -> _Grid:
    return _grid(bins, [(low[1], high[1]) for low, high in limits])


def _grid(bins: tuple[int, ...], limits: Sequence[tuple[Any, Any]]) -> _Grid:
    """The edges numpy.histogramdd uses (``numpy.linspace(low, high, n + 1)``, its dtype from the ends)."""
    if not bins:
        raise ValueError("points must have at least one dimension (column); numpy.histogramdd fails on none too")
    edges = np.full((len(bins), max(bins) + 1), np.inf)
    scale, limit = [], []
    for d, ((low, high), n) in enumerate(zip(limits, bins)):
        with np.errstate(all="ignore"):  # a width that overflows gives NaN edges: refused just below
            row = np.linspace(low, high, n + 1)
        if row.dtype.itemsize > 8:
            raise TypeError(f"range[{d}] gives {row.dtype} edges; give float64 (or Python) numbers")
        row = row.astype(np.float64)
        if not np.all(np.isfinite(row)) or np.any(row[1:] < row[:-1]):
            raise ValueError(
                f"range[{d}] = ({low}, {high}) is too wide: its width overflows float64, and numpy.histogramdd's "
                f"edges would be NaN (it would count nothing); use a narrower range"
            )
        edges[d, : n + 1] = row
        with np.errstate(all="ignore"):  # a subnormal width overflows the scale: then never sure
            s = n / (row[n] - row[0])
            positions = (row - row[0]) * s  # t(e_i), exactly as the kernel computes t(v)
        scale.append(float(s))
        limit.append(_sure_limit(positions) if np.isfinite(s) else -1.0)
    edges.setflags(write=False)  # shared by every call through the cache
    return _Grid(
        edges=edges,
        n_bins=bins,
        low=tuple(float(v) for v in edges[:, 0]),
        high=tuple(float(edges[d, n]) for d, n in enumerate(bins)),
        scale=tuple(scale),
        top=tuple(float(n - 1) for n in bins),
        limit=tuple(limit),
    )


def _grid_layout(dims: int, bins: int | Sequence[int], range: object) -> _Grid:
    """numpy.histogramdd's grid, computed once per distinct (bins, range) and cached."""
    checked, limits = _grid_arguments(dims, bins, range)
    try:
        return _grid_cached(checked, tuple((_range_key(low), _range_key(high)) for low, high in limits))
    except TypeError:  # an unhashable range end (an exotic numeric type): compute without the cache
        return _grid(checked, limits)


def _points(name: str, value: object, dims: int | None = None) -> np.ndarray:
    """Points as the n-D kernel reads them: 2-D, native, C-contiguous float32/float64 (ints as float64).

    Integers become float64 as numpy's ``searchsorted`` compares them with float64 edges.
    """
    points = read_array(name, value, 2)
    if dims is not None and points.shape[1] != dims:
        raise ValueError(f"{name} must have {dims} columns (one per dimension), got shape {points.shape}")
    if points.dtype.kind != "f":
        points = points.astype(np.float64)
    return np.ascontiguousarray(points)


def _table(add_to: np.ndarray | None, grid: _Grid) -> np.ndarray:
    """The flat count table: a new one, or ``add_to`` checked and viewed flat."""
    if add_to is None:
        return np.zeros(grid.size, dtype=np.int64)
    add_to = as_array("add_to", add_to)
    if (
        add_to.dtype.kind != "i"
        or add_to.dtype.itemsize != 8
        or add_to.shape != grid.shape
        or not add_to.flags.c_contiguous
    ):
        raise ValueError(
            f"add_to must be a C-contiguous int64 array of shape {grid.shape}, got {add_to.dtype} {add_to.shape}"
        )
    require_writeable("add_to", add_to)
    require_native("add_to", add_to)
    return add_to.reshape(-1)


def _count(points: np.ndarray, grid: _Grid, counts: np.ndarray, parallel: bool) -> None:
    """Add the counts of ``points`` to flat ``counts``: on this thread, or in parallel chunks."""
    g = grid
    chunks = _chunks(parallel, points.shape[0], counts.size)
    if chunks == 1:  # straight into the table, without waking numba's thread pool (small blocks)
        _count_points(points, 0, points.shape[0], g.edges, g.n_bins, g.low, g.high, g.scale, g.top, g.limit, counts)
    else:
        _histdd(points, g.edges, g.n_bins, g.low, g.high, g.scale, g.top, g.limit, counts, chunks)


def histogramdd(
    points: np.ndarray,
    bins: int | Sequence[int],
    range: Sequence[tuple[float, float]],
    *,
    parallel: bool = False,
    add_to: np.ndarray | None = None,
) -> np.ndarray:
    """Count ``points`` (n points x d dimensions) in a d-dimensional grid of equal-width bins.

    Returns int64 counts of shape ``bins``; the same numbers as ``numpy.histogramdd(points, bins,
    range)[0]`` (``low == high`` widens by 0.5 as there). A range whose width overflows float64 is
    refused: numpy's edges would be NaN. ``parallel=True`` splits the points over all numba threads.
    ``add_to``: an int64 array of shape ``bins`` that the counts are *added* to (and which is
    returned), so many blocks accumulate into one table without a new one per block; for a sequence
    of blocks, ``histogramdd_blocks`` also checks the bins and range only once.
    """
    points = as_array("points", points)
    if points.ndim == 2 and points.shape[1] == 0:
        raise ValueError(
            f"points must have at least one dimension (column), got shape {points.shape}; numpy.histogramdd fails on "
            "it too"
        )
    points = _points("points", points)
    grid = _grid_layout(points.shape[1], bins, range)
    counts = _table(add_to, grid)
    if add_to is not None:
        require_apart(("points", "add_to"), (points, add_to))
    _count(points, grid, counts, parallel)
    return add_to if add_to is not None else counts.reshape(grid.shape)


def histogramdd_blocks(
    blocks: Iterable[np.ndarray],
    bins: int | Sequence[int],
    range: Sequence[tuple[float, float]],
    *,
    add_to: np.ndarray | None = None,
    parallel: bool = False,
) -> np.ndarray:
    """Count a sequence of point blocks into one table: ``histogramdd`` of their concatenation.

    The edges, the fast-path bounds and the bins/range checks are done once for all blocks, and no
    block is copied into a concatenation: a partition of hundreds of small blocks costs one call.
    The dimension count comes from ``range``. Blocks may differ in length and dtype (float32,
    float64, integers): every value is binned exactly among numpy's float64 edges, which is what
    numpy does with the concatenation. ``add_to`` as in ``histogramdd``. ``parallel=True`` splits
    each block over the numba threads (worth it for large blocks only).
    """
    try:
        dims = len(range)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"range must be a sequence of (low, high) pairs, one per dimension, got {range!r}") from None
    grid = _grid_layout(dims, bins, range)
    counts = _table(add_to, grid)
    if isinstance(blocks, np.ndarray):
        raise TypeError("blocks must be a sequence of 2-D arrays, got one ndarray; call histogramdd for a single block")
    for b, block in enumerate(blocks):
        points = _points(f"blocks[{b}]", block, dims)
        if add_to is not None:
            require_apart((f"blocks[{b}]", "add_to"), (points, add_to))
        _count(points, grid, counts, parallel)
    return add_to if add_to is not None else counts.reshape(grid.shape)


def histogram1d_reference(x: np.ndarray, bins: int, range: tuple[float, float]) -> np.ndarray:
    """numpy's answer, as int64 counts."""
    return np.histogram(x, bins=bins, range=range)[0].astype(np.int64)


def histogramdd_reference(
    points: np.ndarray, bins: int | Sequence[int], range: Sequence[tuple[float, float]]
) -> np.ndarray:
    """numpy's answer, as int64 counts."""
    return np.histogramdd(points, bins=bins, range=range)[0].astype(np.int64)
