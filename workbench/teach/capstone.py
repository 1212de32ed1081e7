"""Checks of lesson 08 · Capstone: each planted locality problem fixed, measured against the planted run.

A check runs the pipeline with the learner's knob (the others as planted) and compares what the
traces measured with the planted run: bytes in task messages, tasks, bytes to the client, bytes
moved. The last check runs the learner's whole fixed pipeline: same answers, every problem gone,
and the speed-up it bought. Bytes and task counts decide; times are reported (a check that passes
or fails with the machine's noise would teach nothing).
"""

from __future__ import annotations

from typing import Any

from workbench.lab import capstone
from workbench.teach.answers import AnswerError, choice, fmt
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

MESSAGES_GAIN = 10.0  # the calibration table out of the task messages: at least 10x fewer bytes
TASKS_GAIN = 4.0  # k-means over the blocks: at least 4x fewer tasks
CLIENT_GAIN = 10.0  # the statistics without the blocks at the client: at least 10x fewer bytes there
QUERIES_GAIN = 2.0  # the queries where the data is: at least 2x fewer bytes moved


def _run(session: Any, planted_run: capstone.PipelineRun, **knobs: Any) -> capstone.PipelineRun:
    try:
        pipeline = capstone.PLANTED.replace(**knobs)
    except ValueError as error:
        raise AnswerError(str(error)) from None
    return capstone.run(session, planted_run.size, pipeline)


def _total(run: capstone.PipelineRun, column: str) -> float:
    return float(run.stages[column].sum())


def _stage(run: capstone.PipelineRun, stage: str, column: str) -> float:
    return float(run.stages.loc[stage, column])


def messages_problem(planted: capstone.PipelineRun, fixed: capstone.PipelineRun) -> str | None:
    """What is still wrong with the task messages (None: fixed)."""
    before, after = _total(planted, "MB_in_task_messages"), _total(fixed, "MB_in_task_messages")
    if after * MESSAGES_GAIN > before:
        return (
            f"the scheduler still sent {fmt(after)} MB in task messages (planted: {fmt(before)} MB; aim for "
            f"{MESSAGES_GAIN:.0f}x less): the calibration table travels inside every task"
        )
    return None


def blocks_problem(planted: capstone.PipelineRun, fixed: capstone.PipelineRun) -> str | None:
    """What is still wrong with the number of k-means tasks (None: fixed)."""
    before, after = _stage(planted, "kmeans", "tasks"), _stage(fixed, "kmeans", "tasks")
    if after * TASKS_GAIN > before:
        return (
            f"k-means still ran {after:.0f} tasks (planted: {before:.0f}; aim for {TASKS_GAIN:.0f}x fewer, at most "
            f"{before / TASKS_GAIN:.0f}): each does too little work for its cost"
        )
    return None


def client_problem(planted: capstone.PipelineRun, fixed: capstone.PipelineRun) -> str | None:
    """What is still wrong with the statistics stage's bytes to the client (None: fixed)."""
    before, after = _stage(planted, "statistics", "MB_to_client"), _stage(fixed, "statistics", "MB_to_client")
    if after * CLIENT_GAIN > before:
        return (
            f"the statistics still brought {fmt(after)} MB to the client (planted: {fmt(before)} MB; aim for "
            f"{CLIENT_GAIN:.0f}x less)"
        )
    return None


def queries_problem(planted: capstone.PipelineRun, fixed: capstone.PipelineRun) -> str | None:
    """What is still wrong with the queries stage's bytes moved (None: fixed)."""
    before, after = _stage(planted, "queries", "MB_moved"), _stage(fixed, "queries", "MB_moved")
    if after * QUERIES_GAIN > before:
        why = (
            " — the calls ran where the blocks are, but each fetched the broadcast table's pieces from the other "
            "backend; a strategy that makes one call per worker's partition fetches them once per worker"
            if fixed.pipeline.queries == "active" and fixed.pipeline.calibration == "broadcast"
            else ": the blocks still travel to the code"
        )
        target = f"aim for {QUERIES_GAIN:.0f}x less"
        return f"the queries still moved {fmt(after)} MB (planted: {fmt(before)} MB; {target}){why}"
    return None


@exercise(
    "08.1",
    answers=("calibration",),
    concept="a large read-only argument should reach each worker once, not travel inside every task",
    hint="compare the column MB_in_task_messages of planted_run.stages with the size of the data; then recall how "
    "lesson 02 sends a large read-only array to the workers, and find that way among the values of "
    "capstone.CALIBRATION",
)
def calibration_fix(calibration: Any, planted_run: Any, session: Any) -> tuple:
    """The calibration table out of the task messages."""
    fixed = _run(session, planted_run, calibration=choice(calibration, "calibration", capstone.CALIBRATION))
    problem = messages_problem(planted_run, fixed)
    if problem:
        return not_yet(problem, "look at MB_in_task_messages per stage in planted_run.stages")
    return passed(
        f"task messages: {fmt(_total(planted_run, 'MB_in_task_messages'))} MB -> "
        f"{fmt(_total(fixed, 'MB_in_task_messages'))} MB; the pipeline took {fmt(planted_run.seconds)} s -> "
        f"{fmt(fixed.seconds)} s"
    )


