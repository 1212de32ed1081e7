"""``workbench bench locality``: what observing a computation costs (``workbench.locality.observe``).

For each seed application (its ``blocks`` strategy: one Dask task per block, on data placed once,
:data:`BLOCKS_PER_WORKER` blocks per worker, untimed), runs alternate unobserved and observed, A B A
B ..., after one warm-up of each, so a noisy machine slows both alike. Two times per observed run:
the work inside the ``with`` block, and the whole block with the observation's start and its reading
of the records at the end. The ratios observed / unobserved of the median times are printed side by
side with the goal: under 5 % more (issue 49), and the observation's own start and reading (a few
calls to the scheduler and the workers: a fixed cost, which a short block shows most). Beside them,
a figure the machine's noise hardly moves: the scheduler's time in the watch's hooks (what it adds
per graph and per task), as a share of the unobserved work's time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from workbench import datasets, machine
from workbench.apps import registry
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, setting, table, text
from workbench.locality import observe
from workbench.runtime import trace
from workbench.runtime.session import Session

APPS = ("histogram", "kmeans", "knn")
SIZES = ("ci", "lab", "full")
MOST_OVERHEAD = 1.05  # the goal: observed work within 5 % of the same work unobserved
VARIANT = "blocks"  # one task per block, the way plain Dask code runs (an application's baseline otherwise)
BLOCKS_PER_WORKER = 8  # blocks per worker of each application's data: a graph of some tasks per worker, as users make


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _app_row(session: Session, app_name: str, size: str, repeats: int) -> dict[str, Any]:
    """One application: its unobserved, observed (work only) and observed (whole block) run times."""
    app = registry.get(app_name)
    params = {"blocks_per_worker": BLOCKS_PER_WORKER} if "blocks_per_worker" in app.parameters else {}
    data = app.prepare(session, datasets.get(app.dataset, size), params)
    name = VARIANT if VARIANT in app.strategies else app.baseline
    variant = app.variant(name)
    try:

        def work() -> Any:
            return variant(session, data, trace.Recorder())

        def observed() -> tuple[float, float, float, int]:
            start = time.perf_counter()
            with observe(session) as seen:
                inside = _timed(work)
            watch_s = seen.report.counts["watch_microseconds"] / 1e6
            return inside, time.perf_counter() - start, watch_s, len(seen.report.findings)

        work(), observed()  # warm-up: numba compiles, first connections
        plain, inside, whole, watched, found = [], [], [], [], 0
        for _ in range(repeats):
            plain.append(_timed(work))
            a, b, w, found = observed()
            inside.append(a)
            whole.append(b)
            watched.append(w)
    finally:
        data.release()
    median = statistics.median
    return {
        "app": app_name,
        "variant": name,
        "unobserved_s": median(plain),
        "observed_work_s": median(inside),
        "observed_block_s": median(whole),
        "work_ratio": median(inside) / median(plain),
        "block_ratio": median(whole) / median(plain),
        "start_and_read_s": median([b - a for a, b in zip(inside, whole)]),
        "watch_s": median(watched),
        "watch_share": median(watched) / median(plain),
        "runs_unobserved_s": plain,
        "runs_observed_work_s": inside,
        "runs_observed_block_s": whole,
        "findings": found,
    }


def run(
    size: str = "ci",
    repeats: int = 7,
    apps: Sequence[str] = APPS,
    session: Session | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """Observe's overhead on each of ``apps`` at ``size``: ratios of the median times, and the goals."""
    checked_size(size, SIZES)
    progress = progress or Progress.quiet()
    rows = []
    with bench_session(session, workers, timeout=300) as session:
        with progress.phase("applications", len(apps)) as phase:
            for app in apps:
                rows.append(_app_row(session, app, size, repeats))
                phase.step(app)
        workers = len(session.workers())
    goals = []
    for r in rows:
        goals.append(
            goal(
                f"{r['app']}: the scheduler's time in the watch's hooks / the unobserved work, under "
                f"{MOST_OVERHEAD - 1:.0%}",
                100 * r["watch_share"],
                100 * (MOST_OVERHEAD - 1),
                better="lower",
                unit="%",
                peers={"watch": r["watch_s"], "unobserved": r["unobserved_s"]},
            )
        )
        for what, ratio, runs in (
            ("the work inside the block", r["work_ratio"], r["runs_observed_work_s"]),
            ("the whole block (reading the records included)", r["block_ratio"], r["runs_observed_block_s"]),
        ):
            goals.append(
                goal(
                    f"{r['app']}: observed / unobserved, {what}, under {MOST_OVERHEAD:.2f}x",
                    ratio,
                    MOST_OVERHEAD,
                    better="lower",
                    peers={"observed": ratio * r["unobserved_s"], "unobserved": r["unobserved_s"]},
                    noise=ratio_noise(runs, r["runs_unobserved_s"]),
                )
            )
    return Report("locality", size, goals, rows, workers=workers, repeats=repeats, machine=machine.describe())


COLUMNS = (
    Column("app", "app", "<10"),
    Column("variant", "variant", "<10"),
    Column("unobserved s", "unobserved_s", ">13.4f"),
    Column("observed s", "observed_work_s", ">11.4f"),
    Column("ratio", "work_ratio", ">6.3f", "x"),
    Column("with reading s", "observed_block_s", ">15.4f"),
    Column("ratio", "block_ratio", ">6.3f", "x"),
    Column("start+read s", "start_and_read_s", ">13.4f"),
    Column("watch s", "watch_s", ">8.4f"),
    Column("findings", "findings", ">9"),
)


def format_report(report: Report) -> str:
    """The report as the text table the command prints, goals last."""
    lines = [setting(report, f"median of {report.repeats} runs of each, alternated"), "", *table(COLUMNS, report.rows)]
    return text(lines, report)
