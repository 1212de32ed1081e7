"""The capstone pipeline: sensor readings calibrated, standardised, clustered (k-means) and queried
(k nearest neighbours), over a blocked dataset, with four locality problems planted in it.

Every stage is one :class:`~workbench.runtime.strategies.BlockWork` run by a registered strategy,
so the problems are knobs of a :class:`Pipeline`, not separate code paths:

- ``calibration="argument"``: the calibration table (a large read-only array) travels inside every
  task's message; ``"broadcast"`` sends it to each worker once.
- ``blocks_per_worker=32``: blocks far too small for the work in them; fewer blocks, or the
  ``split`` strategy (one task per worker's partition), fix it.
- ``statistics="fetch"``: the standardisation statistics gather every block to the client;
  ``"blocks"`` or ``"split"`` compute partial sums where the blocks are.
- ``queries="non-active"``: the nearest-neighbour search fetches every block's store object to
  wherever the task runs; ``"active"`` (or ``"active-split"``) runs the search where the data is.

:func:`run` times each stage and records what the workbench's traces see: tasks, bytes moved
between processes (to the client included) and bytes the scheduler sent to workers in task
messages. The answers are the same whatever the knobs (checked by :func:`same_answers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from workbench import datasets, kernels
from workbench.apps import kmeans, knn
from workbench.lab.runner import traced_call
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.counts import task_message_bytes
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Broadcast

STAGES = ("statistics", "kmeans", "queries")
CALIBRATION = ("argument", "broadcast")
OPTIONS = {
    "statistics": ("fetch", "blocks", "split"),
    "kmeans": ("blocks", "rechunk", "split"),
    "queries": ("non-active", "active", "active-split", "blocks", "split"),
}
MAX_BLOCKS_PER_WORKER = 1024


@dataclass(frozen=True)
class Pipeline:
    """How the pipeline runs: the defaults are the planted problems (:data:`PLANTED`)."""

    blocks_per_worker: int = 32
    calibration: str = "argument"
    statistics: str = "fetch"
    kmeans: str = "blocks"
    queries: str = "non-active"

    def __post_init__(self) -> None:
        bpw = self.blocks_per_worker
        if isinstance(bpw, bool) or not isinstance(bpw, (int, np.integer)) or not 1 <= bpw <= MAX_BLOCKS_PER_WORKER:
            raise ValueError(f"blocks_per_worker must be an integer from 1 to {MAX_BLOCKS_PER_WORKER}, got {bpw!r}")
        if not isinstance(self.calibration, str) or self.calibration not in CALIBRATION:
            raise ValueError(f"calibration must be one of {CALIBRATION}, got {self.calibration!r}")
        for stage, options in OPTIONS.items():
            if not isinstance(getattr(self, stage), str) or getattr(self, stage) not in options:
                raise ValueError(f"{stage} must be one of the strategies {options}, got {getattr(self, stage)!r}")

    def replace(self, **changes: Any) -> Pipeline:
        """This pipeline with some knobs changed."""
        return replace(self, **changes)


PLANTED = Pipeline()


# -- the work of one block, per stage ------------------------------------------------------------
def calibrate(raw: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Features of raw rows: ``(reading - offset[sensor]) * gain[sensor]``; the table holds the offsets
    of every sensor, then their gains (column 0 of a raw row is its sensor id)."""
    sensors = table.shape[0] // 2
    ids = raw[:, 0].astype(np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= sensors):
        raise ValueError(f"sensor ids must be in [0, {sensors}), got {ids.min()}..{ids.max()}")
    return (raw[:, 1:] - table[ids]) * table[sensors + ids]


