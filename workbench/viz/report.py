"""What an experiment says, for people: a claim in one sentence (:func:`claim`), the statistics
table (:func:`stats_html`) and a standalone HTML report (opens offline: BokehJS is inlined)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models import Div
from bokeh.resources import INLINE

from workbench import machine
from workbench.lab import stats as statistics
from workbench.lab.runner import Experiment, point_key
from workbench.units import ratio_text
from workbench.viz.gantt import gantt
from workbench.viz.locality import block_map, bytes_matrix
from workbench.viz.timing import comparison_figure


def point_text(point: Mapping[str, Any]) -> str:
    """A parameter point in words: ``200 blocks per worker``, ``128 dims, 4 centres``."""
    return ", ".join(f"{value} {name.replace('_', ' ')}" for name, value in point.items())


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _runs_text(r: statistics.Ratio) -> str:
    return f"{r.n_first} runs each" if r.n_first == r.n_second else f"{r.n_first} and {r.n_second} runs"


def claim_text(r: statistics.Ratio, first: str, second: str, where: str = "", expected: str | None = None) -> str:
    """The sentence a lesson prints for the comparison ``r`` of ``first``'s times over ``second``'s
    (:func:`workbench.lab.stats.time_ratio`), ``where`` (e.g. "at 200 blocks per worker"): which is
    faster and by how much, with the interval; that they are close; or, plainly, that this run
    cannot tell. ``expected``: the variant the lesson (or a paper) predicts to be faster; a run
    that finds the other one faster says so."""
    where = f" {where}" if where else ""
    interval = statistics.interval_text
    if r.verdict in ("faster", "slower"):
        fast, slow = (first, second) if r.verdict == "faster" else (second, first)
        speed, low, high = r.speedup
        text = (
            f"{fast} is {ratio_text(speed)} faster than {slow}{where} (95 % CI {interval(low, high)}, "
            f"{_p_text(r.p_value)}, {_runs_text(r)})"
        )
        if expected is not None and expected != fast:
            text += f": the opposite of the prediction that {expected} is faster"
        return text
    measured = (
        f"{first} / {second} time ratio {ratio_text(r.ratio)}, 95 % CI {interval(r.low, r.high)}, "
        f"{_p_text(r.p_value)}, {_runs_text(r)}"
    )
    if r.verdict == "close":
        margin = round((statistics.CLOSE - 1) * 100)
        return f"{first} and {second} are within {margin} % of each other{where} ({measured})"
    return f"on this machine the difference between {first} and {second}{where} is within the noise ({measured})"


def claim(
    source: Experiment | Mapping[str, Sequence[float]],
    first: str,
    second: str,
    point: Mapping[str, Any] | None = None,
    *,
    where: str | None = None,
    expected: str | None = None,
) -> str:
    """The sentence that states what this run measured of ``first`` against ``second`` (see
    :func:`claim_text`): "split is 5.8x faster than blocks at 200 blocks per worker (95 % CI
    4.1x–7.9x, p = 0.003, 5 runs each)", or "on this machine the difference between ... is within
    the noise (...)".

    ``source``: an experiment (the variants' timed runs at ``point``; ``point`` may be left out
    when the experiment ran one point), or times by name (``{"numpy": [...], "numba": [...]}``).
    ``where`` says where the comparison was made (by default the point, in words)."""
    if isinstance(source, Experiment):
        points = source.points()
        if point is None:
            if len(points) > 1:
                raise ValueError(f"this experiment ran at {len(points)} points: give one of {points}")
            point = points[0]
        first_times = source.runs(first, point)["seconds"].to_list()
        second_times = source.runs(second, point)["seconds"].to_list()
        where = f"at {point_text(point)}" if where is None and point else where
    elif isinstance(source, Mapping):
        missing = [name for name in (first, second) if name not in source]
        if missing:
            raise ValueError(f"no times of {missing}: the times given are of {sorted(source)}")
        first_times, second_times = list(source[first]), list(source[second])
    else:
        raise TypeError(f"claim takes an Experiment or a mapping of times by name, got {type(source).__name__}")
    where = where or ""
    if min(len(first_times), len(second_times)) < 2:
        at = f" {where}" if where else ""
        return (
            f"with {len(first_times)} run(s) of {first} and {len(second_times)} of {second}{at}, this run cannot "
            "say which is faster: a comparison needs at least 2 runs of each"
        )
    return claim_text(statistics.time_ratio(first_times, second_times), first, second, where, expected)


def stats_html(table: pd.DataFrame, parameters: list[str]) -> str:
    """The statistics table (``Experiment.stats()``) as HTML: the mean times, the time ratio of the
    variant over the baseline with its 95 % interval, the verdict and the p-value; a note when empty."""
    if table.empty:
        return "<p>(one variant, or one run of each: nothing to compare; run at least two repeats)</p>"
    shown = table.assign(
        ratio_ci=[
            f"{ratio_text(r)} ({statistics.interval_text(a, b)})"
            for r, a, b in zip(table.ratio, table.ratio_low, table.ratio_high)
        ],
        p=[f"{p:.3g}{' *' if s else ''}" for p, s in zip(table.p_value, table.significant)],
    )[[*parameters, "variant", "baseline", "runs", "time_variant_s", "time_baseline_s", "ratio_ci", "verdict", "p"]]
    shown.columns = [
        *parameters,
        "variant",
        "baseline",
        "runs",
        "time variant (s)",
        "time baseline (s)",
        "time ratio variant / baseline (95% CI)",
        "variant is",
        "p-value",
    ]
    return shown.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0) + (
        f"<p><small>Time ratio of the geometric mean times; its interval and * p &lt; {statistics.ALPHA} "
        "from Welch's t-test on the log times. <i>close</i>: the whole interval within 10 % of 1; "
        "<i>within the noise</i>: this run cannot tell.</small></p>"
    )


def _repeats_text(meta: Mapping[str, Any]) -> str:
    """The rounds an experiment ran per point: "3 repeats", or "3 to 8 repeats (5 run at most)"."""
    least, most = meta["repeats"], meta.get("max_repeats", meta["repeats"])
    if most <= least:
        return f"{least} repeats"
    ran = max(meta.get("rounds", {}).values(), default=least)
    return f"{least} to {most} repeats until each comparison is decided ({ran} at most here)"


def build(experiment: Experiment):
    """The report's bokeh layout: header, statistics, comparison, Gantts, locality."""
    meta = experiment.metadata
    parts = [
        Div(
            text=(
                f"<h1>{html.escape(meta['app'])}: {html.escape(', '.join(meta['variants']))}</h1>"
                f"<p>{html.escape(meta.get('description', ''))}</p>"
                f"<p>size <b>{meta['size']}</b>, {_repeats_text(meta)} per point, seed {meta['seed']}, "
                f"started {meta['started']}; warm-up runs excluded ({len(experiment.warmups)}).</p>"
                "<pre>" + html.escape("\n".join(machine.summary_lines(meta["machine"]))) + "</pre>"
            ),
            width=900,
        ),
        Div(
            text="<h2>Each variant against the baseline</h2>" + stats_html(experiment.stats(), experiment.parameters),
            width=900,
        ),
        comparison_figure(experiment.results, experiment.parameters),
    ]
    last = experiment.points()[-1]
    if experiment.traces:
        parts.append(
            Div(text=f"<h2>Traces: the median run of each variant at {html.escape(str(last))}</h2>", width=900)
        )
        for variant in meta["variants"]:
            run_id = experiment.median_run(variant, last)
            parts.append(gantt(experiment.trace_of(run_id), title=f"{variant} ({run_id})"))
        parts.append(
            bytes_matrix(
                experiment.bytes_moved(meta["variants"], last),
                title="bytes moved in those runs (source -> destination)",
            )
        )
    if experiment.locality:
        parts.append(block_map(experiment.locality_at(last), title=f"where the blocks were at {point_key(last)}"))
    return column(*parts)


def write_report(experiment: Experiment, path: str | Path) -> Path:
    """Write the report to ``path`` (one self-contained HTML file)."""
    path = Path(path)
    path.write_text(file_html(build(experiment), resources=INLINE, title=f"workbench: {experiment.app}"))
    return path
