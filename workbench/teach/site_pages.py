"""A lesson executed by papermill, made into a page of the course site (``workbench.teach.site``).

The executed copy is what CI judges; the page is what a reader sees. This module turns the first
into the second, on a copy, without looking at cell indices (lessons change):

- papermill's red "An Exception was encountered" cells (tag ``papermill-error-cell-tag``) are left
  out, and a cell tagged ``raises-exception`` shows its error's last line as the lesson's intended
  outcome instead of a traceback;
- Dask's log records on stderr (a worker's "Compute Failed ... Traceback" when a task fails on
  purpose, the scheduler's warnings while a cluster closes) are left out: they are Dask's logging,
  not the lesson's output;
- papermill's injected parameters cell is removed and the lesson's ``parameters`` cell folded
  (Jupyter Book's ``remove-cell`` and ``hide-cell`` tags);
- a live panel (an ipywidgets view) is drawn from the widget state the executed copy saved: the
  settings it ran with, its status and tables, and the figures its Run drew, under a note saying
  that in JupyterLab it is live; a progress bar (transient) is left out;
- BokehJS, which each lesson inlines (~4 MB), is loaded from one file of the site's ``_static/``
  (:func:`write_bokeh_js`), so the site holds it once and still needs no network.

It also writes the section of the ``bench-results`` page: the latest ``workbench bench all`` run
of the machine that builds the site (:func:`bench_results_markdown`), or what to run when there is none.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat

from workbench.bench.goals import figure_text, threshold_text
from workbench.bench.progress import run_time
from workbench.bench.report import of_record

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
BOKEH_LOAD = "application/vnd.bokehjs_load.v0+json"
BOKEH_EXEC = "application/vnd.bokehjs_exec.v0+json"
PAPERMILL_BANNER_TAG = "papermill-error-cell-tag"

PANEL_NOTE = (
    "On this page the panel is shown as its <b>Run</b> left it (the cell below it presses Run once): "
    "what it reported and the figures it drew. In JupyterLab the panel is live: change a setting and "
    "press <b>Run</b>."
)
PANEL_IDLE_NOTE = (
    "The lesson leaves this panel's <b>Run</b> to you (Run All does not press it). In JupyterLab the panel "
    "is live: set its knobs and press <b>Run</b>."
)
WIDGET_NOTE = "This output is an interactive widget: run the lesson in JupyterLab to see it."

# A record of Python's logging as Dask formats it: "2026-01-01 10:00:00,123 - distributed.worker - ERROR - ..."
_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - (?P<logger>\S+) - [A-Z]+ - ", re.MULTILINE)
_CONTINUATION = re.compile(r"^(?:\s|$|[A-Z][\w ().]*:\s)")  # indented, blank, "Key: ...", "Traceback (...):"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Controls whose values say how a panel ran; boxes are walked, outputs drawn, the rest skipped.
_CONTROLS = {
    "DropdownModel",
    "SelectionSliderModel",
    "SelectMultipleModel",
    "IntSliderModel",
    "FloatSliderModel",
    "SelectModel",
    "RadioButtonsModel",
    "ToggleButtonsModel",
    "CheckboxModel",
    "ToggleButtonModel",
    "IntTextModel",
    "FloatTextModel",
    "BoundedIntTextModel",
    "BoundedFloatTextModel",
    "TextModel",
}
_BOXES = {"VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel", "AccordionModel", "TabModel"}
_PROGRESS = {"FloatProgressModel", "IntProgressModel"}


def bokeh_js_name() -> str:
    """The file name BokehJS gets in the site's ``_static/``, versioned like bokeh's own."""
    import bokeh

    return f"bokeh-{bokeh.__version__}.min.js"


BOKEH_COMPONENTS = ("bokeh", "bokeh-gl", "bokeh-widgets", "bokeh-tables")
MATHJAX = "bokeh-mathjax"  # 1.8 MB, only for figures with TeX or MathML text
_MATH = re.compile(r'\$\$|"name":\s*"(?:TeX|MathML|MathText)"')


def needs_mathjax(notebooks: Sequence[nbformat.NotebookNode]) -> bool:
    """Whether a figure of these pages has math text ($$...$$, TeX or MathML): BokehJS draws it with
    its MathJax bundle, which the site otherwise leaves out."""
    return any(_MATH.search(json.dumps(notebook.cells)) for notebook in notebooks)


def write_bokeh_js(static: Path, mathjax: bool = False) -> Path:
    """Write BokehJS (the components bokeh inlines in a notebook, in its order, MathJax's only if
    ``mathjax``) into ``static`` as one file, for every page of the site."""
    from bokeh.resources import Resources

    static.mkdir(parents=True, exist_ok=True)
    path = static / bokeh_js_name()
    components = [*BOKEH_COMPONENTS, *([MATHJAX] if mathjax else [])]
    path.write_text(";\n".join(Resources(mode="inline", components=components).js_raw) + ";\n")
    return path


def _admonition(title: str, body_html: str, kind: str, name: str) -> dict[str, Any]:
    """An output that renders as the theme's admonition box (plain HTML: no MyST parsing needed);
    ``name`` is a class of its own (``workbench-<name>``) that tests and screenshots find it by."""
    box = (
        f'<div class="admonition {kind} workbench-{name}">\n<p class="admonition-title">{html.escape(title)}</p>\n'
        f"<p>{body_html}</p>\n</div>\n"
    )
    return nbformat.v4.new_output("display_data", data={"text/html": box})


def _html(text: str) -> dict[str, Any]:
    return nbformat.v4.new_output("display_data", data={"text/html": text})


def _tags(cell: nbformat.NotebookNode) -> list[str]:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


# -- intended errors, papermill's banners, Dask's logs ----------------------------------------------
def drop_papermill_banners(notebook: nbformat.NotebookNode) -> int:
    """Leave out the cells papermill inserts around a failing cell; return how many."""
    before = len(notebook.cells)
    notebook.cells = [c for c in notebook.cells if PAPERMILL_BANNER_TAG not in c.get("metadata", {}).get("tags", [])]
    return before - len(notebook.cells)


def error_line(output: dict[str, Any]) -> str:
    """An error output's last line, as Python prints it: ``ValueError: assignment destination is read-only``."""
    evalue = _ANSI.sub("", str(output.get("evalue", ""))).strip()
    ename = str(output.get("ename", "Error"))
    return f"{ename}: {evalue}" if evalue else ename