def moments(raw: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Count, sum and sum of squares of each feature of a block (3 x features)."""
    features = calibrate(raw, table)
    return np.stack([np.full(features.shape[1], float(len(features))), features.sum(0), (features**2).sum(0)])


def add(partials: list[np.ndarray]) -> np.ndarray:
    """Element-wise sum of partial moments."""
    return np.sum(partials, axis=0)


def standardised(raw: np.ndarray, table: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Calibrated features, each column centred on its mean and divided by its deviation (``scale``:
    the means, then the deviations)."""
    return (calibrate(raw, table) - scale[0]) / scale[1]


def cluster_sums(raw: np.ndarray, table: np.ndarray, scale: np.ndarray, centres: np.ndarray) -> Any:
    """k-means partial sums and counts of a block's standardised features (the k-means app's kernel)."""
    _, sums, counts = kernels.kmeans_partial(standardised(raw, table, scale), centres)
    return sums, counts


def nearest_rows(
    raw: np.ndarray, table: np.ndarray, scale: np.ndarray, queries: np.ndarray, k: int, *, rows: np.ndarray
) -> knn.Neighbours:
    """Each query's k nearest standardised rows of a block (``rows``: their global row numbers)."""
    return knn.nearest(standardised(raw, table, scale), queries, k, rows=rows)


STATISTICS = BlockWork(block=moments, merge=add)
CLUSTERS = BlockWork(block=cluster_sums, merge=kmeans.add_partials)
QUERIES = BlockWork(block=nearest_rows, merge=knn.merge_nearest, with_rows=True)


# -- one run --------------------------------------------------------------------------------------
@dataclass
class Answers:
    """What the pipeline computes: feature scale, cluster centres, and each query's nearest rows."""

    scale: np.ndarray
    centres: np.ndarray
    distances: np.ndarray
    rows: np.ndarray


@dataclass
class PipelineRun:
    """One timed run: the pipeline, its answers, one row per stage (``reused``: taken from another run,
    not run again), each stage's trace, each stage's result as it returned it (``found``: what a later
    run that reuses this one's stage reads), and the dataset's seed."""

    pipeline: Pipeline
    size: str
    answers: Answers
    stages: pd.DataFrame
    traces: dict[str, pd.DataFrame] = field(default_factory=dict)
    found: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    @property
    def seconds(self) -> float:
        """Seconds of the three stages together."""
        return float(self.stages["seconds"].sum())


def _stage_row(stage: str, strategy: str, seconds: float, frame: pd.DataFrame, sent: int) -> dict[str, Any]:
    from workbench.runtime import trace

    on_workers = (frame["action"] == "compute") & (frame["worker"] != trace.CLIENT)
    on_workers_side = frame["worker"] != trace.CLIENT
    return {
        "stage": stage,
        "strategy": strategy,
        "seconds": seconds,
        "tasks": int(on_workers.sum()),
        "MB_moved": float(frame.loc[frame["action"] == "transfer", "bytes"].sum()) / 1e6,
        "MB_to_client": float(frame.loc[(frame["action"] == "transfer") & ~on_workers_side, "bytes"].sum()) / 1e6,
        "MB_in_task_messages": sent / 1e6,
    }


def _stages_to_run(stages: Sequence[str], reuse: PipelineRun | None, size: str, seed: int) -> tuple[str, ...]:
    """``stages`` checked: known names, and a run to take the others from, of the same data."""
    if isinstance(stages, str) or not set(stages) <= set(STAGES) or not stages:
        raise ValueError(f"stages must be some of {STAGES}, got {stages!r}")
    if set(stages) != set(STAGES):
        if not isinstance(reuse, PipelineRun):
            raise ValueError(
                f"running only the stages {tuple(stages)} needs reuse=, a run of the whole pipeline to take "
                "the other stages from (the planted run)"
            )
        if (reuse.size, reuse.seed) != (size, seed):
            raise ValueError(
                f"reuse= is a run of size {reuse.size!r} and seed {reuse.seed}; this run is of size {size!r} and "
                f"seed {seed}: its stages would describe other data"
            )
    return tuple(s for s in STAGES if s in stages)


def run(
    session: Session,
    size: str = "ci",
    pipeline: Pipeline = PLANTED,
    seed: int = 0,
    stages: Sequence[str] = STAGES,
    reuse: PipelineRun | None = None,
) -> PipelineRun:
    """Run the pipeline once on the ``sensors`` dataset at ``size``; each stage timed and traced.

    The readings are placed first, ``pipeline.blocks_per_worker`` blocks per worker (not timed: the
    data arrives blocked so); the blocks are released at the end, whatever happens.

    ``stages``: the stages to run; the others are taken from ``reuse`` (a run of the whole pipeline
    at the same size and seed: its rows, traces and answers, marked ``reused`` in the stages table).
    A stage's answers do not depend on the knobs, so a later stage reads an earlier one's answer from
    ``reuse`` when that stage is not run: a lesson 08 check that changes one stage's knob runs that
    stage alone (a third of the time).
    """
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"pipeline must be a capstone.Pipeline, got {type(pipeline).__name__}")
    to_run = _stages_to_run(stages, reuse, size, seed)
    dataset = datasets.get("sensors", size, seed=seed)
    n_rows = dataset.spec("readings").shape[0]
    rows = rows_per_block(len(session.workers()), n_rows, int(pipeline.blocks_per_worker))
    table, centres = dataset.load("calibration"), dataset.load("centres")
    queries, k = dataset.load("queries"), int(dataset.params["neighbours"])
    table_arg = Broadcast(table) if pipeline.calibration == "broadcast" else table
    placed = PlacedBlocks(session, dataset.to_dask("readings", rows), "sensor readings")
    stages: list[dict[str, Any]] = []
    traces: dict[str, pd.DataFrame] = {}
    found: dict[str, Any] = {}

    def stage(name: str, body: Any) -> None:
        if name not in to_run:
            assert reuse is not None  # _stages_to_run holds it
            found[name] = reuse.found[name]
            stages.append({**reuse.stages.loc[name].to_dict(), "stage": name, "reused": True})
            traces[name] = reuse.traces[name]
            return
        strategy = getattr(pipeline, name)
        before = task_message_bytes(session)

        def call(recorder: Any) -> Any:
            with strategies.get(strategy).open(session, placed, recorder) as plan:
                return body(plan)

        found[name], seconds, _, frame = traced_call(session, call)
        stages.append(
            {**_stage_row(name, strategy, seconds, frame, task_message_bytes(session) - before), "reused": False}
        )
        traces[name] = frame

    def statistics(plan: Any) -> np.ndarray:
        count, total, squares = plan.reduce(STATISTICS, table_arg)
        mean = total / count
        return np.stack([mean, np.sqrt(np.maximum(squares / count - mean**2, 1e-300))])

    try:
        stage("statistics", statistics)
        scale = found["statistics"]

        def lloyd(plan: Any) -> np.ndarray:
            current = centres.copy()
            for _ in range(int(dataset.params["iterations"])):
                sums, counts = plan.reduce(CLUSTERS, table_arg, scale, current)
                current = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], current)
            return current

        stage("kmeans", lloyd)
        features_of_queries = standardised(queries, table, scale)
        stage("queries", lambda plan: plan.reduce(QUERIES, table_arg, scale, features_of_queries, k))
    finally:
        placed.release()
    nearest = found["queries"]
    answers = Answers(scale, found["kmeans"], nearest.distances, nearest.rows)
    return PipelineRun(pipeline, size, answers, pd.DataFrame(stages).set_index("stage"), traces, found, seed)


