"""k-nearest neighbours (thesis §4.3, §5.3.4): one search tree per piece, every piece queried.

The work of a piece of the fit set (a block, a rechunked block, a SplIter partition, a store
block) is :func:`nearest`: fit a ``NearestNeighbors`` tree on its points and answer every query
with its k nearest, as global row numbers (``rows=``). The merge keeps the k nearest of several
pieces. Many small pieces mean many trees, each queried with every point: O(pieces x log n)
lookups; one tree per partition brings that back towards O(log n) while no point moves.

The queries are a :class:`~workbench.runtime.strategies.Broadcast` argument: scattered to every
worker once for the Dask strategies, and placed in the store as one block per worker for the store
strategies, where a lookup on another backend must fetch them: the many-to-many pattern that made
dataClay's ``active`` kNN slower than Dask's (thesis ch. 4). ``active-split`` fits one tree per
partition of store blocks, so there are as many trees, and query fetches, as workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from workbench.apps.registry import BLOCKS_PER_WORKER, Application, PlacedData, register, resized
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Broadcast, Plan


class Neighbours(NamedTuple):
    """Each query's nearest fit points found so far: distances and global rows, nearest first."""

    distances: np.ndarray
    rows: np.ndarray
    k: int


def nearest(points: np.ndarray, queries: np.ndarray, k: int, *, rows: np.ndarray) -> Neighbours:
    """Fit one tree on ``points`` (global row numbers ``rows``); each query's k nearest among them."""
    from sklearn.neighbors import NearestNeighbors

    distances, local = NearestNeighbors(n_neighbors=min(k, len(points))).fit(points).kneighbors(queries)
    return Neighbours(distances, rows[local], k)


def nearest_of_blocks(blocks: list[np.ndarray], queries: np.ndarray, k: int, *, rows: np.ndarray) -> Neighbours:
    """One tree for a whole partition: its blocks concatenated where they are."""
    return nearest(np.concatenate(blocks) if len(blocks) > 1 else blocks[0], queries, k, rows=rows)


def merge_nearest(pieces: list[Neighbours]) -> Neighbours:
    """The k nearest over several pieces' answers (ties: the piece that came first)."""
    distances = np.concatenate([p.distances for p in pieces], axis=1)
    rows = np.concatenate([p.rows for p in pieces], axis=1)
    k = pieces[0].k
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return Neighbours(np.take_along_axis(distances, order, axis=1), np.take_along_axis(rows, order, axis=1), k)


WORK = BlockWork(block=nearest, blocks=nearest_of_blocks, merge=merge_nearest, with_rows=True)


@dataclass(kw_only=True)
class KNNData(PlacedData):
    """The fit set in worker memory; the queries and k as the work's arguments."""


def solve(plan: Plan, data: KNNData) -> np.ndarray:
    """Global rows of each query's k nearest fit points, nearest first."""
    return plan.reduce(WORK, *data.args).rows


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> KNNData:
    """The fit points, ``blocks_per_worker`` blocks on each worker; the queries broadcast."""
    dataset = resized(dataset, params)
    rows = rows_per_block(
        len(session.workers()), dataset.spec("points").shape[0], int(params.get("blocks_per_worker", 1))
    )
    return KNNData(
        blocks=PlacedBlocks(session, dataset.to_dask("points", rows)),
        args=(Broadcast(dataset.load("queries")), dataset.params["neighbours"]),
    )


APP = register(
    Application(
        name="knn",
        description="k nearest neighbours (thesis §4.3, §5.3.4): one tree per piece, global top k",
        dataset="knn",
        prepare=prepare,
        work=WORK,
        solve=solve,
        strategies=["blocks", "rechunk", "split", "split-materialized", "active", "non-active", "active-split"],
        baseline="blocks",
        grids={
            "ci": {"blocks_per_worker": [1, 8]},
            "lab": {"blocks_per_worker": [1, 8, 48]},
            "full": {"blocks_per_worker": [1, 48, 200]},
        },
        parameters={**BLOCKS_PER_WORKER, "points": "points of the fit set (default: the size's)"},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 48, 200]},
    )
)
