"""Checks of lesson 08 · Capstone: each planted locality problem fixed, measured against the planted run.

A check runs the pipeline with the learner's knob (the others as planted) and compares what the
traces measured with the planted run; a check of one stage's problem (08.2-08.4) runs that stage
alone and takes the others from the planted run: bytes in task messages, tasks, bytes to the client, bytes
moved. The last check runs the learner's whole fixed pipeline: same answers, every problem gone,
and the speed-up it bought. Bytes and task counts decide; times are reported (a check that passes
or fails with the machine's noise would teach nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.lab import capstone
from workbench.teach.answers import AnswerError, choice, fmt
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise
from workbench.units import ratio_text

MESSAGES_GAIN = 10.0  # the calibration table out of the task messages: at least 10x fewer bytes
TASKS_GAIN = 4.0  # k-means over the blocks: at least 4x fewer tasks
CLIENT_GAIN = 10.0  # the statistics without the blocks at the client: at least 10x fewer bytes there
QUERIES_GAIN = 2.0  # the queries where the data is: at least 2x fewer bytes moved


def _run(
    session: Any, planted_run: capstone.PipelineRun, stages: tuple[str, ...] = capstone.STAGES, **knobs: Any
) -> capstone.PipelineRun:
    """The pipeline with the learner's ``knobs`` (the others as planted); only ``stages`` run, the
    others are the planted run's: a check of one stage's problem measures that stage alone."""
    try:
        pipeline = capstone.PLANTED.replace(**knobs)
    except ValueError as error:
        raise AnswerError(str(error)) from None
    if not isinstance(planted_run, capstone.PipelineRun):
        raise AnswerError(
            f"planted_run should be the lesson's capstone.run(...) result, got {type(planted_run).__name__}"
        )
    return capstone.run(session, planted_run.size, pipeline, planted_run.seed, stages=stages, reuse=planted_run)


def _total(run: capstone.PipelineRun, column: str) -> float:
    return float(run.stages[column].sum())


def _stage(run: capstone.PipelineRun, stage: str, column: str) -> float:
    return float(run.stages.loc[stage, column])


@dataclass(frozen=True)
class Problem:
    """A planted problem as the traces measure it: ``column`` of ``stage`` (of every stage summed when
    None) must fall at least ``gain`` times from the planted run to the fixed one; ``says(before,
    after, fixed)`` is what is still wrong when it did not."""

    stage: str | None
    column: str
    gain: float
    says: Callable[[float, float, capstone.PipelineRun], str]

    def measure(self, run: capstone.PipelineRun) -> float:
        """What the traces of ``run`` measured of this problem."""
        return _total(run, self.column) if self.stage is None else _stage(run, self.stage, self.column)

    def left(self, planted: capstone.PipelineRun, fixed: capstone.PipelineRun) -> str | None:
        """What is still wrong in ``fixed`` against ``planted`` (None: fixed)."""
        before, after = self.measure(planted), self.measure(fixed)
        return self.says(before, after, fixed) if after * self.gain > before else None


def _queries_says(before: float, after: float, fixed: capstone.PipelineRun) -> str:
    """The queries still move blocks: why, when the calls run where the blocks are but fetch the table."""
    why = (
        " — the calls ran where the blocks are, but each fetched the broadcast table's pieces from the other "
        "backend; a strategy that makes one call per worker's partition fetches them once per worker"
        if fixed.pipeline.queries == "active" and fixed.pipeline.calibration == "broadcast"
        else ": the blocks still travel to the code"
    )
    return f"the queries still moved {fmt(after)} MB (planted: {fmt(before)} MB; aim for {QUERIES_GAIN:.0f}x less){why}"


MESSAGES = Problem(
    None,
    "MB_in_task_messages",
    MESSAGES_GAIN,
    lambda before, after, _: (
        f"the scheduler still sent {fmt(after)} MB in task messages (planted: {fmt(before)} MB; aim for "
        f"{MESSAGES_GAIN:.0f}x less): the calibration table travels inside every task"
    ),
)
BLOCKS = Problem(
    "kmeans",
    "tasks",
    TASKS_GAIN,
    lambda before, after, _: (
        f"k-means still ran {after:.0f} tasks (planted: {before:.0f}; aim for {TASKS_GAIN:.0f}x fewer, at most "
        f"{before / TASKS_GAIN:.0f}): each does too little work for its cost"
    ),
)
CLIENT = Problem(
    "statistics",
    "MB_to_client",
    CLIENT_GAIN,
    lambda before, after, _: (
        f"the statistics still brought {fmt(after)} MB to the client (planted: {fmt(before)} MB; aim for "
        f"{CLIENT_GAIN:.0f}x less)"
    ),
)
QUERIES = Problem("queries", "MB_moved", QUERIES_GAIN, _queries_says)
PROBLEMS = (MESSAGES, BLOCKS, CLIENT, QUERIES)  # the four planted problems, in the lesson's order


def _verdict(
    problem: Problem, planted_run: capstone.PipelineRun, fixed: capstone.PipelineRun, done: str, hint: str = ""
) -> tuple:
    """One fix's verdict: not yet, with what is still wrong (and ``hint``), or passed, with ``done``
    (what the fix changed, as measured)."""
    left = problem.left(planted_run, fixed)
    return not_yet(left, hint) if left else passed(done)


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
    done = (
        f"task messages: {fmt(MESSAGES.measure(planted_run))} MB -> {fmt(MESSAGES.measure(fixed))} MB; "
        f"the pipeline took {fmt(planted_run.seconds)} s -> {fmt(fixed.seconds)} s"
    )
    return _verdict(MESSAGES, planted_run, fixed, done, "look at MB_in_task_messages per stage in planted_run.stages")


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
    fixed = _run(session, planted_run, ("kmeans",), blocks_per_worker=blocks_per_worker, kmeans=strategy)
    done = (
        f"k-means tasks: {BLOCKS.measure(planted_run):.0f} -> {BLOCKS.measure(fixed):.0f}; "
        f"k-means took {fmt(_stage(planted_run, 'kmeans', 'seconds'))} s -> {fmt(_stage(fixed, 'kmeans', 'seconds'))} s"
    )
    return _verdict(BLOCKS, planted_run, fixed, done)


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
    fixed = _run(session, planted_run, ("statistics",), statistics=strategy)
    done = f"bytes to the client for the statistics: {fmt(CLIENT.measure(planted_run))} MB -> "
    done += f"{fmt(CLIENT.measure(fixed))} MB"
    return _verdict(CLIENT, planted_run, fixed, done, "the 'fetch' strategy gathers every block to the client")


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
    fixed = _run(session, planted_run, ("queries",), queries=strategy)
    done = f"bytes moved by the queries: {fmt(QUERIES.measure(planted_run))} MB -> {fmt(QUERIES.measure(fixed))} MB"
    return _verdict(QUERIES, planted_run, fixed, done)


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
    problems = [p for p in (problem.left(planted_run, run) for problem in PROBLEMS) if p]
    if problems:
        return not_yet(f"{len(problems)} of the 4 problems remain: " + "; ".join(problems))
    per_stage = ", ".join(
        f"{stage} {ratio_text(_stage(planted_run, stage, 'seconds') / max(_stage(run, stage, 'seconds'), 1e-9))}"
        for stage in capstone.STAGES
    )
    return passed(
        f"same answers, all four problems gone; {fmt(planted_run.seconds)} s -> {fmt(run.seconds)} s, planted / "
        f"fixed time {ratio_text(planted_run.seconds / run.seconds)} ({per_stage}) in one run of each, which has no "
        "interval: the bytes and tasks decide, not the time; bytes moved "
        f"{fmt(_total(planted_run, 'MB_moved'))} -> {fmt(_total(run, 'MB_moved'))} MB, in task messages "
        f"{fmt(_total(planted_run, 'MB_in_task_messages'))} -> {fmt(_total(run, 'MB_in_task_messages'))} MB"
    )


# -- the diagnosis (workbench.locality) of the planted pipeline and of the learner's ------------------------------
# The kind of finding workbench.locality names each planted problem by, in the order the exercises take them.
PLANTED_KINDS = ("repeated-argument", "tiny-tasks", "gather-to-client", "remote-reads")
# Task groups every run of the pipeline has, whatever its knobs (its k-means and query stages' merges): a
# report without them observed other work than the pipeline.
PIPELINE_GROUPS = ("add_partials", "merge_nearest")
DIAGNOSIS_SIZE = "ci"  # the diagnosed runs: the same four problems on the smallest data, seconds each


def diagnose(session: Any, pipeline: capstone.Pipeline = capstone.PLANTED, size: str = DIAGNOSIS_SIZE) -> Any:
    """``pipeline`` run once at ``size`` inside :func:`workbench.locality.observe`: its report."""
    from workbench.locality import observe

    if not isinstance(pipeline, capstone.Pipeline):
        raise TypeError(f"pipeline must be a capstone.Pipeline, got {type(pipeline).__name__}")
    with observe(session) as seen:
        capstone.run(session, size, pipeline)
    return seen.report


@exercise(
    "08.6",
    answers=("diagnosis",),
    concept="a tool that reads the evidence you read names every problem left in a pipeline, and nothing in one "
    "with all four fixed",
    hint="run your fixed pipeline of exercise 5 at size ci inside the with block of observe(session), then take "
    "the observation's report once the block is done; its findings name any problem left, each with its remedy",
)
def diagnosis_of_yours(diagnosis: Any) -> tuple:
    """The learner's fixed pipeline, diagnosed: no finding left."""
    from workbench.locality import Report
    from workbench.locality.observe import Observation

    if isinstance(diagnosis, Observation):
        return not_yet("diagnosis is the observation itself: give its report, `seen.report`, read after the with block")
    if not isinstance(diagnosis, Report):
        return not_yet(
            f"diagnosis should be the report of observe(session), `seen.report` after the with block, got "
            f"{type(diagnosis).__name__}"
        )
    tasks = int(diagnosis.counts.get("tasks", 0))
    if tasks == 0:
        return not_yet('the observed block ran no Dask work: put `capstone.run(session, "ci", fixed)` inside it')
    ran = set(diagnosis.records["task"]) if not diagnosis.records.empty else set()
    missing = [group for group in PIPELINE_GROUPS if group not in ran]
    if missing:
        return not_yet(
            f"the observed block ran {tasks} tasks, but not the capstone pipeline (no {' or '.join(missing)} "
            'tasks): put `capstone.run(session, "ci", fixed)` inside it, with your fixed pipeline of exercise 5'
        )
    if diagnosis.findings:
        first = diagnosis.findings[0]
        planted = " (all four planted problems: was it capstone.PLANTED that ran, not your `fixed`?)"
        return not_yet(
            f"the diagnosis names {', '.join(diagnosis.kinds())}"
            f"{planted if set(PLANTED_KINDS) <= set(diagnosis.kinds()) else ''}: {first.summary}",
            f"{first.remedy} Change that knob in exercise 5's pipeline, then run its cells and these again.",
        )
    return passed(
        f"no finding in {tasks} tasks over {diagnosis.seconds:.2g} s: the tool sees every planted problem gone too"
    )


def diagnosis_summary(report: Any, planted: tuple[str, ...] = PLANTED_KINDS) -> str:
    """What the diagnosis named against what was planted: each planted kind named or not (with the
    threshold its evidence stayed under), and any kind it found that was not planted."""
    from workbench.locality import THRESHOLDS

    found = report.kinds()
    named = [k for k in planted if k in found]
    lines = [f"the diagnosis named {len(named)} of the {len(planted)} planted problems: {', '.join(named) or 'none'}"]
    for kind in (k for k in planted if k not in found):
        limits = ", ".join(f"{name} {value:g}" for name, value in THRESHOLDS.get(kind, {}).items())
        lines.append(f"not named: {kind} (its evidence in this run stayed under a threshold: {limits})")
    lines += [f"named, not planted: {kind}" for kind in found if kind not in planted]
    return "\n".join(lines)
