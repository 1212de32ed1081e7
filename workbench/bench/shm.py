"""``workbench bench shm``: deliver one read-only array to every worker, against the peers.

One array (256 MB by default) is used by ``tasks`` successive tasks on every worker (each task
reads all of it). For every way of getting it there, in one run on one machine: the wall time
from first submission to the last result, and the peak extra memory of the node (the sum of the
proportional set sizes of all processes involved, so pages shared by several processes count
once, minus the same sum before the array existed). Ratios are to the workbench's RRO path.

Peers: plain Dask (pickled to each worker process), objects as files (PyCOMPSs), Python's
``multiprocessing.shared_memory``, the ``SharedArray`` package, joblib's automatic memmapping
and Ray's object store. A peer that is not installed (``pip install -e .[peers]``) is skipped
with a message.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from workbench import machine
from workbench.memory import shm
from workbench.runtime.session import Session, start
from workbench.runtime.tasks import RRO, TaskRuntime, task

MB = 1e6


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


def run(
    size_mb: int = 256,
    tasks: int = 10,
    workers: int | None = None,
    only: list[str] | None = None,
    session: Session | None = None,
) -> dict[str, Any]:
    """Run every available way; returns a JSON-ready report with ratios to the workbench.

    Uses ``session`` when given (a notebook's), else starts its own cluster of ``workers``.
    """
    if only:
        unknown = sorted(set(only) - set(PEERS))
        if unknown:
            raise ValueError(f"unknown peers {unknown}; choose from {list(PEERS)}")
    array = np.random.default_rng(0).random(size_mb * 125_000)  # size_mb * 1e6 bytes of float64
    expected = float(array.sum())
    rows, skipped = [], {}
    with contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=120) as session:
        _with_runtime("dask")(session, np.ones(10), 1, Measure())  # warm the cluster and imports
        for name, (function, module) in PEERS.items():
            if only and name not in only:
                continue
            if _missing(module):
                skipped[name] = f"not installed: pip install {module} (or: pip install -e .[peers])"
                continue
            measure = Measure()
            try:
                results = function(session, array, tasks, measure)
            except Exception as error:  # a broken peer is reported, not fatal to the others
                skipped[name] = f"failed: {type(error).__name__}: {error}"
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
        n_workers = len(session.workers())
    base = next((r for r in rows if r["way"] == "workbench-rro"), None)
    for r in rows:
        r["time_vs_workbench"] = r["seconds"] / base["seconds"] if base else None
        r["memory_vs_workbench"] = (
            r["extra_memory_bytes"] / base["extra_memory_bytes"] if base and base["extra_memory_bytes"] else None
        )
        r["copies_per_node"] = r["extra_memory_bytes"] / array.nbytes
    return {
        "benchmark": "shm",
        "array_bytes": array.nbytes,
        "workers": n_workers,
        "tasks_per_worker": tasks,
        "ways": rows,
        "skipped": skipped,
        "attach_seconds_by_size": attach_times(),
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
    return "\n".join(lines)
