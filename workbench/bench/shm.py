"""``workbench bench shm``: deliver one read-only array to every worker, against the peers.

One array (32 MB at size ci, 256 MB at lab, the default, 1 GB at full) is used by ``tasks``
successive tasks on every worker (each task reads all of it). For every way of getting it there,
in one run on one machine: the wall time from first submission to the last result, and the peak
extra memory of the node (the sum of the proportional set sizes of all processes involved, so
pages shared by several processes count once, minus the same sum before the array existed).
Ratios are to the workbench's RRO path.

Peers: plain Dask (pickled to each worker process), objects as files (PyCOMPSs), Python's
``multiprocessing.shared_memory``, the ``SharedArray`` package, joblib's automatic memmapping
and Ray's object store. A peer that is not installed (``pip install -e .[peers]``) is skipped
with a message.

Goals (issue 29, after the RRO paper's Table I, where RRO beat PyCOMPSs' objects as files): RRO
faster than files; RRO the fastest of every way measured; RRO's peak extra memory about one copy
of the array per node. Each way runs once, so the goals carry no noise figure; a goal whose peer
did not run is left out.

Against the node's read floor (issue 36, :mod:`workbench.bench.read_floor`): all workers at once
each sum their own resident array of the same size as many times as the ways' tasks, with nothing
to deliver, under the same memory sampler as the ways (on 2 cores it slows every reader); every
way's time is printed over that floor's, and the goal is RRO within 10 % of the floor, or the fastest
way by at least 5 %. Beside the times, the counts that do not depend on the machine
(:mod:`workbench.runtime.counts`) for every way that goes through Dask: tasks and dependencies
submitted, scheduler-worker messages, bytes moved between workers. RRO's tasks attach the node's
copy, so it moves no copy of the array between workers, on any machine (a goal); plain Dask
scatters the array to one worker and every other worker fetches it.

Table I's point reports each way's first timed run apart (cold) and every RRO run's publish time,
read from its trace (each run makes its segments anew, so a cold run whose publishing is slower shows
it there); its goal is on the warm repeats.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from workbench import machine
from workbench.bench import read_floor
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.memory import shm
from workbench.runtime import counts
from workbench.runtime.session import Session
from workbench.runtime.tasks import RRO, TaskRuntime, task
from workbench.settings import export

MB = 1e6
SIZES_MB = {"ci": 32, "lab": 256, "full": 1024}  # the array at each size (ci: small enough for a 2-core CI box)
# RRO keeps one copy of the array per node (in /dev/shm, mapped by every worker); PSS also counts what
# the workers allocate besides (task results, buffers), a larger share of a small array. A copy per
# worker would read >= 2 at the smallest cluster (2 workers): 1.25 tells the two apart with room for that.
ONE_COPY_AT_MOST = 1.25
# issue 36, item 4: RRO's time within 10 % of the node's read floor, or the fastest way by at least 5 %
NEAR_FLOOR = 1.10
FASTEST_BY = 1.05
# RRO's tasks attach the node's copy: what moves between workers is their small results, not the array
MOVED_AT_MOST = 0.01  # arrays' worth of bytes moved between workers
# Table I's timed runs of each way: the first reported apart (cold), the others its goal's (warm repeats)
TABLE1_RUNS = 3


# -- what every task does with the array: read all of it -----------------------------------------
@task(array=RRO)
def _use(array: np.ndarray) -> float:
    return float(array.sum())


def _use_plain(array: np.ndarray) -> float:
    return float(array.sum())


# -- memory sampling ---------------------------------------------------------------------------
def _tree_pss(root: psutil.Process) -> int:
    """Sum of PSS over ``root`` and its descendants: shared pages are split among their users."""
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def _unmapped_shm_bytes() -> int:
    """Workbench segments in /dev/shm that no process maps (PSS cannot see them)."""
    return sum(i.nbytes for i in shm.list_segments() if i.state == "complete" and not i.mapped_by)


class PeakMemory:
    """Samples the node's memory use by this process tree every ``interval`` seconds."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.root = psutil.Process()
        self.baseline = _tree_pss(self.root)
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_pss(self.root))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _tree_pss(self.root) + _unmapped_shm_bytes())

    @property
    def extra(self) -> int:
        """Peak bytes of the node above the start."""
        return max(0, self.peak - self.baseline)


