"""``workbench bench kernels``: each kernel's throughput, against numpy and the memory bandwidth.

For every kernel: the first call (numba compile, or load from the cache) timed apart; then the
median of repeated calls for the numba kernel on one thread and on all threads, and for its numpy
reference. Ratios: numpy time / numba time, and numba throughput / streaming-read bandwidth
measured in the same run (the practical memory limit of this machine).

``histogramdd`` also runs a *plain loop*: the naive parallel numba loop that takes the arithmetic bin
and corrects nothing (so it can be off by one near edges). It is what this CPU gives a histogram
without exactness; the kernel's time against it shows what exactness costs here, on any machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import njit, prange

import kernels
from kernels import prk
from workbench import machine
from workbench.lab.timing import median_seconds, time_once

GB = 1e9
# Goals from the foundation issue; printed next to the figures, never asserted in tests.
GOALS = {
    "histogramdd": {"ratio_numpy": 20.0, "fraction_of_stream": 0.40},
    "histogram1d": {"ratio_numpy": 2.0},
}


@dataclass
class Case:
    """One kernel to measure: inputs, the numba call, its numpy reference, and what it moves."""

    name: str
    inputs: Callable[[int], tuple[Any, ...]]
    numba_call: Callable[..., object]  # (*inputs, parallel=bool)
    numpy_call: Callable[..., object]
    input_bytes: Callable[[tuple[Any, ...]], int]
    dispatchers: tuple[Any, ...]
    has_serial: bool = True
    rate: Callable[[tuple[Any, ...], float], tuple[float, str]] | None = None
    plain_call: Callable[..., np.ndarray] | None = None  # (*inputs): the naive loop, a reference line


@njit(nogil=True, cache=True, parallel=True)
def _plain_histdd(points, n_bins, low, high, scale, counts, n_chunks):
    """The naive loop: arithmetic bin per coordinate, no correction near edges (not exact)."""
    n, dims = points.shape
    chunk = (n + n_chunks - 1) // n_chunks
    local = np.zeros((n_chunks, counts.size), dtype=np.int64)
    for c in prange(n_chunks):
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            flat = 0
            inside = True
            for d in range(dims):
                v = points[i, d]
                if not (v >= low[d] and v <= high[d]):
                    inside = False
                    break
                flat = flat * n_bins[d] + min(int((v - low[d]) * scale[d]), n_bins[d] - 1)
            if inside:
                local[c, flat] += 1
    for c in range(n_chunks):
        counts += local[c]


def plain_histogramdd(points: np.ndarray, bins: int, range: list[tuple[float, float]]) -> np.ndarray:
    """``_plain_histdd`` on all numba threads: counts of shape ``(bins,) * d`` (C-contiguous float64 points)."""
    dims = points.shape[1]
    n_bins = np.full(dims, bins, dtype=np.int64)
    low = np.array([r[0] for r in range], dtype=np.float64)
    high = np.array([r[1] for r in range], dtype=np.float64)
    counts = np.zeros(bins**dims, dtype=np.int64)
    _plain_histdd(points, n_bins, low, high, n_bins / (high - low), counts, numba.get_num_threads())
    return counts.reshape((bins,) * dims)


def _rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def names() -> list[str]:
    """The names of the kernels this benchmark times (what ``--only`` accepts)."""
    return [case.name for case in _cases()]


def _cases() -> list[Case]:
    """Every kernel's case: the histograms and k-means, the linear algebra, the PRK."""
    return [*_data_cases(), *_linalg_cases(), *_prk_cases()]


