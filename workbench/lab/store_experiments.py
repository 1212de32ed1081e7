"""The active store's experiments (thesis ch. 4): weak scaling, what moved, kNN's many-to-many.

Every variant runs through the experiment runner, so answers are checked against the baseline
(the plain one-task-per-block Dask code, ``blocks``) and every run has a trace. ``moved`` turns
a run's trace into the bytes each variant moved, which is where active and non-active differ.
"""
from __future__ import annotations

import pandas as pd

from workbench.lab import granularity
from workbench.lab.runner import Experiment, run_experiment
from workbench.runtime import trace as tracing
from workbench.runtime.session import Session

VARIANTS = {
    "histogram": ["blocks", "active", "non-active"],
    "kmeans": ["blocks", "active", "non-active"],
    "knn": ["blocks", "active", "non-active", "active-split"],
}
# kNN's penalty grows with the number of trees each query block must visit (blocks per worker).
KNN_BLOCKS = {"ci": [1, 4], "lab": [1, 4, 16], "full": [1, 8, 48]}


def compare(session: Session, app: str, size: str = "ci", repeats: int = 3, blocks_per_worker: int | None = None) -> Experiment:
    """The store variants of ``app`` against its plain Dask baseline, at one point of its grid."""
    grid = None
    if blocks_per_worker is not None:
        grid = {"blocks_per_worker": [blocks_per_worker]}
    return run_experiment(session, app, VARIANTS[app], size=size, grid=grid, repeats=repeats, progress=False, baseline="blocks")


def weak_scaling(session: Session, app: str, size: str = "ci", workers: tuple[int, ...] = (1, 2), repeats: int = 3) -> pd.DataFrame:
    """Thesis Figs. 4.4-4.6 on one machine: one block per worker, points growing with the workers."""
    return granularity.weak_scaling(session, app, size=size, workers=workers, blocks_per_worker=1, repeats=repeats, variants=VARIANTS[app])


def moved(experiment: Experiment) -> pd.DataFrame:
    """Per variant: mean seconds, tasks, and bytes moved between processes (from the traces)."""
    table = experiment.results.groupby("variant")[["seconds", "tasks", "bytes_transferred"]].mean()
    table["MB_moved"] = table.pop("bytes_transferred") / 1e6
    return table.reindex([v for v in experiment.results["variant"].unique()]).round(4)


def first_trace(experiment: Experiment, variant: str) -> pd.DataFrame:
    """The trace of ``variant``'s first timed run (for a Gantt chart or a bytes-moved matrix)."""
    run_id = experiment.results.loc[experiment.results["variant"] == variant, "run_id"].iloc[0]
    return experiment.traces[run_id]


def bytes_moved(experiment: Experiment, variant: str) -> pd.DataFrame:
    """Source x destination bytes of ``variant``'s first timed run."""
    return tracing.bytes_moved(first_trace(experiment, variant))


def knn_many_to_many(session: Session, size: str = "ci", repeats: int = 3) -> tuple[Experiment, pd.DataFrame]:
    """kNN at more and more blocks per worker: active lookups pay for query blocks that travel to
    every tree; one tree per partition (``active-split``) cuts the trees to one per worker."""
    experiment = run_experiment(
        session, "knn", VARIANTS["knn"], size=size, grid={"blocks_per_worker": KNN_BLOCKS[size]},
        repeats=repeats, progress=False, baseline="blocks",
    )
    table = experiment.results.groupby(["blocks_per_worker", "variant"])[["seconds", "tasks", "bytes_transferred"]].mean()
    table["MB_moved"] = table.pop("bytes_transferred") / 1e6
    return experiment, table.round(4)
