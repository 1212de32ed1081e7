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
from workbench.bench.goals import goal, goal_lines, ratio_noise
from workbench.bench.progress import Progress
from workbench.memory import shm
from workbench.runtime.session import Session, start
from workbench.runtime.tasks import RRO, TaskRuntime, task

MB = 1e6
SIZES_MB = {"ci": 32, "lab": 256, "full": 1024}  # the array at each size (ci: small enough for a 2-core CI box)
# RRO keeps one copy of the array per node (in /dev/shm, mapped by every worker); PSS also counts what
# the workers allocate besides (task results, buffers), a larger share of a small array. A copy per
# worker would read >= 2 at the smallest cluster (2 workers): 1.25 tells the two apart with room for that.
ONE_COPY_AT_MOST = 1.25


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
    # joblib's own process pool: it dumps the array once to /dev/shm and workers memory-map it
    with Parallel(n_jobs=n_jobs, max_nbytes="1M", mmap_mode="r") as parallel:
        parallel(delayed(_use_plain)(np.ones(4)) for _ in range(n_jobs))  # start the pool: not measured
        with measure:
            return parallel(delayed(_use_plain)(array) for _ in range(tasks * n_jobs))


def _ray(session: Session, array: np.ndarray, tasks: int, measure: Measure) -> list[float]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else Ray 2.60 writes a token under $HOME
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
    if size not in SIZES_MB:
        raise ValueError(f"size must be one of {list(SIZES_MB)}, got {size!r}")
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
                }
            )
            phase.step(name)
    return rows, skipped


def _peer(way: str) -> str:
    """A way's name among a goal's peers: the workbench's is RRO, as the paper calls it."""
    return "RRO" if way == "workbench-rro" else way


def shm_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 29's goals for the ways in ``rows`` (one timed run each, so no noise); a goal whose peer
    was not measured (skipped, failed, not asked for) is left out."""
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
    return goals


def table1_point(session: Session, size: str, repeats: int, progress: Progress) -> dict[str, Any]:
    """k-means at Table I's point with the most dimensions of ``size`` (128 at lab and full: the
    largest fragments, where the paper's gain is largest), ``rro`` against ``files``."""
    from workbench.lab.reproduce import hook_grid
    from workbench.lab.runner import run_experiment

    grid = hook_grid(size)
    with progress.phase("Table I", 1) as phase:
        experiment = run_experiment(
            session, "kmeans", ["files", "rro"], size=size, grid=grid, repeats=repeats, progress=False, baseline="files"
        )
        phase.step(f"k-means at {grid['dims'][0]} dims, files and rro")
    samples = {v: [float(t) for t in experiment.runs(v)["seconds"]] for v in ("files", "rro")}
    return {"point": {k: v[0] for k, v in grid.items()}, "samples_s": samples}


def table1_goal(point: dict[str, Any]) -> dict[str, Any]:
    """RRO against files at Table I's point (the paper: 40 % faster at 128 dims on 16 workers)."""
    files, rro = point["samples_s"]["files"], point["samples_s"]["rro"]
    return goal(
        f"Table I at {point['point']['dims']} dims: k-means with RRO faster than files (files time / RRO time)",
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
) -> dict[str, Any]:
    """Run every available way; returns a JSON-ready report with ratios to the workbench and the goals.

    The array has the MB of ``size`` (:data:`SIZES_MB`) unless ``size_mb`` is given. Uses ``session``
    when given (a notebook's), else starts its own cluster of ``workers``. ``table1``: also k-means
    at Table I's point with the most dimensions, RRO against files (3 runs each).
    """
    size_mb = _size_mb(size, size_mb)
    progress = progress or Progress.quiet()
    if only:
        unknown = sorted(set(only) - set(PEERS))
        if unknown:
            raise ValueError(f"unknown peers {unknown}; choose from {list(PEERS)}")
    array = np.random.default_rng(0).random(size_mb * 125_000)  # size_mb * 1e6 bytes of float64
    with contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=120) as session:
        _with_runtime("dask")(session, np.ones(10), 1, Measure())  # warm the cluster and imports
        rows, skipped = _measure_ways(session, array, tasks, only, progress)
        point = table1_point(session, size, 3, progress) if table1 else None
        n_workers = len(session.workers())
    base = next((r for r in rows if r["way"] == "workbench-rro"), None)
    for r in rows:
        r["time_vs_workbench"] = r["seconds"] / base["seconds"] if base else None
        r["memory_vs_workbench"] = (
            r["extra_memory_bytes"] / base["extra_memory_bytes"] if base and base["extra_memory_bytes"] else None
        )
        r["copies_per_node"] = r["extra_memory_bytes"] / array.nbytes
    with progress.phase("attach", 1) as phase:
        attach = attach_times()
        phase.step("16, 64, 256 MB")
    return {
        "benchmark": "shm",
        "size": size,
        "array_bytes": array.nbytes,
        "workers": n_workers,
        "tasks_per_worker": tasks,
        "ways": rows,
        "skipped": skipped,
        "attach_seconds_by_size": attach,
        "table1": point,
        "goals": shm_goals(rows) + ([table1_goal(point)] if point else []),
        "machine": machine.describe(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as the text table the command prints."""
    lines = [
        f"one {report['array_bytes'] / MB:.0f} MB read-only array, {report['tasks_per_worker']} tasks on each of "
        f"{report['workers']} workers (every task reads all of it)",
        "",
        f"{'way':<30} {'seconds':>8} {'x workbench':>11} {'extra MB':>9} {'copies':>7} {'x workbench':>11}",
    ]
    for r in report["ways"]:
        t = f"{r['time_vs_workbench']:.2f}" if r["time_vs_workbench"] else "-"
        m = f"{r['memory_vs_workbench']:.2f}" if r["memory_vs_workbench"] else "-"
        lines.append(
            f"{r['way']:<30} {r['seconds']:>8.3f} {t:>11} {r['extra_memory_bytes'] / MB:>9.0f} "
            f"{r['copies_per_node']:>7.2f} {m:>11}"
        )
    for name, why in report["skipped"].items():
        lines.append(f"{name:<30} skipped: {why}")
    lines.append(
        "extra MB: peak node memory above the start (sum of PSS: shared pages count once); copies = extra / array"
    )
    lines.append(
        "attach (map, no pre-fault): "
        + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in report["attach_seconds_by_size"].items())
    )
    if report.get("table1"):
        point = report["table1"]
        lines.append(
            f"Table I, k-means at {point['point']}: "
            + ", ".join(f"{v} {statistics.median(t):.3f} s" for v, t in point["samples_s"].items())
        )
    return "\n".join([*lines, "", *goal_lines(report["goals"])])
