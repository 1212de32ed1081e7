"""Block-size sweeps: the same work cut into more and more blocks (one task per block)."""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

import datasets
import kernels
from workbench.apps.histogram import histogram_blocks
from workbench.apps.placement import PersistedBlocks
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


def _warm_up(bins: int, ranges: Sequence[tuple[float, float]]) -> None:
    kernels.histogramdd(np.zeros((1, len(ranges))), bins, ranges)


def histogram_block_sweep(
    session: Session,
    size: str = "ci",
    blocks: Sequence[int] = (2, 8, 32, 128),
    repeats: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """Time the blocked histogram of the ``histogram`` dataset at each number of blocks.

    The points are generated on the workers and persisted before timing, so only the tasks are
    timed. Every run is checked against the numba kernel on the whole array. One row per run:
    blocks, rows per block, repeat, seconds.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    ds = datasets.get("histogram", size, seed)
    n_points = ds.spec("points").shape[0]
    bins, ranges = ds.params["bins"], ds.params["range"]
    expected = kernels.histogramdd(ds.load("points"), bins, ranges, parallel=True) if size == "ci" else None
    session.run(_warm_up, bins, ranges)  # numba compile or cache load, before any timing
    rows = []
    for n_blocks in blocks:
        if not 1 <= n_blocks <= n_points:
            raise ValueError(f"blocks must be between 1 and {n_points} (the number of points), got {n_blocks}")
        block_rows = -(-n_points // n_blocks)
        points = PersistedBlocks(session, ds.to_dask("points", block_rows))
        for repeat in range(repeats):
            start = time.perf_counter()
            counts = histogram_blocks(session, points.block_futures, bins, ranges)
            seconds = time.perf_counter() - start
            if expected is not None and not np.array_equal(counts, expected):
                raise AssertionError(f"blocked histogram with {n_blocks} blocks differs from the kernel")
            if counts.sum() != n_points:
                raise AssertionError(f"blocked histogram counted {counts.sum()} of {n_points} points")
            rows.append(dict(blocks=len(points.block_futures), block_rows=block_rows, repeat=repeat, seconds=seconds))
        points.release()
    return pd.DataFrame(rows)
