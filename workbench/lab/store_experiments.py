"""The active store's experiments (thesis ch. 4): its variants against plain Dask, and kNN's many-to-many.

Every variant runs through the experiment runner, so answers are checked against the baseline
(the plain one-task-per-block Dask code, ``blocks``) and every run has a trace; the experiment's
own queries (``moved()``, ``bytes_moved(variant)``, ``median_trace(variant)``) show what moved,
which is where active and non-active differ. Weak scaling is :func:`workbench.lab.granularity.weak_scaling`
with ``variants=VARIANTS[app]``.
"""

from __future__ import annotations

import pandas as pd

from workbench.apps import registry
from workbench.lab.runner import Experiment, run_experiment
from workbench.runtime.session import Session

VARIANTS = {
    "histogram": ["blocks", "active", "non-active"],
    "kmeans": ["blocks", "active", "non-active"],
    "knn": ["blocks", "active", "non-active", "active-split"],
}
# kNN's penalty grows with the number of trees each query block must visit (blocks per worker).
KNN_BLOCKS = {"ci": [1, 4], "lab": [1, 4, 16], "full": [1, 8, 48]}
# The dataset kNN's many-to-many runs on, by size. At lab it is ci's (20,000 fit points, 2,000 queries):
# what active lookups pay is a trip of the queries to every tree's backend, counted by the blocks,
# and lab's (1,000,000 and 10,000) made most of lesson 04's time (issue 46).
KNN_SIZE = {"ci": "ci", "lab": "ci", "full": "full"}
# What store_variants runs of an application's grid at a size, where it is not the whole grid. At lab,
# k-means at 16 dims only (134 MB of points; its grid has 16, 64 and 128) and 5 iterations (of 10):
# active against non-active is a copy against a computation in every iteration, both growing with
# the dims, so one point and a few iterations show the gap per iteration; the whole grid, 128 dims
# (1 GB) fetched in each of 10 iterations, made most of the 238 s before lesson 04's first figure
# (issue 46).
POINTS: dict[str, dict[str, dict[str, list]]] = {"kmeans": {"lab": {"dims": [16], "iterations": [5]}}}


def store_variants(
    session: Session, app: str, size: str = "ci", repeats: int = 3, blocks_per_worker: int | None = None
) -> Experiment:
    """The store variants of ``app`` against its plain Dask baseline: over its grid for ``size`` (with
    :data:`POINTS`' values where it has some), or at ``blocks_per_worker`` when given. The rounds adapt
    to the comparisons lesson 04 states: active against non-active, and against blocks."""
    grid = None
    if app in POINTS and size in POINTS[app]:
        grid = {**registry.get(app).grids[size], **POINTS[app][size]}
    if blocks_per_worker is not None:
        grid = {"blocks_per_worker": [blocks_per_worker]}
    return run_experiment(
        session,
        app,
        VARIANTS[app],
        size=size,
        grid=grid,
        repeats=repeats,
        progress=False,
        baseline="blocks",
        settle=[("active", "non-active"), ("active", "blocks")],
    )


def knn_many_to_many(session: Session, size: str = "ci", repeats: int = 3) -> tuple[Experiment, pd.DataFrame]:
    """kNN at more and more blocks per worker (:data:`KNN_BLOCKS`, on the :data:`KNN_SIZE` dataset):
    active lookups pay for query blocks that travel to every tree; one tree per partition
    (``active-split``) cuts the trees to one per worker.
    Returns the experiment and its ``moved()`` table (seconds, tasks, MB moved per point and variant).
    The rounds adapt to the comparisons lesson 04 states, at the most blocks: active and active-split
    against blocks."""
    most = {"blocks_per_worker": KNN_BLOCKS[size][-1]}
    experiment = run_experiment(
        session,
        "knn",
        VARIANTS["knn"],
        size=KNN_SIZE[size],
        grid={"blocks_per_worker": KNN_BLOCKS[size]},
        repeats=repeats,
        progress=False,
        baseline="blocks",
        settle=[("active", "blocks", most), ("active-split", "blocks", most)],
    )
    return experiment, experiment.moved()
