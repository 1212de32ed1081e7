"""``workbench bench splitter``: one task per block, rechunk and SplIter at 1, 48 and 200 blocks per core.

The histogram (5-D) and k-means (10 iterations) on numba kernels, so the scheduling cost is what
shows. Each variant's mean time is divided by ``split``'s (ratios above 1: slower than split).
One worker process per core, one thread each, so blocks per worker = blocks per core. Each
(application, blocks per core) point is one experiment of the runner: one step of the progress bar.

Beside the times, the counts that predict scale (:mod:`workbench.runtime.counts`): tasks and
dependencies submitted per iteration, scheduler-worker messages and bytes moved between workers.
Their goal holds on any machine: split's tasks + dependencies per k-means iteration stay within 3 per
partition + 1 whatever the blocks per core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench import machine
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, setting, table, text
from workbench.datasets import SIZES
from workbench.lab.runner import run_experiment
from workbench.runtime.session import Session

VARIANTS = ("blocks", "rechunk", "split", "split-materialized")
# (app, blocks per core, other variant, minimum of other / split): printed next to the figures, never asserted
GOALS = (
    ("histogram", 48, "blocks", 5.0),
    ("histogram", 200, "blocks", 5.0),
    ("histogram", 48, "rechunk", 1.0),
    ("histogram", 200, "rechunk", 1.0),
    ("kmeans", 48, "rechunk", 1.0),
    ("kmeans", 200, "rechunk", 1.0),
)
AT_ONE_BLOCK = ("histogram", "kmeans")  # split within 5 % of blocks at 1 block per core
AT_MOST_SLOWER = 1.05
# apps whose iterations map the same partitions again: split's count per iteration follows the partitions
ITERATIVE = ("kmeans",)
# k-means: split within 10 % of split-materialized at every blocks per core (issue 36)
NEAR_MATERIALIZED = ("kmeans", 1.10)


def _point_rows(session: Session, app: str, bpc: int, size: str, repeats: int) -> list[dict[str, Any]]:
    """Every variant of ``app`` at ``bpc`` blocks per core: mean seconds, each run's, tasks, ratio to split."""
    experiment = run_experiment(
        session,
        app,
        variants=list(VARIANTS),
        size=size,
        grid={"blocks_per_worker": [bpc]},
        repeats=repeats,
        max_repeats=repeats,  # a fixed count: the benchmark's time is budgeted
        trace=True,
        progress=False,
        baseline="split",
    )
    means = experiment.summary(phases=True).set_index("variant")
    split_seconds = means.loc["split", "mean_s"]
    workers = len(session.workers())
    rows = []
    for variant, row in means.iterrows():
        building = row.get("phase_split_s")
        rows.append(
            {
                "app": app,
                "blocks_per_core": int(bpc),
                "variant": variant,
                "seconds": float(row["mean_s"]),
                "runs_s": [float(s) for s in experiment.runs(variant)["seconds"]],
                "tasks": float(row["tasks"]),
                "ratio_to_split": float(row["mean_s"] / split_seconds),
                "partition_building_s": None if building is None or building != building else float(building),
                "workers": workers,
                **per_iteration(experiment.runs(variant)),
            }
        )
    return rows


def per_iteration(runs: Any) -> dict[str, float]:
    """Counts per iteration, the mean of ``runs`` (the runner's traced result rows): tasks and
    dependencies submitted in an iteration after the first (k-means' ``later-iterations`` phase: what
    every iteration costs once the plan is open), or in the whole run for a one-pass application;
    scheduler-worker messages and bytes moved between workers, the run's over its iterations."""
    later = "phase_later-iterations_n"
    if later in runs and runs[later].notna().all():
        n = runs[later]
        tasks = runs["phase_later-iterations_tasks"] / n
        deps = runs["phase_later-iterations_dependencies"] / n
        first = runs["phase_first-iteration_n"].fillna(0) if "phase_first-iteration_n" in runs else 0
        iterations = n + first
    else:
        tasks, deps, iterations = runs["submitted_tasks"], runs["dependencies"], runs["seconds"] * 0 + 1
    return {
        "iterations": float(iterations.mean()),
        "tasks_per_iteration": float(tasks.mean()),
        "dependencies_per_iteration": float(deps.mean()),
        "messages_per_iteration": float((runs["messages"] / iterations).mean()),
        "bytes_moved_per_iteration": float((runs["bytes_transferred"] / iterations).mean()),
    }


