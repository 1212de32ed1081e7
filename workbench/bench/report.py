"""One benchmark's report: what every ``workbench bench NAME`` returns, prints and ``bench all`` keeps.

Every benchmark's ``run()`` returns a :class:`Report`; its ``format_report(report)`` prints it for
people, ``--json`` prints :meth:`Report.to_json`, and ``bench all`` reads that back with
:meth:`Report.from_json` (a benchmark's output, or a results file, is untrusted: anything not of this
shape is refused in one line that names the field). The JSON of a report::

    {"version": 1, "benchmark", "size", "workers", "repeats", "counts": {name: number},
     "machine": {...} | null, "skipped": why | null, "rows": [{...}], "goals": [goal], "parts": {name: ...}}

``rows`` is the benchmark's main table, ``goals`` the dicts :func:`workbench.bench.goals.goal` makes,
``counts`` the run's own numbers (calls made, blocks, bytes of an array, threads), ``parts`` whatever
else the benchmark measured, by name (its further tables: ``eager``, ``bandwidth``, ...). The same
module gives the common parts of every ``format_report``: a table from :class:`Column` specs, the
setting line and the goals block.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.bench.goals import goal_lines, goal_met, is_number, problem, text_problem

VERSION = 1  # of a report's JSON: a file of another version is refused (run the benchmark again)
FIELDS = (
    "version",
    "benchmark",
    "size",
    "workers",
    "repeats",
    "counts",
    "machine",
    "skipped",
    "rows",
    "goals",
    "parts",
)


class ReportError(ValueError):
    """A report that is not of :class:`Report`'s shape: ``field`` names where (``goals[1]``), ``what`` what is
    wrong; the message is the one line ``field what``."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where} {what}")
        self.field, self.what = where, what


