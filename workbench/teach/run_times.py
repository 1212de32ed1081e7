"""``workbench bench lessons``: how long each lesson's Run All takes, headless, against its budget.

Every lesson (or ``--only``'s) is executed with papermill as :mod:`workbench.teach.execute` runs it
(the solutions manual's answers, at the size asked for), one after the other, and timed from the
kernel's start to its last cell: a learner's Run All, less the browser. Each time is set against
the size's budget (:data:`BUDGET_S`), a goal of the report ("lesson 03's Run All at size lab <= 150 s"),
with the lesson's slowest cells, so a lesson over its budget says where its time went.

The instructor guide's table of run times is this benchmark's output on a named machine, never
typed by hand: ``workbench bench lessons --size lab --markdown`` prints it (the machine's CPU, its
cores and the load average, measured, are its first line), and the guide pastes it whole between
:data:`BEGIN` and :data:`END`; :func:`read_table` reads it back for the test that holds the two
in one shape.

It runs for minutes (eleven lessons), so ``workbench bench all`` leaves it out unless ``--only``
names it (its ``only_when_named`` in :data:`workbench.cli.BENCHMARKS`).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat

from workbench import machine
from workbench.bench.goals import goal
from workbench.bench.opening import checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Report, text

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
# Seconds a lesson's Run All may take, headless on 2 quiet cores. lab: a class waits for it inside its
# lesson's minutes (issue 46). ci: what CI and Binder run; the eleven lessons take about 5 minutes
# together on 2 quiet cores (the README's nbval run), most of them 15-30 s, lesson 02 the most (its
# Table I runs last about a second each, to outlast a shared machine's bursts); 60 s a lesson flags a
# lesson that grew, and keeps CI's notebook tests (each lesson once, as a learner who answers wrong,
# then right) a third of the suite's time. full is the papers' shape on one machine, for no
# class: no budget.
BUDGET_S: dict[str, float | None] = {"ci": 60.0, "lab": 150.0, "full": None}
CELL_TIMEOUT_S = 900  # a cell that runs this long is stopped and its lesson recorded as timed out
SLOWEST = 3  # the slowest cells of each lesson the report names
COMMAND = "workbench bench lessons --size lab --markdown"  # what prints the instructor guide's table
BEGIN = f"<!-- lesson run times: the output of `{COMMAND}`, pasted whole -->"
END = "<!-- end of the lesson run times -->"
HEADER = "| lesson | Run All, headless | budget | lesson minutes | slowest cell |"
_ROW = re.compile(r"^\| (\d\d) ([^|]+) \| ([\d.]+) s(?: \(([^)]*)\))? \| ([^|]+) \| (\d+) \| ([^|]*) \|$")
_MACHINE = re.compile(r"^Measured by `workbench bench lessons --size (\w+)` on (.+?), (\d+) cores, ")


def notebooks(only: Sequence[str] | None = None, directory: Path = NOTEBOOKS) -> list[Path]:
    """The lesson notebooks in order, or only those whose two-digit numbers ``only`` names (an unknown
    number is refused, naming the lessons there are)."""
    found = sorted(directory.glob("[0-9][0-9]-*.ipynb"))
    if not only:
        return found
    numbers = [p.name[:2] for p in found]
    unknown = [n for n in only if n not in numbers]
    if unknown:
        raise ValueError(f"no lesson {', '.join(unknown)}: the lessons are {', '.join(numbers)}")
    return [p for p in found if p.name[:2] in only]


def numbers() -> list[str]:
    """The two-digit numbers of the lessons (what ``--only`` takes)."""
    return [p.name[:2] for p in notebooks()]


def cell_seconds(executed: nbformat.NotebookNode) -> list[dict[str, Any]]:
    """Each executed code cell's seconds, as papermill recorded them: (index, seconds, first line)."""
    cells = []
    for index, cell in enumerate(executed.cells):
        seconds = cell.metadata.get("papermill", {}).get("duration")
        if cell.cell_type == "code" and seconds is not None:
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            cells.append({"cell": index, "seconds": round(float(seconds), 3), "first_line": first[:80]})
    return cells


