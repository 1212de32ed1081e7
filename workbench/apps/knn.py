"""k-nearest neighbours (thesis §4.3, §5.3.4): one search tree per piece, every piece queried.

Each piece of the fit set (a block, a rechunked block, or a SplIter partition) builds a
``NearestNeighbors`` tree and answers every query with its k nearest; the caller keeps the global
k nearest. Many small pieces mean many trees, each queried with every point: O(pieces x log n)
lookups. One tree per partition brings that back towards O(log n) while no point moves. Local
row numbers become global ones through the block offsets, or ``Partition.get_item_indexes``.

Store variants (thesis §4.3.3, §5.3.4): the fit blocks and the query blocks are store objects.
``active`` builds one persistent ``FitStructure`` per fit block, on the block's backend, and
calls its active ``kneighbors`` with every query block: a query block on another backend has to
travel (the many-to-many pattern that made dataClay 3x slower). ``non-active`` fetches trees
and query blocks through the store to whichever worker runs each lookup. ``active-split`` builds
one structure per SplIter partition, so there are as many trees as workers, not as blocks.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from datasets import Dataset
from workbench.apps.placement import PersistedBlocks, rows_per_block
from workbench.apps.registry import BLOCKS_PER_WORKER, Application, register, resized
from workbench.runtime import splitter
from workbench.runtime.session import Session
from workbench.runtime.store import ArrayBlock, PersistentObject, active, store_for
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
        self.query_blocks: Any = None  # the queries in the store, for the store variants

    def release(self) -> None:
        if self.query_blocks is not None:
            self.query_blocks.delete()
            self.query_blocks = None
        super().release()


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


class FitStructure(PersistentObject):
    """A search tree over some fit points, with the global row number of each of its points."""

    def __init__(self, points: np.ndarray, rows: np.ndarray):
        from sklearn.neighbors import NearestNeighbors

        self.rows = np.asarray(rows, dtype=np.int64)
        self.tree = NearestNeighbors().fit(points)

    @active
    def kneighbors(self, queries: ArrayBlock, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Distances and global rows of each query's k nearest among this structure's points."""
        from copy import copy

        tree = copy(self.tree)  # thesis Listing 4.12: a shallow copy lets lookups run concurrently
        tree._tree = copy(self.tree._tree)
        distances, local = tree.kneighbors(queries.data, n_neighbors=min(k, len(self.rows)))
        return distances, self.rows[local]


def build_structure(points: np.ndarray, rows: np.ndarray) -> Any:
    """Task body: fit a tree here and persist it on this worker's backend; returns its proxy."""
    return FitStructure(points, rows).make_persistent()


def merge_top_k(pieces: list[tuple[np.ndarray, np.ndarray]], k: int) -> np.ndarray:
    """The k nearest over all structures' answers (distances, global rows): global rows, nearest first."""
    distances = np.concatenate([d for d, _ in pieces], axis=1)
    rows = np.concatenate([r for _, r in pieces], axis=1)
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(rows, order, axis=1)


def _query_blocks(session: Session, data: KNNData) -> Any:
    """The queries as store blocks, one per worker, placed round-robin (made once, untimed)."""
    if data.query_blocks is None:
        pieces = np.array_split(data.queries, len(session.workers()))
        data.query_blocks = store_for(session).persist_blocks([p for p in pieces if len(p)])
    return data.query_blocks


def _store_knn(session: Session, data: KNNData, recorder: Recorder, mode: str) -> np.ndarray:
    fit_blocks = data.in_store(ArrayBlock)
    queries = _query_blocks(session, data)
    client = session.client
    with recorder.phase("fit"):
        if mode == "active-split":
            partitions = splitter.split(session, fit_blocks)
            structures = session.gather([
                client.submit(build_structure, piece, p.get_item_indexes(), workers=[p.worker], allow_other_workers=False, pure=False)
                for p, piece in zip(partitions, splitter.run_partitions(session, partitions, _identity, materialize=True))
            ])
        else:
            rows = _offsets(fit_blocks.chunks)
            if mode == "active":  # built where each block lives
                holders = fit_blocks.holders()
                structures = session.gather([
                    client.submit(_build_on_block, b, r, workers=[w], allow_other_workers=False, pure=False)
                    for b, r, w in zip(fit_blocks, rows, holders)
                ])
            else:  # non-active: the block travels through the store to wherever the fit runs
                structures = session.gather([client.submit(_build_fetching, b, r, pure=False) for b, r in zip(fit_blocks, rows)])
    try:
        with recorder.phase("kneighbors"):
            answers = []
            for query_block in queries:
                if mode == "non-active":
                    pieces = [s.kneighbors.non_active(query_block, data.k) for s in structures]
                else:
                    pieces = [s.kneighbors(query_block, data.k) for s in structures]
                answers.append(client.submit(merge_top_k, pieces, data.k, pure=False))
            return np.concatenate(session.gather(answers))
    finally:
        store_for(session).delete(structures)


def _identity(array: np.ndarray) -> np.ndarray:
    return array


def _build_on_block(block_proxy: Any, rows: np.ndarray) -> Any:
    """Task body on the block's backend: the block is local, nothing moves."""
    from workbench.runtime.store.backend import local_backend

    _, entry = local_backend().obtain(block_proxy.ref, "fit", for_write=False)
    return build_structure(entry.obj.data, rows)


def _build_fetching(block_proxy: Any, rows: np.ndarray) -> Any:
    """Task body, non-active: fetch a copy of the block through the store, fit here."""
    from workbench.runtime.store.backend import local_backend

    return build_structure(local_backend().fetch_copy(block_proxy.ref, "fit").data, rows)


def run_active(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _store_knn(session, data, recorder, "active")


def run_non_active(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _store_knn(session, data, recorder, "non-active")


def run_active_split(session: Session, data: KNNData, recorder: Recorder) -> np.ndarray:
    return _store_knn(session, data, recorder, "active-split")


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> KNNData:
    return KNNData(session, resized(dataset, params), int(params.get("blocks_per_worker", 1)))


APP = register(
    Application(
        name="knn",
        description="k nearest neighbours (thesis §4.3, §5.3.4): one tree per piece, global top k",
        dataset="knn",
        prepare=prepare,
        variants={
            "blocks": run_blocks, "rechunk": run_rechunk, "split": run_split, "split-materialized": run_split_materialized,
            "active": run_active, "non-active": run_non_active, "active-split": run_active_split,
        },
        baseline="blocks",
        grids={"ci": {"blocks_per_worker": [1, 8]}, "lab": {"blocks_per_worker": [1, 8, 48]}, "full": {"blocks_per_worker": [1, 48, 200]}},
        parameters={**BLOCKS_PER_WORKER, "points": "points of the fit set (default: the size's)"},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 48, 200]},
    )
)