@dataclass(frozen=True)
class Report:
    """What one run of a benchmark measured: its name and setting, its main table, its goals, the rest by name."""

    benchmark: str
    size: str
    goals: tuple[dict[str, Any], ...] = ()
    rows: tuple[dict[str, Any], ...] = ()
    parts: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, float] = field(default_factory=dict)
    workers: int | None = None
    repeats: int | None = None
    machine: Mapping[str, Any] | None = None
    skipped: str | None = None  # why nothing was measured (this machine cannot run it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "goals", tuple(self.goals))
        object.__setattr__(self, "rows", tuple(self.rows))

    @property
    def met(self) -> int:
        """How many of its goals this run met."""
        return sum(bool(g["met"]) for g in self.goals)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (what ``--json`` prints and ``results.json`` holds), with its version."""
        return {
            "version": VERSION,
            "benchmark": self.benchmark,
            "size": self.size,
            "workers": self.workers,
            "repeats": self.repeats,
            "counts": dict(self.counts),
            "machine": None if self.machine is None else dict(self.machine),
            "skipped": self.skipped,
            "rows": [dict(r) for r in self.rows],
            "goals": [dict(g) for g in self.goals],
            "parts": dict(self.parts),
        }

    @classmethod
    def from_json(cls, data: Any) -> Report:
        """The report ``data`` holds (as :meth:`to_json` wrote it, perhaps through strict JSON: a figure
        that could not be had is null), every field checked; each goal's figures as floats and its
        ``met`` worked out again from its figure and threshold. :class:`ReportError` for anything else."""
        if not isinstance(data, dict):
            raise ReportError("the report", "is not a JSON object")
        if "version" not in data:
            raise ReportError("version", f"is missing: a report older than version {VERSION} (run the benchmark again)")
        if data["version"] != VERSION or isinstance(data["version"], bool):
            said = f"{data['version']!r:.20}"
            raise ReportError(
                "version", f"is {said}, not {VERSION}: another workbench's report (run the benchmark again)"
            )
        unknown = [k for k in data if k not in FIELDS]
        if unknown:
            raise ReportError(str(unknown[0])[:40], "is not a field of a report")
        missing = [k for k in FIELDS if k not in data]
        if missing:
            raise ReportError(missing[0], "is missing")
        for key in ("benchmark", "size"):
            _text(data[key], key)
        _text(data["skipped"], "skipped", optional=True)
        for key in ("workers", "repeats"):
            value = data[key]
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ReportError(key, f"is {value!r:.40}, not a count of at least 1 (or null)")
        counts = _object(data["counts"], "counts")
        for name, value in counts.items():
            if value is not None and not is_number(value):
                raise ReportError(f"counts[{name[:40]!r}]", f"is {value!r:.40}, not a number")
        if data["machine"] is not None:
            _object(data["machine"], "machine")
        rows = _list(data["rows"], "rows")
        for i, row in enumerate(rows):
            _object(row, f"rows[{i}]")
        goals = [_goal(g, f"goals[{i}]") for i, g in enumerate(_list(data["goals"], "goals"))]
        return cls(
            benchmark=data["benchmark"],
            size=data["size"],
            goals=tuple(goals),
            rows=tuple(rows),
            parts=_object(data["parts"], "parts"),
            counts=counts,
            workers=data["workers"],
            repeats=data["repeats"],
            machine=data["machine"],
            skipped=data["skipped"],
        )


def _text(value: Any, where: str, optional: bool = False) -> None:
    if optional and value is None:
        return
    wrong = text_problem(value)
    if wrong:
        raise ReportError(where, "is missing (or null), not text" if value is None else wrong)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReportError(where, "is not a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ReportError(where, "is not a list")
    return value


def _float(value: Any) -> float:
    """A figure as a float: None (strict JSON's NaN, a figure that could not be had) as NaN."""
    return math.nan if value is None else float(value)


def _goal(g: Any, where: str) -> dict[str, Any]:
    """One goal read back, of :func:`workbench.bench.goals.goal`'s shape: its figures as floats, ``met``
    worked out again from them."""
    wrong = problem(g)
    if wrong:
        words = g.get("goal") if isinstance(g, dict) and isinstance(g.get("goal"), str) else None
        raise ReportError(where + (f" (goal {words[:60]!r})" if words is not None else ""), wrong)
    read = dict(g)
    read["measured"] = _float(g["measured"])
    read["threshold"] = float(g["threshold"])
    read["peers"] = {name: _float(value) for name, value in g.get("peers", {}).items()}
    read["met"] = goal_met(read["measured"], read["threshold"], g["better"])
    read["noise"] = None if g.get("noise") is None else float(g["noise"])
    return read


def of_record(record: Mapping[str, Any]) -> Report | None:
    """The report of one benchmark's record in ``bench all``'s results (None: it failed or was stopped),
    as :func:`workbench.bench.suite.load` checked it or ``bench all`` just wrote it: not checked again
    (the page and the site still show any text it holds as text)."""
    data = record.get("report")
    return None if data is None else Report(**{key: data[key] for key in FIELDS if key != "version"})


# -- the common parts of format_report -------------------------------------------------------------
_SPEC = re.compile(r"^(?P<align>[<>^])?(?P<width>\d+)")


@dataclass(frozen=True)
class Column:
    """One column of a report's table: its title, the row's field (or a function of the row) and the
    format spec of its cells (``">8.4f"``), with ``suffix`` after each figure (``"x"``). A cell whose
    value is None (or a field the row lacks) shows ``-``."""

    title: str
    value: str | Callable[[Mapping[str, Any]], Any]
    spec: str = ""
    suffix: str = ""

    @property
    def width(self) -> int:
        """The column's width: its spec's, with the suffix."""
        found = _SPEC.match(self.spec)
        return (int(found["width"]) if found else 0) + len(self.suffix)

    @property
    def align(self) -> str:
        """``<`` or ``>`` (``^``): its spec's alignment, else left."""
        found = _SPEC.match(self.spec)
        return found["align"] if found and found["align"] else "<"

    def header(self) -> str:
        """The column's title, aligned to its width."""
        return f"{self.title:{self.align}{self.width}}"

    def cell(self, row: Mapping[str, Any]) -> str:
        """The row's cell of this column."""
        value = self.value(row) if callable(self.value) else row.get(self.value)
        if value is None:
            return f"{'-':{self.align}{self.width}}"
        return format(value, self.spec) + self.suffix


def table(columns: Sequence[Column], rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A header line of the columns' titles, then a line per row (cells apart by one space, no trailing space)."""
    return [
        " ".join(c.header() for c in columns).rstrip(),
        *(" ".join(c.cell(r) for c in columns).rstrip() for r in rows),
    ]


def setting(report: Report, *more: str) -> str:
    """The run's setting as the first line of a report: ``size ci, 2 workers, ...`` (``more``: its own words)."""
    said = [f"size {report.size}"]
    if report.workers is not None:
        said.append(f"{report.workers} workers")
    return ", ".join([*said, *more])


def text(lines: Iterable[str], report: Report) -> str:
    """The report's text: ``lines`` (its own parts), then a blank line and its goals, one a line."""
    return "\n".join([*lines, "", "goals:", *goal_lines(report.goals)])