def unexpected_errors(executed: nbformat.NotebookNode) -> list[str]:
    """The errors of cells not tagged ``raises-exception`` (which fail on purpose), as ``cell N: Name: text``."""
    errors = []
    for index, cell in enumerate(executed.cells):
        if "raises-exception" in cell.metadata.get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(f"cell {index}: {output.get('ename')}: {str(output.get('evalue'))[:200]}")
    return errors


def time_lesson(notebook: Path, size: str, out: Path, cell_timeout: float = CELL_TIMEOUT_S) -> dict[str, Any]:
    """Execute one lesson at ``size`` into ``out`` and time it: its seconds, status ("ok", "errors" or
    "timed out"), its errors and its slowest cells."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from workbench.teach.execute import execute

    started = time.perf_counter()
    status, errors = "ok", []
    try:
        output = execute(notebook, out, "solutions", size, cell_timeout=cell_timeout)
    except (CellTimeoutError, DeadKernelError) as error:
        status = "timed out" if isinstance(error, CellTimeoutError) else "kernel died"
        errors.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
        output = out / notebook.name
    seconds = time.perf_counter() - started
    cells: list[dict[str, Any]] = []
    if output.exists():
        executed = nbformat.read(output, as_version=4)
        cells = cell_seconds(executed)
        errors += unexpected_errors(executed)
    if errors and status == "ok":
        status = "errors"
    return {
        "lesson": notebook.name[:2],
        "title": notebook.stem[3:],
        "notebook": notebook.name,
        "seconds": round(seconds, 3),
        "status": status,
        "errors": errors,
        "slowest": sorted(cells, key=lambda c: -c["seconds"])[:SLOWEST],
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(
    size: str = "ci",
    only: Sequence[str] | None = None,
    out: str | None = None,
    markdown: bool = False,
    progress: Progress | None = None,
    notebooks_dir: str | Path | None = None,
) -> Report:
    """Every lesson (or ``only``'s) executed at ``size``, timed against its budget: a row per lesson, the
    budget, total and load average in ``parts``, a goal per lesson. ``out``: where the executed copies
    go (None: a temporary directory, removed after). ``markdown``: :func:`format_report` prints the
    instructor guide's table. ``notebooks_dir``: the folder of lessons to time (None: the course's
    ``notebooks/``), such as the copy ``workbench course copy`` made and an instructor edited."""
    from workbench.teach import syllabus

    checked_size(size, BUDGET_S)
    directory = NOTEBOOKS if notebooks_dir is None else Path(notebooks_dir)
    if not directory.is_dir() or not notebooks(directory=directory):
        raise ValueError(f"no lessons (NN-name.ipynb) in {directory}: name the folder that holds the lesson notebooks")
    paths = notebooks(only, directory)
    progress = progress or Progress.quiet()
    budget = BUDGET_S[size]
    minutes = {number: info.minutes for number, info in syllabus.lessons().items()}
    load_before = _load()
    rows = []
    with tempfile.TemporaryDirectory(prefix="workbench-bench-lessons-") as scratch:
        executed = Path(out) if out else Path(scratch)
        with progress.phase("lessons", len(paths)) as phase:
            for path in paths:
                progress.say(f"{path.stem}: running at size {size} ...")
                row = time_lesson(path, size, executed)
                row["minutes"] = minutes.get(row["lesson"])
                rows.append(row)
                over = "" if budget is None or row["seconds"] <= budget else f", over its budget of {budget:.0f} s"
                phase.step(f"{path.stem} {row['seconds']:.0f} s ({row['status']}{over})")
    goals = [
        goal(
            f"lesson {r['lesson']}'s Run All at size {size} <= {budget:.0f} s",
            r["seconds"] if r["status"] == "ok" else float("nan"),
            budget,
            better="lower",
            unit="s",
            bound=None if r["status"] == "ok" else f"it did not run to its end ({r['status']})",
        )
        for r in rows
        if budget is not None
    ]
    parts = {
        "budget_s": budget,
        "total_s": round(sum(r["seconds"] for r in rows), 3),
        "load": {"before": load_before, "after": _load()},
        "markdown": markdown,
    }
    return Report("lessons", size, goals, rows, parts, counts={"cores": os.cpu_count()}, machine=machine.describe())


def _load_words(report: Report) -> str:
    """The load average at the start and the end, and what it means for the times beside it."""
    before, after = report.parts["load"]["before"][0], report.parts["load"]["after"][0]
    cores = report.counts["cores"]
    words = f"load average {before:.1f} at the start, {after:.1f} at the end"
    if max(before, after) > cores:
        words += f" (above its {cores} cores: other work shared the machine, so these times are longer "
        words += "than a quiet machine's)"
    else:
        words += " (a quiet machine)"
    return words


def _slowest(row: dict[str, Any]) -> str:
    if not row["slowest"]:
        return ""
    cell = row["slowest"][0]
    return f"{cell['seconds']:.0f} s: `{cell['first_line'].replace('|', '/').replace('`', '')}`"


def markdown_table(report: Report) -> str:
    """The instructor guide's table of run times, between :data:`BEGIN` and :data:`END`: the machine
    line, then a row per lesson (its time, its budget, its minutes in the schedule, its slowest cell)."""
    budget, cpu = report.parts["budget_s"], (report.machine or {}).get("cpu")
    lines = [
        BEGIN,
        "",
        f"Measured by `workbench bench lessons --size {report.size}` on {cpu}, "
        f"{report.counts['cores']} cores, {_load_words(report)}.",
        "",
        HEADER,
        "|---|---|---|---|---|",
    ]
    for r in report.rows:
        status = "" if r["status"] == "ok" else f" ({r['status']})"
        budget_text = "none" if budget is None else f"{budget:.0f} s"
        lines.append(
            f"| {r['lesson']} {r['title']} | {r['seconds']:.0f} s{status} | {budget_text} | {r['minutes'] or ''} "
            f"| {_slowest(r)} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def read_table(text: str) -> dict[str, Any]:
    """The table :func:`markdown_table` printed, read back from a page that pasted it (the instructor
    guide): its size, the machine's CPU and cores, and each lesson's seconds. A page without the
    markers, or whose table is not in that shape, is refused with what is wrong."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no table of lesson run times: paste the output of '{COMMAND}' (it has the markers)")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    found = _MACHINE.match(block[0]) if block else None
    if not found:
        raise ValueError(f"the table's first line does not name the machine as the benchmark does: {block[:1]}")
    if HEADER not in block:
        raise ValueError(f"the table's header is not the benchmark's ({HEADER})")
    rows = {}
    for line in block[block.index(HEADER) + 2 :]:
        if not line.strip():
            continue
        row = _ROW.match(line)
        if not row:
            raise ValueError(f"a row is not in the benchmark's shape: {line}")
        rows[row[1]] = {"title": row[2], "seconds": float(row[3]), "status": row[4] or "ok"}
    return {"size": found[1], "cpu": found[2], "cores": int(found[3]), "lessons": rows}


def format_report(report: Report) -> str:
    """The report as text (each lesson's time against its budget, its slowest cells, the goals), or
    the instructor guide's Markdown table when ``--markdown`` asked for it."""
    if report.parts.get("markdown"):
        return markdown_table(report)
    budget = report.parts["budget_s"]
    lines = [
        f"lessons at size {report.size} on {(report.machine or {}).get('cpu')}, {report.counts['cores']} cores; "
        f"{_load_words(report)}",
        f"budget per lesson: {'none at this size' if budget is None else f'{budget:.0f} s'}",
        "",
    ]
    for r in report.rows:
        verdict = "" if budget is None else ("  within budget" if r["seconds"] <= budget else "  OVER budget")
        if r["status"] != "ok":
            verdict = f"  {r['status'].upper()}"
        lines.append(f"{r['lesson']} {r['title']:<28} {r['seconds']:7.0f} s{verdict}")
        for cell in r["slowest"]:
            lines.append(f"     cell {cell['cell']:>2}: {cell['seconds']:6.1f} s  {cell['first_line']}")
        lines += [f"     error: {e}" for e in r["errors"]]
    lines += ["", f"all lessons: {report.parts['total_s']:.0f} s"]
    return text(lines, report)
