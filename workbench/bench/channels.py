"""``workbench bench channels``: in-place array channels against eager messages and MPI.

1. **Ping-pong** between two ranks, payloads from 8 B up (256 MiB at ``lab``), throughput
   MB/s = iterations x payload x 1e-6 / s (an iteration is a round trip), for ``channels`` (one
   node: shared memory), ``eager`` (every message a new array sent worker to worker by Dask) and ``mpi`` (mpi4py under
   ``mpiexec``, when installed: ``pip install -e ".[mpi]"``), and ``channels`` between two
   simulated nodes (the socket path).
   **Loaded**: the same ping-pong, channels and mpi4py, while ``LOAD_PROCESSES`` CPU-bound
   processes that the benchmark starts and stops run beside it (a busy class server, a learner's
   laptop running a browser): the median of ``LOADED_REPEATS`` runs per payload, up to 16 MiB.
   **Waiting**: the share of a core a rank uses while it waits ``WAIT_SECONDS`` for its peer
   (channels and mpi4py): what a busy-polling rank takes from everything else on the machine.
2. **Steady state**: 10,000 messages through a channel after a warm-up, with ``tracemalloc`` and
   the RSS measured around them: a persistent buffer allocates nothing per message.
3. **The kernels** (PRK reduce, transpose, stencil) through ``channels`` and ``eager``: time per
   iteration inside the ranks (group start-up apart).
4. **The memory copy bandwidth** of one process at each payload of 1 MiB and more: a put is one
   copy, so half of it caps a round trip's MB/s; a bandwidth goal not met near that cap says so
   (its ``bound``).
5. **Scheduler messages**: each ping-pong group is counted (:mod:`workbench.runtime.counts`): the
   scheduler-worker messages of its start and end, whatever its round trips, since the messages
   themselves go rank to rank. Its goal holds on any machine: between the payload run with the
   fewest round trips and the one with the most, the scheduler sees at most
   ``MESSAGES_PER_THOUSAND`` more messages per 1,000 round trips.

Goals (issues 14 and 24) are printed beside the figures, never asserted. Progress goes to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import psutil

from workbench import machine
from workbench.apps import prk
from workbench.bench.goals import goal, ratio_noise, spread
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.runtime import counts
from workbench.runtime.channels import ArrayChannel, EagerChannel, Rank, run_group
from workbench.runtime.session import Session, start
from workbench.units import size_text

KiB, MiB = 2**10, 2**20
PAYLOADS = {
    "ci": [8, 4 * KiB, 256 * KiB, MiB, 16 * MiB],
    "lab": [8, 64, KiB, 16 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
    "full": [8, 64, KiB, 16 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
}
KERNEL_SIZES = {"ci": dict(length=MiB // 8, order=512, n=512), "lab": dict(length=4 * MiB, order=2048, n=2048)}
KERNEL_SIZES["full"] = KERNEL_SIZES["lab"]
KERNEL_RANKS = {"ci": (2,), "lab": (1, 2, 4), "full": (1, 2, 4)}  # 4 ranks on 2 workers: two per worker
STEADY_MESSAGES = 10_000
LOAD_PROCESSES = 2  # CPU-bound processes beside the loaded ping-pong (load 4 on 2 cores with the two ranks)
LOADED_REPEATS = 3  # runs per loaded payload: a busy machine's figures vary from run to run, the median is shown
LOADED_MAX_BYTES = 16 * MiB
WAIT_SECONDS = 1.0  # how long the waiting rank waits in the CPU-share measurement
COPY_BOUND_SHARE = 0.7  # channels at this share of the copy cap or more: the copy, not the channel, bounds them
MESSAGES_PER_THOUSAND = 1.0  # scheduler messages a channels group may add per 1,000 round trips (none by design)


def iterations_for(nbytes: int) -> int:
    """Round trips for a payload: many for small ones, enough bytes (about 1 GiB) for large ones."""
    return int(min(5_000, max(5, (1 << 30) // max(1, nbytes))))


def copy_bandwidth(nbytes: int, repeats: int | None = None) -> float:
    """This process's memory copy rate for ``nbytes``, MB/s: ``np.copyto``, best of ``repeats`` (default:
    more for small copies). A put is one such copy, so a round trip (two puts) moves at most half of it."""
    repeats = repeats or max(5, min(50, (256 * MiB) // nbytes))
    source = np.ones(nbytes, np.uint8)
    target = np.zeros_like(source)
    np.copyto(target, source)  # every page faulted in (and a cache-sized copy in cache) before the timed copies
    best = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - begin)
    return nbytes * 1e-6 / best


def warm_up_round_trips(iterations: int) -> int:
    """The round trips :func:`pingpong_rank` bounces before its timed ``iterations``: a tenth, at least one."""
    return max(1, iterations // 10)


def bounce(rank: Rank, channel: ArrayChannel | EagerChannel, count: int) -> None:
    """``count`` round trips of ``channel``'s buffer between ranks 0 and 1 (rank 0 puts first): the one
    ping-pong loop of the timed and the allocation measurements."""
    other = 1 - rank.rank
    for _ in range(count):
        if rank.rank == 0:
            channel.put(other)
            channel.take(other)
        else:
            channel.take(other)
            channel.put(other)


def pingpong_rank(rank: Rank, nbytes: int, iterations: int) -> float:
    """Ranks 0 and 1 bounce a buffer ``iterations`` times (after a tenth as warm-up); seconds per round trip."""
    channel = rank.channel("pingpong", nbytes, np.uint8)
    channel.buffer[:] = rank.rank
    for warm in (True, False):
        count = warm_up_round_trips(iterations) if warm else iterations
        rank.barrier()
        begin = time.perf_counter()
        bounce(rank, channel, count)
        seconds = time.perf_counter() - begin
    return seconds / iterations


def pingpong(session: Session, nbytes: int, eager: bool, workers: Sequence[str] | None = None) -> dict[str, float]:
    """One payload's round trip and throughput between two ranks, with the group's round trips (warm-up
    included) and the scheduler-worker messages it caused, start and end included (counted around the
    group, outside the ranks' timed loop)."""
    iterations = iterations_for(nbytes) if not eager else max(3, iterations_for(nbytes) // 20)
    placed = list(workers or session.workers()[:2])
    if len(placed) == 1:
        placed = placed * 2
    with counts.counting(session) as counted:
        result = run_group(session, pingpong_rank, [(nbytes, iterations)] * 2, workers=placed, eager=eager)
    round_trip = max(result.results)
    return {
        "nbytes": nbytes,
        "round_trip_s": round_trip,
        "MBps": nbytes * 1e-6 / round_trip,
        "round_trips": iterations + warm_up_round_trips(iterations),
        "scheduler_messages": counted.counts.messages,
    }


@contextlib.contextmanager
def cpu_load(processes: int = LOAD_PROCESSES) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``processes`` CPU-bound Python processes for the duration of the block (a busy machine); they
    are killed and reaped when it ends, however it ends."""
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(processes):
            spinners.append(
                subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=60)


def median_row(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The run with the median round trip of several runs of one payload, with every run's round trip."""
    ordered = sorted(rows, key=lambda r: r["round_trip_s"])
    return {**ordered[len(ordered) // 2], "runs_round_trip_s": [r["round_trip_s"] for r in rows]}


def loaded_pingpong(
    session: Session,
    payloads: Sequence[int],
    mpi: bool,
    repeats: int | None = None,
    step: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Channels' and mpi4py's ping-pong under ``cpu_load()``: the median of ``repeats`` runs each
    (default ``LOADED_REPEATS``). ``step`` is called after each payload's runs and each mpi4py run."""
    repeats = repeats or LOADED_REPEATS
    step = step or (lambda label: None)
    rows = []
    with cpu_load():
        for n in payloads:
            rows.append(median_row([pingpong(session, n, eager=False) for _ in range(repeats)]))
            step(f"channels {size_text(n)}")
        if not mpi:
            return rows, {"skipped": "not asked for (--no-mpi)"}
        runs = []
        for k in range(repeats):
            runs.append(mpi_pingpong(payloads))
            step(f"mpi4py run {k + 1}")
    if any("skipped" in run for run in runs):
        return rows, next(run for run in runs if "skipped" in run)
    peer = {
        "library": runs[0]["library"],
        "rows": [median_row([run["rows"][i] for run in runs]) for i in range(len(payloads))],
    }
    return rows, peer


def waiting_rank(rank: Rank, seconds: float) -> float | None:
    """Rank 0 works ``seconds`` (sleeps), then puts; rank 1 waits in ``take``: its CPU seconds per second
    waited (thread CPU time: the rank's own thread, not the worker's)."""
    channel = rank.channel("wait", 8, np.uint8)
    rank.barrier()
    if rank.rank == 0:
        time.sleep(seconds)
        channel.put(1)
        return None
    cpu, wall = time.thread_time(), time.perf_counter()
    channel.take(0)
    return (time.thread_time() - cpu) / (time.perf_counter() - wall)


def wait_cpu_share(session: Session, seconds: float | None = None) -> float:
    """The share of a core a channels rank uses while it waits for its peer (see :func:`waiting_rank`)."""
    workers = session.workers()[:2]
    result = run_group(session, waiting_rank, [(seconds or WAIT_SECONDS,)] * 2, workers=workers)
    return float(result.results[1])


def mpi_pingpong(payloads: Sequence[int], timeout: float = 600, wait_seconds: float = 0.0) -> dict[str, Any]:
    """mpi4py's ping-pong under ``mpiexec`` (round trips per payload), or why it was skipped."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return {"skipped": 'mpi4py is not installed: pip install -e ".[mpi]" (mpi4py and the mpich wheel)'}
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None:
        return {"skipped": 'no mpiexec found: pip install -e ".[mpi]" brings MPICH\'s'}
    command = [
        mpiexec,
        "-n",
        "2",
        sys.executable,
        "-m",
        "workbench.bench.mpi_pingpong",
        "--payloads",
        *map(str, payloads),
        "--iterations",
        *(str(iterations_for(n)) for n in payloads),
        "--wait-seconds",
        str(wait_seconds),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        return {"skipped": f"mpiexec failed ({done.returncode}): {done.stderr.strip()[-400:]}"}
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    rows = [
        {
            "nbytes": n,
            "round_trip_s": printed["round_trip_s"][str(n)],
            "MBps": n * 1e-6 / printed["round_trip_s"][str(n)],
        }
        for n in payloads
    ]
    out = {"library": printed["library"], "rows": rows}
    if "wait_cpu_share" in printed:
        out["wait_cpu_share"] = printed["wait_cpu_share"]
    return out


def steady_rank(rank: Rank, nbytes: int, messages: int) -> dict[str, int]:
    """Ping-pong ``messages`` round trips after a warm-up, measuring what was allocated meanwhile."""
    channel = rank.channel("steady", nbytes, np.uint8)
    bounce(rank, channel, 200)
    process = psutil.Process()
    rss = process.memory_info().rss
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        bounce(rank, channel, messages)
        after = tracemalloc.take_snapshot()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # what the message path allocated and kept (the worker's own threads allocate meanwhile too)
    ours = [tracemalloc.Filter(True, f"*{os.sep}runtime{os.sep}channels{os.sep}*"), tracemalloc.Filter(True, __file__)]
    grown = sum(
        s.size_diff
        for s in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename")
        if s.size_diff > 0
    )
    return {
        "tracemalloc_growth": int(grown),
        "tracemalloc_peak": int(peak),
        "rss_growth": process.memory_info().rss - rss,
    }


def steady_state(session: Session, nbytes: int = 64 * KiB, messages: int = STEADY_MESSAGES) -> dict[str, Any]:
    """Allocation over ``messages`` round trips on each rank (channels)."""
    workers = session.workers()[:2] if len(session.workers()) > 1 else session.workers() * 2
    result = run_group(session, steady_rank, [(nbytes, messages)] * 2, workers=workers)
    return {"nbytes": nbytes, "messages": messages, "ranks": result.results}


def timed_rank(rank: Rank, function: Callable[..., Any], args: tuple[Any, ...]) -> float:
    """Seconds of ``function(None, *args, rank=rank)``'s timed iterations on this rank (its
    ``rank.timed("iterations")``), after one warm-up call with no timed iterations (kernels compiled
    or loaded, pages touched)."""
    function(None, *args[:-1], 0, rank=rank)
    rank.timings.clear()
    rank.barrier()
    function(None, *args, rank=rank)
    return rank.timings["iterations"]


def kernels_rates(
    session: Session, size: str, ranks: int, iterations: int = 10, step: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """PRK reduce, transpose and stencil through channels and eager: seconds per iteration (``step`` is
    called after each kernel)."""
    sizes = KERNEL_SIZES[size]
    kernels = {
        "reduce": (prk.reduce_rank, (sizes["length"], iterations), 8 * sizes["length"]),
        "transpose": (prk.transpose_rank, (sizes["order"], iterations), 8 * sizes["order"] ** 2),
        "stencil": (prk.stencil_rank, (sizes["n"], iterations), 8 * sizes["n"] ** 2),
    }
    rows = []
    for name, (function, args, nbytes) in kernels.items():
        row: dict[str, Any] = {"kernel": name, "ranks": ranks, "bytes": nbytes}
        for variant in ("channels", "eager"):
            result = run_group(session, timed_rank, [(function, args)] * ranks, ranks=ranks, eager=variant == "eager")
            row[f"{variant}_s_per_iteration"] = max(result.results) / (iterations + 1)
        row["channels_vs_eager"] = row["eager_s_per_iteration"] / row["channels_s_per_iteration"]
        rows.append(row)
        if step is not None:
            step(f"{name}, {ranks} ranks")
    return rows


def run(
    size: str = "lab",
    session: Session | None = None,
    workers: int | None = None,
    two_nodes: bool = True,
    mpi: bool = True,
    progress: Progress | None = None,
) -> Report:
    """The whole benchmark: a row per payload of the channels' ping-pong, the other parts by name (eager,
    loaded, two nodes, mpi4py, copy, waiting, steady state, kernels), the goals. ``progress`` shows a
    phase per part, a step per payload or kernel (the command prints it to stderr)."""
    payloads = PAYLOADS[checked_size(size, PAYLOADS)]
    progress = progress or Progress.quiet()
    with bench_session(session, workers or 2, timeout=600) as session:
        if len(session.workers()) < 2:
            raise ValueError("bench channels needs at least 2 workers (one per ping-pong rank)")
        workers = len(session.workers())
        figures = one_node(session, size, payloads, mpi, progress)
    figures["channels_two_nodes"] = []
    if two_nodes:
        with start(nodes=["nodeA", "nodeB"], timeout=600) as nodes:
            with progress.phase("ping-pong between two simulated nodes (sockets)", len(payloads)) as phase:
                figures["channels_two_nodes"] = pingpongs(nodes, payloads, False, phase.step)
    progress.say(f"ping-pong, mpi4py: one mpiexec run of {len(payloads)} payloads")
    peer = mpi_pingpong(payloads, wait_seconds=WAIT_SECONDS) if mpi else {"skipped": "not asked for (--no-mpi)"}
    figures["mpi"] = peer
    figures["wait_cpu_share"]["mpi"] = peer.get("wait_cpu_share")
    copied = [n for n in payloads if n >= MiB]
    progress.say(f"memory copy bandwidth at {len(copied)} payloads of 1 MiB and more")
    figures["copy"] = [{"nbytes": n, "MBps": copy_bandwidth(n)} for n in copied]  # a round trip's cap, in the goals
    parts = {key: value for key, value in figures.items() if key != "channels"}
    report = Report(
        "channels", size, rows=figures["channels"], parts=parts, workers=workers, machine=machine.describe()
    )
    return dataclasses.replace(report, goals=goals(report))


def pingpongs(
    session: Session, payloads: Sequence[int], eager: bool, step: Callable[[str], None]
) -> list[dict[str, float]]:
    """:func:`pingpong` for each payload in turn, ``step`` called after each."""
    rows = []
    for n in payloads:
        rows.append(pingpong(session, n, eager=eager))
        step(size_text(n))
    return rows


def one_node(session: Session, size: str, payloads: Sequence[int], mpi: bool, progress: Progress) -> dict[str, Any]:
    """The parts on one node's workers: ping-pong (channels, eager, loaded), a waiting rank's CPU share,
    the steady state and the PRK kernels."""
    with progress.phase("ping-pong, channels", len(payloads)) as phase:
        channel_rows = pingpongs(session, payloads, False, phase.step)
    eager_payloads = [n for n in payloads if n <= 64 * MiB]
    with progress.phase("ping-pong, eager", len(eager_payloads)) as phase:
        eager_rows = pingpongs(session, eager_payloads, True, phase.step)
    loaded_payloads = [n for n in payloads if n <= LOADED_MAX_BYTES]
    steps = len(loaded_payloads) + (LOADED_REPEATS if mpi else 0)
    name = f"ping-pong under load ({LOAD_PROCESSES} CPU-bound processes), median of {LOADED_REPEATS} runs"
    with progress.phase(name, steps) as phase:
        loaded_rows, loaded_peer = loaded_pingpong(session, loaded_payloads, mpi, step=phase.step)
    progress.say(
        f"CPU share of a rank waiting {WAIT_SECONDS:g} s for its peer; steady state ({STEADY_MESSAGES} messages)"
    )
    waiting = wait_cpu_share(session)
    steady = steady_state(session, messages=STEADY_MESSAGES)
    with progress.phase("PRK kernels, channels and eager", 3 * len(KERNEL_RANKS[size])) as phase:
        kernel_rows = [
            row for ranks in KERNEL_RANKS[size] for row in kernels_rates(session, size, ranks=ranks, step=phase.step)
        ]
    return {
        "channels": channel_rows,
        "eager": eager_rows,
        "loaded": {"processes": LOAD_PROCESSES, "repeats": LOADED_REPEATS, "channels": loaded_rows, "mpi": loaded_peer},
        "wait_cpu_share": {"seconds": WAIT_SECONDS, "channels": waiting, "mpi": None},
        "steady_state": steady,
        "kernels": kernel_rows,
    }


def copy_bound(mbps: float, copy_mbps: float | None) -> str | None:
    """What bounds a ping-pong at ``mbps`` when it is near the copy cap (half the copy rate measured):
    the memory copy; None when it is not near it (then something else does)."""
    if not copy_mbps or mbps < COPY_BOUND_SHARE * copy_mbps / 2:
        return None
    return (
        f"the memory copy bandwidth: a put is one copy, {copy_mbps:.0f} MB/s measured here caps a round trip "
        f"at {copy_mbps / 2:.0f} MB/s, and channels reach {mbps / (copy_mbps / 2):.0%} of it"
    )


def bandwidth_goals(report: Report) -> list[dict[str, Any]]:
    """The large-payload goals: channels (the report's rows) against mpi4py and against the eager baseline."""
    out, p = [], report.parts
    channels = {r["nbytes"]: r for r in report.rows}
    eager = {r["nbytes"]: r for r in p["eager"]}
    mpi_rows = {r["nbytes"]: r for r in p["mpi"].get("rows", [])}
    copy_mbps = {r["nbytes"]: r["MBps"] for r in p.get("copy", [])}
    large = [n for n in channels if n >= MiB and n in mpi_rows]
    if large:
        n = min(large, key=lambda n: channels[n]["MBps"] / mpi_rows[n]["MBps"])
        mbps = channels[n]["MBps"]
        out.append(
            goal(  # the words stay the same from run to run (bench compare matches by them): no payload size
                "channels >= mpi4py bandwidth for payloads of 1 MiB and more (the worst ratio)",
                mbps / mpi_rows[n]["MBps"],
                1.0,
                peers={"channels": mbps, "mpi4py": mpi_rows[n]["MBps"]},
                peer_unit="MB/s",
                bound=copy_bound(mbps, copy_mbps.get(n)),
            )
        )
    if 16 * MiB in channels and 16 * MiB in eager:
        mbps = channels[16 * MiB]["MBps"]
        out.append(
            goal(
                "channels >= 2x the eager baseline at 16 MiB",
                mbps / eager[16 * MiB]["MBps"],
                2.0,
                peers={"channels": mbps, "eager": eager[16 * MiB]["MBps"]},
                peer_unit="MB/s",
                bound=copy_bound(mbps, copy_mbps.get(16 * MiB)),
            )
        )
    return out


def latency_goals(report: Report) -> list[dict[str, Any]]:
    """The small-message goals: the round trip idle and under load (with mpi4py's beside it)."""
    p = report.parts
    channels = {r["nbytes"]: r for r in report.rows}
    mpi_rows = {r["nbytes"]: r for r in p["mpi"].get("rows", [])}
    smallest = min(channels)
    rtt_us = channels[smallest]["round_trip_s"] * 1e6
    peers = {"channels": rtt_us}
    if smallest in mpi_rows:
        peers["mpi4py"] = mpi_rows[smallest]["round_trip_s"] * 1e6
    out = [goal(f"small-message ({smallest} B) round trip <= 20 us", rtt_us, 20.0, better="lower", unit=" us",
                peers=peers, peer_unit="us")]  # fmt: skip
    loaded = {r["nbytes"]: r for r in p["loaded"]["channels"]}
    if smallest not in loaded:
        return out
    ours = loaded[smallest]
    busy_us = ours["round_trip_s"] * 1e6
    processes = p["loaded"]["processes"]
    loaded_mpi = {r["nbytes"]: r for r in p["loaded"]["mpi"].get("rows", [])}
    theirs = loaded_mpi.get(smallest)
    peers = {"channels": busy_us, **({"mpi4py": theirs["round_trip_s"] * 1e6} if theirs else {})}
    text = f"loaded ({processes} CPU-bound processes) small-message ({smallest} B) round trip <= 100 us"
    out.append(goal(text, busy_us, 100.0, better="lower", unit=" us", peers=peers, peer_unit="us",
                    noise=spread(ours["runs_round_trip_s"])))  # fmt: skip
    if theirs:
        out.append(
            goal(
                f"loaded {smallest} B round trip no worse than mpi4py's under the same load (channels/mpi4py)",
                ours["round_trip_s"] / theirs["round_trip_s"],
                1.0,
                better="lower",
                peers=peers,
                peer_unit="us",
                noise=ratio_noise(ours["runs_round_trip_s"], theirs["runs_round_trip_s"]),
            )
        )
    return out


def message_goals(channel_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue 36's count goal: the scheduler messages a channels group adds per 1,000 round trips, from
    the ping-pong rows (a report's ``rows``) with the fewest and the most round trips (none where they do
    not differ)."""
    rows = [r for r in channel_rows if "scheduler_messages" in r]
    if not rows:
        return []
    few = min(rows, key=lambda r: r["round_trips"])
    many = max(rows, key=lambda r: r["round_trips"])
    if many["round_trips"] == few["round_trips"]:
        return []
    added = many["scheduler_messages"] - few["scheduler_messages"]
    per_thousand = 1000 * added / (many["round_trips"] - few["round_trips"])
    return [
        goal(
            f"channels: scheduler messages grow by at most {MESSAGES_PER_THOUSAND:g} per 1,000 round trips "
            "(a group's start and end apart: the messages go rank to rank)",
            per_thousand,
            MESSAGES_PER_THOUSAND,
            better="lower",
            unit="messages",
            peers={
                f"{few['round_trips']} round trips": few["scheduler_messages"],
                f"{many['round_trips']} round trips": many["scheduler_messages"],
            },
            peer_unit="messages",
        )
    ]


def goals(report: Report) -> list[dict[str, Any]]:
    """Issues 14, 24 and 36's goals against this run's figures (its rows and parts)."""
    out = [*bandwidth_goals(report), *latency_goals(report), *message_goals(report.rows)]
    waiting = report.parts["wait_cpu_share"]
    shares = {"channels": waiting["channels"] * 100}
    if waiting.get("mpi") is not None:
        shares["mpi4py"] = waiting["mpi"] * 100
    out.append(
        goal(
            "a rank waiting for its peer leaves its core to others: CPU share <= 5 %",
            shares["channels"],
            5.0,
            better="lower",
            unit=" %",
            peers=shares,
            peer_unit="%",
        )
    )
    steady = report.parts["steady_state"]
    ranks = {f"rank {i}": r for i, r in enumerate(steady["ranks"])}
    grown = {name: r["tracemalloc_growth"] for name, r in ranks.items()}
    out.append(
        goal(
            f"no allocation per message: tracemalloc growth over {steady['messages']} messages <= 64 KiB",
            max(grown.values()),
            64 * KiB,
            better="lower",
            unit=" B",
            peers=grown,
            peer_unit="B",
        )
    )
    rss = {name: r["rss_growth"] for name, r in ranks.items()}
    out.append(goal("RSS flat over the steady-state messages: growth <= 1 MiB", max(rss.values()), MiB,
                    better="lower", unit=" B", peers=rss, peer_unit="B"))  # fmt: skip
    return out


def _mbps_and_round_trip(row: Mapping[str, Any] | None) -> str | None:
    """A ping-pong cell: MB/s and, in brackets, the round trip in us (None: not measured at that payload)."""
    return f"{row['MBps']:>9.1f} ({row['round_trip_s'] * 1e6:>8.1f})" if row else None


def _pingpong_column(title: str, variant: str) -> Column:
    """The column of one ping-pong variant of :func:`pingpong_rows`' rows."""
    return Column(title, lambda r: _mbps_and_round_trip(r[variant]), ">20")


PINGPONG_COLUMNS = (
    Column("payload", "nbytes", ">10"),
    _pingpong_column("channels", "channels"),
    _pingpong_column("eager", "eager"),
    _pingpong_column("mpi4py", "mpi4py"),
    _pingpong_column("channels, 2 nodes", "channels, 2 nodes"),
    _pingpong_column("channels, loaded", "channels, loaded"),
    _pingpong_column("mpi4py, loaded", "mpi4py, loaded"),
    Column("copy MB/s", "copy_MBps", ">10.0f"),
)
MESSAGE_COLUMNS = (
    Column("payload", lambda r: size_text(r["nbytes"]), ">10"),
    Column("round trips", "round_trips", ">11"),
    Column("messages", "scheduler_messages", ">9"),
    Column("eager's", "eager_messages", ">8"),
)
STEADY_COLUMNS = (
    Column("rank", "rank", ">4"),
    Column("tracemalloc +B", "tracemalloc_growth", ">14"),
    Column("RSS +B", "rss_growth", ">10"),
)
KERNEL_COLUMNS = (
    Column("kernel", "kernel", "<10"),
    Column("ranks", "ranks", ">5"),
    Column("channels s/it", "channels_s_per_iteration", ">14.5f"),
    Column("eager s/it", "eager_s_per_iteration", ">11.5f"),
    Column("eager/channels", "channels_vs_eager", ">15.2f"),
)


def pingpong_rows(report: Report) -> list[dict[str, Any]]:
    """A row per payload of the report's ping-pong: each variant's row by name (None where it did not run
    that payload), and the memory copy's MB/s (measured at 1 MiB and more)."""
    p = report.parts
    by_payload = {
        "eager": p["eager"],
        "mpi4py": p["mpi"].get("rows", []),
        "channels, 2 nodes": p["channels_two_nodes"],
        "channels, loaded": p["loaded"]["channels"],
        "mpi4py, loaded": p["loaded"]["mpi"].get("rows", []),
    }
    found = {variant: {r["nbytes"]: r for r in rows} for variant, rows in by_payload.items()}
    copy_mbps = {r["nbytes"]: r["MBps"] for r in p.get("copy", [])}
    return [
        {"nbytes": r["nbytes"], "channels": r, **{v: rows.get(r["nbytes"]) for v, rows in found.items()},
         "copy_MBps": copy_mbps.get(r["nbytes"])}
        for r in report.rows
    ]  # fmt: skip


def format_report(report: Report) -> str:
    """The report as the text tables the command prints, goals last."""
    p = report.parts
    lines = [
        f"ping-pong, MB/s (round trip in us); loaded: {p['loaded']['processes']} CPU-bound processes beside it, "
        f"median of {p['loaded']['repeats']} runs; copy: one process's memory copy (a round trip moves at most "
        "half of it)",
        *table(PINGPONG_COLUMNS, pingpong_rows(report)),
        f"mpi4py: skipped ({p['mpi']['skipped']})" if "skipped" in p["mpi"] else f"mpi4py: {p['mpi']['library']}",
    ]
    if "skipped" in p["loaded"]["mpi"]:
        lines.append(f"mpi4py, loaded: skipped ({p['loaded']['mpi']['skipped']})")
    waiting = p["wait_cpu_share"]
    mpi_share = waiting["mpi"]
    lines.append(
        f"a rank waiting {waiting['seconds']:g} s for its peer uses {waiting['channels']:.1%} of a core (channels)"
        + (f", {mpi_share:.1%} (mpi4py)" if mpi_share is not None else "")
    )
    counted = [r for r in report.rows if "scheduler_messages" in r]
    if counted:
        eager = {r["nbytes"]: r.get("scheduler_messages") for r in p["eager"]}
        lines += [
            "",
            "scheduler-worker messages per ping-pong group (2 ranks, its start and end), channels and eager's",
            *table(MESSAGE_COLUMNS, [{**r, "eager_messages": eager.get(r["nbytes"])} for r in counted]),
        ]
    steady = p["steady_state"]
    lines += [
        "",
        f"steady state, {steady['messages']} round trips of {steady['nbytes']} B",
        *table(STEADY_COLUMNS, [{"rank": i, **r} for i, r in enumerate(steady["ranks"])]),
        "",
        *table(KERNEL_COLUMNS, p["kernels"]),
    ]
    return text(lines, report)