def show_intended_errors(notebook: nbformat.NotebookNode) -> int:
    """In each cell tagged ``raises-exception``, replace the traceback by the error's last line shown as
    the intended outcome; return how many errors were replaced."""
    replaced = 0
    for cell in notebook.cells:
        if cell.cell_type != "code" or "raises-exception" not in cell.get("metadata", {}).get("tags", []):
            continue
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                body = f"This cell fails on purpose, with: <code>{html.escape(error_line(output))}</code>"
                outputs.append(_admonition("The intended error", body, "tip", "intended-error"))
                replaced += 1
            else:
                outputs.append(output)
        cell.outputs = outputs
    return replaced


def without_dask_logs(text: str) -> str:
    """``text`` less the log records of Dask's loggers (``distributed.*``), each with its continuation
    lines: indented or blank lines and ``Field: value`` lines (a worker's "Compute Failed" record
    carries its task's ``Key:``, ``Exception:`` and ``Traceback:``). Other lines stay."""
    kept: list[str] = []
    in_record = False
    for line in text.splitlines(keepends=True):
        match = _LOG_RECORD.match(line)
        if match is not None:
            in_record = match["logger"].startswith("distributed")
        elif in_record and not _CONTINUATION.match(line):
            in_record = False
        if not in_record:
            kept.append(line)
    return "".join(kept)


def drop_dask_logs(notebook: nbformat.NotebookNode) -> int:
    """Remove Dask's log records from every stderr stream (an emptied stream goes); return how many
    streams changed."""
    changed = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                text = without_dask_logs(output.get("text", ""))
                if text != output.get("text", ""):
                    changed += 1
                    if not text.strip():
                        continue
                    output = nbformat.from_dict({**output, "text": text})
            outputs.append(output)
        cell.outputs = outputs
    return changed


