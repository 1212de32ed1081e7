"""``workbench bench store``: the active store's call cost and active vs non-active applications.

1. A null method (no arguments, returns ``None``), called sequentially (latency) and with many
   calls in flight (throughput: futures submitted together, or synchronous calls from 8 threads),
   through every path side by side:
   - the store, plain value: one direct message to the backend holding the object;
   - the store, future: a Dask task pinned to that backend (composable with other tasks);
   - a plain ``client.submit`` of a null function (Dask's own task cost, no object);
   - a Dask actor method call (Dask's built-in stateful workers);
   - dataClay 4.3.1, when installed with Redis (see :mod:`workbench.bench.dataclay_peer`).
2. histogram and k-means under ``active`` (a call per block), ``non-active`` and ``active-split``
   (one active call per worker's partition, not per block), through the experiment runner (same
   answers checked), one experiment per parameter point. At lab k-means runs at 16, 64 and 128
   dimensions (the RRO paper's Table I's largest), the histogram at 1 to 256 blocks per worker.
   Goal: k-means ``active`` and the histogram's ``active-split`` at least 2x faster than non-active
   at every point; where one node moves non-active's bytes so fast that no variant could gain 2x by
   not moving them, within 10 % of the most it could (non-active's time over its time less its
   bytes at the worker-to-worker bandwidth measured with every backend copying at once).
   Beside the times, the counts that predict scale (issue 36), per iteration: tasks, dependencies,
   scheduler-worker messages and messages to the store (its catalogue and backends), and both
   messages per worker. Their goal holds on any machine: an ``active-split`` iteration sends at most
   :data:`MESSAGES_PER_WORKER` messages per worker, whatever the blocks per worker. ``active``'s
   count is printed, not a goal: a call per block is dataClay's model, and its messages follow the
   blocks by design; the partition calls are what makes them follow the workers.
3. Copies of an object (issue 35): the bandwidth of a fetch to the client and of a move between
   backends, 1 KiB and 64 MiB (1 MiB at ``ci``), beside Dask's own gather of the same bytes; every
   copy is taken under the object's shared lock (a fetch copies the arrays under it), so a copy
   must not wait for a read-only call, nor two read-only calls for each other: both are measured.
Goals from the issue are printed next to the figures, never asserted.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from workbench import machine
from workbench.apps import registry
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.bench.splitter import per_iteration
from workbench.datasets import SIZES
from workbench.lab.runner import grid_points, run_experiment
from workbench.runtime.session import Session
from workbench.runtime.store import PersistentObject, Store, active
from workbench.runtime.store.handles import active_task, submit_active


class Null(PersistentObject):
    """An object whose method does nothing: what is left is the cost of the call."""

    @active
    def nothing(self) -> None:
        """Nothing: what is left is the cost of the call."""
        return None


class Payload(PersistentObject):
    """Bytes to copy (random: nothing compresses them), and a read-only call that stays inside the object."""

    def __init__(self, nbytes: int):
        self.data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)

    @active
    def inside(self, seconds: float) -> float:
        """Stay inside the object (its shared lock held) for ``seconds``: a long read-only call."""
        time.sleep(seconds)
        return seconds


# An active k-means iteration with one call per worker costs, per worker, about 7.5 scheduler-worker
# messages (the call's compute-task, task-finished and free-keys, and its share of the merge task's)
# and the store's location look-up (a few, whatever the workers): at most 10. A call per block
# costs about 6 messages a block, so this bound fails where the count grows with the blocks.
MESSAGES_PER_WORKER = 10.0
VARIANTS = ("active", "non-active", "active-split")
# The variant whose gain over non-active each app's goal names: k-means' per-block active calls (the
# papers' comparison), the histogram's partition calls (one per worker, whatever the blocks per worker)
GAIN_VARIANT = {"kmeans": "active", "histogram": "active-split"}
GAIN = 2.0  # active at least 2x non-active, where moving the bytes allows it (see gain_goal)
WITHIN_BOUND = 0.9  # else within 10 % of the gain that moving non-active's bytes bounds
TRANSFER_SIZES = {"ci": (1024, 2**20), "lab": (1024, 64 * 2**20), "full": (1024, 64 * 2**20)}
READ_SECONDS = 0.3  # how long the read-only call of the concurrency figures stays inside the object


def null_function() -> None:
    """A task that does nothing (Dask's own cost per task)."""
    return None


class NullActor:
    """A Dask actor with a method that does nothing (Dask's stateful-worker path)."""

    def nothing(self) -> None:
        """Nothing: what is left is the cost of the call."""
        return None


def _per_call(calls: int, run: Callable[[], Any]) -> float:
    """Seconds per call of ``run`` repeated ``calls`` times (after 20 warm-up calls)."""
    for _ in range(20):
        run()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def _in_flight(calls: int, submit_all: Callable[[int], list[Any]], wait: Callable[[list[Any]], Any]) -> float:
    wait(submit_all(20))
    start = time.perf_counter()
    wait(submit_all(calls))
    return (time.perf_counter() - start) / calls


def null_calls(
    session: Session, store: Store, calls: int = 2000, step: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Latency and throughput of a null call through each of the four paths, in ms per call (``step``:
    called with each path's name once it is measured)."""
    client, timeout = session.client, session.timeout
    proxy = store.make_persistent(Null())
    worker = proxy.locations()[0]
    few = max(calls // 10, 50)  # a path through the scheduler is slower: fewer sequential calls
    rows: list[dict[str, Any]] = []

    def results(futures: list[Any]) -> list[Any]:
        return [f.result(timeout=timeout) for f in futures]

    def measure(
        path: str,
        sequential: int,
        call: Callable[[], Any],
        submit_all: Callable[[int], list[Any]],
        wait: Callable[[list[Any]], Any],
    ) -> None:
        latency = _per_call(sequential, call)
        rows.append(
            {"path": path, "latency_ms": 1e3 * latency, "throughput_ms": 1e3 * _in_flight(calls, submit_all, wait)}
        )
        if step is not None:
            step(path)

    try:
        (resolved,) = store.resolve([proxy.ref])
        with ThreadPoolExecutor(8) as pool:  # value calls are synchronous: threads keep 8 in flight, as for dataClay
            measure(
                "store: value (direct to the backend)",
                calls,
                proxy.nothing.value,
                lambda n: [pool.submit(proxy.nothing.value) for _ in range(n)],
                results,
            )
        measure(
            "store: future (task pinned to the backend)",
            few,
            lambda: proxy.nothing().result(timeout=timeout),
            lambda n: [submit_active(session, [active_task(resolved, "nothing", False, (), {})])[0] for _ in range(n)],
            session.gather,
        )
        measure(
            "dask: client.submit (null task)",
            few,
            lambda: client.submit(null_function, pure=False, workers=[worker]).result(timeout=timeout),
            lambda n: [client.submit(null_function, pure=False, workers=[worker]) for _ in range(n)],
            session.gather,
        )
        actor = client.submit(NullActor, actor=True, workers=[worker]).result(timeout=timeout)
        measure(
            "dask: actor method",
            calls,
            lambda: actor.nothing().result(timeout=timeout),
            lambda n: [actor.nothing() for _ in range(n)],
            results,
        )
    finally:
        proxy.delete()
    return rows


def _timings(repeats: int, run: Callable[[], Any]) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``run``, after one warm-up call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def _median_seconds(repeats: int, run: Callable[[], Any]) -> float:
    """Median seconds of ``run`` over ``repeats`` calls, after one warm-up call."""
    return statistics.median(_timings(repeats, run))


def copy_rates(session: Session, store: Store, sizes: Sequence[int], repeats: int = 5) -> list[dict[str, Any]]:
    """Bandwidth of the store's copies of an object of each size: a fetch to the client (``GET``: a
    snapshot under the object's shared lock) and a move between two backends (``PUSH``, the lock
    held until the copy is there), beside Dask's gather of the same array from the same worker (no
    store, no lock): one row per path and size, the median of ``repeats`` (``MBps``) and the fastest
    (``best_MBps``: what a busy machine disturbs least)."""
    return [row for nbytes in sizes for row in _copy_rates_of(session, store, nbytes, repeats)]


def _copy_rates_of(session: Session, store: Store, nbytes: int, repeats: int) -> list[dict[str, Any]]:
    """:func:`copy_rates`' rows of one size."""
    workers = store.backends()
    times: dict[str, list[float]] = {}
    proxy = store.make_persistent(Payload(nbytes), backend=workers[0])
    try:
        times["store: fetch (backend -> client)"] = _timings(repeats, proxy.fetch)
        if len(workers) > 1:
            targets = itertools.cycle(workers[1:] + workers[:1])
            times["store: move (backend -> backend)"] = _timings(repeats, lambda: proxy.move(next(targets)))
    finally:
        proxy.delete()
    future = session.client.scatter(Payload(nbytes).data, workers=[workers[0]])
    try:
        times["dask: gather (worker -> client)"] = _timings(repeats, future.result)
    finally:
        future.release()
    return [
        {
            "path": path,
            "nbytes": nbytes,
            "seconds": statistics.median(t),
            "MBps": nbytes / statistics.median(t) / 1e6,
            "best_MBps": nbytes / min(t) / 1e6,
        }
        for path, t in times.items()
    ]


def concurrent_move_rate(store: Store, nbytes: int, repeats: int) -> dict[str, Any] | None:
    """The worker-to-worker bandwidth with every backend copying at once: one ``nbytes`` object per
    backend, each moved to the next backend in the same instant (threads), total bytes over the wall
    time; the median of ``repeats`` and the fastest. ``None`` with one backend (nothing to move to)."""
    backends = store.backends()
    if len(backends) < 2:
        return None
    proxies = [store.make_persistent(Payload(nbytes), backend=b) for b in backends]
    try:
        with ThreadPoolExecutor(len(proxies)) as pool:
            where = list(range(len(backends)))

            def all_move() -> None:
                for i in range(len(where)):
                    where[i] = (where[i] + 1) % len(backends)
                for f in [pool.submit(p.move, backends[w]) for p, w in zip(proxies, where)]:
                    f.result()

            times = _timings(repeats, all_move)
    finally:
        for p in proxies:
            p.delete()
    total = nbytes * len(backends)
    return {
        "path": f"store: move, all {len(backends)} backends at once",
        "nbytes": total,
        "seconds": statistics.median(times),
        "MBps": total / statistics.median(times) / 1e6,
        "best_MBps": total / min(times) / 1e6,
    }


def reader_concurrency(store: Store, repeats: int = 20) -> dict[str, float]:
    """Whether copies and reads of one object wait for each other (they must not: all take its lock
    shared): ``two_reads_ratio``, the wall time of two concurrent read-only calls of
    :data:`READ_SECONDS` over one's (1: they overlap, 2: serialised); ``fetch_beside_read_ms``, the
    longest of the 1 KiB fetches made while such a call is inside the object (about
    ``fetch_alone_ms`` if they overlap, up to :data:`READ_SECONDS` if serialised)."""
    proxy = store.make_persistent(Payload(1024))
    try:
        alone = _median_seconds(1, lambda: proxy.inside.value(READ_SECONDS))
        fetch_alone = _median_seconds(repeats, proxy.fetch)
        with ThreadPoolExecutor(2) as pool:
            start = time.perf_counter()
            both = [pool.submit(proxy.inside.value, READ_SECONDS) for _ in range(2)]
            for f in both:
                f.result()
            two = time.perf_counter() - start
            reading = pool.submit(proxy.inside.value, READ_SECONDS)
            longest = 0.0
            while not reading.done():
                start = time.perf_counter()
                proxy.fetch()
                longest = max(longest, time.perf_counter() - start)
            reading.result()
    finally:
        proxy.delete()
    return {
        "read_s": alone,
        "two_reads_ratio": two / alone,
        "fetch_alone_ms": 1e3 * fetch_alone,
        "fetch_beside_read_ms": 1e3 * longest,
    }


def active_vs_non_active(
    session: Session, apps: Sequence[str], size: str, repeats: int, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """Every store variant (:data:`VARIANTS`) per app and parameter point: mean seconds, each run's,
    bytes moved and counts per iteration; ``ratio`` is non-active time / active time. Each point is
    one experiment of the runner, one step of ``progress``."""
    progress = progress or Progress.quiet()
    workers = len(session.workers())
    points = [(app, point) for app in apps for point in grid_points(registry.get(app).grids[size])]
    rows = []
    with progress.phase("applications", len(points)) as phase:
        for app, point in points:
            experiment = run_experiment(
                session,
                app,
                list(VARIANTS),
                size=size,
                grid={k: [v] for k, v in point.items()},
                repeats=repeats,
                max_repeats=repeats,  # a fixed count: the benchmark's time is budgeted
                progress=False,
                baseline="active",
            )
            means = experiment.summary().set_index("variant")
            variants = {
                v: {
                    "seconds": float(means.loc[v, "mean_s"]),
                    "runs_s": [float(s) for s in experiment.runs(v)["seconds"]],
                    "bytes_moved": int(round(means.loc[v, "MB_moved"] * 1e6)),
                }
                for v in VARIANTS
            }
            a, n = variants["active"], variants["non-active"]
            rows.append(
                {
                    "app": app,
                    "parameters": {k: (v.item() if hasattr(v, "item") else v) for k, v in point.items()},
                    "variants": variants,
                    "active_s": a["seconds"],
                    "non_active_s": n["seconds"],
                    "active_runs_s": a["runs_s"],
                    "non_active_runs_s": n["runs_s"],
                    "ratio": n["seconds"] / a["seconds"],
                    "active_bytes_moved": a["bytes_moved"],
                    "non_active_bytes_moved": n["bytes_moved"],
                    "counts": {v: counts_per_iteration(experiment.runs(v), workers) for v in VARIANTS},
                }
            )
            phase.step(f"{app} {rows[-1]['parameters']}")
    return rows


def counts_per_iteration(runs: Any, workers: int) -> dict[str, float]:
    """A variant's counts per iteration, the mean of its traced ``runs``: tasks, dependencies,
    scheduler-worker messages and bytes moved (:func:`workbench.bench.splitter.per_iteration`),
    messages to the store, and the messages of both kinds per worker."""
    found = per_iteration(runs)
    store = float((runs["store_messages"] / found["iterations"]).mean())
    found["store_messages_per_iteration"] = store
    found["messages_per_worker_per_iteration"] = (found["messages_per_iteration"] + store) / workers
    return found


def store_goals(
    calls_rows: list[dict[str, Any]],
    app_rows: list[dict[str, Any]],
    copy_rows: Sequence[dict[str, Any]] = (),
    readers: dict[str, float] | None = None,
    moves_at_once: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The issues' goals: the store's null-call latency (alone, and against dataClay's when it ran);
    each app's gain over non-active at every point (:func:`gain_goal`) and, for the partition calls,
    a fixed number of messages per worker per iteration; a fetch of the largest object copied at
    least at half Dask's gather bandwidth, and copies and reads of one object not waiting for each
    other (issue 35). One latency figure per path, so only the applications have noise."""
    latency = {r["path"]: r["latency_ms"] for r in calls_rows}
    value = calls_rows[0]["latency_ms"]
    goals = [goal("store null call latency", value, 1.0, better="lower", unit="ms", peers=latency, peer_unit="ms")]
    dataclay = next((r["latency_ms"] for r in calls_rows if r["path"].startswith("dataClay")), None)
    if dataclay is not None:
        goals.append(
            goal(
                "store latency below dataClay's (store / dataClay)",
                value / dataclay,
                1.0,
                better="lower",
                peers={"store": value, "dataClay": dataclay},
                peer_unit="ms",
            )
        )
    rate = moves_at_once["MBps"] if moves_at_once else None
    for row in app_rows:
        if row["app"] in GAIN_VARIANT:
            goals.append(gain_goal(row, GAIN_VARIANT[row["app"]], rate))
        found = row.get("counts", {}).get("active-split")
        if found is not None:
            goals.append(messages_goal(row, found))
    if copy_rows:
        largest = max(r["nbytes"] for r in copy_rows)
        rates = {r["path"]: r["MBps"] for r in copy_rows if r["nbytes"] == largest}
        fetch, dask = rates.get("store: fetch (backend -> client)"), rates.get("dask: gather (worker -> client)")
        if fetch is not None and dask is not None:
            goals.append(
                goal(
                    f"store fetch of {largest / 2**20:g} MiB under the object's lock (store / Dask gather bandwidth)",
                    fetch / dask,
                    0.5,
                    peers=rates,
                    peer_unit="MB/s",
                )
            )
    if readers is not None:
        goals.append(
            goal(
                "two read-only calls on one object overlap (wall time / one call's)",
                readers["two_reads_ratio"],
                1.5,
                better="lower",
            )
        )
        goals.append(
            goal(
                "a fetch does not wait for a read-only call (longest fetch beside one, ms)",
                readers["fetch_beside_read_ms"],
                1e3 * READ_SECONDS / 3,
                better="lower",
                unit="ms",
                peers={"fetch alone": readers["fetch_alone_ms"], "beside a read": readers["fetch_beside_read_ms"]},
                peer_unit="ms",
            )
        )
    return goals


def _variant(row: dict[str, Any], variant: str) -> dict[str, Any]:
    """A variant's figures in an application row (rows made before ``variants`` held only two)."""
    if "variants" in row:
        return row["variants"][variant]
    key = "active" if variant == "active" else "non_active"
    return {"seconds": row[f"{key}_s"], "runs_s": row[f"{key}_runs_s"], "bytes_moved": row.get(f"{key}_bytes_moved")}


def move_bound(non_active_s: float, moved_bytes: float, rate_MBps: float | None) -> float | None:
    """The most any variant can gain over non-active by not moving ``moved_bytes``: non-active's time
    over what is left of it once the bytes' time at ``rate_MBps`` (every backend copying at once) is
    taken away. ``None`` where no rate was measured or moving accounts for all of it (no bound)."""
    if not rate_MBps or moved_bytes <= 0:
        return None if not rate_MBps else 1.0
    left = non_active_s - moved_bytes / (rate_MBps * 1e6)
    return non_active_s / left if left > 0 else None


def gain_goal(row: dict[str, Any], variant: str, rate_MBps: float | None) -> dict[str, Any]:
    """``variant`` at least :data:`GAIN` times faster than non-active; where one node moves the bytes
    faster than that allows (:func:`move_bound` below ``GAIN`` / :data:`WITHIN_BOUND`), within 10 %
    of the bound instead: the threshold says which applied, ``bound`` (and the report's table) what
    the bound came from. The words hold no figure of the run, so two runs' goals match."""
    mine, non = _variant(row, variant), _variant(row, "non-active")
    bound = row_bound(row, variant, rate_MBps)
    threshold = GAIN if bound is None or WITHIN_BOUND * bound >= GAIN else round(WITHIN_BOUND * bound, 2)
    moved = _moved(row, variant)
    why = (
        f"moving non-active's {moved / 1e6:.0f} MB at the {rate_MBps:.0f} MB/s measured with every backend copying "
        f"at once takes {moved / (rate_MBps * 1e6):.3f} s of its {non['seconds']:.3f} s: no variant gains more than "
        f"{bound:.2f}x by not moving them"
        if bound is not None and rate_MBps
        else "no worker-to-worker rate was measured (one backend)"
    )
    return goal(
        f"{row['app']} {variant} at {row['parameters']}: >= {GAIN:g}x non-active, or within 10 % of the most not "
        f"moving its bytes can gain on this machine (non-active time / {variant} time)",
        non["seconds"] / mine["seconds"],
        threshold,
        peers={variant: mine["seconds"], "non-active": non["seconds"]},
        noise=ratio_noise(mine["runs_s"], non["runs_s"]),
        bound=why,
    )


def _moved(row: dict[str, Any], variant: str) -> int:
    """Bytes non-active moved between workers beyond what ``variant`` moved."""
    return max(0, (_variant(row, "non-active")["bytes_moved"] or 0) - (_variant(row, variant)["bytes_moved"] or 0))


def row_bound(row: dict[str, Any], variant: str, rate_MBps: float | None) -> float | None:
    """:func:`move_bound` of an application row: the most ``variant`` can gain over non-active there."""
    return move_bound(_variant(row, "non-active")["seconds"], _moved(row, variant), rate_MBps)


def _bound_text(row: dict[str, Any], rate_MBps: float | None) -> str:
    """The row's move bound for its goal's variant, as the table prints it."""
    variant = GAIN_VARIANT.get(row["app"])
    bound = row_bound(row, variant, rate_MBps) if variant and "variants" in row else None
    return f"{bound:.2f}x" if bound is not None else "-"


def messages_goal(row: dict[str, Any], found: dict[str, float]) -> dict[str, Any]:
    """The partition calls' messages per worker per iteration at most :data:`MESSAGES_PER_WORKER`."""
    return goal(
        f"{row['app']} active-split at {row['parameters']}: messages per worker per iteration at most "
        f"{MESSAGES_PER_WORKER:g}, whatever the blocks (scheduler + store)",
        found["messages_per_worker_per_iteration"],
        MESSAGES_PER_WORKER,
        better="lower",
        unit="messages",
        peers={
            "scheduler": found["messages_per_iteration"],
            "store": found["store_messages_per_iteration"],
            "tasks": found["tasks_per_iteration"],
        },
        peer_unit="per iteration",
    )


def run(
    size: str = "lab",
    repeats: int = 3,
    calls: int = 2000,
    apps: Sequence[str] = ("histogram", "kmeans"),
    dataclay: bool = True,
    session: Session | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """The whole benchmark: a row per null-call path, the rest in ``parts`` (applications, copies, readers,
    moves at once, dataClay's peer), the goals.

    ``workers``: local worker processes when no ``session`` is given (default: one per core).
    """
    checked_size(size, SIZES)
    progress = progress or Progress.quiet()
    owned = session is None
    with (
        bench_session(session, workers, timeout=300) as session,
        tempfile.TemporaryDirectory(prefix="workbench-bench-store-") as directory,
    ):
        with Store(session, directory if owned else None) as store:  # a given session keeps its own store
            with progress.phase("null calls", 4) as phase:
                calls_rows = null_calls(session, store, calls, phase.step)
            with progress.phase("copies", 2) as phase:
                copy_rows = copy_rates(session, store, TRANSFER_SIZES[size], repeats=max(repeats, 3))
                at_once = concurrent_move_rate(store, max(TRANSFER_SIZES[size]), repeats=max(repeats, 3))
                phase.step("bandwidth")
                readers = reader_concurrency(store)
                phase.step("concurrent readers")
            app_rows = active_vs_non_active(session, apps, size, repeats, progress)
        workers = len(session.workers())
    peer: dict[str, Any] = {"available": False, "reason": "not asked for (--no-dataclay)"}
    if dataclay:
        from workbench.bench import dataclay_peer

        with progress.phase("dataClay", 1) as phase:
            peer = dataclay_peer.measure(calls=calls)
            phase.step("null calls" if peer.get("available") else "skipped")
    if peer.get("available"):
        calls_rows.append(
            {
                "path": "dataClay 4.3.1: active method",
                "latency_ms": peer["latency_ms"],
                "throughput_ms": peer.get("throughput_ms"),
            }
        )
    return Report(
        "store",
        size,
        store_goals(calls_rows, app_rows, copy_rows, readers, at_once),
        calls_rows,
        {"applications": app_rows, "copies": copy_rows, "readers": readers, "moves_at_once": at_once, "dataclay": peer},
        counts={"calls": calls},
        workers=workers,
        repeats=repeats,
        machine=machine.describe(),
    )


CALL_COLUMNS = (
    Column("path", "path", "<46"),
    Column("latency ms", "latency_ms", ">11.3f"),
    Column("throughput ms/call", "throughput_ms", ">19.3f"),
)
_APP, _PARAMETERS = Column("app", "app", "<10"), Column("parameters", lambda r: str(r["parameters"]), "<32")
APPLICATION_COLUMNS = (
    _APP,
    _PARAMETERS,
    Column("active s", "active_s", ">9.4f"),
    Column("split s", "split_s", ">8.4f"),
    Column("non-active s", "non_active_s", ">13.4f"),
    Column("non/active", "ratio", ">11.2f"),
    Column("non/split", "non_vs_split", ">10.2f"),
    Column("MB active", "active_MB", ">10.2f"),
    Column("split", "split_MB", ">6.2f"),
    Column("non-active", "non_active_MB", ">11.2f"),
    Column("bound", "bound", ">6"),
)
COUNT_COLUMNS = (
    _APP,
    _PARAMETERS,
    Column("variant", "variant", "<13"),
    Column("tasks", "tasks_per_iteration", ">7.1f"),
    Column("deps", "dependencies_per_iteration", ">7.1f"),
    Column("sched msgs", "messages_per_iteration", ">11.1f"),
    Column("store msgs", "store_messages_per_iteration", ">11.1f"),
    Column("msgs/worker", "messages_per_worker_per_iteration", ">12.1f"),
)
COPY_COLUMNS = (
    Column("path", "path", "<40"),
    Column("bytes", "nbytes", ">10"),
    Column("ms", lambda r: 1e3 * r["seconds"], ">9.3f"),
    Column("MB/s", "MBps", ">9.1f"),
    Column("best MB/s", "best_MBps", ">10.1f"),
)


def _megabytes(figures: dict[str, Any] | None) -> float | None:
    """A variant's bytes moved between workers, in MB (None where not measured)."""
    moved = figures and figures.get("bytes_moved")
    return None if moved is None else moved / 1e6


def application_line(row: dict[str, Any], rate_MBps: float | None) -> dict[str, Any]:
    """One application row as :data:`APPLICATION_COLUMNS` show it: each variant's seconds and MB moved, the
    ratios to non-active's and the move bound (at ``rate_MBps``, every backend copying at once)."""
    a, n = _variant(row, "active"), _variant(row, "non-active")
    split = row["variants"]["active-split"] if "variants" in row else None
    return {
        "app": row["app"],
        "parameters": row["parameters"],
        "active_s": a["seconds"],
        "split_s": split["seconds"] if split else None,
        "non_active_s": n["seconds"],
        "ratio": row["ratio"],
        "non_vs_split": n["seconds"] / split["seconds"] if split else None,
        "active_MB": _megabytes(a),
        "split_MB": _megabytes(split),
        "non_active_MB": _megabytes(n),
        "bound": _bound_text(row, rate_MBps),
    }


def format_report(report: Report) -> str:
    """The report as the text tables the command prints, goals last."""
    parts = report.parts
    lines = [
        f"{report.workers} workers; null calls: {report.counts['calls']} per path",
        "",
        *table(CALL_COLUMNS, report.rows),
    ]
    if not parts["dataclay"].get("available"):
        lines.append(f"dataClay: skipped ({parts['dataclay'].get('reason')})")
    rate = (parts.get("moves_at_once") or {}).get("MBps")
    counted = [
        {"app": r["app"], "parameters": r["parameters"], "variant": variant, **c}
        for r in parts["applications"]
        for variant, c in r.get("counts", {}).items()
    ]
    lines += [
        "",
        f"active vs non-active, size {report.size}, mean of {report.repeats} runs (seconds; MB moved between workers)",
        *table(APPLICATION_COLUMNS, [application_line(r, rate) for r in parts["applications"]]),
        "bound: the most the goal's variant (k-means: active, histogram: active-split) can gain by not moving "
        "non-active's bytes, at the rate measured with every backend copying at once (- : none below any gain)",
        "",
        "counts per iteration (after the first; messages: the run's over its iterations)",
        *table(COUNT_COLUMNS, counted),
        "",
        "copies of an object (median, and fastest)",
        *table(COPY_COLUMNS, [*parts.get("copies", []), *filter(None, [parts.get("moves_at_once")])]),
    ]
    readers = parts.get("readers")
    if readers:
        lines.append(
            f"two {readers['read_s']:.2f} s read-only calls together: {readers['two_reads_ratio']:.2f}x one's time; "
            f"a fetch beside one: {readers['fetch_beside_read_ms']:.1f} ms at most ({readers['fetch_alone_ms']:.1f} "
            "ms alone)"
        )
    return text(lines, report)
