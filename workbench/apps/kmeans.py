"""k-means as the PyCOMPSs paper's Algorithm 1, one Lloyd loop under every strategy.

The points are cut into fragments that stay on the workers. Each iteration maps ``partial_sum``
over the fragments (per-centre sums and counts; the labels stay on the worker), merges the
partial results, and moves the centres; it stops when no centre moves more than ``epsilon``
(1e-9) or after ``iterations``. The fragment is read again every iteration: that reuse is what
RRO exploits, and what SplIter's materialized partitions keep in one piece.

``partial_sum`` is a PyCOMPSs-style task whose fragment is ``RRO`` (``@task(fragment=RRO)``): in
the ``files``, ``dask`` and ``rro`` variants the direction decides how the fragment reaches each
task; the other variants (``blocks``, ``rechunk``, ``split``, ``split-materialized``, ``active``,
``non-active``; thesis Listing 4.9 for the store) run the same function with their own locality,
and so do the memory-tier configurations of thesis ch. 6 (``dram``, ``mapped``, ``cached``, ``disk``,
``dynamic``, the peers ``dask-spill`` and ``memmap``: :mod:`workbench.runtime.strategies.tiers`).
A partition's fragments are summed in one kernel call (``workbench.kernels.kmeans_partial_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench import datasets, kernels
from workbench.apps.registry import Application, PlacedData, register
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Plan
from workbench.runtime.strategies.tiers import TIER_VARIANTS
from workbench.runtime.tasks import RRO, task

SHAPE_PARAMETERS = ("points", "dims", "centres", "block")


@task(fragment=RRO)
def partial_sum(fragment: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-centre sums and counts of one fragment (the labels stay on the worker)."""
    _, sums, counts = kernels.kmeans_partial(fragment, centres)
    return sums, counts


def add_partials(partials: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Add partial sums and counts (of fragments, or of a partition's fragments)."""
    sums = sum(p[0] for p in partials)
    counts = sum(p[1] for p in partials)
    return sums, counts


WORK = BlockWork(block=partial_sum, blocks=kernels.kmeans_partial_blocks, merge=add_partials)


@dataclass(kw_only=True)
class KMeansData(PlacedData):
    """Fragments of points in worker memory, the initial centres, and the stopping rule."""

    centres: np.ndarray
    iterations: int
    epsilon: float


def lloyd(plan: Plan, data: KMeansData) -> tuple[np.ndarray, int]:
    """Algorithm 1 over ``plan``: returns ``(centres, iterations run)``."""
    centres = data.centres
    for iteration in range(1, data.iterations + 1):
        # the first iteration carries the one-off costs (publishing, writing files): phase apart
        with plan.recorder.phase("first-iteration" if iteration == 1 else "later-iterations"):
            sums, counts = plan.reduce(WORK, centres)
        previous, centres = centres, kernels.kmeans_update(sums, counts, centres)
        if np.abs(centres - previous).max() <= data.epsilon:
            break
    return centres, iteration


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> KMeansData:
    """Fragments placed on the workers (``blocks_per_worker`` of them each, when given)."""
    shape = {k: int(params[k]) for k in SHAPE_PARAMETERS if k in params}
    if "blocks_per_worker" in params:  # fragments per worker, as SplIter's sweeps count them
        points = shape.get("points", dataset.spec("points").shape[0])
        shape["block"] = rows_per_block(len(session.workers()), points, int(params["blocks_per_worker"]))
    if shape:
        dataset = datasets.get(dataset.name, dataset.size, dataset.seed, **shape)
    iterations = int(params.get("iterations", dataset.params["iterations"]))
    return KMeansData(
        blocks=PlacedBlocks(session, dataset.to_dask("points")),
        centres=dataset.load("centres"),
        iterations=iterations,
        epsilon=dataset.params["epsilon"],
    )


def same_answer(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]) -> bool:
    """The same number of iterations and the same centres (to 1e-9: partial sums add in other orders)."""
    return a[1] == b[1] and bool(np.allclose(a[0], b[0], rtol=0.0, atol=1e-9))


APP = register(
    Application(
        name="kmeans",
        description="k-means, PyCOMPSs Algorithm 1: fragments RRO, centres IN; files vs dask vs rro",
        dataset="kmeans",
        prepare=prepare,
        work=WORK,
        solve=lloyd,
        strategies=[
            "files",
            "dask",
            "rro",
            "blocks",
            "rechunk",
            "split",
            "split-materialized",
            "active",
            "non-active",
            "active-split",
            *(v for v in TIER_VARIANTS if v != "non-active"),
        ],
        baseline="files",
        grids={
            "ci": {"dims": [8, 32], "iterations": [3]},
            "lab": {"dims": [16, 64, 128], "iterations": [10]},
            "full": {"dims": [64, 128], "iterations": [20]},
        },
        parameters={
            "points": "points clustered",
            "dims": "dimensions of a point",
            "centres": "clusters",
            "block": "points per fragment",
            "blocks_per_worker": "fragments per worker (sets block)",
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
