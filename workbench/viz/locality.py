"""Where data lives and where it went: blocks x workers, and bytes moved between workers.

Matrices of bytes that a lesson compares are drawn by :func:`bytes_matrices` on one colour scale, with
its colour bar: the same shade is the same number of bytes in each.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from bokeh import palettes
from bokeh.models import ColorBar, ColumnDataSource, FixedTicker, LinearColorMapper

from workbench.viz.gantt import short_workers
from workbench.viz.style import PALETTE, SEQUENTIAL, byte_ticks, bytes_text, new_figure, text_colour, wrap

MATRIX_MIN_WIDTH = 380  # pixels: two matrices side by side in a lesson's output, one per line below that


def block_map(locality: dict[str, str], title: str = "which worker holds which block"):
    """One column per block, one row per worker; a filled cell marks where the block is."""
    blocks = list(locality)
    names = short_workers(locality.values())
    workers = sorted(set(names.values())) or ["(none)"]
    fig = new_figure(
        x_range=blocks or ["(none)"],
        y_range=workers,
        height=110 + 40 * len(workers),
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
        color=PALETTE[0],
        source=ColumnDataSource(dict(block=blocks, worker=[names[locality[b]] for b in blocks])),
    )
    # block names are for the hover: on the axis they would run together
    fig.xaxis.major_label_text_font_size = "0pt" if len(blocks) > 24 else "9pt"
    fig.xaxis.major_tick_line_color = None if len(blocks) > 24 else "black"
    fig.grid.grid_line_color = None
    return fig


def bytes_mapper(matrices: Mapping[str, pd.DataFrame] | pd.DataFrame) -> LinearColorMapper:
    """One colour scale for every matrix given: light at 0 bytes, darkest at the largest cell of all."""
    frames = [matrices] if isinstance(matrices, pd.DataFrame) else list(matrices.values())
    high = max((float(m.to_numpy().max()) for m in frames if m.size), default=0.0)
    return LinearColorMapper(palette=list(reversed(getattr(palettes, SEQUENTIAL))), low=0, high=max(high, 1.0))


def _cell_colour(value: float, mapper: LinearColorMapper) -> str:
    """The colour ``mapper`` gives ``value`` (as bokeh maps it: equal bins from low to high)."""
    palette = mapper.palette
    share = (value - mapper.low) / ((mapper.high - mapper.low) or 1.0)
    return palette[min(len(palette) - 1, max(0, int(share * len(palette))))]


def bytes_matrix(
    matrix: pd.DataFrame, title: str = "bytes moved (source -> destination)", mapper: LinearColorMapper | None = None
):
    """Heatmap of a bytes-moved matrix (rows: sources, columns: destinations), each cell labelled in
    KiB/MiB/GiB, dark text on light cells and light on dark, with its colour bar. ``mapper`` is the
    colour scale (:func:`bytes_mapper`; shared by matrices compared with one another: see
    :func:`bytes_matrices`); by default this matrix's own."""
    mapper = mapper if mapper is not None else bytes_mapper(matrix)
    names = short_workers([*map(str, matrix.index), *map(str, matrix.columns)])
    sources = [names[str(s)] for s in matrix.index] or ["(none)"]
    destinations = [names[str(c)] for c in matrix.columns] or ["(none)"]
    cells = [(names[str(s)], names[str(d)], int(matrix.loc[s, d])) for s in matrix.index for d in matrix.columns]
    fig = new_figure(
        x_range=destinations,
        y_range=list(reversed(sources)),
        height=150 + 45 * len(sources),
        min_width=MATRIX_MIN_WIDTH,
        title=title,
        tools="hover,save",
        toolbar_location=None,
        tooltips=[("from", "@source"), ("to", "@destination"), ("bytes", "@label (@bytes{0,0} B)")],
        x_axis_label="destination",
        y_axis_label="source",
    )
    source = ColumnDataSource(
        dict(
            source=[c[0] for c in cells],
            destination=[c[1] for c in cells],
            bytes=[c[2] for c in cells],
            label=[bytes_text(c[2]) for c in cells],
            ink=[text_colour(_cell_colour(c[2], mapper)) for c in cells],
        )
    )
    fig.rect(
        x="destination",
        y="source",
        width=1,
        height=1,
        source=source,
        fill_color={"field": "bytes", "transform": mapper},
        line_color="white",
    )
    fig.text(
        x="destination",
        y="source",
        text="label",
        text_color="ink",
        source=source,
        text_align="center",
        text_baseline="middle",
        text_font_size="9pt",
    )
    ticks, labels = byte_ticks(mapper.high)
    fig.add_layout(
        ColorBar(
            color_mapper=mapper,
            ticker=FixedTicker(ticks=ticks),
            major_label_overrides=labels,
            title="bytes",
            width=12,
        ),
        "right",
    )
    fig.xaxis.major_label_orientation = 0.5
    fig.grid.grid_line_color = None
    return fig


def bytes_matrices(matrices: Mapping[str, pd.DataFrame], title: str | None = None):
    """Matrices of bytes moved that are compared (one per variant, per stage ...), titled by their keys,
    side by side where the output is wide enough (:func:`~workbench.viz.style.wrap`), all on one colour
    scale: the same shade is the same number of bytes in each, and each shows that scale's colour bar."""
    if not matrices:
        raise ValueError("bytes_matrices needs at least one matrix")
    mapper = bytes_mapper(matrices)
    figures = [bytes_matrix(matrix, title=str(name), mapper=mapper) for name, matrix in matrices.items()]
    return wrap(figures, min_width=MATRIX_MIN_WIDTH, title=title)
