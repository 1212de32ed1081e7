"""Live panels: a few controls and a Run button that measures on the session's cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import pandas as pd
from bokeh.io import show
from IPython.display import display

from workbench.lab.sweep import histogram_block_sweep
from workbench.runtime.session import Session
from workbench.viz.timing import block_sweep_figure

# Blocks per worker the block-sweep panel offers (on 2 workers, 2 to 1024 blocks in all).
BLOCK_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


# -- what every panel's Run does ----------------------------------------------------------------
def controls_row(children: Sequence[widgets.Widget]) -> widgets.HBox:
    """Controls side by side that wrap onto the next line where the output is narrow (an HBox does not)."""
    return widgets.HBox(list(children), layout=widgets.Layout(flex_flow="row wrap"))


def run_button(run: Callable[[], Any]) -> widgets.Button:
    """The Run button: a click calls ``run()``, the same call a script or a test makes."""
    button = widgets.Button(description="Run", button_style="primary", icon="play")
    button.on_click(lambda _: run())
    return button


@contextlib.contextmanager
def running(button: widgets.Button, status: widgets.HTML, message: str | None = None) -> Iterator[None]:
    """One run of a panel: ``button`` disabled meanwhile (one run at a time), ``message`` (if any) in
    ``status``; an error is shown in ``status`` (a click has no traceback to read), then raised; the
    button is enabled again however the run ends."""
    button.disabled = True
    try:
        if message is not None:
            status.value = message
        yield
    except Exception as error:
        status.value = f"<b>error:</b> {error}"
        raise
    finally:
        button.disabled = False


def redraw(output: widgets.Output, figure: Any, *tables: Any) -> None:
    """Replace what ``output`` shows with ``figure`` (a bokeh figure) and ``tables`` below it."""
    with output:
        output.clear_output(wait=True)
        show(figure)
        for table in tables:
            display(table)


class BlockSweepPanel:
    """Pick a number of blocks per worker, press Run: the histogram runs and joins the growing figure
    (drawn against the blocks in all).

    ``panel.widget`` is what a notebook displays; ``panel.run()`` does what the button does, so
    the panel can be scripted and tested. ``panel.runs`` holds every measured run.
    """

    def __init__(self, session: Session, size: str = "ci", choices: Sequence[int] = BLOCK_CHOICES):
        self.session = session
        self.size = size
        self.runs = pd.DataFrame(columns=["blocks", "block_rows", "repeat", "seconds"])
        self.blocks = widgets.SelectionSlider(
            options=list(choices),
            value=choices[len(choices) // 2],
            description="blocks per worker",
            style={"description_width": "initial"},
        )
        self.repeats = widgets.IntSlider(value=3, min=1, max=10, description="repeats")
        self.button = run_button(self.run)
        self.status = widgets.HTML(value="Choose a number of blocks per worker and press <b>Run</b>.")
        self.output = widgets.Output()
        self.widget = widgets.VBox([controls_row([self.blocks, self.repeats, self.button]), self.status, self.output])

    def run(self) -> pd.DataFrame:
        """Measure the chosen number of blocks per worker, add the runs to the figure, return all runs."""
        with running(
            self.button, self.status, f"running {self.blocks.value} blocks per worker x {self.repeats.value} ..."
        ):
            new = histogram_block_sweep(
                self.session, self.size, blocks_per_worker=(self.blocks.value,), repeats=self.repeats.value
            )
            self.runs = new if self.runs.empty else pd.concat([self.runs, new], ignore_index=True)
            redraw(self.output, block_sweep_figure(self.runs))
            self.status.value = (
                f"{self.blocks.value} blocks per worker ({new['blocks'].iloc[0]} blocks): "
                f"median {new['seconds'].median():.4f} s"
            )
        return self.runs


class ExperimentPanel:
    """Controls for an experiment and a Run button; the figures below it are redrawn in place.

    Application, variants, the application's own knobs (blocks per worker; points, dims, centres;
    ...), workers, size and repeats. Run calls the experiment runner on the session's cluster, then
    shows the statistics table, the comparison with 95 % confidence intervals, the Gantt of the
    median run of each variant, the bytes moved and where the blocks were.
    ``panel.run()`` does what the button does; ``panel.experiment`` holds the last result.

    It opens on ``app`` with ``variants`` chosen (default: all of them) and each knob at its value in
    ``start``, else at the first value of the size's grid: a lesson opens it on a case that shows its
    point (lesson 06: two ranks, where one would move nothing).
    """

    def __init__(
        self,
        session: Session,
        size: str = "ci",
        app: str = "histogram",
        variants: Sequence[str] | None = None,
        start: Mapping[str, Any] | None = None,
    ):
        import os

        from workbench.apps import registry

        self.session = session
        self.experiment = None
        self.app = widgets.Dropdown(options=registry.names(), value=app, description="application")
        self.variants = widgets.SelectMultiple(description="variants", rows=3)
        self.knobs: dict[str, widgets.SelectionSlider] = {}
        self.knob_box = widgets.VBox()
        from distributed import LocalCluster

        owned_local = isinstance(session.cluster, LocalCluster)  # one the session started (and can scale)
        self.workers = widgets.IntSlider(
            value=len(session.workers()),
            min=1,
            max=max(os.cpu_count() or 1, len(session.workers())),
            description="workers",
            disabled=not owned_local,
        )
        self.repeats = widgets.IntSlider(value=2 if size == "ci" else 3, min=2, max=10, description="repeats")
        self.button = run_button(self.run)
        self.status = widgets.HTML("Choose, then press <b>Run</b>.")
        self.table = widgets.HTML()
        self.figures = widgets.VBox()
        self.size = widgets.Dropdown(options=["ci", "lab", "full"], value=size, description="size")
        self.app.observe(lambda _: self._fill_app(), names="value")
        self._fill_app()
        self._open_at(variants, start or {})
        controls = controls_row(
            [
                widgets.VBox([self.app, self.variants]),
                self.knob_box,
                widgets.VBox([self.workers, self.size, self.repeats, self.button]),
            ]
        )
        self.widget = widgets.VBox([controls, self.status, self.table, self.figures])

    def _fill_app(self) -> None:
        """Variants and knobs of the chosen application; knobs start at its grid's first values."""
        from workbench.apps import registry

        app = registry.get(self.app.value)
        self.variants.options = list(app.variants)
        self.variants.value = tuple(app.variants)
        start = {name: values[0] for name, values in app.grids[self.size.value].items()}
        self.knobs = {
            name: widgets.SelectionSlider(
                options=list(choices),
                value=start[name] if start.get(name) in choices else choices[len(choices) // 2],
                description=name,
                style={"description_width": "initial"},
            )
            for name, choices in app.knobs.items()
        }
        self.knob_box.children = list(self.knobs.values())

    def _open_at(self, variants: Sequence[str] | None, start: Mapping[str, Any]) -> None:
        """Choose ``variants`` and set each knob named in ``start``; a name or value the application
        does not offer is refused with what it offers."""
        app = self.app.value
        if variants is not None:
            offered = list(self.variants.options)
            unknown = [v for v in variants if v not in offered]
            if unknown or not variants:
                raise ValueError(f"{app} has no variants {unknown or '(none chosen)'}; it has {offered}")
            self.variants.value = tuple(variants)
        for name, value in start.items():
            if name not in self.knobs:
                raise ValueError(f"{app} has no knob {name!r} to start at; its knobs are {list(self.knobs)}")
            if value not in self.knobs[name].options:
                raise ValueError(f"{app}'s {name} offers {list(self.knobs[name].options)}, not {value!r}")
            self.knobs[name].value = value

    def run(self):
        """Run the experiment with the controls' values and redraw; returns the Experiment."""
        from jupyter_bokeh.widgets import BokehModel

        from workbench.lab.runner import run_experiment
        from workbench.viz.gantt import gantt
        from workbench.viz.locality import block_map, bytes_matrices
        from workbench.viz.report import stats_html
        from workbench.viz.timing import comparison_figure

        with running(self.button, self.status):
            if not self.workers.disabled and self.workers.value != len(self.session.workers()):
                self.status.value = f"scaling the cluster to {self.workers.value} workers ..."
                self.session.scale(self.workers.value)
            point = {name: knob.value for name, knob in self.knobs.items()}
            self.status.value = f"running {self.app.value} ({', '.join(self.variants.value)}) at {point} ..."
            experiment = run_experiment(
                self.session,
                self.app.value,
                variants=list(self.variants.value),
                size=self.size.value,
                grid={name: [value] for name, value in point.items()},
                repeats=self.repeats.value,
                max_repeats=self.repeats.value,  # the count the learner chose
                progress=False,
            )
            self.experiment = experiment
            self.table.value = stats_html(experiment.stats(), experiment.parameters) if experiment.compared else ""
            figures = [comparison_figure(experiment.results, experiment.parameters)]
            variants = experiment.metadata["variants"]
            for variant in variants:
                run_id = experiment.median_run(variant, point)
                figures.append(gantt(experiment.trace_of(run_id), title=f"{variant}: median run ({run_id})"))
            figures.append(
                bytes_matrices(
                    {v: experiment.bytes_moved(v, point) for v in variants},
                    title="bytes moved in the median runs (source -> destination), one colour scale",
                )
            )
            figures.append(block_map(experiment.locality_at(point)))
            self.figures.children = [BokehModel(f) for f in figures]
            means = experiment.summary()
            self.status.value = "done: " + ", ".join(
                f"{v} {s:.4f} s" for v, s in zip(means["variant"], means["mean_s"])
            )
            return experiment


class PageTablePanel:
    """Pick a shared segment's size and the most tasks, press Run: page tables are measured for 1, 2,
    4, ... processes and as many threads, and drawn (lesson 07). ``panel.run()`` does what the
    button does; ``panel.rows`` holds the last measurement."""

    def __init__(self, sizes_mib: Sequence[int] = (16, 64, 128, 256), tasks: Sequence[int] = (2, 4, 8, 16)):
        from workbench.lab import execution_models

        self._measure = execution_models.page_tables
        self.rows: list[dict] = []
        self.segment = widgets.SelectionSlider(options=list(sizes_mib), value=sizes_mib[1], description="segment MiB")
        self.tasks = widgets.SelectionSlider(options=list(tasks), value=tasks[1], description="most tasks")
        self.button = run_button(self.run)
        self.status = widgets.HTML(value="Choose a segment size and the most tasks, then press <b>Run</b>.")
        self.output = widgets.Output()
        self.widget = widgets.VBox([controls_row([self.segment, self.tasks, self.button]), self.status, self.output])

    def run(self) -> list[dict]:
        """Measure page tables for processes and threads up to the chosen tasks; show the figure."""
        from workbench.viz.execution_models import page_table_figure

        counts = [n for n in (1, 2, 4, 8, 16) if n <= self.tasks.value]
        message = f"measuring {counts} processes and threads on {self.segment.value} MiB ..."
        with running(self.button, self.status, message):
            nbytes = self.segment.value * 2**20
            self.rows = self._measure(nbytes, counts, "processes") + self._measure(nbytes, counts, "threads")
            redraw(self.output, page_table_figure(self.rows, title=f"page tables, {self.segment.value} MiB segment"))
            most = {r["model"]: r["vmpte_kib"] for r in self.rows if r["tasks"] == counts[-1]}
            self.status.value = (
                f"{counts[-1]} processes: {most['processes']} KiB of page tables; "
                f"{counts[-1]} threads: {most['threads']} KiB"
            )
        return self.rows


class PipelinePanel:
    """The capstone pipeline's knobs (lesson 08) and a Run button: the pipeline runs once with them
    and its stages are drawn next to the planted run's. ``panel.run()`` does what the button does;
    ``panel.last`` holds the last run."""

    def __init__(self, session: Session, size: str, planted: object):
        from workbench.lab import capstone

        self._capstone, self.session, self.size, self.planted = capstone, session, size, planted
        self.last = None
        self.blocks = widgets.SelectionSlider(
            options=[1, 2, 4, 8, 16, 32, 64], value=capstone.PLANTED.blocks_per_worker, description="blocks/worker"
        )
        self.knobs = {
            name: widgets.Dropdown(options=list(options), value=getattr(capstone.PLANTED, name), description=name)
            for name, options in [("calibration", capstone.CALIBRATION), *capstone.OPTIONS.items()]
        }
        self.button = run_button(self.run)
        self.status = widgets.HTML(value="Set the knobs, then press <b>Run</b>: stages compared with the planted run.")
        self.output = widgets.Output()
        knobs = [self.blocks, *self.knobs.values()]
        self.widget = widgets.VBox(
            [controls_row(knobs[:3]), controls_row([*knobs[3:], self.button]), self.status, self.output]
        )

    def run(self) -> object:
        """Run the pipeline with the panel's knobs; show the stage figure and the comparison table."""
        from workbench.viz.timing import stage_bars

        with running(self.button, self.status):
            pipeline = self._capstone.Pipeline(
                blocks_per_worker=self.blocks.value, **{name: w.value for name, w in self.knobs.items()}
            )
            self.status.value = f"running {pipeline} ..."
            self.last = self._capstone.run(self.session, self.size, pipeline)
            redraw(
                self.output,
                stage_bars({"planted": self.planted.stages, "yours": self.last.stages}),
                self._capstone.compare(self.planted, self.last).round(3).T,  # one column per stage: it fits
            )
            self.status.value = f"planted {self.planted.seconds:.3f} s, yours {self.last.seconds:.3f} s"
        return self.last
