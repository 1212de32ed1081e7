"""A standalone HTML report of an experiment: opens offline (BokehJS is inlined)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models import Div
from bokeh.resources import INLINE

from workbench import machine
from workbench.lab import stats as statistics
from workbench.lab.runner import Experiment, point_key
from workbench.viz.gantt import gantt
from workbench.viz.locality import block_map, bytes_matrices
from workbench.viz.timing import comparison_figure


def stats_html(table: pd.DataFrame, parameters: list[str]) -> str:
    """The statistics table (``Experiment.stats()``) as HTML, the papers' columns; a note when empty."""
    if table.empty:
        return "<p>(one variant, or one run of each: nothing to compare; run at least two repeats)</p>"
    shown = table.assign(
        ci_s=[f"[{a:+.4f}, {b:+.4f}]" for a, b in zip(table.ci_low_s, table.ci_high_s)],
        ci_pct=[f"[{a:+.1f}%, {b:+.1f}%]" for a, b in zip(table.ci_low_pct, table.ci_high_pct)],
        p=[f"{p:.3g}{' *' if s else ''}" for p, s in zip(table.p_value, table.significant)],
    )[[*parameters, "variant", "baseline", "runs", "time_variant_s", "time_baseline_s", "ci_s", "ci_pct", "p"]]
    shown.columns = [
        *parameters,
        "variant",
        "baseline",
        "runs",
        "time variant (s)",
        "time baseline (s)",
        "95% CI of difference (s)",
        "(%)",
        "p-value",
    ]
    return shown.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0) + (
        f"<p><small>* p &lt; {statistics.ALPHA} (Welch's t-test); % of the baseline's mean.</small></p>"
    )


def build(experiment: Experiment):
    """The report's bokeh layout: header, statistics, comparison, Gantts, locality."""
    meta = experiment.metadata
    parts = [
        Div(
            text=(
                f"<h1>{html.escape(meta['app'])}: {html.escape(', '.join(meta['variants']))}</h1>"
                f"<p>{html.escape(meta.get('description', ''))}</p>"
                f"<p>size <b>{meta['size']}</b>, {meta['repeats']} repeats per point, seed {meta['seed']}, "
                f"started {meta['started']}; warm-up runs excluded ({len(experiment.warmups)}).</p>"
                "<pre>" + html.escape("\n".join(machine.summary_lines(meta["machine"]))) + "</pre>"
            ),
            sizing_mode="stretch_width",
        ),
        Div(
            text="<h2>Each variant against the baseline</h2>" + stats_html(experiment.stats(), experiment.parameters),
            sizing_mode="stretch_width",
        ),
        comparison_figure(experiment.results, experiment.parameters),
    ]
    last = experiment.points()[-1]
    if experiment.traces:
        parts.append(
            Div(
                text=f"<h2>Traces: the median run of each variant at {html.escape(str(last))}</h2>",
                sizing_mode="stretch_width",
            )
        )
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
    path.write_text(file_html(build(experiment), resources=INLINE, title=f"workbench: {experiment.app}"))
    return path
