"""What an observation recorded, the findings it proves, and where people read them.

A :class:`Report` is records first (as distributed's diagnostics are), findings and figures second:

- ``records``: the trace of the observed work in the schema of :mod:`workbench.runtime.trace` (each
  task's compute, transfer and disk spans on its worker and thread, the transfers to the client on
  the "client" row, the active store's copies and the workbench's own events);
- ``arguments``: the large literal values found in task messages (one row per object: ``fingerprint``,
  ``what``, ``bytes``, ``copies`` (task messages that carried it), ``groups`` (copies per task group));
- ``reads``: per task group, its finished ``tasks``, the ``dependency_bytes`` they read and the
  ``graphs`` that brought tasks of it;
- ``workers``: per worker (the index): ``threads``, ``memory_limit``, ``rss_before`` / ``rss_after``
  (process memory at the block's start and end) and what its memory spilled during the block
  (``disk_write_bytes``, ``_count``, ``_seconds``, and the same for ``disk_read``);
- ``counts``: the block's ``tasks`` and ``dependencies`` submitted, ``graphs``, scheduler-worker
  ``messages``, ``task_message_bytes`` (what the scheduler sent to workers), ``bytes_moved`` between
  workers, ``bytes_to_client``, ``keys_moved_again`` / ``bytes_moved_again`` (a key that arrived at
  the same worker more than once), ``dropped_tasks`` (finished tasks beyond what the watch keeps) and
  ``watch_microseconds`` (the scheduler's time in the watch's hooks: what observing cost it);
- ``start`` / ``stop``: the block's epoch seconds.

``report.findings`` (:mod:`workbench.locality.findings`) is computed from these alone, so a saved
report (:meth:`Report.save`, one JSON file) gives the same findings when loaded (:meth:`Report.load`,
``workbench diagnose FILE``); a trace written by :func:`workbench.runtime.trace.write` loads too, with
what a trace holds (no arguments, reads or spill).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import workbench.locality.findings as rules
from workbench.locality.findings import Finding
from workbench.runtime import trace
from workbench.units import size_text

FORMAT = "workbench-locality-observation"  # the "format" of a saved report
VERSION = 1
ARGUMENT_COLUMNS = ("fingerprint", "what", "bytes", "copies", "groups")
READ_COLUMNS = ("group", "tasks", "dependency_bytes", "graphs")
WORKER_COLUMNS = (
    "threads",
    "memory_limit",
    "rss_before",
    "rss_after",
    *(f"disk_{way}_{unit}" for way in ("write", "read") for unit in ("bytes", "count", "seconds")),
)
IFRAME_MARGIN = 160  # pixels under a notebook's report frame beyond what its figures and text need


class NotATrace(ValueError):
    """A file that is neither a saved observation nor a workbench trace."""


def _frame(rows: Any, columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(list(rows or []), columns=list(columns))


@dataclass
class Report:
    """One observation of Dask work: its records, the findings they prove, and its figures (see the module)."""

    records: pd.DataFrame
    arguments: pd.DataFrame = field(default_factory=lambda: _frame([], ARGUMENT_COLUMNS))
    reads: pd.DataFrame = field(default_factory=lambda: _frame([], READ_COLUMNS))
    workers: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(WORKER_COLUMNS)))
    counts: dict[str, int] = field(default_factory=dict)
    start: float = 0.0
    stop: float = 0.0

    @property
    def seconds(self) -> float:
        """How long the observed block took (seconds)."""
        return max(self.stop - self.start, 0.0)

    @cached_property
    def findings(self) -> list[Finding]:
        """The locality problems the records prove, the largest estimated saving first."""
        return rules.find(self)

    def kinds(self) -> list[str]:
        """The kinds of problem found, in :data:`~workbench.locality.findings.KINDS`' order."""
        found = {f.kind for f in self.findings}
        return [k for k in rules.KINDS if k in found]

    def table(self) -> pd.DataFrame:
        """One row per finding: its kind, what it found, what the remedy would save, the lessons."""
        return pd.DataFrame(
            [
                {"kind": f.kind, "finding": f.summary, "saves": f.saves, "lessons": ", ".join(f.lessons)}
                for f in self.findings
            ],
            columns=["kind", "finding", "saves", "lessons"],
        )

    def groups(self) -> pd.DataFrame:
        """Per task group: tasks, median and total compute seconds, result bytes, bytes read from its
        dependencies and bytes received from elsewhere (the evidence behind tiny-tasks and remote-reads)."""
        frame = self.records
        on_workers = frame[frame["worker"] != trace.CLIENT] if not frame.empty else frame
        compute = on_workers[on_workers["action"] == "compute"] if not frame.empty else frame
        seconds = compute["stop"] - compute["start"]
        table = pd.DataFrame(
            {
                "tasks": compute.groupby("task").size(),
                "median_ms": seconds.groupby(compute["task"]).median() * 1e3,
                "compute_s": seconds.groupby(compute["task"]).sum(),
                "result_bytes": compute.groupby("task")["bytes"].sum(),
            }
        )
        if not frame.empty:
            moves = on_workers[(on_workers["action"] == "transfer") & (on_workers["source"] != on_workers["worker"])]
            table["received_bytes"] = moves.groupby("task")["bytes"].sum()
        if not self.reads.empty:
            table["read_bytes"] = self.reads.set_index("group")["dependency_bytes"]
        table.index.name = "group"
        return table.fillna(0).sort_values("compute_s", ascending=False)

    # -- text ---------------------------------------------------------------------------------------------------
    def text(self) -> str:
        """The report for a terminal: what was observed, then each finding with its saving and remedy."""
        c = self.counts
        lines = [self.observed()]
        if c.get("pending_at_end"):
            lines.append(
                f"{c['pending_at_end']} keys submitted in the block were still being computed when it ended "
                "(persist or submit without waiting): their work is missing here; wait(...) for them inside the block"
            )
        if c.get("dropped_tasks"):
            lines.append(f"(the first {c['dropped_tasks']} finished tasks were dropped: the watch keeps the last ones)")
        if not c.get("tasks") and self.records.empty and not c.get("pending_at_end"):
            lines.append("no Dask work ran in the observed block: put the computation inside the with block")
        elif not self.findings:
            lines.append("no locality problem above the thresholds (workbench.locality.findings.THRESHOLDS)")
        for i, f in enumerate(self.findings, 1):
            lines += [f"{i}. [{f.kind}] {f.summary}", f"   saves {f.saves}", f"   remedy: {f.remedy}"]
        return "\n".join(lines)

    def observed(self) -> str:
        """One line: what was observed. A report read from a trace has no graph or message counts (a trace
        records what ran and moved, not what was submitted): it says so rather than "0 tasks submitted"."""
        c = self.counts
        if not c and not self.records.empty:
            frame = self.records
            ran = int((frame["action"] == "compute").sum())
            moved = frame[(frame["action"] == "transfer") & (frame["worker"] != trace.CLIENT)]["bytes"].sum()
            to_client = frame[(frame["action"] == "transfer") & (frame["worker"] == trace.CLIENT)]["bytes"].sum()
            return (
                f"a trace of {self.seconds:.3g} s: {ran} tasks ran, {size_text(int(moved))} moved between workers, "
                f"{size_text(int(to_client))} to the client (a trace holds no graph or task-message counts: "
                "observe(...) the work for those)"
            )
        return (
            f"observed {self.seconds:.3g} s of Dask work: {c.get('tasks', 0)} tasks submitted in {c.get('graphs', 0)} "
            f"graphs, {size_text(int(c.get('task_message_bytes', 0)))} in task messages, "
            f"{size_text(int(c.get('bytes_moved', 0)))} moved between workers, "
            f"{size_text(int(c.get('bytes_to_client', 0)))} to the client"
        )

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<locality Report: {self.seconds:.3g} s observed, findings: {', '.join(self.kinds()) or 'none'}>"

    # -- files ----------------------------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """Everything the report holds as plain values (what :meth:`save` writes)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "start": self.start,
            "stop": self.stop,
            "counts": dict(self.counts),
            "records": self.records.to_dict("records"),
            "arguments": self.arguments.to_dict("records"),
            "reads": self.reads.to_dict("records"),
            "workers": self.workers.reset_index(names="worker").to_dict("records"),
            "findings": [f.as_dict() for f in self.findings],
        }

    def save(self, path: str | Path) -> Path:
        """Write the observation to ``path`` (one JSON file; ``workbench diagnose PATH`` reads it back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), default=_plain))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """A report from a file :meth:`save` wrote, or from a trace :func:`workbench.runtime.trace.write`
        wrote (records only). :class:`NotATrace` (a ValueError) for any other file."""
        path = Path(path)
        if path.is_dir():
            raise NotATrace(
                f"{path} is a folder: give one file in it that report.save(...) or a trace wrote (a 'workbench run' "
                "folder's traces are traces/run-NNNN.json)"
            )
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file (give a file written by report.save(...) or a trace .json)")
        try:
            data = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise NotATrace(f"{path} is not JSON ({error}): give a file written by report.save(...)") from None
        saved = isinstance(data, dict) and data.get("format") == FORMAT
        records = (
            isinstance(data, list) and data and all(isinstance(r, dict) and set(trace.FIELDS) <= set(r) for r in data)
        )
        if saved or records:
            what = "observation" if saved else "trace"
            try:  # a damaged file (a value edited, NaN or out of range) fails here, not in the findings later
                if saved and data.get("version") != VERSION:
                    raise NotATrace(
                        f"{path} is an observation of version {data.get('version')!r} and this workbench reads "
                        f"version {VERSION}: diagnose it with the workbench that saved it"
                    )
                if saved:
                    report = cls.from_dict(data)
                else:
                    frame = trace.normalise(data)
                    report = cls(frame, start=float(frame["start"].min()), stop=float(frame["stop"].max()))
                if not math.isfinite(report.seconds):
                    raise ValueError("its start or stop time is not a number")
                report.findings  # noqa: B018 (computed now: a value that breaks them is the file's fault)
            except NotATrace:
                raise
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as error:
                raise NotATrace(
                    f"{path} is a damaged {what} ({type(error).__name__}: {error}): save it again from its "
                    "report (report.save(...)) or its run"
                ) from None
            return report
        raise NotATrace(
            f"{path} is neither an observation saved by workbench.locality (report.save) nor a workbench trace "
            f"(a list of records with the fields {', '.join(trace.FIELDS)})"
            + (
                ": give the run-NNNN.json beside it (a .perfetto.json is for ui.perfetto.dev)"
                if path.name.endswith(".perfetto.json")
                else ""
            )
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """A report from :meth:`as_dict`'s values."""
        if data.get("version") != VERSION:
            raise NotATrace(
                f"an observation of version {data.get('version')!r}; this workbench reads version {VERSION}"
            )
        workers = pd.DataFrame(data.get("workers") or [], columns=["worker", *WORKER_COLUMNS]).set_index("worker")
        return cls(
            records=pd.DataFrame(data.get("records") or [], columns=list(trace.FIELDS)),
            arguments=_frame(data.get("arguments"), ARGUMENT_COLUMNS),
            reads=_frame(data.get("reads"), READ_COLUMNS),
            workers=workers,
            counts={k: int(v) for k, v in (data.get("counts") or {}).items()},
            start=float(data.get("start", 0.0)),
            stop=float(data.get("stop", 0.0)),
        )

    # -- pages ----------------------------------------------------------------------------------------------------
    def layout(self) -> Any:
        """The report as one bokeh column: findings first, then the evidence figures."""
        import workbench.locality.figures as figures

        return figures.layout(self)

    def to_html(self, path: str | Path) -> Path:
        """Write the report as one HTML page that opens offline (BokehJS inlined); returns the path."""
        from workbench.viz.page import document

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document(self.layout(), "workbench: locality diagnosis"))
        return path

    def _ipython_display_(self) -> None:
        """In a notebook that loaded BokehJS (a lesson: :func:`workbench.viz.notebook.setup_notebook`), the
        layout shown with it, a few hundred kB; elsewhere the page in a frame (:meth:`_repr_html_`), which
        carries its own BokehJS (2 MB) and needs nothing the notebook loaded."""
        from bokeh.io import show
        from bokeh.io.state import curstate
        from IPython.display import HTML, display

        if curstate().notebook:
            show(self.layout())
        else:
            display(HTML(self._repr_html_()))

    def _repr_html_(self) -> str:
        """In a notebook: the page of :meth:`to_html` in a frame as wide as the output (it needs nothing the
        notebook loaded, and shows the same offline)."""
        import workbench.locality.figures as figures
        from workbench.viz.page import document

        layout = self.layout()
        page = document(layout, "workbench: locality diagnosis")
        height = figures.height(layout) + IFRAME_MARGIN
        return (
            f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width: 100%; border: none" '
            f'height="{height}" title="locality diagnosis"></iframe>'
        )


def _plain(value: Any) -> Any:
    """JSON for what the standard encoder refuses: numpy numbers, tuples as keys' text, sets."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)