# -- parameters -------------------------------------------------------------------------------------
def hide_parameters(notebook: nbformat.NotebookNode) -> None:
    """Remove papermill's injected parameters cell from the page and fold the lesson's own
    ``parameters`` cell (a reader can unfold it to see the size knob)."""
    for cell in notebook.cells:
        tags = _tags(cell)
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        elif "parameters" in tags and "hide-cell" not in tags and "remove-cell" not in tags:
            tags.append("hide-cell")


# -- widgets: static from their saved state ---------------------------------------------------------
def _model_id(reference: Any) -> str | None:
    return reference[len("IPY_MODEL_") :] if isinstance(reference, str) and reference.startswith("IPY_MODEL_") else None


def _control_value(state: dict[str, Any]) -> str | None:
    """What a control shows as its value (a label for options, the value otherwise)."""
    labels = state.get("_options_labels")
    index = state.get("index")
    if labels is not None and index is not None:
        chosen = index if isinstance(index, list) else [index]
        return ", ".join(str(labels[i]) for i in chosen if isinstance(i, int) and 0 <= i < len(labels))
    if "value" in state:
        return str(state["value"])
    return None


def _bokeh_outputs(bundle: Any) -> list[dict[str, Any]]:
    """A jupyter_bokeh ``BokehModel``'s saved figure as the two outputs ``bokeh.io.show`` makes: the
    figure's div and the script that embeds it (it waits for BokehJS as bokeh's own does)."""
    bundle = json.loads(bundle) if isinstance(bundle, str) else bundle
    script = (
        "(function(root) {\n"
        f"  const docs_json = {json.dumps(bundle['docs_json'])};\n"
        f"  const render_items = {json.dumps(bundle['render_items'])};\n"
        "  function embed() { root.Bokeh.embed.embed_items_notebook(docs_json, render_items); }\n"
        "  if (root.Bokeh !== undefined) { embed(); return; }\n"
        "  let attempts = 0;\n"
        "  const timer = setInterval(function() {\n"
        "    if (root.Bokeh !== undefined) { clearInterval(timer); embed(); }\n"
        "    else if (++attempts > 100) { clearInterval(timer); console.log('Bokeh: BokehJS is missing'); }\n"
        "  }, 10);\n"
        "})(window);"
    )
    return [_html(bundle["div"]), nbformat.v4.new_output("display_data", data={"application/javascript": script})]


class _StaticWidget:
    """Walks one saved widget tree: the controls' settings, the HTML it shows, its outputs and figures."""

    def __init__(self, states: dict[str, Any]):
        self.states = states
        self.settings: list[tuple[str, str]] = []
        self.outputs: list[dict[str, Any]] = []
        self.has_button = False
        self.has_progress = False
        self.has_figure = False  # a panel whose Run drew: a figure or an output area's outputs (saved state)

    def walk(self, model_id: str) -> None:
        model = self.states.get(model_id)
        if model is None:
            return
        name, state = model.get("model_name", ""), model.get("state", {})
        if name in _BOXES:
            for child in state.get("children", []):
                if (child_id := _model_id(child)) is not None:
                    self.walk(child_id)
        elif name in _CONTROLS:
            value = _control_value(state)
            if value is not None:
                self.settings.append((str(state.get("description") or name.removesuffix("Model")), value))
        elif name == "ButtonModel":  # a panel's Run button (a lesson's teardown has another: no panel)
            self.has_button = self.has_button or state.get("description") == "Run"
        elif name in _PROGRESS:
            self.has_progress = True
        elif name in ("HTMLModel", "LabelModel", "HTMLMathModel"):
            value = str(state.get("value", "")).strip()
            if value:
                self.outputs.append(_html(value if name != "LabelModel" else html.escape(value)))
        elif name == "OutputModel":
            self.has_figure = self.has_figure or bool(state.get("outputs"))
            self.outputs.extend(nbformat.from_dict(o) for o in state.get("outputs", []))
        elif name == "BokehModel" and state.get("render_bundle"):
            self.has_figure = True
            self.outputs.extend(_bokeh_outputs(state["render_bundle"]))

    def page_outputs(self) -> list[dict[str, Any]]:
        """What the page shows in the widget's place."""
        if self.has_progress and not self.has_button:
            return []  # a progress bar: transient, its last state says nothing once the cell is done
        if not self.has_button:
            return self.outputs or [_admonition("A widget", html.escape(WIDGET_NOTE), "note", "widget")]
        if not self.has_figure:  # a panel the lesson leaves for the learner to run
            return [_admonition("A live panel", PANEL_IDLE_NOTE, "note", "live-panel-idle"), *self.outputs]
        settings = ", ".join(f"{html.escape(k)} = <code>{html.escape(v)}</code>" for k, v in self.settings)
        note = PANEL_NOTE + (f"<br>It ran with: {settings}." if settings else "")
        return [_admonition("A live panel, shown after one Run", note, "note", "live-panel"), *self.outputs]


