"""k-means with unequal work per block: the imbalance experiments of SplIter with balance (issue 17).

The points are laid out as an HPC code decomposes its domain: contiguous runs of blocks, one run
per worker (:func:`~workbench.runtime.blocks.place_contiguous`). Each block's work is the k-means
partial step repeated ``repeat`` times its cost factor (:func:`workbench.datasets.block_costs`: a heavy head,
block 0 costing ``skew`` times the last), so with ``skew`` > 1 the first workers hold the expensive
region and ``split``'s pinned partitions wait for them. The answer does not depend on the costs
(only the last repetition's sums are kept): every variant must return the same centres.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench import datasets, kernels
from workbench.apps.kmeans import add_partials
from workbench.apps.registry import Application, PlacedData, register
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks, place_contiguous, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Plan

ITERATIONS = 3
REPEAT = {"ci": 40, "lab": 40, "full": 10}  # repetitions per unit of cost (bench balance asks for more at ci)


def repetitions(rows: np.ndarray, costs: np.ndarray, rows_per_block: int, repeat: int) -> int:
    """How many times a block holding ``rows`` repeats the partial step: each original block's cost
    factor weighted by the share of the block's rows it holds, so the same rows cost the same work
    however they are cut (a block ``rechunk`` merged from eight costs what the eight cost together)."""
    if not len(rows):
        return 1
    blocks = np.minimum(len(costs) - 1, np.asarray(rows, dtype=np.int64) // rows_per_block)
    units = float(costs[blocks].sum()) / rows_per_block  # cost-1 blocks' worth of work
    return max(1, round(units * repeat * rows_per_block / len(rows)))


def costly_partial(
    fragment: np.ndarray, centres: np.ndarray, costs: np.ndarray, rows_per_block: int, repeat: int, *, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The k-means partial step of one block, repeated to its cost (:func:`repetitions`; the last one kept)."""
    for _ in range(repetitions(rows, costs, rows_per_block, repeat) - 1):
        kernels.kmeans_partial(fragment, centres)
    _, sums, counts = kernels.kmeans_partial(fragment, centres)
    return sums, counts


WORK = BlockWork(block=costly_partial, merge=add_partials, with_rows=True)


@dataclass(kw_only=True)
class SkewedData(PlacedData):
    """Points in contiguous runs per worker, the initial centres, and the per-block costs."""

    centres: np.ndarray
    costs: np.ndarray
    rows_per_block: int
    repeat: int


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> SkewedData:
    """``blocks_per_worker`` blocks per worker, contiguous; costs from ``skew``."""
    points = dataset.spec("points").shape[0]
    rows = rows_per_block(len(session.workers()), points, int(params.get("blocks_per_worker", 8)))
    n_blocks = -(-points // rows)
    array = place_contiguous(session, dataset.to_dask("points", rows))
    return SkewedData(
        blocks=PlacedBlocks(session, array, "skewed k-means points"),
        centres=dataset.load("centres"),
        costs=datasets.block_costs(n_blocks, float(params.get("skew", 1))),
        rows_per_block=rows,
        repeat=int(params.get("repetitions", REPEAT.get(dataset.size, 10))),
    )


def solve(plan: Plan, data: SkewedData) -> np.ndarray:
    """``ITERATIONS`` Lloyd steps (fixed: every variant does the same work)."""
    centres = data.centres.copy()
    for _ in range(ITERATIONS):
        sums, counts = plan.reduce(WORK, centres, data.costs, data.rows_per_block, data.repeat)
        centres = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centres)
    return centres


def same_answer(a: np.ndarray, b: np.ndarray) -> bool:
    """The same centres (to 1e-9: partial sums add in other orders)."""
    return bool(np.allclose(a, b, rtol=0.0, atol=1e-9))


APP = register(
    Application(
        name="skewed-kmeans",
        description="k-means with a heavy-tailed cost per block, blocks in contiguous runs per worker (imbalance)",
        dataset="kmeans",
        prepare=prepare,
        work=WORK,
        solve=solve,
        strategies=["blocks", "rechunk", "split", "split-balanced", "split-balanced-replicas"],
        baseline="split",
        grids={
            "ci": {"skew": [1, 16], "blocks_per_worker": [8]},
            "lab": {"skew": [1, 4, 16, 64], "blocks_per_worker": [8]},
            "full": {"skew": [1, 4, 16, 64], "blocks_per_worker": [16]},
        },
        parameters={
            "skew": "cost of the first block over the last (1: balanced; heavy head, geometric fall)",
            "blocks_per_worker": "blocks per worker (default 8)",
            "repetitions": "repetitions of the partial step per unit of cost (default by size)",
        },
        same_answer=same_answer,
    )
)
