"""One figure style for every lesson, panel and report: what makes a figure fit its output and read.

- A figure fills the width of the output it is shown in (bokeh's ``sizing_mode="stretch_width"``) at a
  fixed height, down to :data:`MIN_WIDTH`; figures side by side go in :func:`wrap`, a row that wraps
  onto the next line where the output is narrow, never past its edge (bokeh's ``row`` does not wrap).
- Colours come from Okabe and Ito's colour-blind-safe palette (:data:`PALETTE`), then Paul Tol's
  muted one (:data:`MORE`); :func:`colours` gives distinct ones, so every entry a legend names has
  its own colour, and :func:`colour_map` the same colour to a variant in figures shown together.
- A legend sits beside or below the data (:func:`legend_outside`), never over it.
- Error whiskers are inside the y range (:func:`fit_whiskers`): bokeh's automatic range stops at the
  bars.
- Bytes are written as :func:`workbench.units.size_text` writes them (``1.25 MiB``), on cells, ticks
  and tooltips (:func:`byte_ticks`); matrices compared with one another share one colour scale.
- Text on a coloured cell is light on dark cells and dark on light ones (:func:`text_colour`).
- Tick labels do not collide: few numeric ticks, ticks at the values measured (:func:`ticks_at`), and
  categorical labels turned when there are many or long ones (:func:`thin_ticks`).
- A table shown in a lesson wraps its headers and writes bytes in binary units (:func:`readable`).

Each figure function of :mod:`workbench.viz` builds its figures with :func:`new_figure` and these
helpers; ``tests/test_viz_style.py`` checks the rules on the figure objects.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
from bokeh.layouts import column
from bokeh.models import Div, FactorRange, LayoutDOM, Range1d, Row
from bokeh.plotting import figure

from workbench.units import size_text

# Okabe & Ito (2008), black left out: blue, orange, bluish green, vermillion, sky blue, reddish purple, yellow.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442")
# Beyond seven: Paul Tol's muted scheme (indigo, olive, wine, teal, sand, rose), then grey and black.
MORE = ("#332288", "#999933", "#882255", "#44AA99", "#DDCC77", "#CC6677", "#777777", "#000000")
COLOURS = PALETTE + MORE
SEQUENTIAL = "Blues256"  # light (small) to dark (large) once reversed: matrices of bytes

HEIGHT = 300  # pixels: a figure's height unless it sizes itself by its rows
MIN_WIDTH = 320  # pixels: narrower than this, a figure stops shrinking (and a wrapped row breaks before it)
TOOLBAR = "above"  # the toolbar over the figure (shown on hover), not beside it: the plot keeps the width
NUMERIC_TICKS = 5  # ticks bokeh aims at on a numeric axis: labels like "12000" stay apart at MIN_WIDTH
LEGEND_ROW = 24  # pixels: a row of a legend under a figure, added to the figure's height
LEGEND_CHARACTERS = 60  # characters of legend labels side by side under a figure (about 7 px each, with swatches)
TURN = math.pi / 4  # categorical labels turned by 45 degrees when many or long


def colours(n: int) -> list[str]:
    """``n`` distinct colours, Okabe-Ito's first; more than :data:`COLOURS` holds is refused (a legend
    of that many entries cannot be read: facet, or group the entries)."""
    if n > len(COLOURS):
        raise ValueError(f"{n} categories, but only {len(COLOURS)} distinct colours: facet or group them")
    return list(COLOURS[:n])


def colour_map(names: Iterable[str]) -> dict[str, str]:
    """A distinct colour for each name, in the order first seen: pass the names of every figure shown
    together, so that a variant has the same colour in each (:func:`colours` refuses too many)."""
    names = list(dict.fromkeys(str(n) for n in names))
    return dict(zip(names, colours(len(names)), strict=True))


def new_figure(*, height: int = HEIGHT, min_width: int = MIN_WIDTH, **options: Any):
    """A bokeh figure in the workbench's style: as wide as its output (``stretch_width``, no fixed width),
    ``height`` pixels high, the toolbar above the plot while the pointer is over it. ``options`` go to
    :func:`bokeh.plotting.figure`; a ``width`` is refused (a fixed width runs off a narrow output)."""
    if "width" in options or "sizing_mode" in options:
        raise TypeError("new_figure sizes itself to its output: give no width or sizing_mode")
    options.setdefault("toolbar_location", TOOLBAR)
    fig = figure(sizing_mode="stretch_width", height=height, min_width=min_width, **options)
    fig.toolbar.autohide = True  # shown while the pointer is over the figure: never over a narrow title
    fig.title.text_font_size = "11pt"
    fig.min_border_right = 16  # the last tick label stays inside the canvas
    thin_ticks(fig)
    return fig


def legend_outside(fig, place: str = "right") -> None:
    """Move the figure's legend out of the data: ``"right"`` (beside the plot) or ``"below"`` (under it,
    in up to three columns, fewer where the labels are long; the figure grows by the legend's rows, so
    the plot keeps its height). Does nothing for a figure without a legend."""
    if place not in ("right", "below"):
        raise ValueError(f"place must be 'right' or 'below', got {place!r}")
    if not fig.legend:
        return
    legend = fig.legend[0]
    if place == "below":  # in as many columns as labels of that length fit side by side at MIN_WIDTH
        longest = max((len(str(item.label.value)) for item in legend.items if item.label), default=1)
        legend.orientation = "horizontal"
        legend.ncols = max(1, min(3, len(legend.items), LEGEND_CHARACTERS // max(1, longest)))
        fig.height += LEGEND_ROW * math.ceil(len(legend.items) / legend.ncols)  # the plot keeps its height
    legend.border_line_alpha = 0
    fig.add_layout(legend, place)  # bokeh moves it there from inside the plot


def fit_whiskers(fig, lows: Iterable[float], highs: Iterable[float], floor: float | None = 0.0) -> Range1d:
    """Set the figure's y range so that every whisker (``lows`` to ``highs``) shows, with a margin above;
    it starts at ``floor`` (bars grow from 0), or below it with a margin where a whisker goes lower
    (``floor=None``: at the lowest whisker, with a margin). Returns the range, for facets that share it."""
    lows, highs = [float(v) for v in lows], [float(v) for v in highs]
    top, bottom = max(highs, default=1.0), min(lows, default=0.0)
    if floor is not None:
        top = max(top, floor)
    span = (top - min(bottom, top if floor is None else floor)) or abs(top) or 1.0
    start = floor if floor is not None and bottom >= floor else bottom - 0.05 * span
    fig.y_range = Range1d(start=start, end=top + 0.08 * span)
    return fig.y_range


def wrap(figures: Sequence[LayoutDOM], min_width: int = MIN_WIDTH, title: str | None = None) -> LayoutDOM:
    """Figures side by side as long as each keeps ``min_width`` pixels, wrapping onto the next line where
    the output is narrower (a CSS flex row that wraps): never wider than the output. Each is at most
    twice ``min_width`` wide (the last one of a row alone would otherwise fill the row: its bars twice
    as wide as the others'). ``title`` (if any) goes above them."""
    for fig in figures:
        fig.sizing_mode = "stretch_width"
        fig.min_width, fig.max_width = min_width, 2 * min_width
    row = Row(
        children=list(figures),
        sizing_mode="stretch_width",
        styles={"flex-wrap": "wrap", "row-gap": "8px"},
    )
    if title is None:
        return row
    header = Div(text=f"<b>{html.escape(title)}</b>", sizing_mode="stretch_width", styles={"font-size": "11pt"})
    return column(header, row, sizing_mode="stretch_width")


def thin_ticks(fig) -> None:
    """Tick labels that do not run together: about :data:`NUMERIC_TICKS` ticks on a numeric axis; on a
    categorical axis with many factors or long ones, labels turned by 45 degrees."""
    for axis, rng in ((fig.xaxis, fig.x_range), (fig.yaxis, fig.y_range)):
        if isinstance(rng, FactorRange):
            continue
        for a in axis:
            if hasattr(a.ticker, "desired_num_ticks"):
                a.ticker.desired_num_ticks = NUMERIC_TICKS
    if isinstance(fig.x_range, FactorRange):
        labels = [str(f[-1] if isinstance(f, tuple) else f) for f in fig.x_range.factors]
        if len(labels) > 6 or max((len(s) for s in labels), default=0) > 8:
            fig.xaxis.major_label_orientation = TURN


def ticks_at(axis, values: Iterable[float], most: int = 8) -> None:
    """Ticks at the values measured (blocks, objects, workers) when there are at most ``most`` of them:
    on a log axis spanning a decade or two, bokeh's own ticks fall between them or run together."""
    from bokeh.models import FixedTicker

    values = sorted({float(v) for v in values})
    if 0 < len(values) <= most:
        axis.ticker = FixedTicker(ticks=values)


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (a ``#rrggbb`` colour): WCAG's relative
    luminance, the contrast ratio of each."""
    r, g, b = (int(fill.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)
    return "#000000" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "#ffffff"


def byte_ticks(high: float, n: int = 5) -> tuple[list[int], dict[int, str]]:
    """At most ``n`` tick values from 0 to ``high`` bytes, a power of two apart (so that each reads
    round in binary units: 0, 512 MiB, 1 GiB, 1.5 GiB) and their labels as
    :func:`~workbench.units.size_text` writes them: for a colour bar or an axis of bytes (bokeh's
    ``major_label_overrides``)."""
    if high < 1:
        return [0], {0: size_text(0)}
    step = 2 ** math.ceil(math.log2(high / max(1, n - 1)))
    ticks = [i * step for i in range(int(high // step) + 1)]
    return ticks, {t: size_text(t) for t in ticks}


def log_byte_ticks(low: float, high: float, n: int = 6) -> tuple[list[int], dict[int, str]]:
    """At most ``n`` powers of two from ``low`` to ``high`` bytes, evenly spaced on a log axis, and their
    labels as :func:`~workbench.units.size_text` writes them (``64 KiB``, ``1 MiB``)."""
    first, last = math.floor(math.log2(max(low, 1))), math.ceil(math.log2(max(high, 1)))
    step = max(1, math.ceil((last - first) / max(1, n - 1)))
    ticks = [2**e for e in range(first, last + 1) if e % step == 0]
    return ticks, {t: size_text(t) for t in ticks}


def readable(frame: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """A copy of ``frame`` to show in a lesson: underscores in its labels become spaces (a long header
    wraps instead of widening the table past its output), numbers are written to ``digits`` significant
    digits, and columns of bytes (whose name's last word ends in ``bytes``: ``nbytes``, ``disk_bytes``) in
    KiB/MiB/GiB."""

    def label(value: object) -> object:
        return value.replace("_", " ") if isinstance(value, str) else value

    def number(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value
        if isinstance(value, int) or float(value).is_integer():
            return f"{int(value):,}"
        return f"{value:.{digits}g}"

    shown = frame.copy()
    for name in shown.columns:
        key = name[-1] if isinstance(name, tuple) else name
        is_bytes = isinstance(key, str) and key.lower().replace("_", " ").split(" ")[-1].endswith("bytes")
        shown[name] = [bytes_text(v) if is_bytes and pd.notna(v) else number(v) for v in shown[name].to_list()]
    return shown.rename(index=label, columns=label)


def bytes_text(nbytes: float) -> str:
    """Bytes as the workbench writes them everywhere (:func:`workbench.units.size_text`)."""
    return size_text(int(nbytes))
