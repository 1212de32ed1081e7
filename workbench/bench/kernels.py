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

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from workbench import kernels, machine
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.kernels import prk
from workbench.lab.timing import time_once

GB = 1e9
STREAM = "streaming read"  # the run's first step, before the kernels
# Seconds numba takes to compile each step's functions when its cache does not hold them (a first run,
# or the kernels' source changed since): the CPU time of the first calls at size ci from an empty cache
# (compiling runs on one core), measured on the project's 2-core AMD EPYC with four other jobs running
# (load 18-22), so a little high if anything. The expected times (cli.BENCHMARKS) are with a warm cache.
COMPILE_S = {
    STREAM: 2.1,
    "histogram1d": 5.1,
    "histogramdd": 2.8,  # with the plain loop's
    "kmeans_partial": 12.7,
    "matrix_add": 0.9,
    "multiply_accumulate": 1.1,
    "prk_nstream": 0.5,
    "prk_transpose": 1.8,
    "prk_stencil": 1.3,
    "prk_reduce": 0.9,
}
# Goals from the foundation issue (kernel, figure, threshold); printed next to the figures, never asserted in tests.
GOALS = (
    ("histogramdd", "ratio_numpy", 20.0),
    ("histogramdd", "fraction_of_stream", 0.40),
    ("histogram1d", "ratio_numpy", 2.0),
)


@dataclass(frozen=True)
class Scale:
    """How a size scales lab's inputs: :meth:`n` a count or a matrix's rows, :meth:`side` a square's side."""

    divide: int = 1  # every dimension divided (ci)
    bytes_factor: int = 1  # the input bytes multiplied (full)

    def n(self, count: int) -> int:
        """A 1-D count or a matrix's rows at this scale."""
        return count * self.bytes_factor // self.divide

    def side(self, count: int) -> int:
        """A square matrix's side at this scale (its bytes grow by ``bytes_factor``)."""
        return count * math.isqrt(self.bytes_factor) // self.divide


# How big the inputs are, against lab's: ci divides every dimension by 64 (a smoke run, not a
# measurement: the inputs fit in cache); full has 4x lab's bytes (1-D counts and matrix rows x4,
# square matrices' sides x2). The streaming read stays 1 GiB at lab and full (it must exceed any cache).
SCALES = {"ci": Scale(divide=64), "lab": Scale(), "full": Scale(bytes_factor=4)}


@dataclass
class Case:
    """One kernel to measure: inputs, the numba call, its numpy reference, and what it moves."""

    name: str
    inputs: Callable[[Scale], tuple[Any, ...]]
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
    from workbench.kernels import histogram, kmeans

    unit = [(0.0, 1.0)] * 5
    return [
        Case(
            "histogram1d",
            lambda s: (_rng().random(s.n(16_000_000)),),
            lambda x, parallel: kernels.histogram1d(x, 100, (0.0, 1.0), parallel=parallel),
            lambda x: np.histogram(x, 100, (0.0, 1.0)),
            lambda a: a[0].nbytes,
            (histogram._hist1d, histogram._count_values),
        ),
        Case(
            "histogramdd",
            lambda s: (_rng().random((s.n(4_000_000), 5)),),
            lambda p, parallel: kernels.histogramdd(p, 8, unit, parallel=parallel),
            lambda p: np.histogramdd(p, 8, unit),
            lambda a: a[0].nbytes,
            (histogram._histdd, histogram._count_points),
            plain_call=lambda p: plain_histogramdd(p, 8, unit),
        ),
        Case(
            "kmeans_partial",
            lambda s: (_rng().random((s.n(1_000_000), 16)), _rng().random((4, 16))),
            lambda p, c, parallel: kernels.kmeans_partial(p, c, parallel=parallel),
            kernels.kmeans_partial_reference,
            lambda a: a[0].nbytes,
            (kmeans._partial, kmeans._partial_serial),
        ),
    ]


