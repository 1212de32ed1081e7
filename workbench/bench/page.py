"""The page of a ``workbench bench all`` run: every goal as measured against its threshold, by mechanism.

The header says where and with what the run was made (machine, versions, size, workers, each
benchmark's wall time). Then, for each mechanism, one figure draws every goal as a bar from the
threshold (1) to the figure in units of the threshold, on a log axis so that 2x better and 2x
worse are as long: to the right a goal is met, to the left it is not (for a "lower is better" goal
the ratio is inverted, so right is always better). A whisker shows the noise seen between repeats,
a table gives the figures and what bounds an unmet goal, and a goal that compares peers gets a
small figure with a bar per peer. BokehJS is inlined (the page opens offline), or loaded from one
file the caller names (the course site's copy). Its look (widths, tables, the HTML file) is the one
:mod:`workbench.viz.page` gives every standalone page, ``workbench report``'s too.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bokeh.layouts import column, gridplot
from bokeh.models import ColumnDataSource, Div, HoverTool, PlainText, Span, Title, Whisker
from bokeh.plotting import figure

from workbench.bench.goals import figure_text, threshold_text
from workbench.bench.progress import run_time
from workbench.bench.report import of_record
from workbench.units import size_text
from workbench.viz.page import TABLE, WIDTH, document, text_div

MET, NOT_MET = "#2ca02c", "#d62728"
CLIP = 30.0  # bars end at 1/30 and 30 times the threshold; the table gives the figure itself
ROW_PX = 26
LABEL_CHARS = 70


# A results file is untrusted: its text is shown as text. Bokeh typesets TeX between $$ (or \[ \],
# \( \)) with MathJax in a Div, a title and an axis label unless told not to: hence these three.
def _div(text: str) -> Div:
    """A Div of HTML whose untrusted parts were escaped, with no TeX typeset in it (the pages' text block)."""
    return text_div(text)


def _title(text: str) -> Title:
    """A figure's title, shown as the text it is (never TeX)."""
    return Title(text=PlainText(text=text))


def score(g: Mapping[str, Any]) -> float:
    """The figure in units of the threshold, turned so that above 1 is met (NaN where undefined)."""
    measured, threshold = float(g["measured"]), float(g["threshold"])
    if not (math.isfinite(measured) and math.isfinite(threshold)) or measured < 0 or threshold <= 0:
        return math.nan
    if measured == 0:  # nothing where at most the threshold is asked: as good as a bar can show
        return CLIP if g["better"] == "lower" else 1 / CLIP
    return measured / threshold if g["better"] == "higher" else threshold / measured


def _figure_text(g: Mapping[str, Any]) -> str:
    return f"{figure_text(g)} (goal {threshold_text(g)})"


def _by_mechanism(results: Mapping[str, Any]) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for b in results["benchmarks"]:
        groups.setdefault(b["mechanism"], [])
        report = of_record(b)
        groups[b["mechanism"]] += [(b["name"], g) for g in (report.goals if report else ())]
    return groups


def _labels(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """A short, unique label per goal: ``benchmark: words`` cut to LABEL_CHARS."""
    labels: list[str] = []
    for name, g in rows:
        label = f"{name}: {g['goal']}"
        label = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
        while label in labels:
            label += " "  # the same words twice: a factor of its own
        labels.append(label)
    return labels


def goals_figure(rows: Sequence[tuple[str, Mapping[str, Any]]], title: str):
    """One bar per goal from 1 (the threshold) to its :func:`score`, log axis, coloured met / not met."""
    labels = _labels(rows)
    scores = [score(g) for _, g in rows]
    drawn = [min(CLIP, max(1 / CLIP, s)) if math.isfinite(s) else 1.0 for s in scores]
    noise = [float(g.get("noise") or 0.0) for _, g in rows]
    source = ColumnDataSource(
        {
            "label": labels,
            "score": drawn,
            "low": [max(1 / CLIP, d * (1 - min(n, 0.99))) for d, n in zip(drawn, noise)],
            "high": [min(CLIP, d * (1 + n)) for d, n in zip(drawn, noise)],
            "colour": [MET if g["met"] else NOT_MET for _, g in rows],
            "figure": [_figure_text(g) for _, g in rows],
            "bound": [g.get("bound") or "" for _, g in rows],
            "verdict": ["met" if g["met"] else "NOT met" for _, g in rows],
        }
    )
    plot = figure(
        title=_title(title),
        y_range=list(reversed(labels)),
        x_axis_type="log",
        x_range=(1 / CLIP, CLIP),
        width=WIDTH,
        height=80 + ROW_PX * len(labels),
        toolbar_location=None,
        x_axis_label="figure / threshold (threshold / figure where lower is better); right of 1: met",
    )
    plot.hbar(y="label", left=1.0, right="score", height=0.6, color="colour", source=source)
    plot.add_layout(Whisker(base="label", lower="low", upper="high", dimension="width", source=source))
    plot.add_layout(Span(location=1.0, dimension="height", line_color="black", line_width=2))
    plot.add_tools(HoverTool(tooltips=[("", "@label"), ("measured", "@figure, @verdict"), ("bounded by", "@bound")]))
    plot.ygrid.grid_line_color = None
    return plot


def peers_figure(name: str, g: Mapping[str, Any]):
    """The figures a goal compares, a bar each (in the goal's ``peer_unit``)."""
    peers = g["peers"]
    plot = figure(
        title=_title(f"{name}: {g['goal']}"[:48]),
        x_range=list(peers),
        width=320,
        height=220,
        toolbar_location=None,
        y_axis_label=PlainText(text=g.get("peer_unit") or ""),
    )
    values = [float(v) if math.isfinite(float(v)) else 0.0 for v in peers.values()]
    plot.vbar(x=list(peers), top=values, width=0.6, color=MET if g["met"] else NOT_MET)
    plot.xaxis.major_label_orientation = 0.6
    plot.title.text_font_size = "9pt"
    return plot


def _header(results: Mapping[str, Any]) -> Div:
    m, v = results["machine"], results["versions"]
    caches = m.get("caches")
    cache_text = (
        ", ".join(f"L{c['level']} {c['type'].lower()} {size_text(c['size'])}" for c in caches)
        if isinstance(caches, list)
        else str(caches)
    )
    e = lambda value: html.escape(str(value))  # noqa: E731 (a results file is untrusted: every field escaped)
    rows = "".join(
        f"<tr><td>{e(b['name'])}</td><td>{e(b['mechanism'])}</td><td>{e(b['size'])}</td>"
        f"<td>{b['wall_s']:.0f} s</td><td>{_met_count(b)}</td><td>{e(b['status'])}</td></tr>"
        for b in results["benchmarks"]
    )
    software = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    return _div(
        f"<h1>workbench bench all on {e(m['hostname'])}</h1>"
        f"<p>{e(m['cpu'])}, {e(m['logical_cores'])} cores, caches {e(cache_text)}, "
        f"{m['memory_total'] / 2**30:.1f} GiB memory; tier directory {e(m.get('tier_directory'))}"
        f"</p><p>size {e(results['size'] or 'each its own')}, workers {e(results['workers'] or 'each its own')}, "
        f"started {e(results['started'])}, {run_time(results['wall_s'])}</p>"
        f"<p><small>{html.escape(software)}</small></p>"
        f"<table {TABLE}><tr><th>benchmark</th><th>mechanism</th><th>size</th><th>wall</th><th>goals met</th>"
        f"<th>status</th></tr>{rows}</table>"
    )


def _met_count(b: Mapping[str, Any]) -> str:
    report = of_record(b)
    return "-" if report is None else f"{report.met}/{len(report.goals)}"


def _goal_table(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> Div:
    cells = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(g['goal'])}</td><td>{html.escape(_figure_text(g))}</td>"
        f"<td style='color:{MET if g['met'] else NOT_MET}'>{'met' if g['met'] else 'NOT met'}</td>"
        f"<td>{html.escape(g.get('bound') or '')}</td></tr>"
        for name, g in rows
    )
    return _div(
        f"<table {TABLE}><tr><th>benchmark</th><th>goal</th><th>measured</th><th></th>"
        f"<th>bounded here by</th></tr>{cells}</table>"
    )


def build(results: Mapping[str, Any]):
    """The page's bokeh layout: the header, then per mechanism its goals' figure, table and peers."""
    parts: list[Any] = [_header(results)]
    for mechanism, rows in _by_mechanism(results).items():
        failed = [b for b in results["benchmarks"] if b["mechanism"] == mechanism and b["status"] != "ok"]
        notes = "".join(f"<p>{html.escape(b['name'])}: {html.escape(b['status'])}: {html.escape(str(b['error']))}</p>"
                        for b in failed)  # fmt: skip
        parts.append(_div(f"<h2>{html.escape(mechanism)}</h2>{notes}"))
        if not rows:
            continue
        met = sum(g["met"] for _, g in rows)
        parts += [goals_figure(rows, f"{mechanism}: {met} of {len(rows)} goals met"), _goal_table(rows)]
        peers = [peers_figure(name, g) for name, g in rows if g.get("peers")]
        if peers:
            parts.append(gridplot(peers, ncols=3, toolbar_location=None))
    return column(*parts)


def page_html(results: Mapping[str, Any], bokeh_src: str | None = None) -> str:
    """The page as HTML: BokehJS inlined, or loaded from ``bokeh_src`` (one file with the widgets')."""
    return document(build(results), f"workbench bench all: {results['machine']['hostname']}", bokeh_src)


def write_page(results: Mapping[str, Any], path: str | Path, bokeh_src: str | None = None) -> Path:
    """Write the page to ``path`` (self-contained unless ``bokeh_src`` is given)."""
    path = Path(path)
    path.write_text(page_html(results, bokeh_src))
    return path