def _data_cases() -> list[Case]:
    """The histograms' and k-means' kernels (numba parallel and serial against numpy)."""
    from kernels import histogram, kmeans

    unit = [(0.0, 1.0)] * 5
    return [
        Case(
            "histogram1d",
            lambda s: (_rng().random(16_000_000 // s),),
            lambda x, parallel: kernels.histogram1d(x, 100, (0.0, 1.0), parallel=parallel),
            lambda x: np.histogram(x, 100, (0.0, 1.0)),
            lambda a: a[0].nbytes,
            (histogram._hist1d, histogram._count_values),
        ),
        Case(
            "histogramdd",
            lambda s: (_rng().random((4_000_000 // s, 5)),),
            lambda p, parallel: kernels.histogramdd(p, 8, unit, parallel=parallel),
            lambda p: np.histogramdd(p, 8, unit),
            lambda a: a[0].nbytes,
            (histogram._histdd, histogram._count_points),
            plain_call=lambda p: plain_histogramdd(p, 8, unit),
        ),
        Case(
            "kmeans_partial",
            lambda s: (_rng().random((1_000_000 // s, 16)), _rng().random((4, 16))),
            lambda p, c, parallel: kernels.kmeans_partial(p, c, parallel=parallel),
            kernels.kmeans_partial_reference,
            lambda a: a[0].nbytes,
            (kmeans._partial, kmeans._partial_serial),
        ),
    ]


def _linalg_cases() -> list[Case]:
    """Matrix addition and C += A @ B."""
    from kernels import linalg

    return [
        Case(
            "matrix_add",
            lambda s: (_rng().random((4096 // s, 4096)), _rng().random((4096 // s, 4096)), np.empty((4096 // s, 4096))),
            lambda a, b, out, parallel: kernels.matrix_add(a, b, out, parallel=parallel),
            lambda a, b, out: np.add(a, b, out=out),
            lambda a: 3 * a[0].nbytes,
            (linalg._add,),
        ),
        Case(
            "multiply_accumulate",
            lambda s: (
                _rng().random((1024 // s, 1024 // s)),
                _rng().random((1024 // s, 1024 // s)),
                np.zeros((1024 // s, 1024 // s)),
            ),
            lambda a, b, c, parallel: kernels.multiply_accumulate(a, b, c),
            lambda a, b, c: kernels.multiply_accumulate_reference(a, b, c),
            lambda a: 4 * a[0].nbytes,
            (linalg._multiply_accumulate,),
            has_serial=False,
            rate=lambda a, t: (2.0 * a[0].shape[0] ** 3 / t / 1e9, "GFlop/s"),
        ),
    ]


def _prk_cases() -> list[Case]:
    """The Parallel Research Kernels (nstream, transpose, stencil, reduce) against their numpy references."""
    return [
        Case(
            "prk_nstream",
            lambda s: (*prk.nstream_init(8_000_000 // s), 3.0),
            lambda a, b, c, scalar, parallel: prk.nstream(a, b, c, scalar),
            prk.nstream_reference,
            lambda a: 4 * a[0].nbytes,
            (prk._nstream,),
            has_serial=False,
            rate=lambda a, t: (4 * 8 * a[0].size / t / 1e6, "MB/s"),
        ),
        Case(
            "prk_transpose",
            lambda s: prk.transpose_init(4096 // s),
            lambda a, b, parallel: prk.transpose(a, b),
            prk.transpose_reference,
            lambda a: 2 * a[0].nbytes,
            (prk._transpose,),
            has_serial=False,
            rate=lambda a, t: (2 * 8 * a[0].shape[0] ** 2 / t / 1e6, "MB/s"),
        ),
        Case(
            "prk_stencil",
            lambda s: (*prk.stencil_init(4096 // s), 2),
            lambda a, b, r, parallel: prk.stencil_star(a, b, r),
            prk.stencil_star_reference,
            lambda a: 2 * a[0].nbytes,
            (prk._stencil_star,),
            has_serial=False,
            rate=lambda a, t: ((2 * (4 * a[2] + 1) + 1) * (a[0].shape[0] - 2 * a[2]) ** 2 / t / 1e6, "MFlop/s"),
        ),
        Case(
            "prk_reduce",
            lambda s: (np.ones((8, 4_000_000 // s)), np.empty(4_000_000 // s)),
            lambda v, out, parallel: prk.vector_reduce(v, out),
            lambda v, out: np.sum(v, axis=0, out=out),
            lambda a: a[0].nbytes + a[1].nbytes,
            (prk._vector_reduce,),
            has_serial=False,
        ),
    ]


def _compiled_fresh(dispatchers: tuple[Any, ...]) -> bool:
    """True when the first call compiled (a cache miss) rather than loading from the numba cache."""
    return any(sum(d.stats.cache_misses.values()) > 0 for d in dispatchers)


def stream_bandwidth(scale: int = 1, repeats: int = 5) -> dict[str, float]:
    """Streaming-read bandwidth (GB/s) over a 1 GiB array, on one thread and on all threads."""
    x = np.ones((1 << 27) // scale)  # 1 GiB of float64 at scale 1: larger than any cache here
    kernels.stream_sum(x[:16])
    kernels.stream_sum(x[:16], parallel=False)
    return {
        "all_threads": x.nbytes / median_seconds(lambda: kernels.stream_sum(x), repeats) / GB,
        "one_thread": x.nbytes / median_seconds(lambda: kernels.stream_sum(x, parallel=False), repeats) / GB,
        "bytes": float(x.nbytes),
    }


def _plain_row(
    plain_call: Callable[..., np.ndarray], args: tuple[Any, ...], row: dict[str, Any], stream: float, repeats: int
) -> dict[str, Any]:
    """The plain loop's figures for a kernel's ``row``: time, ratios, and the kernel's speed against it."""
    plain_counts = plain_call(*args)  # warm-up (compile or cache load), then timed
    plain_s = median_seconds(lambda: plain_call(*args), repeats)
    return {
        "plain_loop_s": plain_s,
        "plain_loop_ratio_numpy": row["numpy_s"] / plain_s,
        "plain_loop_fraction_of_stream": row["bytes"] / plain_s / GB / stream,
        "kernel_speed_vs_plain_loop": plain_s / row["numba_s"],
        "plain_loop_counts_equal_kernel": bool(np.array_equal(plain_counts, row.pop("_counts"))),
    }


def run(quick: bool = False, repeats: int = 5, only: list[str] | None = None) -> dict[str, Any]:
    """Measure every kernel (or those named in ``only``); returns a JSON-ready report."""
    scale = 64 if quick else 1
    cases = _cases()
    if only:
        unknown = sorted(set(only) - {c.name for c in cases})
        if unknown:
            raise ValueError(f"unknown kernels {unknown}; choose from {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in only]
    stream = stream_bandwidth(scale, repeats)
    rows = []
    for case in cases:
        args = case.inputs(scale)
        first_call = time_once(lambda case=case, args=args: case.numba_call(*args, parallel=True))
        compiled = _compiled_fresh(case.dispatchers)
        if case.has_serial:
            case.numba_call(*args, parallel=False)  # a parallel=False call reuses the same compiled kernel
        parallel_s = median_seconds(lambda case=case, args=args: case.numba_call(*args, parallel=True), repeats)
        serial_s = (
            median_seconds(lambda case=case, args=args: case.numba_call(*args, parallel=False), repeats)
            if case.has_serial
            else None
        )
        numpy_s = median_seconds(lambda case=case, args=args: case.numpy_call(*args), repeats)
        nbytes = case.input_bytes(args)
        throughput = nbytes / parallel_s / GB
        row = {
            "kernel": case.name,
            "bytes": nbytes,
            "first_call_s": first_call,
            "first_call_compiled": compiled,
            "numba_s": parallel_s,
            "numba_one_thread_s": serial_s,
            "numpy_s": numpy_s,
            "GBps": throughput,
            "ratio_numpy": numpy_s / parallel_s,
            "ratio_numpy_one_thread": numpy_s / serial_s if serial_s else None,
            "fraction_of_stream": throughput / stream["all_threads"],
        }
        if case.rate is not None:
            row["rate"], row["rate_unit"] = case.rate(args, parallel_s)
        if case.plain_call is not None:
            row["_counts"] = case.numba_call(*args, parallel=True)
            row.update(_plain_row(case.plain_call, args, row, stream["all_threads"], repeats))
        goals = GOALS.get(case.name)
        if goals:
            row["goals"] = {k: {"goal": v, "measured": row[k], "met": row[k] >= v} for k, v in goals.items()}
        rows.append(row)
    return {
        "benchmark": "kernels",
        "quick": quick,
        "repeats": repeats,
        "numba_threads": numba.get_num_threads(),
        "stream_GBps": stream,
        "kernels": rows,
        "machine": machine.describe(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a table a person reads: one line per kernel."""
    stream = report["stream_GBps"]
    lines = [
        f"streaming read: {stream['all_threads']:.1f} GB/s on {report['numba_threads']} threads, "
        f"{stream['one_thread']:.1f} GB/s on one   (median of {report['repeats']})",
        "",
        f"{'kernel':<20} {'first call':>11} {'numba':>9} {'1 thread':>9} {'numpy':>9} {'GB/s':>6} "
        f"{'x numpy':>8} {'x numpy 1t':>10} {'of stream':>9}  rate",
    ]
    for r in report["kernels"]:
        first = f"{r['first_call_s']:.3f}{'c' if r['first_call_compiled'] else 'l'}"
        one = f"{r['numba_one_thread_s']:.4f}" if r["numba_one_thread_s"] else "-"
        one_ratio = f"{r['ratio_numpy_one_thread']:.1f}" if r["ratio_numpy_one_thread"] else "-"
        rate = f"{r['rate']:.4g} {r['rate_unit']}" if "rate" in r else ""
        lines.append(
            f"{r['kernel']:<20} {first:>11} {r['numba_s']:>9.4f} {one:>9} {r['numpy_s']:>9.4f} "
            f"{r['GBps']:>6.2f} {r['ratio_numpy']:>8.1f} {one_ratio:>10} {r['fraction_of_stream']:>9.0%}  {rate}"
        )
    for r in report["kernels"]:
        if "plain_loop_s" in r:  # the reference line under the table: same columns, what it is at the end
            same = "same counts" if r["plain_loop_counts_equal_kernel"] else "counts DIFFER"
            lines.append(
                f"{r['kernel'] + ' plain':<20} {'-':>11} {r['plain_loop_s']:>9.4f} {'-':>9} {'-':>9} "
                f"{r['bytes'] / r['plain_loop_s'] / GB:>6.2f} {r['plain_loop_ratio_numpy']:>8.1f} {'-':>10} "
                f"{r['plain_loop_fraction_of_stream']:>9.0%}  naive loop, no edge correction ({same}); "
                f"the kernel runs at {r['kernel_speed_vs_plain_loop']:.2f}x its speed"
            )
    lines.append("first call: c = compiled now, l = loaded from the numba cache; times in seconds (medians)")
    llc = report["machine"].get("last_level_cache")
    if llc:
        lines.append(
            f"'of stream' compares with a {stream['bytes'] / 2**30:.0f} GiB read; inputs smaller than the "
            f"{llc / 2**20:.0f} MiB last-level cache can exceed 100 % (and writes count as bytes too)"
        )
    for r in report["kernels"]:
        for key, g in r.get("goals", {}).items():
            verdict = "met" if g["met"] else "NOT met"
            lines.append(f"goal {r['kernel']} {key} >= {g['goal']:g}: measured {g['measured']:.2f} ({verdict})")
    return "\n".join(lines)