def same_answers(a: PipelineRun, b: PipelineRun) -> list[str]:
    """What differs between two runs' answers (empty: the same, to rounding of the merge order)."""
    differences = []
    if not np.allclose(a.answers.scale, b.answers.scale, rtol=1e-9, atol=1e-12, equal_nan=True):
        differences.append("the feature scale (statistics)")
    if not np.allclose(a.answers.centres, b.answers.centres, rtol=1e-6, atol=1e-9, equal_nan=True):
        differences.append("the cluster centres (k-means)")
    same_distances = np.allclose(a.answers.distances, b.answers.distances, rtol=1e-9, atol=1e-12, equal_nan=True)
    # rows may differ only where two neighbours are at the same distance (a tie: either order is right)
    tied = np.isclose(a.answers.distances[:, 1:], a.answers.distances[:, :-1], rtol=1e-12, atol=0)
    tied = np.pad(tied, ((0, 0), (0, 1))) | np.pad(tied, ((0, 0), (1, 0)))
    if not same_distances or ((a.answers.rows != b.answers.rows) & ~tied).any():
        differences.append("the nearest neighbours (queries)")
    return differences


def compare(planted: PipelineRun, fixed: PipelineRun) -> pd.DataFrame:
    """Per stage and in all: seconds, tasks, MB moved (to the client among them) and MB in task messages,
    planted next to fixed,
    with the ratio planted / fixed (above 1: the fix gained)."""
    columns = ["seconds", "tasks", "MB_moved", "MB_to_client", "MB_in_task_messages"]
    a, b = planted.stages[columns].copy(), fixed.stages[columns].copy()
    a.loc["all"], b.loc["all"] = a.sum(), b.sum()
    table = pd.concat({"planted": a, "fixed": b}, axis=1)
    for column in columns:
        table[("planted / fixed", column)] = a[column] / b[column].where(b[column] > 0, np.nan)
    return table
