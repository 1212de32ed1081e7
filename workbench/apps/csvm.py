"""Cascade SVM (thesis §5.3): fit an SVC on each piece, keep its support vectors, merge pairs, repeat.

The first layer's pieces are what the variants change: one per block (``blocks``), one per
rechunked block (``rechunk``), one per SplIter partition fitted block by block with a local
cascade (``split``) or on the concatenated partition (``split-materialized``). The cascade is
compute-bound (an SVC fit grows faster than linearly with its points), which is where the thesis
found ``rechunk`` best. Labels travel with their points: the partition's label blocks are found
by the same block indexes (``Partition.get_indexes``).
"""
from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from datasets import Dataset
from workbench.apps.placement import PersistedBlocks, rows_per_block
from workbench.apps.registry import BLOCKS_PER_WORKER, Application, register
from workbench.runtime import splitter
from workbench.runtime.session import Session
from workbench.runtime.trace import Recorder

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


def local_cascade(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Cascade a partition's per-block results down to one, inside the partition's task."""
    while len(pieces) > 1:
        pieces = [merge_support(pieces[i : i + 2]) for i in range(0, len(pieces), 2)]
    return pieces[0]


def accuracy_of(support: tuple[np.ndarray, np.ndarray], points: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.svm import SVC

    return float(SVC(**SVC_OPTIONS).fit(*support).score(points, labels))


class CSVMData(PersistedBlocks):
    """Points and labels in worker memory, cut into the same row blocks."""

    def __init__(self, session: Session, dataset: Dataset, blocks_per_worker: int):
        n = dataset.spec("points").shape[0]
        rows = rows_per_block(session, n, blocks_per_worker)
        super().__init__(session, dataset.to_dask("points", rows))
        self.placed_labels = PersistedBlocks(session, dataset.to_dask("labels", rows))
        self.check = (dataset.load("points"), dataset.load("labels"))  # the answer: accuracy on all data

    @property
    def points(self) -> da.Array:
        return self.array

    @property
    def labels(self) -> da.Array:
        return self.placed_labels.array

    def release(self) -> None:
        super().release()
        self.placed_labels.release()


def _cascade(session: Session, pieces: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Merge futures of support sets pairwise on the cluster until one remains."""
    client = session.client
    while len(pieces) > 1:
        pieces = [client.submit(merge_support, pieces[i : i + 2], pure=False) if i + 1 < len(pieces) else pieces[i]
                  for i in range(0, len(pieces), 2)]
    return session.gather(pieces[0])


def _answer(data: CSVMData, support: tuple[np.ndarray, np.ndarray]) -> float:
    return accuracy_of(support, *data.check)


def run_blocks(session: Session, data: CSVMData, recorder: Recorder) -> float:
    point_blocks = data.points.to_delayed().ravel()
    label_blocks = data.labels.to_delayed().ravel()
    import dask

    first = session.client.compute([dask.delayed(fit_support)(p, l) for p, l in zip(point_blocks, label_blocks)])
    return _answer(data, _cascade(session, first))


def run_rechunk(session: Session, data: CSVMData, recorder: Recorder) -> float:
    import dask

    rows = rows_per_block(session, data.points.shape[0])
    points, labels = data.points.rechunk((rows, -1)), data.labels.rechunk(rows)
    first = session.client.compute(
        [dask.delayed(fit_support)(p, l) for p, l in zip(points.to_delayed().ravel(), labels.to_delayed().ravel())]
    )
    return _answer(data, _cascade(session, first))


def _run_split(session: Session, data: CSVMData, recorder: Recorder, materialize: bool) -> float:
    with recorder.phase("split"):
        partitions = splitter.split(session, data.points)
    options = {"materialize": True} if materialize else {"merge": local_cascade}
    first = splitter.run_partitions(session, partitions, fit_support, with_arrays=[data.labels], **options)
    return _answer(data, _cascade(session, first))


def run_split(session: Session, data: CSVMData, recorder: Recorder) -> float:
    return _run_split(session, data, recorder, materialize=False)


def run_split_materialized(session: Session, data: CSVMData, recorder: Recorder) -> float:
    return _run_split(session, data, recorder, materialize=True)


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> CSVMData:
    return CSVMData(session, dataset, int(params.get("blocks_per_worker", 1)))


APP = register(
    Application(
        name="csvm",
        description="Cascade SVM (thesis §5.3): SVC per piece, support vectors merged pairwise",
        dataset="csvm",
        prepare=prepare,
        variants={"blocks": run_blocks, "rechunk": run_rechunk, "split": run_split, "split-materialized": run_split_materialized},
        baseline="blocks",
        grids={"ci": {"blocks_per_worker": [1, 8]}, "lab": {"blocks_per_worker": [1, 8, 48]}, "full": {"blocks_per_worker": [1, 48, 200]}},
        parameters=BLOCKS_PER_WORKER,
        # different first layers make different cascades: the same accuracy, within one percentage point
        same_answer=lambda a, b: abs(a - b) <= 0.01,
        knobs={"blocks_per_worker": [1, 2, 4, 8, 16, 48, 200]},
    )
)