def _widget_views(notebook: nbformat.NotebookNode) -> list[_StaticWidget]:
    states = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    views = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is not None:
                widget = _StaticWidget(states)
                widget.walk(view.get("model_id", ""))
                views.append(widget)
    return views


def live_panels(notebook: nbformat.NotebookNode) -> int:
    """How many widget views of an executed notebook are live panels (a Run button among their widgets)
    that ran, so the page shows what their Run drew (a panel left for the learner is not counted)."""
    return sum(widget.has_button and widget.has_figure for widget in _widget_views(notebook))


def static_widgets(notebook: nbformat.NotebookNode) -> int:
    """Replace every widget view by its static result (drawn from the notebook's saved widget state)
    and drop the state; return how many views were replaced."""
    states = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outputs.append(output)
                continue
            widget = _StaticWidget(states)
            widget.walk(view.get("model_id", ""))
            outputs.extend(widget.page_outputs())
            replaced += 1
        cell.outputs = outputs
    notebook.get("metadata", {}).pop("widgets", None)
    return replaced


# -- BokehJS once per site --------------------------------------------------------------------------
def bokeh_from_static(notebook: nbformat.NotebookNode, script_src: str) -> int:
    """Replace each inlined BokehJS (the output of ``output_notebook``) by one ``<script src>`` to the
    site's copy (the first on the page; later ones go); if the page draws bokeh figures without
    one, the script is put before the first. Returns how many inlined copies were replaced."""
    tag = f'<script type="text/javascript" src="{html.escape(script_src)}"></script>'
    replaced, loaded = 0, False
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if BOKEH_LOAD in data:
                replaced += 1
                if not loaded:
                    outputs.append(_html(tag))
                    loaded = True
                continue
            if not loaded and (BOKEH_EXEC in data or "Bokeh.embed" in str(data.get("application/javascript", ""))):
                outputs.append(_html(tag))
                loaded = True
            outputs.append(output)
        cell.outputs = outputs
    return replaced


def for_site(notebook: nbformat.NotebookNode, bokeh_src: str) -> nbformat.NotebookNode:
    """The page of an executed lesson: a copy with every change this module makes."""
    page = nbformat.from_dict(json.loads(json.dumps(notebook)))
    drop_papermill_banners(page)
    show_intended_errors(page)
    drop_dask_logs(page)
    hide_parameters(page)
    static_widgets(page)  # before BokehJS: a panel's figures are embedded scripts that need it
    bokeh_from_static(page, bokeh_src)
    return page


# -- the page of this machine's benchmark results ---------------------------------------------------
BENCH_BEGIN = "<!-- bench results: begin (the site puts the latest results of its machine here) -->"
BENCH_END = "<!-- bench results: end -->"
NO_BENCH_RESULTS = (
    "No results of `workbench bench all` were on the machine that built this site. Run `make bench` "
    "(or `workbench bench all`) there, then `make site`: this page then shows them."
)


