"""The n-dimensional histogram of a blocked point set (thesis ch. 4-5), under every strategy.

The work of a block is ``workbench.kernels.histogramdd`` (its counts), the merge adds counts, and a
partition's blocks are counted into one table in one call (``workbench.kernels.histogramdd_blocks``: the
bins' layout worked out once per partition, not once per block). The variants are the
strategies: ``blocks`` (one task per block, the baseline), ``fetch`` (the caller gathers every
block and bins them itself), ``rechunk``, ``split``, ``split-materialized``, ``active`` and
``non-active`` (thesis Listing 4.7: the binning as an active method where each block lives, or
each block fetched through the store); see :mod:`workbench.runtime.strategies`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench import kernels
from workbench.apps.registry import BLOCKS_PER_WORKER, Application, PlacedData, register, resized
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork


def sum_counts(partials: Sequence[np.ndarray]) -> np.ndarray:
    """Add per-block counts (the merge: a task body on a worker, or here)."""
    total = np.zeros_like(partials[0])
    for counts in partials:
        total += counts
    return total


WORK = BlockWork(block=kernels.histogramdd, blocks=kernels.histogramdd_blocks, merge=sum_counts)


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> PlacedData:
    """The points in worker memory, ``blocks_per_worker`` blocks on each worker (or ``blocks`` in
    all); bins and range as arguments."""
    dataset = resized(dataset, params)
    n_points = dataset.spec("points").shape[0]
    if "blocks" in params:
        blocks = int(params["blocks"])
        if not 1 <= blocks <= n_points:
            raise ValueError(f"blocks must be between 1 and {n_points} (the number of points), got {blocks}")
        rows = -(-n_points // blocks)
    else:
        rows = rows_per_block(len(session.workers()), n_points, int(params.get("blocks_per_worker", 1)))
    return PlacedData(
        blocks=PlacedBlocks(session, dataset.to_dask("points", rows)),
        args=(dataset.params["bins"], dataset.params["range"]),
    )


def check(counts: np.ndarray, data: PlacedData) -> None:
    """Every point is counted once (the points are uniform in the range)."""
    if int(counts.sum()) != data.blocks.shape[0]:
        raise AssertionError(f"the histogram counted {int(counts.sum())} of {data.blocks.shape[0]} points")


APP = register(
    Application(
        name="histogram",
        description="5-D histogram of uniform points (thesis ch. 4-5): one task per block vs fetch to the caller",
        dataset="histogram",
        prepare=prepare,
        work=WORK,
        strategies=[
            "blocks",
            "fetch",
            "rechunk",
            "split",
            "split-materialized",
            "active",
            "non-active",
            "active-split",
            "dask",
            "rro",
        ],
        baseline="blocks",
        grids={
            "ci": {"blocks_per_worker": [1, 8, 64]},
            # lab: lesson 01's tour runs it (every point's fetch moves the 400 MB): three points show the
            # bytes growing with the blocks; five took most of the lesson's Run All (issue 46)
            "lab": {"blocks_per_worker": [1, 16, 256]},
            "full": {"blocks_per_worker": [1, 8, 48, 200]},
        },
        parameters={
            **BLOCKS_PER_WORKER,
            "blocks": "blocks in all (instead of blocks_per_worker)",
            "points": "points binned (default: the size's)",
        },
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        check=check,
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 32, 64, 128, 256]},
    )
)
