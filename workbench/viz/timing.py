"""Timing figures: bars per variant, and time against the number of blocks."""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


def _columns(table: pd.DataFrame, *names: str) -> ColumnDataSource:
    """A source from plain columns (bokeh's DataFrame path warns under pandas 3)."""
    return ColumnDataSource({name: table[name].to_list() for name in names})


def timing_bars(seconds: Mapping[str, float], title: str = "time per run", unit: str = "s"):
    """One bar per label: how long each variant took."""
    labels = list(seconds)
    source = ColumnDataSource(
        dict(label=labels, seconds=[float(seconds[k]) for k in labels], color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))])
    )
    fig = figure(x_range=labels, height=280, width=520, title=title, toolbar_location=None, y_axis_label=unit)
    fig.vbar(x="label", top="seconds", width=0.7, color="color", source=source)
    fig.add_tools(HoverTool(tooltips=[("variant", "@label"), ("time", f"@seconds{{0.0000}} {unit}")]))
    fig.y_range.start = 0
    return fig


def block_sweep_figure(runs: pd.DataFrame, title: str = "one task per block"):
    """Seconds per run against the number of blocks (log axis); the line joins the medians."""
    medians = runs.groupby("blocks", as_index=False)["seconds"].median()
    fig = figure(
        x_axis_type="log", height=300, width=560, title=title,
        x_axis_label="blocks (= tasks)", y_axis_label="seconds",
    )
    fig.scatter("blocks", "seconds", source=_columns(runs, "blocks", "seconds"), size=6, alpha=0.5, color=PALETTE[0])
    fig.line(
        "blocks", "seconds", source=_columns(medians, "blocks", "seconds"), line_width=2, color=PALETTE[1], legend_label="median"
    )
    fig.add_tools(HoverTool(tooltips=[("blocks", "@blocks"), ("seconds", "@seconds{0.000}")]))
    fig.legend.location = "top_left"
    return fig