def splitter_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The goals (:data:`GOALS`, :data:`AT_ONE_BLOCK`) of the points in ``rows``; those not run are left out."""
    by_key = {(r["app"], r["blocks_per_core"], r["variant"]): r for r in rows}
    goals = []
    for app, bpc, variant, minimum in GOALS:
        other, split = by_key.get((app, bpc, variant)), by_key.get((app, bpc, "split"))
        if other and split:
            goals.append(
                goal(
                    f"{app} at {bpc} blocks/core: {variant} / split",
                    other["seconds"] / split["seconds"],
                    minimum,
                    peers={variant: other["seconds"], "split": split["seconds"]},
                    noise=ratio_noise(other["runs_s"], split["runs_s"]),
                )
            )
    for r in rows:
        if r["app"] in ITERATIVE and r["variant"] == "split" and "tasks_per_iteration" in r:
            partitions = r["workers"]  # split: one partition per worker
            goals.append(
                goal(
                    f"{r['app']} at {r['blocks_per_core']} blocks/core: split's tasks + dependencies per iteration "
                    "at most 3 per partition + 1 (its task, its one dependency, its partial's merge)",
                    r["tasks_per_iteration"] + r["dependencies_per_iteration"],
                    3 * partitions + 1,
                    better="lower",
                    unit="tasks + deps",
                    peers={"tasks": r["tasks_per_iteration"], "dependencies": r["dependencies_per_iteration"]},
                    peer_unit="per iteration",
                )
            )
    for app in AT_ONE_BLOCK:
        blocks, split = by_key.get((app, 1, "blocks")), by_key.get((app, 1, "split"))
        if blocks and split:
            name = f"{app} at 1 block/core: split at most 5 % slower than blocks (split / blocks)"
            goals.append(_split_against(name, split, "blocks", blocks, AT_MOST_SLOWER))
    app, most = NEAR_MATERIALIZED
    for (a, bpc, variant), split in sorted(by_key.items()):
        materialized = by_key.get((a, bpc, "split-materialized"))
        if a == app and variant == "split" and materialized:
            name = f"{app} at {bpc} blocks/core: split within 10 % of split-materialized (split / materialized)"
            goals.append(_split_against(name, split, "split-materialized", materialized, most))
    return goals


def _split_against(name: str, split: dict[str, Any], peer: str, other: dict[str, Any], most: float) -> dict[str, Any]:
    """The goal that ``split``'s time is at most ``most`` times the ``peer`` variant's (``other``)."""
    return goal(
        name,
        split["seconds"] / other["seconds"],
        most,
        better="lower",
        peers={"split": split["seconds"], peer: other["seconds"]},
        noise=ratio_noise(split["runs_s"], other["runs_s"]),
    )


def run(
    size: str = "lab",
    repeats: int = 3,
    blocks_per_core: Sequence[int] = (1, 48, 200),
    apps: Sequence[str] = ("histogram", "kmeans"),
    session: Session | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """Measure every variant of ``apps`` at each block count; ratios to ``split``, and the goals.

    ``workers``: local worker processes when no ``session`` is given (default: one per core).
    """
    checked_size(size, SIZES)
    progress = progress or Progress.quiet()
    rows = []
    with bench_session(session, workers, timeout=300) as session:
        with progress.phase("applications", len(apps) * len(blocks_per_core)) as phase:
            for app in apps:
                for bpc in blocks_per_core:
                    rows += _point_rows(session, app, bpc, size, repeats)
                    phase.step(f"{app} at {bpc} blocks/core")
        workers = len(session.workers())
    goals = splitter_goals(rows)
    return Report("splitter", size, goals, rows, workers=workers, repeats=repeats, machine=machine.describe())


COLUMNS = (
    Column("app", "app", "<10"),
    Column("blocks/core", "blocks_per_core", ">11"),
    Column("variant", "variant", "<19"),
    Column("seconds", "seconds", ">8.4f"),
    Column("tasks", "tasks", ">7.0f"),
    Column("/ split", "ratio_to_split", ">8.2f"),
    Column("partitioning s", "partition_building_s", ">15.4f"),
    Column("tasks/it", "tasks_per_iteration", ">8.1f"),
    Column("deps/it", "dependencies_per_iteration", ">8.1f"),
    Column("msgs/it", "messages_per_iteration", ">8.1f"),
    Column(
        "MB/it", lambda r: r["bytes_moved_per_iteration"] / 1e6 if "bytes_moved_per_iteration" in r else None, ">7.2f"
    ),
)


def format_report(report: Report) -> str:
    """The report as the text table the command prints, goals last."""
    lines = [
        setting(report, "one per core", f"mean of {report.repeats} runs"),
        "",
        *table(COLUMNS, report.rows),
        "",
        "per iteration (it): tasks and dependencies submitted in an iteration after the first (a one-pass app: "
        "the run), scheduler-worker messages and MB moved between workers (the run's over its iterations)",
    ]
    return text(lines, report)
