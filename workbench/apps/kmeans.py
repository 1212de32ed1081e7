"""k-means as the PyCOMPSs paper's Algorithm 1, in the variants files, dask and rro, and in the
granularity variants of SplIter: blocks, rechunk, split and split-materialized.

The points are cut into fragments that stay on the workers. Each iteration runs one
``partial_sum`` task per fragment (labels, per-centre sums and counts; the fragment is the RRO
argument, the centres IN), merges the partial results, and moves the centres; it stops when no
centre moves more than ``epsilon`` (1e-9) or after ``iterations``. The fragment is read again
every iteration: that reuse is what RRO exploits.

In the store variants (thesis Listing 4.9) the fragments are objects of the active store:
``active`` runs ``partial_sum`` as an active method where each fragment lives; ``non-active``
fetches every fragment through the store, every iteration, to the task that computes on it.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

import datasets
import kernels
from datasets import Dataset
from workbench.apps.placement import PersistedBlocks, rows_per_block
from workbench.apps.registry import Application, per_mode, register
from workbench.runtime import splitter
from workbench.runtime.session import PinnedCall, Session
from workbench.runtime.store import ArrayBlock, active
from workbench.runtime.tasks import RRO, TaskRuntime, task
from workbench.runtime.trace import Recorder

SHAPE_PARAMETERS = ("points", "dims", "centres", "block")


@task(fragment=RRO)
def partial_sum(fragment: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-centre sums and counts of one fragment (the labels stay on the worker)."""
    _, sums, counts = kernels.kmeans_partial(fragment, centres)
    return sums, counts


