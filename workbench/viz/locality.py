"""Where data lives and where it went: blocks x workers, and bytes moved between workers."""

from __future__ import annotations

import pandas as pd
from bokeh.models import ColumnDataSource, LinearColorMapper
from bokeh.plotting import figure


def block_map(locality: dict[str, str], title: str = "which worker holds which block", width: int = 760):
    """One column per block, one row per worker; a filled cell marks where the block is."""
    blocks = list(locality)
    workers = sorted(set(locality.values())) or ["(none)"]
    fig = figure(
        x_range=blocks or ["(none)"],
        y_range=workers,
        height=90 + 40 * len(workers),
        width=width,
        title=title,
        tools="hover,xpan,xwheel_zoom,reset",
        tooltips=[("block", "@block"), ("worker", "@worker")],
        x_axis_label=f"blocks ({len(blocks)})",
    )
    fig.rect(
        x="block",
        y="worker",
        width=0.95,
        height=0.9,
        color="#4477aa",
        source=ColumnDataSource(dict(block=blocks, worker=[locality[b] for b in blocks])),
    )
    fig.xaxis.major_label_text_font_size = "0pt" if len(blocks) > 40 else "9pt"
    fig.xaxis.major_label_orientation = 1.2
    fig.grid.grid_line_color = None
    return fig


def bytes_matrix(matrix: pd.DataFrame, title: str = "bytes moved (source -> destination)"):
    """Heatmap of a bytes-moved matrix (rows: sources, columns: destinations)."""
    sources = [str(s) for s in matrix.index] or ["(none)"]
    destinations = [str(c) for c in matrix.columns] or ["(none)"]
    cells = [(str(s), str(d), int(matrix.loc[s, d])) for s in matrix.index for d in matrix.columns]
    fig = figure(
        x_range=destinations,
        y_range=list(reversed(sources)),
        height=110 + 45 * len(sources),
        width=140 + 150 * len(destinations),
        title=title,
        tools="hover,save",
        toolbar_location=None,
        tooltips=[("from", "@source"), ("to", "@destination"), ("bytes", "@bytes{0,0}")],
        x_axis_label="destination",
        y_axis_label="source",
    )
    data = dict(source=[c[0] for c in cells], destination=[c[1] for c in cells], bytes=[c[2] for c in cells])
    mapper = LinearColorMapper(palette="Blues256", low=max(data["bytes"] or [1]), high=0)
    fig.rect(
        x="destination",
        y="source",
        width=1,
        height=1,
        source=ColumnDataSource(data),
        fill_color={"field": "bytes", "transform": mapper},
        line_color="white",
    )
    fig.text(
        x="destination",
        y="source",
        text="bytes",
        source=ColumnDataSource(data),
        text_align="center",
        text_baseline="middle",
        text_font_size="9pt",
    )
    fig.xaxis.major_label_orientation = 0.5
    fig.grid.grid_line_color = None
    return fig
