"""The granularity experiments of SplIter (thesis ch. 5): the same data cut into more and more blocks."""

from __future__ import annotations

import pandas as pd

from workbench import datasets
from workbench.apps import registry
from workbench.lab.runner import Experiment, run_experiment
from workbench.runtime.session import Session
from workbench.runtime.splitter import Partition

VARIANTS = ["blocks", "rechunk", "split", "split-materialized"]
# Blocks per core (= per worker: one single-threaded worker per core). The thesis went to 48;
# one machine has few cores, so the sweep goes to 200 to reach the thesis's task counts. lab keeps
# four points of full's seven (the fewest, then 16, 48 and 200, where the variants part): lesson 03
# runs the histogram and kNN over them, and seven took its Run All past four minutes (issue 46).
FRAGMENTATION = {"ci": [1, 8, 64], "lab": [1, 16, 48, 200], "full": [1, 2, 4, 8, 16, 48, 200]}
# The dataset lesson 03's kNN sweep runs on, by the lesson's size. At lab it is ci's (20,000 fit points,
# 2,000 queries): many blocks cost one tree per block, each asked every query, so the gap between
# blocks and split shows on the small set; lab's (1,000,000 and 10,000) took minutes at 200 blocks
# per core (issue 46).
KNN_SIZE = {"ci": "ci", "lab": "ci", "full": "full"}
# The dataset lesson 03's Cascade SVM runs on, by the lesson's size. At lab it is ci's (4,000 points):
# rechunk's one move against many small fits shows there (rechunk 7x faster than blocks at 200 blocks
# per core on a busy 2-core VM), and lab's 40,000 points took a fifth of the lesson's Run All.
CSVM_SIZE = {"ci": "ci", "lab": "ci", "full": "full"}


def fragmentation_sweep(
    session: Session, app: str, size: str = "ci", repeats: int = 3, progress: bool = False
) -> Experiment:
    """Every granularity variant of ``app`` at each number of blocks per core; baseline ``blocks``.
    The rounds adapt to the comparison lesson 03 states: split against blocks at the most blocks."""
    most = {"blocks_per_worker": FRAGMENTATION[size][-1]}
    return run_experiment(
        session,
        app,
        variants=VARIANTS,
        size=size,
        grid={"blocks_per_worker": FRAGMENTATION[size]},
        repeats=repeats,
        progress=progress,
        baseline="blocks",
        settle=[("split", "blocks", most)],
    )


def partition_table(partitions: list[Partition]) -> pd.DataFrame:
    """One row per partition: its worker, how many blocks, and which rows it covers."""
    return pd.DataFrame(
        [
            {
                "worker": p.worker,
                "blocks": len(p),
                "first block": p.get_indexes()[0],
                "last block": p.get_indexes()[-1],
                "rows": int(sum(b - a for a, b in p.item_ranges)),
            }
            for p in partitions
        ]
    )


def weak_scaling(
    session: Session,
    app: str,
    size: str = "ci",
    workers: tuple[int, ...] = (1, 2),
    blocks_per_worker: int = 8,
    repeats: int = 3,
    variants: list[str] | None = None,
) -> pd.DataFrame:
    """Points grow with the workers (the size's points per worker, times workers): mean seconds per
    variant and the efficiency t(first) / t(n). The cluster is rescaled, then restored."""
    application = registry.get(app)
    per_worker = datasets.get(application.dataset, size).spec("points").shape[0] // max(workers)
    original = len(session.workers())
    rows = []
    try:
        for n in workers:
            session.scale(n)
            experiment = run_experiment(
                session,
                app,
                variants=variants or VARIANTS,
                size=size,
                repeats=repeats,
                progress=False,
                baseline="blocks",
                grid={"blocks_per_worker": [blocks_per_worker], "points": [per_worker * n]},
            )
            means = experiment.summary()
            rows += [
                {"workers": n, "points": per_worker * n, "variant": variant, "seconds": seconds}
                for variant, seconds in zip(means["variant"], means["mean_s"])
            ]
    finally:
        session.scale(original)
    table = pd.DataFrame(rows)
    first = table[table.workers == workers[0]].set_index("variant")["seconds"]
    table["efficiency"] = [first[v] / s for v, s in zip(table["variant"], table["seconds"])]
    return table


def knn_fit_sweep(
    session: Session,
    size: str = "ci",
    fit_points: tuple[int, ...] | None = None,
    blocks_per_worker: int = 8,
    repeats: int = 3,
) -> pd.DataFrame:
    """Thesis Fig. 5.18: blocks processed per second as the fit set grows, for each variant."""
    fit_points = (
        fit_points
        or {"ci": (5_000, 20_000), "lab": (100_000, 300_000, 1_000_000), "full": (1_000_000, 3_000_000, 10_000_000)}[
            size
        ]
    )
    experiment = run_experiment(
        session,
        "knn",
        variants=VARIANTS,
        size=size,
        repeats=repeats,
        progress=False,
        baseline="blocks",
        grid={"blocks_per_worker": [blocks_per_worker], "points": list(fit_points)},
    )
    blocks = blocks_per_worker * len(session.workers())
    table = experiment.summary().rename(columns={"mean_s": "seconds"})[["points", "variant", "seconds"]]
    table["blocks_per_second"] = blocks / table["seconds"]
    return table