@exercise(
    "08.2",
    answers=("blocks_per_worker", "kmeans_strategy"),
    concept="when each task is shorter than its scheduling cost, pay for fewer tasks over the same co-located blocks",
    hint="count the k-means tasks in its Gantt chart and compare each task's length with the gaps; lesson 03 makes "
    "the tasks follow the cores with bigger blocks or with one task per worker's partition (the strategies are "
    "in capstone.OPTIONS)",
)
def blocks_fix(blocks_per_worker: Any, kmeans_strategy: Any, planted_run: Any, session: Any) -> tuple:
    """k-means with far fewer tasks: bigger blocks or partitions."""
    strategy = choice(kmeans_strategy, "kmeans_strategy", capstone.OPTIONS["kmeans"])
    fixed = _run(session, planted_run, blocks_per_worker=blocks_per_worker, kmeans=strategy)
    problem = blocks_problem(planted_run, fixed)
    if problem:
        return not_yet(problem)
    return passed(
        f"k-means tasks: {_stage(planted_run, 'kmeans', 'tasks'):.0f} -> {_stage(fixed, 'kmeans', 'tasks'):.0f}; "
        f"k-means took {fmt(_stage(planted_run, 'kmeans', 'seconds'))} s -> {fmt(_stage(fixed, 'kmeans', 'seconds'))} s"
    )


@exercise(
    "08.3",
    answers=("statistics_strategy",),
    concept="a sum can be computed where each block lives; only the partial sums need to travel",
    hint="in the statistics stage's bytes-moved matrix, see who receives the bytes; the statistics are sums, so a "
    "strategy of capstone.OPTIONS that runs a task where each block is brings back only partial sums",
)
def client_fix(statistics_strategy: Any, planted_run: Any, session: Any) -> tuple:
    """The statistics computed where the blocks are, not at the client."""
    strategy = choice(statistics_strategy, "statistics_strategy", capstone.OPTIONS["statistics"])
    fixed = _run(session, planted_run, statistics=strategy)
    problem = client_problem(planted_run, fixed)
    if problem:
        return not_yet(problem, "the 'fetch' strategy gathers every block to the client")
    return passed(
        f"bytes to the client for the statistics: {fmt(_stage(planted_run, 'statistics', 'MB_to_client'))} MB -> "
        f"{fmt(_stage(fixed, 'statistics', 'MB_to_client'))} MB"
    )


@exercise(
    "08.4",
    answers=("queries_strategy",),
    concept="a search over stored blocks can run where each block is stored; only the nearest neighbours need to "
    "travel",
    hint="in the bytes-moved matrix of the queries stage, whole blocks travel between the workers; lesson 04's "
    "active methods run the search where each store object lives (the strategies are in capstone.OPTIONS)",
)
def queries_fix(queries_strategy: Any, planted_run: Any, session: Any) -> tuple:
    """The nearest-neighbour search run where the data is."""
    strategy = choice(queries_strategy, "queries_strategy", capstone.OPTIONS["queries"])
    fixed = _run(session, planted_run, queries=strategy)
    problem = queries_problem(planted_run, fixed)
    if problem:
        return not_yet(problem)
    return passed(
        f"bytes moved by the queries: {fmt(_stage(planted_run, 'queries', 'MB_moved'))} MB -> "
        f"{fmt(_stage(fixed, 'queries', 'MB_moved'))} MB"
    )


@exercise(
    "08.5",
    answers=("fixed",),
    concept="the fixes work together: each removes one cost, and one of them changes which strategy suits another",
    hint="fixed = capstone.Pipeline(...) with the four fixes you found; check that every one is gone together",
)
def whole_pipeline(fixed: Any, planted_run: Any, session: Any) -> tuple:
    """Every problem fixed at once: the same answers, and the speed-up measured."""
    if not isinstance(fixed, capstone.Pipeline):
        return not_yet(f"fixed should be a capstone.Pipeline(...), got {type(fixed).__name__}")
    run = capstone.run(session, planted_run.size, fixed)
    differences = capstone.same_answers(planted_run, run)
    if differences:
        return not_yet("the fixed pipeline computes something else: " + ", ".join(differences))
    problems = [
        p
        for p in (
            messages_problem(planted_run, run),
            blocks_problem(planted_run, run),
            client_problem(planted_run, run),
            queries_problem(planted_run, run),
        )
        if p
    ]
    if problems:
        return not_yet(f"{len(problems)} of the 4 problems remain: " + "; ".join(problems))
    per_stage = ", ".join(
        f"{stage} {fmt(_stage(planted_run, stage, 'seconds') / max(_stage(run, stage, 'seconds'), 1e-9))}x"
        for stage in capstone.STAGES
    )
    return passed(
        f"same answers, all four problems gone; {fmt(planted_run.seconds)} s -> {fmt(run.seconds)} s, "
        f"{fmt(planted_run.seconds / run.seconds)}x faster on this run ({per_stage}); bytes moved "
        f"{fmt(_total(planted_run, 'MB_moved'))} -> {fmt(_total(run, 'MB_moved'))} MB, in task messages "
        f"{fmt(_total(planted_run, 'MB_in_task_messages'))} -> {fmt(_total(run, 'MB_in_task_messages'))} MB"
    )
