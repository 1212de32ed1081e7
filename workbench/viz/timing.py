"""Timing figures: bars per variant, and time against the number of blocks."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool, Whisker
from bokeh.plotting import figure

from workbench.lab.stats import mean_ci

PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


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
            color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))],
        )
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
        x_axis_type="log",
        height=300,
        width=560,
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
    fig.legend.location = "top_left"
    return fig


def comparison_figure(results: pd.DataFrame, parameters: list[str], title: str = "mean time with 95 % CI"):
    """Bars of mean seconds per variant at each parameter point, whiskers at the 95 % CI of the mean."""
    rows = []
    group_keys = parameters + ["variant"]
    for key, group in results.groupby(group_keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        mean, low, high = mean_ci(group["seconds"])
        point = ", ".join(str(v) for v in key[:-1]) or "all"
        rows.append(dict(point=point, variant=str(key[-1]), mean=mean, low=low, high=high, runs=len(group)))
    table = pd.DataFrame(rows)
    variants = list(dict.fromkeys(table["variant"]))
    factors = [(p, v) for p, v in zip(table["point"], table["variant"])]
    from bokeh.models import FactorRange

    fig = figure(
        x_range=FactorRange(*factors),
        height=320,
        width=max(420, 60 * len(factors) + 120),
        title=title,
        y_axis_label="seconds",
        x_axis_label=", ".join(parameters) or "variant",
        tools="hover,save",
        toolbar_location="right",
        tooltips=[
            ("variant", "@variant"),
            ("mean", "@mean{0.0000} s"),
            ("95% CI", "@low{0.0000} - @high{0.0000}"),
            ("runs", "@runs"),
        ],
    )
    source = ColumnDataSource(
        dict(
            x=factors,
            variant=table["variant"].to_list(),
            mean=table["mean"].to_list(),
            low=table["low"].to_list(),
            high=table["high"].to_list(),
            runs=table["runs"].to_list(),
            colour=[PALETTE[variants.index(v) % len(PALETTE)] for v in table["variant"]],
        )
    )
    fig.vbar(x="x", top="mean", width=0.8, color="colour", source=source)
    fig.add_layout(Whisker(base="x", lower="low", upper="high", source=source, line_width=1.5))
    fig.y_range.start = 0
    fig.xaxis.major_label_orientation = 0.8
    fig.xgrid.grid_line_color = None
    return fig


def scaling_figure(table: pd.DataFrame, title: str = "weak scaling", y: str = "seconds"):
    """One line per variant: ``y`` (seconds, or efficiency) against the number of workers."""
    y_label = {"seconds": "mean seconds per run", "efficiency": "efficiency t(first) / t(n)"}.get(y, y)
    fig = figure(
        height=300,
        width=520,
        title=title,
        x_axis_label="workers (points grow with them)",
        y_axis_label=y_label,
        tools="hover,save",
        tooltips=[("variant", "@variant"), ("workers", "@workers"), (y, f"@{y}{{0.000}}")],
    )
    for i, (variant, rows) in enumerate(table.groupby("variant", sort=False)):
        rows = rows.sort_values("workers").assign(variant=variant)
        source = _columns(rows, "workers", y, "variant")
        colour = PALETTE[i % len(PALETTE)]
        fig.line("workers", y, source=source, line_width=2, color=colour, legend_label=str(variant))
        fig.scatter("workers", y, source=source, size=7, color=colour)
    fig.xaxis.ticker = sorted(table["workers"].unique().tolist())
    fig.y_range.start = 0
    fig.legend.location = "bottom_left"
    return fig


def store_scale_figure(report: dict, title: str = "the active store as it fills"):
    """Log-log curves of ``workbench bench store-scale``: registration per object, ``store.locations`` of all
    objects and ``.value()`` latency against the number of objects; ``persist_blocks`` per block
    against the number of blocks. Flat per-object lines are what scaling looks like."""
    objects = pd.DataFrame(report["objects"])
    curves = {
        "make_persistent_many, ms per object": objects["per_object_ms"],
        "locations of all, ms": 1e3 * objects["locations_s"],
        ".value() latency, ms": objects["value_latency_ms"],
    }
    fig = figure(
        height=320,
        width=560,
        title=title,
        x_axis_type="log",
        y_axis_type="log",
        x_axis_label="objects (blocks for persist_blocks)",
        y_axis_label="milliseconds",
        tools="hover,save",
        tooltips=[("curve", "@curve"), ("count", "@count"), ("ms", "@ms{0.000}")],
    )
    series = [(name, objects["objects"], values) for name, values in curves.items()]
    if report.get("blocks"):
        blocks = pd.DataFrame(report["blocks"])
        series.append(("persist_blocks, ms per block", blocks["blocks"], blocks["per_block_ms"]))
    for i, (name, counts, values) in enumerate(series):
        source = ColumnDataSource({"count": list(counts), "ms": list(values), "curve": [name] * len(values)})
        colour = PALETTE[i % len(PALETTE)]
        fig.line("count", "ms", source=source, line_width=2, color=colour, legend_label=name)
        fig.scatter("count", "ms", source=source, size=7, color=colour)
    fig.legend.location = "top_left"
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
    fig = figure(
        x_range=tiers,
        y_axis_type="log",
        height=320,
        width=620,
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
    fig.legend.location = "top_right"
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
    fig = figure(
        y_range=labels[::-1],
        height=40 + 26 * len(labels),
        width=560,
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
    fig = figure(
        x_axis_type="log",
        y_axis_type="log",
        height=340,
        width=620,
        title=title,
        x_axis_label="payload (bytes)",
        y_axis_label="MB/s (round trips x payload / s)",
    )
    for i, (name, rows) in enumerate(curves.items()):
        if not rows:
            continue
        source = ColumnDataSource(
            dict(
                nbytes=[r["nbytes"] for r in rows],
                MBps=[max(r["MBps"], 1e-6) for r in rows],
                rtt_us=[r["round_trip_s"] * 1e6 for r in rows],
            )
        )
        color = PALETTE[i % len(PALETTE)]
        fig.line("nbytes", "MBps", source=source, line_width=2, color=color, legend_label=name)
        fig.scatter("nbytes", "MBps", source=source, size=6, color=color, legend_label=name)
    fig.add_tools(
        HoverTool(tooltips=[("payload", "@nbytes B"), ("MB/s", "@MBps{0.0}"), ("round trip", "@rtt_us{0.0} us")])
    )
    fig.legend.location = "top_left"
    return fig


def stage_bars(stages: Mapping[str, pd.DataFrame], column: str = "seconds", title: str = "seconds per stage"):
    """Bars of one column per pipeline stage, one bar per run side by side (capstone: planted vs fixed)."""
    from bokeh.models import FactorRange
    from bokeh.palettes import Category10
    from bokeh.transform import factor_cmap

    runs = list(stages)
    names = [str(s) for s in next(iter(stages.values())).index] if stages else []
    factors = [(stage, run) for stage in names for run in runs]
    values = [float(stages[run].loc[stage, column]) for stage, run in factors]
    source = ColumnDataSource(dict(x=factors, value=values, run=[run for _, run in factors]))
    fig = figure(x_range=FactorRange(*factors), height=300, width=640, title=title, tools="hover,save")
    fig.vbar(x="x", top="value", width=0.8, source=source, fill_color=factor_cmap("x", Category10[10], runs, 1, 2))
    fig.yaxis.axis_label = column
    fig.hover.tooltips = [("stage, run", "@x"), (column, "@value{0.000}")]
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    return fig
