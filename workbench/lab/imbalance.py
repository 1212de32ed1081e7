"""Imbalance experiments: a slowed worker, and the skewed k-means run in every balancing variant.

A *slowed worker* is one whose core is shared with competing busy processes: each worker process
(every thread of it) is pinned to its own core, and ``burners`` processes spin on the core of the
slowed one, which then gets ``1 / (burners + 1)`` of it. Only a local cluster can be slowed so (the
client sets the affinities of the workers' processes); everything is undone on exit, whatever
happens.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from workbench.apps import skewed
from workbench.lab.runner import Experiment, run_experiment
from workbench.runtime.session import Session

VARIANTS = ("blocks", "rechunk", "split", "split-balanced", "split-balanced-replicas")
BURN = "while True: pass"


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


def _pin(pid: int, cores: set[int]) -> None:
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


@contextmanager
def slowed_worker(session: Session, burners: int = 2, worker: str | None = None) -> Iterator[str]:
    """Slow one worker (default: the first by address) to about ``1 / (burners + 1)`` of a core; yields its address."""
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("slowing a worker needs Linux's sched_setaffinity")
    if session.cluster is None:
        raise ValueError("slowing a worker pins the processes of a local cluster; this session joined a remote one")
    if isinstance(burners, bool) or not isinstance(burners, int) or not 1 <= burners <= 8:
        raise ValueError(f"burners must be an integer from 1 to 8, got {burners!r}")
    workers = sorted(session.workers())
    worker = worker or workers[0]
    if worker not in workers:
        raise ValueError(f"no worker {worker!r}; the workers are {workers}")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < len(workers):
        raise ValueError(f"{len(workers)} workers on {len(cores)} cores: slowing one needs a core per worker")
    pids = session.run(os.getpid)
    before = {address: os.sched_getaffinity(pid) for address, pid in pids.items()}
    started: list[subprocess.Popen] = []
    try:
        for i, address in enumerate(workers):
            _pin(pids[address], {cores[i]})
        core = cores[workers.index(worker)]
        for _ in range(burners):
            burner = subprocess.Popen([sys.executable, "-S", "-c", BURN], stdin=subprocess.DEVNULL)
            started.append(burner)
            os.sched_setaffinity(burner.pid, {core})
        yield worker
    finally:
        for burner in started:
            burner.kill()
            burner.wait(timeout=30)
        for address, pid in pids.items():
            if Path(f"/proc/{pid}").exists():
                _pin(pid, before[address])


def scenario(
    session: Session,
    name: str,
    size: str = "ci",
    skew: float = 1,
    repeats: int = 3,
    variants: Sequence[str] = VARIANTS,
    blocks_per_worker: int = 8,
    burners: int = 2,
    repeat: int | None = None,
) -> Experiment:
    """One imbalance scenario of the skewed k-means: ``balanced`` (skew 1), ``skewed`` (``skew``) or
    ``slowed`` (skew 1, one worker slowed), every variant, traced. ``repeat``: repetitions of the
    k-means step per unit of cost (default: the application's for ``size``; fewer for a quick look)."""
    if name not in ("balanced", "skewed", "slowed"):
        raise ValueError(f"scenario is 'balanced', 'skewed' or 'slowed', got {name!r}")
    grid = {"skew": [1 if name != "skewed" else skew], "blocks_per_worker": [blocks_per_worker]}
    if repeat is not None:
        grid["repetitions"] = [repeat]

    def run() -> Experiment:
        return run_experiment(
            session, "skewed-kmeans", list(variants), size=size, grid=grid, repeats=repeats, progress=False
        )

    if name == "slowed":
        with slowed_worker(session, burners):
            return run()
    return run()


def steals(experiment: Experiment) -> pd.DataFrame:
    """Per variant: steals and bytes they moved, replicas made (from the median run's trace)."""
    rows = []
    for variant in experiment.results["variant"].unique():
        frame = experiment.median_trace(variant)
        stolen = frame[frame["action"] == "steal"]
        copied = frame[frame["action"] == "replicate"]
        rows.append(
            {
                "variant": variant,
                "steals": len(stolen),
                "MB_stolen": float(stolen["bytes"].sum()) / 1e6,
                "MB_replicated": float(copied["bytes"].sum()) / 1e6,
            }
        )
    return pd.DataFrame(rows).set_index("variant")


# the runner's counts of a traced run (what it gave the scheduler) -> their names per k-means iteration
PER_ITERATION = {
    "submitted_tasks": "tasks_per_iteration",
    "dependencies": "dependencies_per_iteration",
    "messages": "messages_per_iteration",
}


def per_iteration(experiment: Experiment) -> pd.DataFrame:
    """Per variant, the mean of its timed runs' counts over the ``skewed.ITERATIONS`` maps of a run: tasks
    and dependencies submitted, scheduler-worker messages (a run's plan, replicas and steals included)."""
    runs = experiment.results
    present = [c for c in PER_ITERATION if c in runs]
    means = runs.groupby("variant")[present].mean() / skewed.ITERATIONS
    return means.rename(columns=PER_ITERATION)


def table(experiment: Experiment) -> pd.DataFrame:
    """Mean seconds, tasks and MB moved per variant, with split / variant (above 1: faster than split),
    steals and replicas, and the counts per iteration (:func:`per_iteration`)."""
    summary = experiment.summary().set_index("variant")
    out = summary[["mean_s", "tasks", "MB_moved"]].copy()
    out["split / variant"] = out.loc["split", "mean_s"] / out["mean_s"]
    out = out.join(steals(experiment)).join(per_iteration(experiment))
    out["MB_moved_with_replicas"] = out["MB_moved"] + out["MB_replicated"]  # replication counts in the run
    return out
