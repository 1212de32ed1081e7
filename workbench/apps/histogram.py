"""The n-dimensional histogram of a blocked point set, in five variants.

* ``blocks``: code goes to the data. One ``histogramdd`` task per block, on the worker that holds
  it, then one task adds the partial counts. Tasks = blocks, so small blocks cost scheduling.
* ``fetch``: data goes to the code. The caller gathers every block and runs the kernel itself:
  no task overhead, but every byte crosses to the client.
* ``rechunk``: Dask rechunks to one block per worker (moving data), then one task per block.
* ``split``: SplIter partitions, one per worker; each task iterates its blocks into one table.
* ``split-materialized``: the same partitions, each concatenated locally and binned in one call.
* ``active``: the blocks are objects of the active store; ``partial_histogram`` is an active
  method, run on the backend that holds each block (thesis Listing 4.7).
* ``non-active``: the same method, but each task fetches its block through the store (a copy)
  and bins it where the task runs, as an object store without active methods does.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from distributed import Future

import kernels
from datasets import Dataset
from workbench.apps.placement import PersistedBlocks, rows_per_block
from workbench.apps.registry import BLOCKS_PER_WORKER, Application, register, resized
from workbench.runtime import splitter
from workbench.runtime.session import Session
from workbench.runtime.store import ArrayBlock, active
from workbench.runtime.trace import Recorder


def sum_counts(partials: Sequence[np.ndarray]) -> np.ndarray:
    """Add per-block counts (a task body: runs on a worker)."""
    total = np.zeros_like(partials[0])
    for counts in partials:
        total += counts
    return total


def histogram_blocks(
    session: Session, block_futures: Sequence[Future], bins: int | Sequence[int], range: Sequence[tuple[float, float]]
) -> np.ndarray:
    """One ``histogramdd`` task per block future, one sum task; returns the counts."""
    if not block_futures:
        raise ValueError("no blocks: place the points first (PersistedBlocks(session, array))")
    client = session.client
    # pure=False: a repeated run is a new run, not a cache hit on the previous result.
    partials = client.map(kernels.histogramdd, block_futures, bins=bins, range=range, pure=False)
    total = client.submit(sum_counts, partials, pure=False)
    return session.gather(total)


class HistogramData(PersistedBlocks):
    """The points in worker memory, plus the bins and range of the dataset."""

    def __init__(self, session: Session, dataset: Dataset, blocks_per_worker: int):
        if blocks_per_worker < 1:
            raise ValueError(f"blocks_per_worker must be at least 1, got {blocks_per_worker}")
        n_points = dataset.spec("points").shape[0]
        super().__init__(session, dataset.to_dask("points", rows_per_block(session, n_points, blocks_per_worker)))
        self.bins = dataset.params["bins"]
        self.range = dataset.params["range"]


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> HistogramData:
    return HistogramData(session, resized(dataset, params), int(params.get("blocks_per_worker", 1)))


def run_blocks(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    return histogram_blocks(session, data.block_futures, data.bins, data.range)


def run_fetch(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    with recorder.phase("fetch"):
        start = time.time()
        blocks = session.gather(data.block_futures)
        recorder.event("transfer", start, time.time(), task="gather-blocks", nbytes=sum(b.nbytes for b in blocks), source="workers")
    with recorder.phase("compute"):
        start = time.time()
        counts = kernels.histogramdd(np.concatenate(blocks), data.bins, data.range)
        recorder.event("compute", start, time.time(), task="histogramdd", nbytes=counts.nbytes)
    return counts


def run_rechunk(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    import dask

    rechunked = data.array.rechunk((rows_per_block(session, data.array.shape[0]), -1))
    partials = [dask.delayed(kernels.histogramdd)(block, data.bins, data.range) for block in rechunked.to_delayed().ravel()]
    return session.gather(session.client.compute(dask.delayed(sum_counts)(partials)))


def histogram_of_blocks(blocks: list[np.ndarray], bins: int | Sequence[int], range: Sequence[tuple[float, float]]) -> np.ndarray:
    """A partition's task body: iterate its blocks, counting all of them into one table (the bins'
    layout worked out once for the partition, not once per block)."""
    return kernels.histogramdd_blocks(blocks, bins, range)


def _split_counts(session: Session, data: HistogramData, recorder: Recorder, materialize: bool) -> np.ndarray:
    with recorder.phase("split"):  # building partitions, reported on its own
        partitions = splitter.split(session, data.array, partitions_per_worker=1)
    with recorder.phase("compute"):
        if materialize:
            partials = splitter.run_partitions(session, partitions, kernels.histogramdd, data.bins, data.range, materialize=True)
        else:
            partials = splitter.run_partitions(session, partitions, histogram_of_blocks, data.bins, data.range)
        return session.gather(session.client.submit(sum_counts, partials, pure=False))


def run_split(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    return _split_counts(session, data, recorder, materialize=False)


def run_split_materialized(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    return _split_counts(session, data, recorder, materialize=True)


class PointsBlock(ArrayBlock):
    """A block of points in the store, able to bin itself where it lives."""

    @active
    def partial_histogram(self, bins: int | Sequence[int], range: Sequence[tuple[float, float]]) -> np.ndarray:
        return kernels.histogramdd(self.data, bins, range)


def _store_counts(session: Session, data: HistogramData, active_methods: bool) -> np.ndarray:
    blocks = data.in_store(PointsBlock)
    if active_methods:
        partials = blocks.call("partial_histogram", data.bins, data.range)
    else:
        partials = blocks.call_non_active("partial_histogram", data.bins, data.range)
    return session.gather(session.client.submit(sum_counts, partials, pure=False))


def run_active(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    return _store_counts(session, data, active_methods=True)


def run_non_active(session: Session, data: HistogramData, recorder: Recorder) -> np.ndarray:
    return _store_counts(session, data, active_methods=False)


APP = register(
    Application(
        name="histogram",
        description="5-D histogram of uniform points (thesis ch. 4-5): one task per block vs fetch to the caller",
        dataset="histogram",
        prepare=prepare,
        variants={
            "blocks": run_blocks, "fetch": run_fetch, "rechunk": run_rechunk,
            "split": run_split, "split-materialized": run_split_materialized,
            "active": run_active, "non-active": run_non_active,
        },
        baseline="blocks",
        grids={
            "ci": {"blocks_per_worker": [1, 8, 64]},
            "lab": {"blocks_per_worker": [1, 4, 16, 64, 256]},
            "full": {"blocks_per_worker": [1, 8, 48, 200]},
        },
        parameters={**BLOCKS_PER_WORKER, "points": "points binned (default: the size's)"},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 32, 64, 128, 256]},
    )
)
