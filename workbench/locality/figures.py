"""The report's page: its findings first, then the evidence figures in the workbench's style.

Built from :mod:`workbench.viz` (the Gantt chart of the trace, the bytes-moved matrix, bars) and
:mod:`workbench.viz.page` (text blocks and tables as every standalone page of the workbench has them).
"""

from __future__ import annotations

import html
from typing import Any, Protocol

import pandas as pd
from bokeh.layouts import column
from bokeh.models import LayoutDOM

from workbench.locality.findings import THRESHOLDS, Finding
from workbench.runtime import trace
from workbench.units import size_text
from workbench.viz.gantt import gantt, short_workers
from workbench.viz.locality import bytes_matrix
from workbench.viz.page import spaced_table, text_div
from workbench.viz.style import wrap
from workbench.viz.timing import timing_bars


class Shown(Protocol):
    """What the figures show of an observation (a :class:`~workbench.locality.report.Report` is one;
    this module imports nothing of it)."""

    records: pd.DataFrame
    counts: dict[str, int]

    @property
    def findings(self) -> list[Finding]:
        """The problems found, with their evidence."""
        ...

    def groups(self) -> pd.DataFrame:
        """The evidence table per task group."""
        ...

    def observed(self) -> str:
        """One line: what was observed."""
        ...


GANTT_RECORDS = 20_000  # records drawn in the Gantt chart at most (the earliest ones): a browser draws more slowly
TEXT_LINE = 22  # pixels a line of text takes, for the height of a notebook's frame
GROUPS_SHOWN = 12  # task groups in the evidence table (the most compute seconds first)


def findings_html(report: Shown) -> str:
    """The findings as HTML: what was observed, then each finding (kind, summary, saving, remedy)."""
    e = html.escape
    c = report.counts
    head = (
        f"<h2>Locality diagnosis: {len(report.findings)} finding{'s' if len(report.findings) != 1 else ''}</h2>"
        f"<p>{e(report.observed())}.</p>"
    )
    if c.get("pending_at_end"):
        head += (
            f"<p><b>{c['pending_at_end']} keys submitted in the block were still being computed when it ended</b> "
            "(persist or submit without waiting): their work is missing here; wait(...) for them inside the block.</p>"
        )
    if not c.get("tasks") and report.records.empty and not c.get("pending_at_end"):
        return head + "<p>No Dask work ran in the observed block: put the computation inside the with block.</p>"
    if not report.findings:
        limits = "; ".join(
            f"{kind}: " + ", ".join(f"{k} {v:g}" for k, v in each.items()) for kind, each in THRESHOLDS.items()
        )
        return head + f"<p>No locality problem above the thresholds ({e(limits)}).</p>"
    items = "".join(
        f"<li><b>{e(f.kind)}</b>: {e(f.summary)}.<br><i>Saves</i> {e(f.saves)}.<br><i>Remedy</i>: {e(f.remedy)}</li>"
        for f in report.findings
    )
    return head + f"<ol>{items}</ol>"


def groups_html(report: Shown) -> str:
    """The evidence table per task group (:meth:`Shown.groups`), the busiest first."""
    table = report.groups().head(GROUPS_SHOWN)
    if table.empty:
        return "<p>(no task ran in the block)</p>"
    shown = table.assign(
        **{c: [size_text(int(v)) for v in table[c]] for c in table if c.endswith("_bytes")},
    )
    return "<h3>Task groups (the most compute first)</h3>" + spaced_table(
        shown.to_html(float_format=lambda v: f"{v:.4g}", border=0)
    )


def layout(report: Shown) -> LayoutDOM:
    """The page: findings, the task-group table, the trace's Gantt chart, bytes moved and busy time per worker."""
    parts: list[Any] = [text_div(findings_html(report) + groups_html(report))]
    frame = report.records
    if not frame.empty:
        shown = frame.head(GANTT_RECORDS)
        title = "the observed work: each task's compute and transfers, per worker thread"
        if len(frame) > GANTT_RECORDS:
            title += f" (the first {GANTT_RECORDS} of {len(frame)} records)"
        parts.append(gantt(shown, title=title))
        side = []
        moved = trace.bytes_moved(frame)
        if int(moved.to_numpy().sum()):
            side.append(bytes_matrix(moved, title="bytes moved"))
        compute = frame[(frame["action"] == "compute") & (frame["worker"] != trace.CLIENT)]
        busy = (compute["stop"] - compute["start"]).groupby(compute["worker"]).sum()
        if len(busy):
            names = short_workers(busy.index)
            side.append(timing_bars({names[w]: float(s) for w, s in busy.items()}, "compute seconds per worker"))
        if side:
            parts.append(wrap(side))
    return column(*parts, sizing_mode="stretch_width")


def height(layout: LayoutDOM) -> int:
    """About how many pixels ``layout`` takes (its figures' heights and its text's lines): a notebook's
    frame is made this high."""
    total = 0
    for child in getattr(layout, "children", []):
        if hasattr(child, "children"):
            total += max((getattr(c, "height", None) or 300 for c in child.children), default=0) + 8
        elif getattr(child, "text", None) is not None:
            text = str(child.text)
            total += TEXT_LINE * (text.count("<li>") * 4 + text.count("<tr") + text.count("<p>") * 2 + 4)
        else:
            total += (getattr(child, "height", None) or 300) + 8
    return total
