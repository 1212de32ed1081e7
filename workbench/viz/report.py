"""An experiment for people: the statistics table (:func:`stats_html`) and a standalone HTML report that
opens offline (BokehJS is inlined), in the look every standalone page of the workbench has
(:mod:`workbench.viz.page`, the bench page's too). A claim in one sentence is :func:`workbench.lab.stats.claim`."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from bokeh.layouts import column

from workbench import machine
from workbench.lab import stats as statistics
from workbench.lab.runner import Experiment, point_key
from workbench.units import ratio_text
from workbench.viz.gantt import gantt
from workbench.viz.locality import block_map, bytes_matrices
from workbench.viz.page import document, spaced_table, text_div
from workbench.viz.timing import comparison_figure


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
    return spaced_table(shown.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0)) + (
        f"<p><small>Time ratio of the geometric mean times; its interval and * p &lt; {statistics.ALPHA} "
        "from Welch's t-test on the log times. <i>close</i>: the whole interval within 10 % of 1; "
        "<i>within the noise</i>: this run cannot tell.</small></p>"
    )


def _repeats_text(meta: Mapping[str, Any]) -> str:
    """The rounds an experiment ran per point: "3 repeats", or "3 to 8 repeats (5 run at most)"
    (what a hand-made file holds instead of whole numbers is shown as it is)."""
    least = meta.get("repeats", "?")
    most, rounds = meta.get("max_repeats", least), meta.get("rounds", {})
    numbers = [least, most, *(rounds.values() if isinstance(rounds, dict) else [])]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return f"{least} repeats"
    if most <= least:
        return f"{least} repeats"
    ran = max(rounds.values(), default=least)
    return f"{least} to {most} repeats until each comparison is decided ({ran} at most here)"


def _machine_lines(record: object) -> tuple[list[str], str]:
    """The machine's lines (:func:`workbench.machine.summary_lines`) and its software line; one line
    saying so for a record that is missing or not the workbench's."""
    missing = ["the machine is not recorded in this results file"], ""
    if not isinstance(record, dict):  # (summary_lines(None) would describe this machine, not the run's)
        return missing
    try:
        *where, software = machine.summary_lines(record)
    except (KeyError, TypeError, ValueError, AttributeError):
        return missing
    return where, software


def build(experiment: Experiment):
    """The report's bokeh layout: header, statistics, comparison, Gantts, locality."""
    meta = experiment.metadata
    e = lambda value: html.escape(str(value))  # noqa: E731 (a results file is read back: every field escaped)
    where, software = _machine_lines(meta.get("machine"))
    parts = [
        text_div(
            f"<h1>{e(meta['app'])}: {e(', '.join(meta['variants']))}</h1>"
            f"<p>{e(meta.get('description', ''))}</p>"
            f"<p>{'<br>'.join(e(line) for line in where)}</p>"
            f"<p>size {e(meta.get('size', '?'))}, {e(_repeats_text(meta))} per point, seed {e(meta.get('seed', '?'))}, "
            f"started {e(meta.get('started', '?'))}; warm-up runs excluded ({len(experiment.warmups)})</p>"
            f"<p><small>{e(software)}</small></p>"
        ),
        text_div("<h2>Each variant against the baseline</h2>" + stats_html(experiment.stats(), experiment.parameters)),
        comparison_figure(experiment.results, experiment.parameters),
    ]
    last = experiment.points()[-1]
    if experiment.traces:
        parts.append(text_div(f"<h2>Traces: the median run of each variant at {html.escape(str(last))}</h2>"))
        for variant in meta["variants"]:
            run_id = experiment.median_run(variant, last)
            parts.append(gantt(experiment.trace_of(run_id), title=f"{variant} ({run_id})"))
        parts.append(
            bytes_matrices(
                {variant: experiment.bytes_moved(variant, last) for variant in meta["variants"]},
                title="bytes moved in those runs (source -> destination), one colour scale",
            )
        )
    if experiment.locality:
        parts.append(block_map(experiment.locality_at(last), title=f"where the blocks were at {point_key(last)}"))
    return column(*parts, sizing_mode="stretch_width")


def write_report(experiment: Experiment, path: str | Path) -> Path:
    """Write the report to ``path`` (one self-contained HTML file)."""
    path = Path(path)
    path.write_text(document(build(experiment), f"workbench: {experiment.app}"))
    return path
