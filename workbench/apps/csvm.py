"""Cascade SVM (thesis §5.3): fit an SVC on each piece, keep its support vectors, merge pairs, repeat.

The work of a piece is :func:`fit_support` on its points and their labels (an aligned array: the
labels' blocks travel with the points' blocks). The merge pools the support vectors of two pieces
and fits again (``fan_in=2``: a binary tree of merge tasks, the cascade). What the strategies
change is the first layer's pieces: one per block (``blocks``), one per rechunked block
(``rechunk``), one per SplIter partition fitted block by block with a local cascade (``split``),
or on the concatenated partition (``split-materialized``). The cascade is compute-bound (an SVC
fit grows faster than linearly with its points), which is where the thesis found ``rechunk`` best.
The answer is the accuracy on all the data of an SVC fitted on the final support vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.apps.registry import BLOCKS_PER_WORKER, Application, PlacedData, register
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Plan

SVC_OPTIONS = {"kernel": "rbf", "C": 1.0, "gamma": "scale"}


def fit_support(points: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fit an SVC and keep its support vectors (a piece with one class keeps everything)."""
    from sklearn.svm import SVC

    if np.unique(labels).size < 2:
        return points, labels
    model = SVC(**SVC_OPTIONS).fit(points, labels)
    return points[model.support_], labels[model.support_]


def merge_support(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One cascade step: pool the support vectors of several pieces and fit again."""
    return fit_support(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))


WORK = BlockWork(block=fit_support, merge=merge_support, fan_in=2)


def accuracy_of(support: tuple[np.ndarray, np.ndarray], points: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy on ``points`` of an SVC fitted on the support vectors."""
    from sklearn.svm import SVC

    return float(SVC(**SVC_OPTIONS).fit(*support).score(points, labels))


@dataclass(kw_only=True)
class CSVMData(PlacedData):
    """Points and labels in worker memory, cut into the same row blocks, and all of them to score."""

    check: tuple[np.ndarray, np.ndarray]


def solve(plan: Plan, data: CSVMData) -> float:
    """The cascade over the plan's pieces, scored on all the data."""
    return accuracy_of(plan.reduce(WORK), *data.check)


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> CSVMData:
    """Points and labels placed in the same row blocks, ``blocks_per_worker`` on each worker."""
    rows = rows_per_block(
        len(session.workers()), dataset.spec("points").shape[0], int(params.get("blocks_per_worker", 1))
    )
    return CSVMData(
        blocks=PlacedBlocks(session, dataset.to_dask("points", rows)),
        aligned=(PlacedBlocks(session, dataset.to_dask("labels", rows)),),
        check=(dataset.load("points"), dataset.load("labels")),
    )


APP = register(
    Application(
        name="csvm",
        description="Cascade SVM (thesis §5.3): SVC per piece, support vectors merged pairwise",
        dataset="csvm",
        prepare=prepare,
        work=WORK,
        solve=solve,
        strategies=["blocks", "rechunk", "split", "split-materialized"],
        baseline="blocks",
        grids={
            "ci": {"blocks_per_worker": [1, 8]},
            "lab": {"blocks_per_worker": [1, 8, 48]},
            "full": {"blocks_per_worker": [1, 48, 200]},
        },
        parameters=BLOCKS_PER_WORKER,
        # different first layers make different cascades: the same accuracy, within one percentage point
        same_answer=lambda a, b: abs(a - b) <= 0.01,
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 48, 200]},
    )
)
