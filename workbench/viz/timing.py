"""Timing figures: bars per variant, and time against the number of blocks, in the workbench's one
figure style (:mod:`workbench.viz.style`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from bokeh.models import ColumnDataSource, FactorRange, FixedTicker, HoverTool, Whisker

from workbench.lab.stats import mean_ci
from workbench.viz.style import (
    COLOURS,
    PALETTE,
    bytes_text,
    colour_map,
    colours,
    fit_whiskers,
    legend_outside,
    log_byte_ticks,
    new_figure,
    ticks_at,
    wrap,
)

FACET_MIN_WIDTH = 240  # pixels: one facet of a comparison (a few bars); four side by side in a lesson's output


def _bar_colours(n: int) -> list[str]:
    """Distinct colours for ``n`` bars named on their axis, or one colour for all when there are more
    bars than distinct colours (the axis names them anyway)."""
    return colours(n) if n <= len(COLOURS) else [PALETTE[0]] * n


def _columns(table: pd.DataFrame, *names: str) -> ColumnDataSource:
    """A source from plain columns (bokeh's DataFrame path warns under pandas 3)."""
    return ColumnDataSource({name: table[name].to_list() for name in names})


def timing_bars(seconds: Mapping[str, float], title: str = "time per run", unit: str = "s"):
    """One bar per label: how long each variant took."""
    labels = list(seconds)
    source = ColumnDataSource(
        dict(
            label=labels,
            seconds=[float(seconds[k]) for k in labels],
            color=_bar_colours(len(labels)),
        )
    )
    fig = new_figure(x_range=labels, height=300, title=title, toolbar_location=None, y_axis_label=unit)
    fig.vbar(x="label", top="seconds", width=0.7, color="color", source=source)
    fig.add_tools(HoverTool(tooltips=[("variant", "@label"), ("time", f"@seconds{{0.0000}} {unit}")]))
    fig.y_range.start = 0
    return fig


def block_sweep_figure(runs: pd.DataFrame, title: str = "one task per block"):
    """Seconds per run against the number of blocks (log axis); the line joins the medians."""
    medians = runs.groupby("blocks", as_index=False)["seconds"].median()
    fig = new_figure(
        x_axis_type="log",
        title=title,
        x_axis_label="blocks (= tasks)",
        y_axis_label="seconds",
    )
    fig.scatter("blocks", "seconds", source=_columns(runs, "blocks", "seconds"), size=6, alpha=0.5, color=PALETTE[0])
    fig.line(
        "blocks",
        "seconds",
        source=_columns(medians, "blocks", "seconds"),
        line_width=2,
        color=PALETTE[1],
        legend_label="median",
    )
    fig.add_tools(HoverTool(tooltips=[("blocks", "@blocks"), ("seconds", "@seconds{0.000}")]))
    ticks_at(fig.xaxis, runs["blocks"])
    legend_outside(fig, "right")
    return fig


def comparison_means(results: pd.DataFrame, parameters: list[str]) -> pd.DataFrame:
    """Mean seconds and the 95 % CI of the mean per parameter point and variant (``point`` is the
    point's values joined by commas, ``all`` without parameters), in run order."""
    rows = []
    for key, group in results.groupby([*parameters, "variant"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        mean, low, high = mean_ci(group["seconds"])
        point = ", ".join(str(v) for v in key[:-1]) or "all"
        rows.append(dict(point=point, variant=str(key[-1]), mean=mean, low=low, high=high, runs=len(group)))
    return pd.DataFrame(rows, columns=["point", "variant", "mean", "low", "high", "runs"])


def comparison_figure(results: pd.DataFrame, parameters: list[str], title: str = "mean time with 95 % CI"):
    """Bars of mean seconds per variant, whiskers at the 95 % CI of the mean, one facet per parameter
    point (titled by it), every facet on one y scale that holds every whisker, the facets wrapping
    onto the next line where the output is narrow. One point: a single figure."""
    table = comparison_means(results, parameters)
    variants = list(dict.fromkeys(table["variant"]))
    palette = dict(zip(variants, colours(len(variants)), strict=True))
    points = list(dict.fromkeys(table["point"]))
    finite = table[[math.isfinite(v) for v in table["high"]]]
    name = ", ".join(parameters) or "variant"
    facets = []
    for point in points:
        rows = table[table["point"] == point]
        fig = new_figure(
            x_range=FactorRange(*rows["variant"]),
            height=320,
            min_width=FACET_MIN_WIDTH,
            title=title if len(points) == 1 else f"{name} = {point}",
            y_axis_label="seconds",
            tools="hover,save",
            tooltips=[
                ("variant", "@variant"),
                ("mean", "@mean{0.0000} s"),
                ("95% CI", "@low{0.0000} - @high{0.0000}"),
                ("runs", "@runs"),
            ],
        )
        source = ColumnDataSource(
            dict(
                variant=rows["variant"].to_list(),
                mean=rows["mean"].to_list(),
                low=rows["low"].to_list(),
                high=rows["high"].to_list(),
                runs=rows["runs"].to_list(),
                colour=[palette[v] for v in rows["variant"]],
            )
        )
        fig.vbar(x="variant", top="mean", width=0.75, color="colour", source=source)
        fig.add_layout(Whisker(base="variant", lower="low", upper="high", source=source, line_width=1.5))
        fig.xaxis.major_label_orientation = math.pi / 4  # variant names are long: turned, they never collide
        fig.xgrid.grid_line_color = None
        facets.append(fig)
    shared = fit_whiskers(facets[0], [*finite["low"], *finite["mean"]], [*finite["high"], *finite["mean"]])
    for fig in facets[1:]:
        fig.y_range = shared  # one scale: bars of different facets compare by height
    if len(facets) == 1:
        return facets[0]
    return wrap(facets, min_width=FACET_MIN_WIDTH, title=title)


def scaling_figure(
    table: pd.DataFrame, title: str = "weak scaling", y: str = "seconds", palette: Mapping[str, str] | None = None
):
    """One line per variant: ``y`` (seconds, or efficiency) against the number of workers. ``palette``
    maps variants to colours (:func:`~workbench.viz.style.colour_map`), the same in every figure shown
    beside this one; by default this figure's own."""
    y_label = {"seconds": "mean seconds per run", "efficiency": "efficiency t(first) / t(n)"}.get(y, y)
    fig = new_figure(
        title=title,
        x_axis_label="workers (points grow with them)",
        y_axis_label=y_label,
        tools="hover,save",
        tooltips=[("variant", "@variant"), ("workers", "@workers"), (y, f"@{y}{{0.000}}")],
    )
    groups = list(table.groupby("variant", sort=False))
    palette = palette or colour_map(variant for variant, _ in groups)
    for variant, rows in groups:
        colour = palette[str(variant)]
        rows = rows.sort_values("workers").assign(variant=variant)
        source = _columns(rows, "workers", y, "variant")
        fig.line("workers", y, source=source, line_width=2, color=colour, legend_label=str(variant))
        fig.scatter("workers", y, source=source, size=7, color=colour)
    fig.xaxis.ticker = sorted(table["workers"].unique().tolist())
    fig.y_range.start = 0
    legend_outside(fig, "below")  # under the plot: side by side in a wrapped row, each keeps its width
    return fig


def store_scale_figure(
    objects: Sequence[Mapping[str, Any]],
    blocks: Sequence[Mapping[str, Any]] = (),
    title: str = "the active store as it fills",
):
    """Log-log curves of ``workbench bench store-scale`` (its report's rows and ``parts["blocks"]``):
    registration per object, ``store.locations`` of all objects and ``.value()`` latency against the
    number of objects; ``persist_blocks`` per block against the number of blocks. Flat per-object lines
    are what scaling looks like."""
    objects = pd.DataFrame(list(objects))
    curves = {
        "make_persistent_many, ms per object": objects["per_object_ms"],
        "locations of all, ms": 1e3 * objects["locations_s"],
        ".value() latency, ms": objects["value_latency_ms"],
    }
    fig = new_figure(
        height=320,
        title=title,
        x_axis_type="log",
        y_axis_type="log",
        x_axis_label="objects (blocks for persist_blocks)",
        y_axis_label="milliseconds",
        tools="hover,save",
        tooltips=[("curve", "@curve"), ("count", "@count"), ("ms", "@ms{0.000}")],
    )
    series = [(name, objects["objects"], values) for name, values in curves.items()]
    if blocks:
        block_table = pd.DataFrame(list(blocks))
        series.append(("persist_blocks, ms per block", block_table["blocks"], block_table["per_block_ms"]))
    for colour, (name, counts, values) in zip(colours(len(series)), series, strict=True):
        source = ColumnDataSource({"count": list(counts), "ms": list(values), "curve": [name] * len(values)})
        fig.line("count", "ms", source=source, line_width=2, color=colour, legend_label=name)
        fig.scatter("count", "ms", source=source, size=7, color=colour)
    ticks_at(fig.xaxis, [c for _, counts, _ in series for c in counts])
    legend_outside(fig, "below")
    return fig


def tier_bandwidth_figure(bandwidth: dict, title: str = "bandwidth per tier, hot and cold"):
    """Grouped bars of ``workbench bench tiers``' bandwidth part: read hot, read cold and write GB/s
    per tier (log axis: a cold read from the device is an order of magnitude below DRAM)."""
    from bokeh.transform import dodge

    rows = bandwidth["rows"]
    tiers = [r["tier"] for r in rows]
    source = ColumnDataSource(
        dict(
            tier=tiers,
            read_hot=[r["read_hot_GBs"] for r in rows],
            read_cold=[r["read_cold_GBs"] for r in rows],
            write=[r["write_GBs"] for r in rows],
            medium=[r["medium"] for r in rows],
        )
    )
    fig = new_figure(
        x_range=tiers,
        y_axis_type="log",
        height=320,
        title=title,
        y_axis_label="GB/s",
        toolbar_location=None,
    )
    for offset, column, color, label in (
        (-0.25, "read_hot", PALETTE[0], "read, hot"),
        (0.0, "read_cold", PALETTE[1], "read, cold"),
        (0.25, "write", PALETTE[2], "write (durable)"),
    ):
        fig.vbar(
            x=dodge("tier", offset, range=fig.x_range),
            top=column,
            bottom=1e-3,
            width=0.22,
            color=color,
            legend_label=label,
            source=source,
        )
    fig.add_tools(
        HoverTool(
            tooltips=[
                ("tier", "@tier"),
                ("read hot", "@read_hot{0.00} GB/s"),
                ("read cold", "@read_cold{0.00} GB/s"),
                ("write", "@write{0.00} GB/s"),
                ("on", "@medium"),
            ]
        )
    )
    legend_outside(fig, "right")
    return fig


def tier_ratio_figure(ratios: pd.DataFrame, title: str = "time relative to dram (same run)"):
    """Horizontal bars of each configuration's median time over ``dram``'s (a ``ratios_to_dram`` table);
    a line at 1."""
    from bokeh.models import Span

    labels = list(ratios.index)
    source = ColumnDataSource(
        dict(
            variant=labels,
            ratio=[float(v) for v in ratios["vs_dram"]],
            seconds=[float(v) for v in ratios["median_s"]],
            color=[PALETTE[0] if v <= 1.1 else PALETTE[1] for v in ratios["vs_dram"]],
        )
    )
    fig = new_figure(
        y_range=labels[::-1],
        height=90 + 28 * len(labels),
        title=title,
        x_axis_label="median time / dram's",
        toolbar_location=None,
    )
    fig.hbar(y="variant", right="ratio", height=0.7, color="color", source=source)
    fig.add_layout(Span(location=1.0, dimension="height", line_dash="dashed", line_color="black"))
    fig.add_tools(
        HoverTool(tooltips=[("variant", "@variant"), ("ratio", "@ratio{0.00}x"), ("median", "@seconds{0.0000} s")])
    )
    fig.x_range.start = 0
    return fig


def pingpong_figure(curves: Mapping[str, list], title: str = "ping-pong throughput"):
    """Log-log throughput (MB/s) against payload bytes, one line per variant (``bench channels`` rows)."""
    fig = new_figure(
        x_axis_type="log",
        y_axis_type="log",
        height=340,
        title=title,
        x_axis_label="payload",
        y_axis_label="MB/s (round trips x payload / s)",
    )
    sizes = [r["nbytes"] for rows in curves.values() for r in rows]
    ticks, labels = log_byte_ticks(min(sizes, default=1), max(sizes, default=2))
    fig.xaxis.ticker = FixedTicker(ticks=ticks)
    fig.xaxis.major_label_overrides = labels
    for color, (name, rows) in zip(colours(len(curves)), curves.items(), strict=True):
        if not rows:
            continue
        source = ColumnDataSource(
            dict(
                nbytes=[r["nbytes"] for r in rows],
                payload=[bytes_text(r["nbytes"]) for r in rows],
                MBps=[max(r["MBps"], 1e-6) for r in rows],
                rtt_us=[r["round_trip_s"] * 1e6 for r in rows],
            )
        )
        fig.line("nbytes", "MBps", source=source, line_width=2, color=color, legend_label=name)
        fig.scatter("nbytes", "MBps", source=source, size=6, color=color, legend_label=name)
    fig.add_tools(
        HoverTool(tooltips=[("payload", "@payload"), ("MB/s", "@MBps{0.0}"), ("round trip", "@rtt_us{0.0} us")])
    )
    legend_outside(fig, "right")
    return fig


def stage_bars(stages: Mapping[str, pd.DataFrame], column: str = "seconds", title: str = "seconds per stage"):
    """Bars of one column per pipeline stage, one bar per run side by side (capstone: planted vs fixed)."""
    from bokeh.transform import factor_cmap

    runs = list(stages)
    names = [str(s) for s in next(iter(stages.values())).index] if stages else []
    factors = [(stage, run) for stage in names for run in runs]
    values = [float(stages[run].loc[stage, column]) for stage, run in factors]
    source = ColumnDataSource(dict(x=factors, value=values, run=[run for _, run in factors]))
    fig = new_figure(x_range=FactorRange(*factors), title=title, tools="hover,save")
    fig.vbar(x="x", top="value", width=0.8, source=source, fill_color=factor_cmap("x", colours(len(runs)), runs, 1, 2))
    fig.yaxis.axis_label = column
    fig.hover.tooltips = [("stage, run", "@x"), (column, "@value{0.000}")]
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    return fig
