"""Block-size sweeps: the same work cut into more and more blocks (one task per block).

A sweep is an experiment of the runner (the histogram's ``blocks`` variant at each number of
blocks per worker), so warm-up, answer checks and interleaving are the runner's; this module turns
its results into the table lesson 00 plots and fits the cost of one task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from workbench import datasets
from workbench.lab.runner import run_experiment
from workbench.runtime.blocks import rows_per_block
from workbench.runtime.session import Session

# Blocks per worker to sweep per size: from one block per worker to far too many (on 2 workers,
# 2 to 2048 blocks in all).
BLOCKS_PER_WORKER_BY_SIZE = {
    "ci": (1, 4, 16, 64),
    "lab": (1, 4, 16, 64, 256),
    "full": (1, 4, 16, 64, 256, 1024),
}


def per_task_cost(runs: pd.DataFrame) -> tuple[float, float]:
    """Fit ``seconds = fixed + per_task * blocks`` through the median of each block count.

    Returns ``(fixed_seconds, seconds_per_task)``: what a run costs regardless of blocks, and
    what each extra task adds (scheduling, transfer of its result, Python call overhead).

    Each median is weighted by its inverse (a fit of relative errors): on a shared machine the
    noise of a run grows with its length, and an unweighted line through block counts spaced by
    powers of two follows the longest run's noise, which can tip the fixed cost below zero.
    """
    medians = runs.groupby("blocks")["seconds"].median()
    if len(medians) < 2:
        raise ValueError("per_task_cost needs runs at two or more block counts")
    seconds = medians.to_numpy(dtype=float)
    weights = 1.0 / np.maximum(seconds, 1e-9)  # a median of 0 s (impossible in practice) must not divide by 0
    per_task, fixed = np.polyfit(medians.index.to_numpy(dtype=float), seconds, 1, w=weights)
    return float(fixed), float(per_task)


def histogram_block_sweep(
    session: Session,
    size: str = "ci",
    blocks_per_worker: Sequence[int] = BLOCKS_PER_WORKER_BY_SIZE["ci"],
    repeats: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """Time the blocked histogram of the ``histogram`` dataset at each number of blocks per worker.

    The points are generated on the workers and placed before timing, so only the tasks are
    timed; the runner checks the counts at each point (every point counted once). One row per
    run: blocks (in all: blocks per worker x workers, the last one may be short), rows per block,
    repeat, seconds.
    """
    experiment = run_experiment(
        session,
        "histogram",
        ["blocks"],
        size=size,
        grid={"blocks_per_worker": [int(b) for b in blocks_per_worker]},
        repeats=repeats,
        seed=seed,
        trace=False,
        progress=False,
    )
    n_points = datasets.get("histogram", size, seed).spec("points").shape[0]
    workers = len(experiment.metadata["cluster"]["workers"])
    runs = experiment.results
    return pd.DataFrame(
        {
            "blocks": [len(experiment.locality_at({"blocks_per_worker": b})) for b in runs["blocks_per_worker"]],
            "block_rows": [rows_per_block(workers, n_points, int(b)) for b in runs["blocks_per_worker"]],
            "repeat": runs["repeat"].to_numpy(),
            "seconds": runs["seconds"].to_numpy(),
        }
    )
