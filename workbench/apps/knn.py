"""k-nearest neighbours (thesis §4.3, §5.3.4): one search tree per piece, every piece queried.

Each piece of the fit set (a block, a rechunked block, or a SplIter partition) builds a
``NearestNeighbors`` tree and answers every query with its k nearest; the caller keeps the global
k nearest. Many small pieces mean many trees, each queried with every point: O(pieces x log n)
lookups. One tree per partition brings that back towards O(log n) while no point moves. Local
row numbers become global ones through the block offsets, or ``Partition.get_item_indexes``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from datasets import Dataset
from workbench.apps.placement import PersistedBlocks, rows_per_block
from workbench.apps.registry import Application, register, resized
from workbench.runtime import splitter
from workbench.runtime.session import Session
from workbench.runtime.trace import Recorder


def nearest(points: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Fit one tree on ``points`` and return the distances and local indexes of each query's k nearest."""
    from sklearn.neighbors import NearestNeighbors

    k = min(k, len(points))
    distances, indexes = NearestNeighbors(n_neighbors=k).fit(points).kneighbors(queries)
    return distances, indexes


def nearest_in_blocks(blocks: list[np.ndarray], queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One tree for a whole partition (its blocks concatenated where they are)."""
    return nearest(np.concatenate(blocks) if len(blocks) > 1 else blocks[0], queries, k)


def top_k(pieces: list[tuple[np.ndarray, np.ndarray]], global_rows: list[np.ndarray], k: int) -> np.ndarray:
    """The k nearest over all pieces: global row indexes, nearest first."""
    distances = np.concatenate([d for d, _ in pieces], axis=1)
    rows = np.concatenate([g[i] for (_, i), g in zip(pieces, global_rows)], axis=1)
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(rows, order, axis=1)


class KNNData(PersistedBlocks):
    def __init__(self, session: Session, dataset: Dataset, blocks_per_worker: int):
        n = dataset.spec("points").shape[0]
        super().__init__(session, dataset.to_dask("points", rows_per_block(session, n, blocks_per_worker)))
        self.queries = dataset.load("queries")
        self.k = dataset.params["neighbours"]


def _offsets(chunks: tuple[int, ...]) -> list[np.ndarray]:
    starts = np.concatenate([[0], np.cumsum(chunks)[:-1]])
    return [np.arange(s, s + n) for s, n in zip(starts, chunks)]


def _per_block(session: Session, block_futures: list[Any], chunks: tuple[int, ...], data: KNNData) -> np.ndarray:
    queries = session.client.scatter(data.queries, broadcast=True, hash=False)
    pieces = session.gather(session.client.map(nearest, block_futures, queries=queries, k=data.k, pure=False))
    return top_k(pieces, _offsets(chunks), data.k)


def run_blocks(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _per_block(session, data.block_futures, data.array.chunks[0], data)


def run_rechunk(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    with recorder.phase("rechunk"):
        rechunked = PersistedBlocks(session, data.array.rechunk((rows_per_block(session, data.array.shape[0]), -1)))
    return _per_block(session, rechunked.block_futures, rechunked.array.chunks[0], data)


def _run_split(session: Session, data: KNNData, recorder: Recorder, materialize: bool) -> np.ndarray:
    with recorder.phase("split"):
        partitions = splitter.split(session, data.array)
    queries = session.client.scatter(data.queries, broadcast=True, hash=False)
    if materialize:
        futures = splitter.run_partitions(session, partitions, nearest, queries, data.k, materialize=True)
    else:
        futures = splitter.run_partitions(session, partitions, nearest_in_blocks, queries, data.k)
    return top_k(session.gather(futures), [p.get_item_indexes() for p in partitions], data.k)


def run_split(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _run_split(session, data, recorder, materialize=False)


def run_split_materialized(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _run_split(session, data, recorder, materialize=True)


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> KNNData:
    return KNNData(session, resized(dataset, params), int(params["blocks_per_worker"]))


APP = register(
    Application(
        name="knn",
        description="k nearest neighbours (thesis §4.3, §5.3.4): one tree per piece, global top k",
        dataset="knn",
        prepare=prepare,
        variants={"blocks": run_blocks, "rechunk": run_rechunk, "split": run_split, "split-materialized": run_split_materialized},
        baseline="blocks",
        grids={"ci": {"blocks_per_worker": [1, 8]}, "lab": {"blocks_per_worker": [1, 8, 48]}, "full": {"blocks_per_worker": [1, 48, 200]}},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 48, 200]},
    )
)