# Every character that breaks a line for someone: markdown-it (\n, \r), str.splitlines and docutils
# (\x0b, \x0c, \x1c-\x1e, \x85, \u2028, \u2029); with the other C0 and C1 controls and lone surrogates.
LINE_BREAKS_AND_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Every ASCII punctuation character: CommonMark lets a backslash escape each, and each escaped one is
# literal text to markdown-it and to every MyST extension (roles, substitutions, targets, math, fences).
ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def _cell(text: Any) -> str:
    """Untrusted text (a results file's) as MyST markdown that shows it, and only it, as text.

    Every line break and control becomes a space, so the text can never begin a line: no directive
    fence (```, :::), target ``(label)=``, ``%`` comment, HTML block, ``$$`` math, heading, list,
    table row or link reference definition ``[x]: url`` can start. Every ASCII punctuation character
    is backslash-escaped, so no inline syntax either: no role ``{role}`x```, substitution ``{{ ... }}``
    (which MyST evaluates as Jinja), HTML, link, emphasis, code, pipe or entity."""
    return ASCII_PUNCTUATION.sub(r"\\\1", LINE_BREAKS_AND_CONTROLS.sub(" ", str(text)))


def _strong(text: Any) -> str:
    """Untrusted text in bold, as :func:`_cell` writes it; without ``**`` where the text is empty or
    begins or ends with a space (markdown would show the marks, not bold)."""
    shown = _cell(text)
    return f"**{shown}**" if shown.strip() == shown and shown else shown


def _goal_row(name: str, g: dict[str, Any]) -> str:
    verdict = "met" if g["met"] else "**not met**"
    cells = (name, g["goal"], figure_text(g), threshold_text(g, ("≥", "≤")))
    return "| " + " | ".join(map(_cell, cells)) + f" | {verdict} | {_cell(g.get('bound') or '')} |"


def bench_results_markdown(results: dict[str, Any] | None, page_href: str = "bench/results.html") -> str:
    """The course page's section on a ``workbench bench all`` run: where it ran, a row per benchmark,
    every goal per mechanism, and a link to its page of figures (``page_href``); with no results,
    :data:`NO_BENCH_RESULTS`."""
    if results is None:
        return NO_BENCH_RESULTS + "\n"
    m, revision = results["machine"], results["versions"].get("git") or "not a git checkout"
    lines = [
        f"Measured on {_strong(m['hostname'])} ({_cell(m['cpu'])}, {_cell(m['logical_cores'])} cores, "
        f"{m['memory_total'] / 2**30:.1f} GiB memory), started {_cell(results['started'])}, size "
        f"{_cell(results['size'] or 'each its own')}, workers {_cell(results['workers'] or 'each its own')}, "
        f"workbench revision {_cell(revision)}; {run_time(results.get('wall_s'))}. "
        f'<a href="{html.escape(page_href)}">The figures</a>: each goal against its threshold, with its peers.',
        "",
        "| benchmark | mechanism | size | wall time | goals met | status |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[str]] = {}
    for b in results["benchmarks"]:
        report = of_record(b)
        met = "-" if report is None else f"{report.met}/{len(report.goals)}"
        cells = (b["name"], b["mechanism"], b["size"], f"{b['wall_s']:.0f} s", met, b["status"])
        lines.append("| " + " | ".join(map(_cell, cells)) + " |")
        rows = groups.setdefault(b["mechanism"], [])
        rows += [_goal_row(b["name"], g) for g in (report.goals if report else ())]
        if b["status"] != "ok":
            rows.append(f"| {_cell(b['name'])} | {_cell(b['status'])}: {_cell(b['error'])} | | | | |")
    for mechanism, rows in groups.items():
        lines += ["", f"### {_cell(mechanism)}", "", "| benchmark | goal | measured | goal | | bounded here by |"]
        lines += ["|---|---|---|---|---|---|", *rows]
    return "\n".join(lines) + "\n"


def with_bench_results(page: str, section: str) -> str:
    """``page`` (the course page's markdown) with the text between its bench markers replaced by ``section``."""
    if page.count(BENCH_BEGIN) != 1 or page.count(BENCH_END) != 1:
        raise ValueError(f"the benchmark results page needs one {BENCH_BEGIN!r} and one {BENCH_END!r}")
    head, rest = page.split(BENCH_BEGIN)
    return f"{head}{BENCH_BEGIN}\n{section}{BENCH_END}{rest.split(BENCH_END, 1)[1]}"