def _linalg_cases() -> list[Case]:
    """Matrix addition and C += A @ B."""
    from workbench.kernels import linalg

    return [
        Case(
            "matrix_add",
            lambda s: (_rng().random((s.n(4096), 4096)), _rng().random((s.n(4096), 4096)), np.empty((s.n(4096), 4096))),
            lambda a, b, out, parallel: kernels.matrix_add(a, b, out, parallel=parallel),
            lambda a, b, out: np.add(a, b, out=out),
            lambda a: 3 * a[0].nbytes,
            (linalg._add,),
        ),
        Case(
            "multiply_accumulate",
            lambda s: (
                _rng().random((s.side(1024), s.side(1024))),
                _rng().random((s.side(1024), s.side(1024))),
                np.zeros((s.side(1024), s.side(1024))),
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
            lambda s: (*prk.nstream_init(s.n(8_000_000)), 3.0),
            lambda a, b, c, scalar, parallel: prk.nstream(a, b, c, scalar),
            prk.nstream_reference,
            lambda a: 4 * a[0].nbytes,
            (prk._nstream,),
            has_serial=False,
            rate=lambda a, t: (4 * 8 * a[0].size / t / 1e6, "MB/s"),
        ),
        Case(
            "prk_transpose",
            lambda s: prk.transpose_init(s.side(4096)),
            lambda a, b, parallel: prk.transpose(a, b),
            prk.transpose_reference,
            lambda a: 2 * a[0].nbytes,
            (prk._transpose,),
            has_serial=False,
            rate=lambda a, t: (2 * 8 * a[0].shape[0] ** 2 / t / 1e6, "MB/s"),
        ),
        Case(
            "prk_stencil",
            lambda s: (*prk.stencil_init(s.side(4096)), 2),
            lambda a, b, r, parallel: prk.stencil_star(a, b, r),
            prk.stencil_star_reference,
            lambda a: 2 * a[0].nbytes,
            (prk._stencil_star,),
            has_serial=False,
            rate=lambda a, t: ((2 * (4 * a[2] + 1) + 1) * (a[0].shape[0] - 2 * a[2]) ** 2 / t / 1e6, "MFlop/s"),
        ),
        Case(
            "prk_reduce",
            lambda s: (np.ones((8, s.n(4_000_000))), np.empty(s.n(4_000_000))),
            lambda v, out, parallel: prk.vector_reduce(v, out),
            lambda v, out: np.sum(v, axis=0, out=out),
            lambda a: a[0].nbytes + a[1].nbytes,
            (prk._vector_reduce,),
            has_serial=False,
        ),
    ]


def _cached(dispatcher: Any) -> bool:
    """Whether numba's cache holds machine code of ``dispatcher`` for its current source, so that its first
    call loads it rather than compiles: numba's own index check (a missing index, or one written for
    another version of the source, reads as empty)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 (no cache for it, or a numba that keeps its cache otherwise: it compiles)
        return False


def to_compile(only: list[str] | None = None) -> list[str]:
    """The steps of a run (the streaming read, then every kernel or ``only``'s) whose first call will
    compile: numba's cache holds none of their functions for their current source. (A kernel calls some
    of its functions only at some sizes, e.g. histogramdd's chunked loop: one whose other functions
    were cached by a run at another size counts as cached; its compile then costs a fraction.)"""
    from workbench.kernels import stream

    steps = {STREAM: (stream._stream_sum,)}
    for case in _cases():
        if not only or case.name in only:
            steps[case.name] = case.dispatchers + ((_plain_histdd,) if case.plain_call is not None else ())
    return [name for name, dispatchers in steps.items() if not any(_cached(d) for d in dispatchers)]


def compile_estimate(size: str = "lab", repeats: int = 5, only: list[str] | None = None) -> tuple[float, str] | None:
    """What a run with these arguments adds to its expected time now: the seconds numba takes to
    compile :func:`to_compile`'s steps (:data:`COMPILE_S`), and what for; None when its cache holds them all."""
    steps = to_compile(only)
    if not steps:
        return None
    what = "the streaming read and " if STREAM in steps else ""
    kernels_left = len(steps) - (STREAM in steps)
    what += f"{kernels_left} kernel{'s' if kernels_left != 1 else ''}" if kernels_left else ""
    return (
        sum(COMPILE_S[step] for step in steps),
        f"for numba to compile {what.removesuffix(' and ')} (not in its cache yet; later runs load them)",
    )


def _compiled_fresh(dispatchers: tuple[Any, ...]) -> bool:
    """True when the first call compiled (a cache miss) rather than loading from the numba cache."""
    return any(sum(d.stats.cache_misses.values()) > 0 for d in dispatchers)


def _samples(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls (their median is the figure, their spread the noise)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return [time_once(fn) for _ in range(repeats)]


def stream_bandwidth(scale: int = 1, repeats: int = 5) -> dict[str, Any]:
    """Streaming-read bandwidth (GB/s) over a 1 GiB array (divided by ``scale``), on one thread and on all
    threads; ``all_threads_samples_s``: the seconds of each all-threads read."""
    x = np.ones((1 << 27) // scale)  # 1 GiB of float64 at scale 1: larger than any cache here
    kernels.stream_sum(x[:16])
    kernels.stream_sum(x[:16], parallel=False)
    all_threads = _samples(lambda: kernels.stream_sum(x), repeats)
    one_thread = _samples(lambda: kernels.stream_sum(x, parallel=False), repeats)
    return {
        "all_threads": x.nbytes / statistics.median(all_threads) / GB,
        "one_thread": x.nbytes / statistics.median(one_thread) / GB,
        "bytes": float(x.nbytes),
        "all_threads_samples_s": all_threads,
    }


def _plain_row(
    plain_call: Callable[..., np.ndarray], args: tuple[Any, ...], row: dict[str, Any], stream: float, repeats: int
) -> dict[str, Any]:
    """The plain loop's figures for a kernel's ``row``: time, ratios, and the kernel's speed against it."""
    plain_counts = plain_call(*args)  # warm-up (compile or cache load), then timed
    plain_s = statistics.median(_samples(lambda: plain_call(*args), repeats))
    return {
        "plain_loop_s": plain_s,
        "plain_loop_ratio_numpy": row["numpy_s"] / plain_s,
        "plain_loop_fraction_of_stream": row["bytes"] / plain_s / GB / stream,
        "kernel_speed_vs_plain_loop": plain_s / row["numba_s"],
        "plain_loop_counts_equal_kernel": bool(np.array_equal(plain_counts, row.pop("_counts"))),
    }


def _kernel_row(case: Case, scale: Scale, repeats: int, stream: dict[str, Any]) -> dict[str, Any]:
    """One kernel's figures: first call, medians of numba (all threads, one thread) and numpy, ratios;
    ``numba_samples_s`` and ``numpy_samples_s`` are the repeats the goals' noise comes from."""
    args = case.inputs(scale)
    first_call = time_once(lambda: case.numba_call(*args, parallel=True))
    compiled = _compiled_fresh(case.dispatchers)
    if case.has_serial:
        case.numba_call(*args, parallel=False)  # a parallel=False call reuses the same compiled kernel
    numba_samples = _samples(lambda: case.numba_call(*args, parallel=True), repeats)
    parallel_s = statistics.median(numba_samples)
    serial_s = (
        statistics.median(_samples(lambda: case.numba_call(*args, parallel=False), repeats))
        if case.has_serial
        else None
    )
    numpy_samples = _samples(lambda: case.numpy_call(*args), repeats)
    numpy_s = statistics.median(numpy_samples)
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
        "numba_samples_s": numba_samples,
        "numpy_samples_s": numpy_samples,
    }
    if case.rate is not None:
        row["rate"], row["rate_unit"] = case.rate(args, parallel_s)
    if case.plain_call is not None:
        row["_counts"] = case.numba_call(*args, parallel=True)
        row.update(_plain_row(case.plain_call, args, row, stream["all_threads"], repeats))
    return row


def kernel_goals(rows: list[dict[str, Any]], stream: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals (:data:`GOALS`) of the kernels in ``rows``, in :func:`workbench.bench.goals.goal`'s shape."""
    by_name = {r["kernel"]: r for r in rows}
    goals = []
    for name, figure, threshold in GOALS:
        row = by_name.get(name)
        if row is None:
            continue
        if figure == "ratio_numpy":
            goals.append(
                goal(
                    f"{name}: numba on all threads faster than numpy (numpy time / numba time)",
                    row["ratio_numpy"],
                    threshold,
                    peers={"numba": row["numba_s"], "numpy": row["numpy_s"]},
                    noise=ratio_noise(row["numba_samples_s"], row["numpy_samples_s"]),
                )
            )
        else:
            goals.append(
                goal(
                    f"{name}: throughput as a fraction of the streaming read",
                    row["fraction_of_stream"],
                    threshold,
                    unit="",
                    peers={name: row["GBps"], "streaming read": stream["all_threads"]},
                    peer_unit="GB/s",
                    noise=ratio_noise(row["numba_samples_s"], stream["all_threads_samples_s"]),
                )
            )
    return goals


def run(size: str = "lab", repeats: int = 5, only: list[str] | None = None, progress: Progress | None = None) -> Report:
    """Measure every kernel (or those named in ``only``) at ``size`` (:data:`SCALES`): a row per kernel, the
    streaming read (``parts["stream_GBps"]``) and the goals."""
    checked_size(size, SCALES)
    progress = progress or Progress.quiet()
    scale = SCALES[size]
    cases = _cases()
    if only:
        unknown = sorted(set(only) - {c.name for c in cases})
        if unknown:
            raise ValueError(f"unknown kernels {unknown}; choose from {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in only]
    with progress.phase("kernels", 1 + len(cases)) as phase:
        stream = stream_bandwidth(scale.divide, repeats)
        phase.step("streaming read")
        rows = []
        for case in cases:
            rows.append(_kernel_row(case, scale, repeats, stream))
            phase.step(case.name)
    return Report(
        "kernels",
        size,
        goals=kernel_goals(rows, stream),
        rows=rows,
        parts={"stream_GBps": stream},
        counts={"numba_threads": numba.get_num_threads()},
        repeats=repeats,
        machine=machine.describe(),
    )


def ratio_text(ratio: float) -> str:
    """A ratio with the digits it needs: three significant ones below 10 (``0.00781``, ``0.176``, ``6.69``:
    a kernel 128x slower than numpy is not ``0.0``), one decimal below 100, none above."""
    if ratio >= 100:
        return f"{ratio:.0f}"
    return f"{ratio:.1f}" if ratio >= 10 else f"{ratio:.3g}"


def _first_call(row: Mapping[str, Any]) -> str | None:
    """The first call's time, ``c`` compiled now or ``l`` loaded from the numba cache (None: a plain-loop row)."""
    if "first_call_s" not in row:
        return None
    return f"{row['first_call_s']:.3f}{'c' if row['first_call_compiled'] else 'l'}"


def _last(row: Mapping[str, Any]) -> str:
    """The last column: the kernel's own rate, or what a plain-loop row is."""
    if "note" in row:
        return row["note"]
    return f" {row['rate']:.4g} {row['rate_unit']}" if "rate" in row else ""


# the table's columns: a row per kernel, and a plain-loop row under a kernel that has one (:func:`plain_row`)
COLUMNS = (
    Column("kernel", "kernel", "<20"),
    Column("first call", _first_call, ">11"),
    Column("numba", "numba_s", ">9.4f"),
    Column("1 thread", lambda r: r.get("numba_one_thread_s") or None, ">9.4f"),
    Column("numpy", "numpy_s", ">9.4f"),
    Column("GB/s", "GBps", ">6.2f"),
    Column("x numpy", lambda r: ratio_text(r["ratio_numpy"]), ">8"),
    Column(
        "x numpy 1t",
        lambda r: ratio_text(r["ratio_numpy_one_thread"]) if r.get("ratio_numpy_one_thread") else None,
        ">10",
    ),
    Column("of stream", "fraction_of_stream", ">9.0%"),
    Column(" rate", _last),
)


def plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The reference row under a kernel's (its ``plain_loop_*`` figures) in :data:`COLUMNS`: the naive loop's
    time, rate and ratios, and at the end what it is and how the kernel compares."""
    same = "same counts" if row["plain_loop_counts_equal_kernel"] else "counts DIFFER"
    return {
        "kernel": row["kernel"] + " plain",
        "numba_s": row["plain_loop_s"],
        "GBps": row["bytes"] / row["plain_loop_s"] / GB,
        "ratio_numpy": row["plain_loop_ratio_numpy"],
        "fraction_of_stream": row["plain_loop_fraction_of_stream"],
        "note": f"  naive loop, no edge correction ({same}); the kernel runs at "
        f"{row['kernel_speed_vs_plain_loop']:.2f}x its speed",
    }


def format_report(report: Report) -> str:
    """The report as a table a person reads: one line per kernel, goals last."""
    stream = report.parts["stream_GBps"]
    lines = [
        f"size {report.size}; streaming read: {stream['all_threads']:.1f} GB/s on {report.counts['numba_threads']} "
        f"threads, {stream['one_thread']:.1f} GB/s on one   (median of {report.repeats})",
        "",
        *table(COLUMNS, report.rows),
        *table(COLUMNS, [plain_row(r) for r in report.rows if "plain_loop_s" in r])[1:],  # under it, no header
    ]
    lines.append("first call: c = compiled now, l = loaded from the numba cache; times in seconds (medians)")
    lines.append("x numpy: numpy's time / numba's (all threads; 1t: one thread); below 1 numpy is faster")
    slower = [r for r in report.rows if r["ratio_numpy"] < 1]
    if slower:
        lines.append(
            "numpy faster than numba on all threads: "
            + ", ".join(f"{r['kernel']} {ratio_text(1 / r['ratio_numpy'])}x" for r in slower)
        )
    llc = (report.machine or {}).get("last_level_cache")
    if llc:
        lines.append(
            f"'of stream' compares with a {stream['bytes'] / 2**30:.3g} GiB read; inputs smaller than the "
            f"{llc / 2**20:.0f} MiB last-level cache can exceed 100 % (and writes count as bytes too)"
        )
    return text(lines, report)
