"""Figures of the execution-model lab (lesson 07, ``bench execution-models``): spawn costs, page
tables against tasks, and ``mmap`` rates of threads against processes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter

from workbench.viz.style import colours, legend_outside, new_figure, ticks_at


def spawn_figure(rows: Sequence[dict[str, Any]], title: str = "time to the first useful instruction"):
    """Horizontal bars, log scale: one per execution model (``spawn_costs`` rows), fastest at the top."""
    rows = sorted(rows, key=lambda r: r["seconds"])
    models = [r["model"] for r in rows][::-1]
    source = ColumnDataSource(
        dict(
            model=[r["model"] for r in rows],
            ms=[r["seconds"] * 1e3 for r in rows],
            vs=[r["vs_thread"] for r in rows],
            how=[r["how"] for r in rows],
            color=colours(len(rows)),
        )
    )
    fig = new_figure(
        y_range=models,
        x_axis_type="log",
        height=90 + 34 * len(rows),
        title=title,
        x_axis_label="milliseconds (log)",
        toolbar_location=None,
    )
    fig.hbar(y="model", right="ms", left=min(source.data["ms"]) / 2, height=0.7, color="color", source=source)
    fig.add_tools(
        HoverTool(tooltips=[("model", "@model"), ("time", "@ms{0.000} ms"), ("x thread", "@vs{0.0}"), ("how", "@how")])
    )
    return fig


def page_table_figure(rows: Sequence[dict[str, Any]], title: str = "page tables for one shared segment"):
    """VmPTE (KiB) against tasks, one line per model (``page_tables`` rows), with the expected
    8 bytes per page per process dashed (PiP's Figure 6)."""
    fig = new_figure(
        height=320,
        title=title,
        x_axis_label="tasks (processes or threads)",
        y_axis_label="page tables, KiB (VmPTE growth)",
    )
    models = sorted({r["model"] for r in rows})
    for color, model in zip(colours(len(models)), models, strict=True):
        mine = sorted((r for r in rows if r["model"] == model), key=lambda r: r["tasks"])
        source = ColumnDataSource(
            dict(
                tasks=[r["tasks"] for r in mine],
                kib=[r["vmpte_kib"] for r in mine],
                expected=[r["expected_kib"] for r in mine],
            )
        )
        fig.line("tasks", "kib", source=source, line_width=2, color=color, legend_label=model)
        fig.scatter("tasks", "kib", source=source, size=7, color=color, legend_label=model)
        fig.line(
            "tasks",
            "expected",
            source=source,
            line_dash="dashed",
            color=color,
            legend_label=f"{model}: 8 B per page per process",
        )
    fig.add_tools(HoverTool(tooltips=[("tasks", "@tasks"), ("VmPTE", "@kib KiB"), ("expected", "@expected KiB")]))
    ticks_at(fig.xaxis, [r["tasks"] for r in rows])
    legend_outside(fig, "below")
    fig.y_range.start = 0
    return fig


def mmap_figure(report: dict[str, Any], title: str = "mmap + munmap calls per second, all tasks"):
    """Calls per second against tasks, threads of one process and processes (``mmap_contention``)."""
    rows = report["rows"]
    fig = new_figure(title=title, x_axis_label="tasks", y_axis_label="calls per second")
    ways = (("threads_per_s", "threads"), ("processes_per_s", "processes"))
    for color, (key, label) in zip(colours(len(ways)), ways, strict=True):
        source = ColumnDataSource(dict(tasks=[r["tasks"] for r in rows], rate=[r[key] for r in rows]))
        fig.line("tasks", "rate", source=source, line_width=2, color=color, legend_label=label)
        fig.scatter("tasks", "rate", source=source, size=7, color=color, legend_label=label)
    fig.add_tools(HoverTool(tooltips=[("tasks", "@tasks"), ("calls/s", "@rate{0}")]))
    fig.yaxis.formatter = NumeralTickFormatter(format="0,0")  # 100,000, not 1.000e+5
    ticks_at(fig.xaxis, [r["tasks"] for r in rows])
    legend_outside(fig, "right")
    fig.y_range.start = 0
    return fig