class Measure:
    """Wall time and peak extra node memory of the ``with`` block: each way wraps only the delivery
    and the tasks, not its own start-up (a process pool, a Ray cluster)."""

    def __enter__(self) -> Measure:
        self.memory = PeakMemory().__enter__()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.memory.__exit__(*exc_info)


# -- the ways --------------------------------------------------------------------------------------
def _pinned(session: Session, tasks: int) -> list[str]:
    """Each worker gets ``tasks`` tasks, in rounds, so every worker needs the array."""
    return [w for _ in range(tasks) for w in session.workers()]


def _with_runtime(mode: str) -> Callable[..., list[float]]:
    def run(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
        with measure, TaskRuntime(session, mode):
            return session.gather([_use.submit(array, workers=[w]) for w in _pinned(session, tasks)])

    run.__name__ = mode
    return run


def _mp_attach_use(name: str, shape: tuple[int, ...], dtype: str) -> float:
    from multiprocessing import shared_memory

    segment = shared_memory.SharedMemory(name=name)  # 3.11: registers with the resource tracker
    try:
        return float(np.ndarray(shape, dtype=dtype, buffer=segment.buf).sum())
    finally:
        segment.close()


def _multiprocessing_shm(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
    from multiprocessing import shared_memory

    with measure:
        return _multiprocessing_shm_run(session, array, tasks, shared_memory)


def _multiprocessing_shm_run(session: Session, array: np.ndarray, tasks: int, shared_memory: Any) -> list[float]:
    segment = shared_memory.SharedMemory(create=True, size=array.nbytes)
    try:
        np.ndarray(array.shape, array.dtype, buffer=segment.buf)[...] = array
        futures = [
            session.client.submit(
                _mp_attach_use,
                segment.name,
                array.shape,
                str(array.dtype),
                pure=False,
                workers=[w],
                allow_other_workers=False,
            )
            for w in _pinned(session, tasks)
        ]
        return session.gather(futures)
    finally:
        segment.close()
        segment.unlink()


def _sharedarray_use(name: str) -> float:
    import SharedArray

    return float(SharedArray.attach(f"shm://{name}").sum())


def _sharedarray(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
    import SharedArray

    name = f"lwb-peer-sharedarray-{os.getpid()}"
    try:
        with measure:
            shared = SharedArray.create(f"shm://{name}", array.shape, array.dtype)
            shared[...] = array
            futures = [
                session.client.submit(_sharedarray_use, name, pure=False, workers=[w], allow_other_workers=False)
                for w in _pinned(session, tasks)
            ]
            return session.gather(futures)
    finally:
        SharedArray.delete(f"shm://{name}")


def _joblib(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
    from joblib import Parallel, delayed

    n_jobs = len(session.workers())
    try:
        # joblib's own process pool: it dumps the array once to /dev/shm and workers memory-map it
        with Parallel(n_jobs=n_jobs, max_nbytes="1M", mmap_mode="r") as parallel:
            parallel(delayed(_use_plain)(np.ones(4)) for _ in range(n_jobs))  # start the pool: not measured
            with measure:
                return parallel(delayed(_use_plain)(array) for _ in range(tasks * n_jobs))
    finally:
        _stop_joblib_pool()


def _stop_joblib_pool() -> None:
    """Stop the process pool joblib keeps for reuse after ``Parallel`` ends, and free what it holds in
    ``/dev/shm``: its named semaphores (``sem.loky-*``) and its memmapping folders
    (``joblib_memmapping_folder_*``). Left running, its workers idle for minutes beside the next way's
    memory measurement, and a process killed meanwhile (a kernel, a benchmark stopped) leaves those
    entries in ``/dev/shm`` for good."""
    from joblib.externals.loky import get_reusable_executor

    executor = get_reusable_executor(reuse=True)  # the pool Parallel used (it exists: Parallel made it)
    if hasattr(executor, "terminate"):  # joblib's MemmappingExecutor: shut down, then its folders removed
        executor.terminate(kill_workers=False)
    else:
        executor.shutdown(wait=True)


def _ray(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
    export("RAY_AUTH_MODE", "disabled")  # read at Ray's import: else Ray 2.60 writes a token under $HOME
    import ray

    n_workers = len(session.workers())
    ray.init(num_cpus=n_workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        use = ray.remote(_use_plain)
        ray.get([use.remote(np.ones(4)) for _ in range(n_workers)], timeout=120)  # start workers: not measured
        with measure:
            reference = ray.put(array)  # one copy in the node's object store, read zero-copy
            return ray.get([use.remote(reference) for _ in range(tasks * n_workers)], timeout=600)
    finally:
        ray.shutdown()


PEERS: dict[str, tuple[Callable[..., list[float]], str | None]] = {
    "workbench-rro": (_with_runtime("rro"), None),
    "dask": (_with_runtime("dask"), None),
    "files": (_with_runtime("files"), None),
    "multiprocessing.shared_memory": (_multiprocessing_shm, None),
    "SharedArray": (_sharedarray, "SharedArray"),
    "joblib-memmap": (_joblib, "joblib"),
    "ray": (_ray, "ray"),
}


# the ways whose tasks go through the session's Dask scheduler: their counts are the cluster's
THROUGH_DASK = frozenset({"workbench-rro", "dask", "files", "multiprocessing.shared_memory", "SharedArray"})


def _missing(module: str | None) -> bool:
    if module is None:
        return False
    import importlib.util

    return importlib.util.find_spec(module) is None


def attach_times(sizes_mb: tuple[int, ...] = (16, 64, 256), repeats: int = 20) -> dict[str, float]:
    """Median seconds to attach (map, no pre-fault) an existing segment, per size: it should not grow."""
    import statistics

    times = {}
    for size in sizes_mb:
        name = f"bench-attach-{os.getpid()}-{size}"
        shm.share(name, np.zeros(size * 125_000))
        try:
            samples = []
            for _ in range(repeats):
                t = time.perf_counter()
                view = shm.attach(name)
                samples.append(time.perf_counter() - t)
                del view
            times[f"{size}MB"] = statistics.median(samples)
        finally:
            shm.delete(name)
    return times


def _size_mb(size: str, size_mb: int | None) -> int:
    """The array's MB: ``size_mb`` when given, else the size's (:data:`SIZES_MB`)."""
    checked_size(size, SIZES_MB)
    if size_mb is not None and (isinstance(size_mb, bool) or not isinstance(size_mb, int) or size_mb < 1):
        raise ValueError(f"size_mb must be a positive whole number of MB, got {size_mb!r}")
    return SIZES_MB[size] if size_mb is None else size_mb


def _measure_ways(
    session: Session, array: np.ndarray, tasks: int, only: list[str] | None, progress: Progress
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every way asked for that can run here, timed and its peak memory taken; the others with why."""
    expected = float(array.sum())
    names = [name for name in PEERS if not only or name in only]
    rows, skipped = [], {}
    with progress.phase("ways", len(names)) as phase:
        for name in names:
            function, module = PEERS[name]
            if _missing(module):
                skipped[name] = f"not installed: pip install {module} (or: pip install -e .[peers])"
                phase.step(f"{name} skipped")
                continue
            measure = Measure()
            try:
                with _counting(session, name) as counted:
                    results = function(session, array, tasks, measure)
            except Exception as error:  # a broken peer is reported, not fatal to the others
                skipped[name] = f"failed: {type(error).__name__}: {error}"
                phase.step(f"{name} failed")
                continue
            if not np.allclose(results, expected, rtol=1e-9):
                raise AssertionError(f"{name} gave a wrong sum")
            rows.append(
                {
                    "way": name,
                    "seconds": measure.seconds,
                    "extra_memory_bytes": measure.memory.extra,
                    "tasks": len(results),
                    "counts": counted.counts.as_dict() if counted else None,
                }
            )
            phase.step(name)
    return rows, skipped


def _counting(session: Session, way: str) -> contextlib.AbstractContextManager[counts.Counting | None]:
    """The cluster's counts around a way whose tasks go through Dask (read outside its timed block);
    nothing for a way with its own pool (joblib, Ray), which the scheduler never sees."""
    return counts.counting(session) if way in THROUGH_DASK else contextlib.nullcontext()


def _peer(way: str) -> str:
    """A way's name among a goal's peers: the workbench's is RRO, as the paper calls it."""
    return "RRO" if way == "workbench-rro" else way


def shm_goals(
    rows: list[dict[str, Any]], floor: dict[str, Any] | None = None, array_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Issue 29's goals for the ways in ``rows`` (one timed run each, so no noise), and issue 36's:
    RRO against the node's read ``floor`` (:mod:`workbench.bench.read_floor`) and the bytes it moves
    between workers (its counts, against ``array_bytes``). A goal whose peer or figure was not measured
    (skipped, failed, not asked for) is left out."""
    ways = {r["way"]: r for r in rows}
    rro = ways.get("workbench-rro")
    if rro is None:
        return []
    goals = []
    if "files" in ways:
        goals.append(
            goal(
                "RRO faster than files (PyCOMPSs-style objects as files; files time / RRO time)",
                ways["files"]["seconds"] / rro["seconds"],
                1.0,
                peers={"RRO": rro["seconds"], "files": ways["files"]["seconds"]},
            )
        )
    others = [r for r in rows if r is not rro]
    if others:
        fastest = min(others, key=lambda r: r["seconds"])
        goals.append(
            goal(
                "RRO fastest of the shared-memory peers (the next fastest way's time / RRO time)",
                fastest["seconds"] / rro["seconds"],
                1.0,
                peers={_peer(r["way"]): r["seconds"] for r in rows},
            )
        )
    if floor is not None:
        goals.append(floor_goal(rro, others, floor))
    goals.append(
        goal(
            "RRO's peak extra memory about one copy of the array per node (extra bytes / array bytes)",
            rro["copies_per_node"],
            ONE_COPY_AT_MOST,
            better="lower",
            peers={_peer(r["way"]): r["copies_per_node"] for r in rows},
            peer_unit="copies",
        )
    )
    if rro.get("counts") is not None and array_bytes:
        goals.append(moved_goal(rows, array_bytes))
    return goals


def floor_goal(rro: dict[str, Any], others: list[dict[str, Any]], floor: dict[str, Any]) -> dict[str, Any]:
    """Issue 36's goal against the node's read floor: RRO's time at most 1.10 x the floor's, or
    RRO the fastest way by at least 5 % (met either way: the threshold, in floor times, is the larger
    of the two allowances)."""
    allowance = NEAR_FLOOR
    peers = {"RRO": rro["seconds"], "read floor": floor["seconds"]}
    if others:
        fastest = min(others, key=lambda r: r["seconds"])
        allowance = max(NEAR_FLOOR, fastest["seconds"] / floor["seconds"] / FASTEST_BY)
        peers[_peer(fastest["way"])] = fastest["seconds"]
    return goal(
        "RRO within 10 % of the node's read floor, or the fastest way by at least 5 % (RRO time / floor time; "
        "the threshold is the larger of 1.10 and the next fastest way's time / floor time / 1.05)",
        rro["seconds"] / floor["seconds"],
        allowance,
        better="lower",
        peers=peers,
    )


def moved_goal(rows: list[dict[str, Any]], array_bytes: int) -> dict[str, Any]:
    """RRO moves no copy of the array between workers, on any machine (its tasks attach the node's
    copy); the other ways that go through Dask beside it."""
    moved = {_peer(r["way"]): r["counts"]["bytes_moved"] / array_bytes for r in rows if r.get("counts")}
    return goal(
        "RRO moves no copy of the array between workers (bytes moved between workers / array bytes)",
        moved["RRO"],
        MOVED_AT_MOST,
        better="lower",
        unit="arrays",
        peers=moved,
        peer_unit="arrays",
    )


def table1_point(session: Session, size: str, repeats: int, progress: Progress) -> dict[str, Any]:
    """k-means at Table I's point with the most dimensions of ``size`` (128 at lab and full: the
    largest fragments, where the paper's gain is largest), ``rro`` against ``files``."""
    from workbench.lab.reproduce import hook_grid
    from workbench.lab.runner import run_experiment

    grid = hook_grid(size)
    with progress.phase("Table I", 1) as phase:
        experiment = run_experiment(
            session,
            "kmeans",
            ["files", "rro"],
            size=size,
            grid=grid,
            repeats=repeats,
            max_repeats=repeats,
            progress=False,
            baseline="files",
        )
        phase.step(f"k-means at {grid['dims'][0]} dims, files and rro")
    samples = {v: [float(t) for t in experiment.runs(v)["seconds"]] for v in ("files", "rro")}
    publish = [_publish_seconds(experiment.traces.get(run_id)) for run_id in experiment.runs("rro")["run_id"]]
    return {
        "point": {k: v[0] for k, v in grid.items()},
        "samples_s": samples,
        "cold_s": {v: t[0] for v, t in samples.items()},
        "warm_s": {v: t[1:] for v, t in samples.items()},
        "rro_publish_s": publish,
    }


def _publish_seconds(frame: Any) -> float | None:
    """How long an RRO run's publishing took, from its trace: the first segment made to the last
    (every node's copy of every fragment); None without a trace or a segment."""
    if frame is None:
        return None
    made = frame[frame["action"] == "shm-create"]
    return float(made["stop"].max() - made["start"].min()) if len(made) else None


def table1_goal(point: dict[str, Any]) -> dict[str, Any]:
    """RRO against files at Table I's point (the paper: 40 % faster at 128 dims on 16 workers), on the
    warm repeats: each way's first timed run (cold) is reported apart."""
    files, rro = point["warm_s"]["files"], point["warm_s"]["rro"]
    if not files or not rro:
        raise ValueError("Table I's goal needs at least one warm repeat of each way (runs after the first)")
    return goal(
        f"Table I at {point['point']['dims']} dims: k-means with RRO faster than files, warm repeats "
        "(files time / RRO time)",
        statistics.median(files) / statistics.median(rro),
        1.0,
        peers={"RRO": statistics.median(rro), "files": statistics.median(files)},
        noise=ratio_noise(files, rro),
    )


def run(
    size: str = "lab",
    size_mb: int | None = None,
    tasks: int = 10,
    workers: int | None = None,
    only: list[str] | None = None,
    table1: bool = True,
    session: Session | None = None,
    progress: Progress | None = None,
) -> Report:
    """Run every available way: a row per way with its ratios to the workbench, and the goals; the ways
    not run and why (``parts["skipped_ways"]``), the read floor, attach times and Table I's point.

    The array has the MB of ``size`` (:data:`SIZES_MB`) unless ``size_mb`` is given. Uses ``session``
    when given (a notebook's), else starts its own cluster of ``workers``. ``table1``: also k-means
    at Table I's point with the most dimensions, RRO against files (:data:`TABLE1_RUNS` runs each: the
    first reported apart, cold, the others the goal's). The node's read floor
    (:mod:`workbench.bench.read_floor`) is measured with the ways' array size and reads per worker.
    """
    size_mb = _size_mb(size, size_mb)
    progress = progress or Progress.quiet()
    if only:
        unknown = sorted(set(only) - set(PEERS))
        if unknown:
            raise ValueError(f"unknown peers {unknown}; choose from {list(PEERS)}")
    array = np.random.default_rng(0).random(size_mb * 125_000)  # size_mb * 1e6 bytes of float64
    with bench_session(session, workers, timeout=120) as session:
        _with_runtime("dask")(session, np.ones(10), 1, Measure())  # warm the cluster and imports
        rows, skipped = _measure_ways(session, array, tasks, only, progress)
        with progress.phase("read floor", 1) as phase, PeakMemory():  # the ways' sampler too: like with like
            floor = read_floor.measure(session, array, tasks)
            phase.step(f"{len(session.workers())} workers reading at once")
        point = table1_point(session, size, TABLE1_RUNS, progress) if table1 else None
        n_workers = len(session.workers())
    base = next((r for r in rows if r["way"] == "workbench-rro"), None)
    for r in rows:
        r["time_vs_workbench"] = r["seconds"] / base["seconds"] if base else None
        r["time_vs_floor"] = r["seconds"] / floor["seconds"]
        r["memory_vs_workbench"] = (
            r["extra_memory_bytes"] / base["extra_memory_bytes"] if base and base["extra_memory_bytes"] else None
        )
        r["copies_per_node"] = r["extra_memory_bytes"] / array.nbytes
    with progress.phase("attach", 1) as phase:
        attach = attach_times()
        phase.step("16, 64, 256 MB")
    return Report(
        "shm",
        size,
        shm_goals(rows, floor, array.nbytes) + ([table1_goal(point)] if point else []),
        rows,
        {"skipped_ways": skipped, "attach_seconds_by_size": attach, "read_floor": floor, "table1": point},
        counts={"array_bytes": array.nbytes, "tasks_per_worker": tasks},
        workers=n_workers,
        machine=machine.describe(),
    )


def _counted(key: str, per: Callable[[dict[str, Any]], float] | None = None) -> Callable[[dict[str, Any]], Any]:
    """A column of a way's counts (None, a dash, for a way the scheduler does not see), over ``per(row)``."""

    def value(row: dict[str, Any]) -> Any:
        if row.get("counts") is None:
            return None
        return row["counts"][key] if per is None else row["counts"][key] / per(row)

    return value


COLUMNS = (
    Column("way", "way", "<30"),
    Column("seconds", "seconds", ">8.3f"),
    Column("x workbench", lambda r: r["time_vs_workbench"] or None, ">11.2f"),
    Column("x floor", "time_vs_floor", ">7.2f"),
    Column("extra MB", lambda r: r["extra_memory_bytes"] / MB, ">9.0f"),
    Column("copies", "copies_per_node", ">7.2f"),
    Column("x workbench", lambda r: r["memory_vs_workbench"] or None, ">11.2f"),
    Column("tasks", _counted("tasks"), ">6"),
    Column("deps", _counted("dependencies"), ">5"),
    Column("msgs/task", _counted("messages", lambda r: r["tasks"]), ">9.1f"),
    Column("MB moved", _counted("bytes_moved", lambda r: MB), ">8.1f"),
)


def format_report(report: Report) -> str:
    """The report as the text table the command prints: each way's time against RRO's and the floor's,
    its memory, its counts; the floor; Table I's point; the goals last."""
    parts = report.parts
    lines = [
        f"one {report.counts['array_bytes'] / MB:.0f} MB read-only array, {report.counts['tasks_per_worker']} tasks on "
        f"each of {report.workers} workers (every task reads all of it)",
        "",
        *table(COLUMNS, report.rows),
    ]
    for name, why in parts["skipped_ways"].items():
        lines.append(f"{name:<30} skipped: {why}")
    lines += [
        "extra MB: peak node memory above the start (sum of PSS: shared pages count once); copies = extra / array",
        "tasks, deps: submitted to the scheduler; msgs/task: scheduler-worker messages per task run; MB moved "
        "between workers ('-': a way with its own pool, not through Dask)",
        _floor_text(parts["read_floor"]),
        "attach (map, no pre-fault): "
        + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in parts["attach_seconds_by_size"].items()),
    ]
    if parts.get("table1"):
        lines += _table1_lines(parts["table1"])
    return text(lines, report)


def _floor_text(floor: dict[str, Any]) -> str:
    """The read floor as one line: what was read, the slowest worker's time, the aggregate bandwidth."""
    return (
        f"read floor: all {floor['workers']} workers each sum their own resident {floor['array_bytes'] / MB:.0f} MB "
        f"array {floor['reads_per_worker']} times at once: {floor['seconds']:.3f} s (the slowest worker), "
        f"{floor['aggregate_bytes_per_s'] / 1e9:.1f} GB/s aggregate "
        f"(starts within {floor['start_skew_s'] * 1e3:.0f} ms)"
    )


def _table1_lines(point: dict[str, Any]) -> list[str]:
    """Table I's point: the warm repeats' medians (the goal's), then each way's first, cold, run and
    RRO's publish time in it against the warm runs'."""
    warm = ", ".join(f"{v} {statistics.median(t):.3f} s" for v, t in point["warm_s"].items() if t)
    cold = ", ".join(f"{v} {t:.3f} s" for v, t in point["cold_s"].items())
    publish = point["rro_publish_s"]
    made = ", ".join("-" if p is None else f"{p:.3f} s" for p in publish)
    return [
        f"Table I, k-means at {point['point']}: warm repeats (median) {warm}",
        f"  first run (cold) {cold}; RRO's publish per run (first, then the warm ones): {made}",
    ]