def add_partials(partials: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Add partial sums and counts (of fragments, or of a partition's blocks)."""
    sums = sum(p[0] for p in partials)
    counts = sum(p[1] for p in partials)
    return sums, counts


merge = task(add_partials)


def block_partial(fragment: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain (untyped-direction) body of ``partial_sum``, for the granularity variants."""
    _, sums, counts = kernels.kmeans_partial(fragment, centres)
    return sums, counts


def partition_partial(blocks: list[np.ndarray], centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A partition's task body: the summed partial (sums, counts) of all its blocks, in one kernel
    call that iterates them (no partial result per block to allocate and add)."""
    return kernels.kmeans_partial_blocks(blocks, centres)


class KMeansData(PersistedBlocks):
    """Fragments of points in worker memory, initial centres, and the stopping rule."""

    def __init__(self, session: Session, dataset: Dataset, iterations: int, epsilon: float):
        super().__init__(session, dataset.to_dask("points"))
        self.centres = dataset.load("centres")
        self.iterations = iterations
        self.epsilon = epsilon


def kmeans(session: Session, data: KMeansData, mode: str, recorder: Recorder | None = None) -> tuple[np.ndarray, int]:
    """Run Algorithm 1 in ``mode``; returns ``(centres, iterations run)``."""
    recorder = recorder or Recorder()
    centres = data.centres
    with TaskRuntime(session, mode, recorder=recorder):
        for iteration in range(1, data.iterations + 1):
            # the first iteration carries the one-off costs (publishing, writing files): phase apart
            with recorder.phase("first-iteration" if iteration == 1 else "later-iterations"):
                partials = [partial_sum(fragment, centres) for fragment in data.block_futures]
                sums, counts = session.gather(merge(partials))
            previous, centres = centres, kernels.kmeans_update(sums, counts, centres)
            if np.abs(centres - previous).max() <= data.epsilon:
                break
    return centres, iteration


def _iterate(
    session: Session, data: KMeansData, recorder: Recorder, one_iteration: Callable[[np.ndarray], list[Any]]
) -> tuple[np.ndarray, int]:
    """Lloyd iterations where ``one_iteration(centres)`` returns futures of partial (sums, counts)."""
    centres = data.centres
    for iteration in range(1, data.iterations + 1):
        with recorder.phase("first-iteration" if iteration == 1 else "later-iterations"):
            partials = one_iteration(centres)
            sums, counts = session.gather(session.client.submit(add_partials, partials, pure=False))
        previous, centres = centres, kernels.kmeans_update(sums, counts, centres)
        if np.abs(centres - previous).max() <= data.epsilon:
            break
    return centres, iteration


def run_blocks(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """One task per fragment per iteration (plain client.map): SplIter's baseline."""
    return _iterate(session, data, recorder, lambda c: session.client.map(block_partial, data.block_futures, centres=c, pure=False))


def run_rechunk(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """Rechunk once to one block per worker (the data moves, timed), then one task per block."""
    with recorder.phase("rechunk"):
        rechunked = PersistedBlocks(session, data.array.rechunk((rows_per_block(session, data.array.shape[0]), -1)))
    return _iterate(session, data, recorder, lambda c: session.client.map(block_partial, rechunked.block_futures, centres=c, pure=False))


def run_split(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """SplIter: one task per partition per iteration, iterating its blocks in one kernel call."""
    with recorder.phase("split"):
        partitions = splitter.split(session, data.array)
    return _iterate(
        session, data, recorder,
        lambda c: splitter.run_partitions(session, partitions, partition_partial, c),
    )


def _identity(array: np.ndarray) -> np.ndarray:
    return array


def run_split_materialized(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """SplIter, each partition concatenated once on its worker, then reused every iteration."""
    with recorder.phase("split"):
        partitions = splitter.split(session, data.array)
        materialized = splitter.run_partitions(session, partitions, _identity, materialize=True)
    return _iterate(
        session, data, recorder,
        lambda c: session.submit_pinned([
            PinnedCall(block_partial, (m, c), p.worker, f"block_partial-{uuid.uuid4().hex}") for m, p in zip(materialized, partitions)
        ]),
    )


class Fragment(ArrayBlock):
    """A fragment of points in the store; its partial sum runs where it lives."""

    @active
    def partial_sum(self, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return block_partial(self.data, centres)


def run_active(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """Active methods: one ``partial_sum`` call per fragment per iteration, on its backend."""
    fragments = data.in_store(Fragment)
    return _iterate(session, data, recorder, lambda c: fragments.call("partial_sum", c))


def run_non_active(session: Session, data: KMeansData, recorder: Recorder) -> tuple[np.ndarray, int]:
    """Non-active: every iteration, each task fetches its fragment through the store."""
    fragments = data.in_store(Fragment)
    return _iterate(session, data, recorder, lambda c: fragments.call_non_active("partial_sum", c))


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> KMeansData:
    shape = {k: int(params[k]) for k in SHAPE_PARAMETERS if k in params}
    if "blocks_per_worker" in params:  # fragments per worker, as SplIter's sweeps count them
        points = shape.get("points", dataset.spec("points").shape[0])
        shape["block"] = rows_per_block(session, points, int(params["blocks_per_worker"]))
    if shape:
        dataset = datasets.get(dataset.name, dataset.size, dataset.seed, **shape)
    iterations = int(params.get("iterations", dataset.params["iterations"]))
    return KMeansData(session, dataset, iterations, dataset.params["epsilon"])


def same_answer(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]) -> bool:
    return a[1] == b[1] and bool(np.allclose(a[0], b[0], rtol=0.0, atol=1e-9))


APP = register(
    Application(
        name="kmeans",
        description="k-means, PyCOMPSs Algorithm 1: fragments RRO, centres IN; files vs dask vs rro",
        dataset="kmeans",
        prepare=prepare,
        variants={
            **per_mode(kmeans),
            "blocks": run_blocks, "rechunk": run_rechunk, "split": run_split, "split-materialized": run_split_materialized,
            "active": run_active, "non-active": run_non_active,
        },
        baseline="files",
        grids={
            "ci": {"dims": [8, 32], "iterations": [3]},
            "lab": {"dims": [16, 64, 128], "iterations": [10]},
            "full": {"dims": [64, 128], "iterations": [20]},
        },
        parameters={
            "points": "points clustered", "dims": "dimensions of a point", "centres": "clusters",
            "block": "points per fragment", "blocks_per_worker": "fragments per worker (sets block)",
            "iterations": "most Lloyd iterations (stops earlier once the centres stay put)",
        },
        same_answer=same_answer,
        knobs={
            "points": [65_536, 262_144, 1_048_576, 4_194_304],
            "dims": [8, 16, 32, 64, 96, 128],
            "centres": [1, 2, 3, 4, 5],
            "iterations": [3, 10, 20],
        },
    )
)
