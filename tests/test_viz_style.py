"""The one figure style (workbench/viz/style.py), checked on the figure objects every figure function
of workbench.viz builds, from small made-up inputs (no cluster, no browser: a second in all).

What a learner meets in the browser (tests/test_lesson_figures.py measures it there) follows from
these rules: every figure is as wide as its output and no wider; figures side by side wrap; every
legend entry has its own colour, from a colour-blind-safe palette, and sits outside the data; error
whiskers are inside the y range; compared matrices share one colour scale with its colour bar, their
cells read in KiB/MiB/GiB, light text on dark cells.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from bokeh.models import ColorBar, FactorRange, FixedTicker, Legend, Plot, Row, Text, Whisker

from workbench.runtime.trace import FIELDS
from workbench.units import size_text
from workbench.viz import execution_models, gantt, gpu, locality, style, timing

ROOT = Path(__file__).resolve().parents[1]
LAID_OUT = {"figure", "new_figure", "Div", "column", "row", "gridplot", "Row", "Column", "GridBox"}  # take a width
OKABE_ITO = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


# -- made-up inputs, shaped as the lab's functions return them --------------------------------------
def _trace(actions: list[str], workers: tuple[str, ...] = ("tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002")):
    rows = []
    for i, action in enumerate(actions):
        worker = "client" if action.startswith("phase:") else workers[i % len(workers)]
        rows.append(dict(zip(FIELDS, (worker, 0, f"t{i}", f"k{i}", action, 1.0 + i, 1.5 + i, 1000 * i, "", ""))))
    return pd.DataFrame(rows, columns=list(FIELDS))


def _results(points=(1, 8, 64, 200), variants=("blocks", "rechunk", "split", "split-materialized")):
    rows = []
    for p in points:
        for j, v in enumerate(variants):
            for k, s in enumerate((0.1, 0.5, 0.9)):  # wide intervals: the whiskers go far above the bars
                rows.append({"blocks_per_worker": p, "variant": v, "repeat": k, "seconds": s * (1 + j) * p / 10})
    return pd.DataFrame(rows)


def _matrix(scale: float) -> pd.DataFrame:
    workers = ["tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"]
    return pd.DataFrame([[0, int(scale)], [int(scale / 3), 0]], index=workers, columns=workers)


def every_figure() -> dict[str, object]:
    """One of each figure the lessons, panels and reports show."""
    scaling = pd.DataFrame(
        [{"variant": v, "workers": w, "seconds": 0.1 * w} for v in ("active", "non-active") for w in (1, 2)]
    )
    stages = pd.DataFrame({"seconds": [0.2, 0.1]}, index=["load", "kmeans"])
    return {
        "timing_bars": timing.timing_bars({"numpy": 0.2, "numba": 0.1, "a longer label": 0.3}),
        "block_sweep_figure": timing.block_sweep_figure(
            pd.DataFrame({"blocks": [2, 2, 8, 8], "seconds": [0.1, 0.2, 0.3, 0.4]})
        ),
        "comparison_figure": timing.comparison_figure(_results(), ["blocks_per_worker"]),
        "comparison_figure, one point": timing.comparison_figure(_results(points=(4,)), ["blocks_per_worker"]),
        "scaling_figure": timing.scaling_figure(scaling),
        "store_scale_figure": timing.store_scale_figure(
            [{"objects": n, "per_object_ms": 0.1, "locations_s": 0.01, "value_latency_ms": 1.0} for n in (100, 1000)],
            [{"blocks": n, "per_block_ms": 0.2} for n in (100, 1000)],
        ),
        "tier_bandwidth_figure": timing.tier_bandwidth_figure(
            {
                "rows": [
                    {"tier": t, "read_hot_GBs": 9.0, "read_cold_GBs": 1.0, "write_GBs": 2.0, "medium": "tmpfs"}
                    for t in ("dram", "mapped", "disk")
                ]
            }
        ),
        "tier_ratio_figure": timing.tier_ratio_figure(
            pd.DataFrame({"vs_dram": [1.0, 1.4], "median_s": [0.1, 0.14]}, index=["dram", "mapped"])
        ),
        "pingpong_figure": timing.pingpong_figure(
            {
                name: [{"nbytes": 2**k, "MBps": 10.0 * k, "round_trip_s": 1e-4} for k in (3, 10, 20, 26)]
                for name in ("channels", "eager")
            }
        ),
        "stage_bars": timing.stage_bars({"planted": stages, "yours": stages / 2}),
        "gantt": gantt.gantt(_trace(["compute", "transfer", "compute", "phase:split", "steal"]), title="g"),
        "gantt, who waited": gantt.gantt(_trace(["put", "take", "wait", "put", "take", "wait"]), title="w"),
        "block_map": locality.block_map({f"b{i}": f"tcp://127.0.0.1:4000{i % 2}" for i in range(64)}),
        "bytes_matrix": locality.bytes_matrix(_matrix(1.8e9)),
        "bytes_matrices": locality.bytes_matrices({"active": _matrix(106_800), "non-active": _matrix(1.8e9)}),
        "spawn_figure": execution_models.spawn_figure(
            [
                {"model": m, "seconds": s, "vs_thread": s / 1e-5, "how": "..."}
                for m, s in (("thread", 1e-5), ("process", 1e-3), ("dask task", 1e-2))
            ]
        ),
        "page_table_figure": execution_models.page_table_figure(
            [
                {"model": m, "tasks": n, "vmpte_kib": 8 * n, "expected_kib": 8 * n}
                for m in ("processes", "threads")
                for n in (1, 2, 4)
            ]
        ),
        "mmap_figure": execution_models.mmap_figure(
            {"rows": [{"tasks": n, "threads_per_s": 1e5 / n, "processes_per_s": 1e5} for n in (1, 2, 4)]}
        ),
        "rate_figure": gpu.rate_figure(
            {"pageable_to_device_gbs": 5.0, "pinned_to_device_gbs": 12.0, "to_host_gbs": 11.0},
            {"gbs": 1500.0},
            {"gbs": 900.0},
            simulated=False,
        ),
        "bytes_figure": gpu.bytes_figure(
            [
                {"way": w, "iteration": i, "bytes_to_device": (i if w == "copied" else 1) * 2**26, "seconds": 0.1 * i}
                for w in gpu.WAYS
                for i in (1, 2, 3)
            ]
        ),
    }


FIGURES = every_figure()


def plots_of(layout) -> list[Plot]:
    """Every bokeh plot in a figure or layout."""
    return [m for m in layout.references() if isinstance(m, Plot)]


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_fills_its_output_and_wraps_rather_than_runs_off(name):
    layout = FIGURES[name]
    assert layout.sizing_mode == "stretch_width", f"{name}: a fixed width runs off a narrow output"
    for plot in plots_of(layout):
        assert plot.sizing_mode == "stretch_width" and plot.min_width <= 440, (name, plot.min_width)
        assert 120 <= plot.height <= 700, (name, plot.height)
    for row in (m for m in layout.references() if isinstance(m, Row)):
        assert (row.styles or {}).get("flex-wrap") == "wrap", f"{name}: a row that does not wrap runs off the edge"
        assert all(child.max_width <= 2 * child.min_width for child in row.children), f"{name}: a lone facet balloons"


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_legend_is_outside_the_data_and_names_each_entry_in_its_own_safe_colour(name):
    safe = {c.upper() for c in style.COLOURS}
    for plot in plots_of(FIGURES[name]):
        assert not [m for m in plot.center if isinstance(m, Legend)], f"{name}: a legend inside the data"
        for legend in (m for m in [*plot.right, *plot.below] if isinstance(m, Legend)):
            looks, colours = [], []
            for item in legend.items:
                glyph = item.renderers[0].glyph
                colour = str(getattr(glyph, "fill_color", None) or glyph.line_color).upper()
                looks.append((colour, tuple(getattr(glyph, "line_dash", ()))))  # a dashed line of a colour: its own
                colours.append(colour)
            assert len(set(looks)) == len(looks), f"{name}: legend entries look the same: {looks}"
            assert set(colours) <= safe, f"{name}: colours outside the colour-blind-safe palette: {colours}"


def test_the_palette_is_okabe_ito_first_and_a_variant_keeps_its_colour_across_figures():
    assert set(style.PALETTE) == OKABE_ITO
    assert len(set(style.COLOURS)) == len(style.COLOURS)
    palette = style.colour_map(["active", "blocks", "non-active", "active-split", "blocks"])
    assert list(palette) == ["active", "blocks", "non-active", "active-split"] and len(set(palette.values())) == 4
    table = pd.DataFrame([{"variant": v, "workers": w, "seconds": 1.0} for v in ("blocks", "active") for w in (1, 2)])
    lines = [r for r in timing.scaling_figure(table, palette=palette).renderers if r.glyph.__class__.__name__ == "Line"]
    assert {r.glyph.line_color for r in lines} == {palette["blocks"], palette["active"]}
    with pytest.raises(ValueError, match="facet or group"):
        style.colours(len(style.COLOURS) + 1)


def test_a_gantt_gives_put_take_and_wait_three_colours_and_every_action_its_own():
    entries = {item.label.value for item in FIGURES["gantt, who waited"].legend[0].items}
    assert entries == {"put", "take", "wait"}
    known = list(gantt.ACTION_COLOURS)
    for start in range(0, len(known), 4):  # any dozen known actions, two phases and an unknown one
        every = [*(known * 2)[start : start + 12], "phase:split", "phase:fetch", "something new"]
        chosen = gantt.action_colours(every)
        assert len(set(chosen.values())) == len(every) == len(style.COLOURS)
        assert chosen[every[0]] == gantt.ACTION_COLOURS[every[0]]  # the same action, the same colour everywhere
    runs = [gantt.action_colours(["compute", "transfer", *extra]) for extra in (["file-read"], ["shm-create"])]
    phases = ["phase:first-iteration", "phase:later-iterations"]
    assert [gantt.action_colours(["compute", "file-read", *phases])[p] for p in phases] == [
        gantt.action_colours(["compute", "shm-attach", "table-hit", *phases])[p] for p in phases
    ], "a lesson's two Gantts draw its phases alike"
    assert runs[0]["transfer"] == runs[1]["transfer"]
    with pytest.raises(ValueError, match="more than 15 actions"):
        gantt.action_colours([*known, "phase:split"])


def test_gantt_rows_name_workers_by_port_on_one_machine():
    plot = FIGURES["gantt"]
    assert set(plot.y_range.factors) == {":40001 / 0", ":40002 / 0", "client / 0"}
    assert gantt.short_workers(["tcp://a:1", "tcp://b:1"]) == {"tcp://a:1": "tcp://a:1", "tcp://b:1": "tcp://b:1"}


def test_error_whiskers_are_inside_the_y_range_and_facets_share_it():
    layout = FIGURES["comparison_figure"]
    plots = plots_of(layout)
    assert len(plots) == 4, "one facet per blocks-per-core point"
    assert len({id(p.y_range) for p in plots}) == 1, "facets compare by height: one y scale"
    means = timing.comparison_means(_results(), ["blocks_per_worker"])
    for plot in plots:
        whisker = next(m for m in plot.center if isinstance(m, Whisker))
        data = whisker.source.data
        assert plot.y_range.start <= min(data["low"]) and plot.y_range.end >= max(data["high"])
    assert plots[0].y_range.end >= means["high"].max() and plots[0].y_range.start <= min(0, means["low"].min())


def test_whiskers_below_zero_still_show():
    plot = timing.comparison_figure(
        pd.DataFrame({"variant": ["a", "a", "b", "b"], "seconds": [0.01, 1.0, 0.5, 0.6]}), []
    )
    whisker = next(m for m in plot.center if isinstance(m, Whisker))
    assert min(whisker.source.data["low"]) < 0 and plot.y_range.start <= min(whisker.source.data["low"])


def test_compared_matrices_share_one_colour_scale_with_its_bar_and_read_in_binary_units():
    small, large = _matrix(106_800), _matrix(1.8e9)
    layout = FIGURES["bytes_matrices"]
    plots = plots_of(layout)
    mappers = {id(r.glyph.fill_color.transform) for p in plots for r in p.renderers if hasattr(r.glyph, "fill_color")}
    assert len(mappers) == 1, "one colour scale for both matrices"
    mapper = plots[0].renderers[0].glyph.fill_color.transform
    assert (mapper.low, mapper.high) == (0, large.to_numpy().max())
    for plot in plots:
        bars = [m for m in plot.right if isinstance(m, ColorBar)]
        assert len(bars) == 1 and bars[0].color_mapper is mapper
        assert all(label.endswith(("B", "KiB", "MiB", "GiB")) for label in bars[0].major_label_overrides.values())
    texts = {}
    for plot in plots:
        renderer = next(r for r in plot.renderers if isinstance(r.glyph, Text))
        data = renderer.data_source.data
        texts.update(
            {(plot.title.text, b): (label, ink) for b, label, ink in zip(data["bytes"], data["label"], data["ink"])}
        )
    assert texts[("non-active", int(1.8e9))] == (size_text(int(1.8e9)), "#ffffff"), "light text on the darkest cell"
    assert texts[("active", 106_800)] == (size_text(106_800), "#000000"), "106,800 B is light beside 1.8 GB"
    assert all(not label.replace(",", "").isdigit() for label, _ in texts.values()), "no raw byte counts"
    assert small.to_numpy().max() < mapper.high


def test_text_on_a_cell_is_light_on_dark_and_dark_on_light():
    assert style.text_colour("#08306B") == "#ffffff" and style.text_colour("#F7FBFF") == "#000000"
    assert style.text_colour("#000000") == "#ffffff" and style.text_colour("#FFFFFF") == "#000000"


def test_byte_ticks_read_round_in_binary_units():
    ticks, labels = style.byte_ticks(1.8e9)
    assert labels == {0: "0 B", 2**29: "512 MiB", 2**30: "1 GiB", 3 * 2**29: "1.5 GiB"} and ticks[-1] <= 1.8e9
    assert style.byte_ticks(0) == ([0], {0: "0 B"})
    ticks, labels = style.log_byte_ticks(8, 2**26)
    assert len(ticks) <= 6 and labels[2**20] == "1 MiB"
    axis = FIGURES["pingpong_figure"].xaxis[0]
    assert set(axis.major_label_overrides.values()) <= {size_text(t) for t in axis.ticker.ticks}


def test_tick_labels_do_not_run_together():
    for name, layout in FIGURES.items():
        for plot in plots_of(layout):
            for axis in (*plot.xaxis, *plot.yaxis):
                ticker = axis.ticker
                if hasattr(ticker, "desired_num_ticks") and not isinstance(ticker, FixedTicker):
                    assert ticker.desired_num_ticks <= style.NUMERIC_TICKS, name
            if isinstance(plot.x_range, FactorRange) and len(plot.x_range.factors) > 6:
                labelled = plot.xaxis[0].major_label_text_font_size != "0pt"
                assert not labelled or plot.xaxis[0].major_label_orientation != "horizontal", name


def test_a_legend_below_puts_long_labels_in_fewer_columns():
    assert FIGURES["scaling_figure"].below[-1].ncols == 2  # active, non-active
    assert FIGURES["page_table_figure"].below[-1].ncols == 1  # "processes: 8 B per page per process"
    assert FIGURES["page_table_figure"].height == 320 + 4 * style.LEGEND_ROW  # the plot keeps its height


def test_new_figure_refuses_a_fixed_width():
    with pytest.raises(TypeError, match="no width"):
        style.new_figure(width=900)
    with pytest.raises(ValueError, match="right' or 'below"):
        style.legend_outside(style.new_figure(), "inside")


def test_readable_tables_wrap_their_headers_and_write_bytes_in_binary_units():
    frame = pd.DataFrame({"MB_moved_with_replicas": [1.5], "bytes": [33_816_576], "count": [129]}, index=["x"])
    shown = style.readable(frame)
    assert list(shown.columns) == ["MB moved with replicas", "bytes", "count"]
    assert shown.iloc[0].to_list() == ["1.5", "32.25 MiB", "129"]


def test_every_viz_module_draws_through_the_style():
    """No figure of workbench.viz is made with bokeh's figure() directly, or with a fixed width."""
    for path in sorted((ROOT / "workbench" / "viz").glob("*.py")):
        if path.name == "style.py":
            continue
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "figure" not in imported, f"{path.name} makes figures without workbench.viz.style.new_figure"
        sized = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") in LAID_OUT]
        widths = [k for n in sized for k in n.keywords if k.arg == "width"]
        fixed = [k for k in widths if isinstance(k.value, ast.Constant)]
        assert not fixed, f"{path.name} gives a fixed width of {fixed[0].value.value} px"


def test_lessons_lay_figures_out_with_the_style_not_bokeh_rows():
    """A lesson puts figures side by side with workbench.viz.style.wrap (it wraps), never bokeh's row,
    gridplot or a fixed width (they run off a narrow output)."""
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code":
                continue
            for bad in (r"bokeh\.layouts import", r"\brow\(", r"\bgridplot\(", r"(?<!min_)\bwidth="):
                lines = [line for line in source.splitlines() if re.search(bad, line)]
                assert not lines, f"{notebook.name}: {lines[0]}"
