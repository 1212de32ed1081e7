"""Block-size sweeps: the same work cut into more and more blocks (one task per block).

A sweep is an experiment of the runner (the histogram's ``blocks`` variant at each total number of
blocks), so warm-up, answer checks and interleaving are the runner's; this module turns its
results into the table lesson 00 plots and fits the cost of one task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

import datasets
from workbench.lab.runner import run_experiment
from workbench.runtime.session import Session

# Numbers of blocks to sweep per size: from one block per worker to far too many.
BLOCKS_BY_SIZE = {"ci": (2, 8, 32, 128), "lab": (2, 8, 32, 128, 512), "full": (2, 8, 32, 128, 512, 2048)}


def per_task_cost(runs: pd.DataFrame) -> tuple[float, float]:
    """Fit ``seconds = fixed + per_task * blocks`` through the median of each block count.

    Returns ``(fixed_seconds, seconds_per_task)``: what a run costs regardless of blocks, and
    what each extra task adds (scheduling, transfer of its result, Python call overhead).
    """
    medians = runs.groupby("blocks")["seconds"].median()
    if len(medians) < 2:
        raise ValueError("per_task_cost needs runs at two or more block counts")
    per_task, fixed = np.polyfit(medians.index.to_numpy(dtype=float), medians.to_numpy(), 1)
    return float(fixed), float(per_task)


def histogram_block_sweep(
    session: Session,
    size: str = "ci",
    blocks: Sequence[int] = (2, 8, 32, 128),
    repeats: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """Time the blocked histogram of the ``histogram`` dataset at each number of blocks.

    The points are generated on the workers and placed before timing, so only the tasks are
    timed; every run's counts are checked (every point counted once). One row per run: blocks,
    rows per block, repeat, seconds.
    """
    n_points = datasets.get("histogram", size, seed).spec("points").shape[0]
    experiment = run_experiment(
        session,
        "histogram",
        ["blocks"],
        size=size,
        grid={"blocks": [int(b) for b in blocks]},
        repeats=repeats,
        seed=seed,
        trace=False,
        progress=False,
    )
    runs = experiment.results
    block_rows = [-(-n_points // int(b)) for b in runs["blocks"]]
    return pd.DataFrame(
        {
            "blocks": [-(-n_points // r) for r in block_rows],  # the blocks there were (the last one may be short)
            "block_rows": block_rows,
            "repeat": runs["repeat"].to_numpy(),
            "seconds": runs["seconds"].to_numpy(),
        }
    )
