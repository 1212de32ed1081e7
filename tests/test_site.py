"""``make site``: the course site builds offline from the lessons executed at size ci; each lesson page
shows intended errors as intended, hides the parameters cells, draws live panels as their Run left
them and loads BokehJS from one file of the site; in a real browser every lesson page shows its
bokeh figures; the benchmark page shows this machine's latest ``bench all`` run or says what to run;
the whole site fits in 10 MiB.

The first tests make pages from small notebooks shaped as papermill writes them (seconds). The
others build the real site; they run after tests/test_notebooks.py (file order), whose executed
copies the build reuses.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import ipywidgets as widgets
import nbformat
import pytest
from ipywidgets.embed import embed_data

from workbench.teach import site, site_pages

CHROMIUM = site.CHROMIUM
BOKEH_SRC = "../_static/bokeh-test.min.js"
EXEC = site_pages.BOKEH_EXEC
LOAD = site_pages.BOKEH_LOAD
BANNER = "papermill-error-cell-tag"
COMPUTE_FAILED = (
    "2026-11-26 04:08:00,849 - distributed.worker - ERROR - Compute Failed\n"
    "Key:       rank0-g6b1b5217f3\n"
    "State:     long-running\n"
    "Exception: 'ChannelError(\"channel 0: rank 0 made 'data' (10,)\")'\n"
    "Traceback: '  File \"group.py\", line 342, in rank_main\\n    raise ChannelError(\\n'\n"
    "\n"
)


def _code(source: str, tags: tuple[str, ...] = (), outputs: list | None = None) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)})
    cell.outputs = [nbformat.from_dict(o) for o in outputs or []]
    return cell


def _markdown(source: str, tags: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(source, metadata={"tags": list(tags)})


def _stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def _display(data: dict, metadata: dict | None = None) -> dict:
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


def _bokeh_show_outputs(title: str) -> list[dict]:
    """The two outputs ``bokeh.io.show`` publishes in a notebook for a figure."""
    from bokeh.embed.notebook import notebook_content
    from bokeh.plotting import figure

    fig = figure(title=title, width=300, height=200)
    fig.line([1, 2, 3], [3, 1, 2])
    script, div, _ = notebook_content(fig)
    return [
        _display({"text/html": div}),
        _display({"application/javascript": script, EXEC: ""}, {EXEC: {"id": fig.id}}),
    ]


def _executed_lesson(cells: list, widget_views: list | None = None) -> nbformat.NotebookNode:
    """A notebook shaped as papermill writes it; ``widget_views`` are saved in its widget state."""
    notebook = nbformat.v4.new_notebook(cells=cells)
    if widget_views:
        notebook.metadata["widgets"] = {site_pages.WIDGET_STATE: embed_data(views=widget_views)["manager_state"]}
    return notebook


def _view(widget: widgets.Widget) -> dict:
    return {
        "output_type": "execute_result",
        "execution_count": 1,
        "metadata": {},
        "data": {site_pages.WIDGET_VIEW: {"model_id": widget.model_id, "version_major": 2, "version_minor": 0}},
    }


def _all_text(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook)


# -- pages made from executed notebooks -------------------------------------------------------------
def test_an_intended_error_shows_its_last_line_without_papermills_banner():
    error = {
        "output_type": "error",
        "ename": "ValueError",
        "evalue": "assignment destination is read-only",
        "traceback": ["\x1b[31m-----\x1b[39m", "\x1b[31mValueError\x1b[39m: assignment destination is read-only"],
    }
    lesson = _executed_lesson(
        [
            _markdown('<span style="color:red">An Exception was encountered at In [8].</span>', (BANNER,)),
            _markdown("# 02 · Shared memory"),
            _markdown("<span>Execution using papermill encountered an exception here and stopped:</span>", (BANNER,)),
            _code('again["celsius"][0] = 99.0', ("raises-exception",), [_stream("stdout", "before\n"), error]),
            _code("1 / 0", (), [{**error, "ename": "ZeroDivisionError", "evalue": "division by zero"}]),
        ]
    )
    page = site_pages.for_site(lesson, BOKEH_SRC)
    text = _all_text(page)
    assert "An Exception was encountered" not in text and "papermill encountered" not in text
    assert [c.source for c in page.cells if c.cell_type == "markdown"] == ["# 02 · Shared memory"]
    intended = page.cells[1]
    assert [o.output_type for o in intended.outputs] == ["stream", "display_data"]
    shown = intended.outputs[1].data["text/html"]
    assert "workbench-intended-error" in shown and "The intended error" in shown
    assert "<code>ValueError: assignment destination is read-only</code>" in shown
    assert "\x1b" not in shown and "-----" not in shown  # no traceback
    # a cell that is not tagged keeps its error: an unintended failure stays visible
    assert page.cells[2].outputs[0].output_type == "error"
    assert lesson.cells[3].outputs[1].output_type == "error", "the executed copy itself is not changed"


def test_dask_log_records_leave_stderr_and_the_rest_stays():
    lesson = _executed_lesson(
        [
            _code(
                "run_group(session, mismatched, ranks=2)",
                outputs=[
                    _stream("stderr", COMPUTE_FAILED + COMPUTE_FAILED.replace("rank0", "rank1")),
                    _stream("stdout", "ChannelError: every rank must make the same channels in the same order\n"),
                ],
            ),
            _code(
                "start()",
                outputs=[
                    _stream(
                        "stderr",
                        "2026-11-26 04:04:32,551 - distributed.scheduler - WARNING - Removing worker "
                        "'tcp://127.0.0.1:45439' caused the cluster to lose already computed task(s)\n"
                        "/work/lesson.py:3: UserWarning: the lesson's own warning\n",
                    )
                ],
            ),
        ]
    )
    page = site_pages.for_site(lesson, BOKEH_SRC)
    text = _all_text(page)
    assert "Compute Failed" not in text and "Traceback" not in text and "distributed." not in text
    assert [o.name for o in page.cells[0].outputs] == ["stdout"]  # the lesson's own output, the error's line
    assert page.cells[1].outputs[0].text == "/work/lesson.py:3: UserWarning: the lesson's own warning\n"


def test_the_parameters_cells_are_hidden():
    lesson = _executed_lesson(
        [
            _code('size = None  # "ci", "lab" or "full"', ("parameters",)),
            _code('# Parameters\nsize = "ci"\n', ("injected-parameters",)),
            _code("import workbench"),
        ]
    )
    page = site_pages.for_site(lesson, BOKEH_SRC)
    assert page.cells[0].metadata.tags == ["parameters", "hide-cell"]
    assert page.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert page.cells[2].metadata.tags == []


def test_a_live_panel_is_drawn_as_its_run_left_it():
    """A real panel of the workbench (no cluster needed) with a figure in its output, and an
    ExperimentPanel's shape (figures as jupyter_bokeh models): the page shows a note, the settings,
    the status and the figures, and no widget view or widget state is left."""
    from bokeh.plotting import figure
    from jupyter_bokeh.widgets import BokehModel

    from workbench.viz.panels import PageTablePanel

    panel = PageTablePanel()
    panel.status.value = "4 processes: 512 KiB of page tables; 4 threads: 128 KiB"
    panel.output.outputs = tuple(_bokeh_show_outputs("page tables, 64 MiB segment"))
    gantt = figure(title="blocks: median run", width=300, height=200)
    gantt.scatter([1, 2], [1, 2])
    experiment = widgets.VBox(
        [
            widgets.HBox(
                [widgets.Dropdown(options=["histogram", "kmeans"], value="kmeans", description="application")]
            ),  # noqa: E501
            widgets.SelectMultiple(options=["files", "dask", "rro"], value=("files", "rro"), description="variants"),
            widgets.Button(description="Run"),
            widgets.HTML("done: files 0.0202 s, rro 0.0106 s"),
            widgets.HTML('<table class="dataframe"><tr><td>speed-up</td></tr></table>'),
            widgets.VBox([BokehModel(gantt)]),
        ]
    )
    progress = widgets.HBox([widgets.HTML("runs: 96%"), widgets.FloatProgress(value=23, max=24)])
    closing = widgets.VBox([widgets.HTML("<p>Run All stops here</p>"), widgets.Button(description="Close the cluster")])
    idle = widgets.VBox([widgets.Button(description="Run"), widgets.HTML("Set the knobs, then press <b>Run</b>.")])
    lesson = _executed_lesson(
        [
            _code("setup_notebook()", outputs=[_display({"application/javascript": "/* BokehJS */", LOAD: ""})]),
            _code("run_experiment(...)", outputs=[_view(progress)]),
            _code("panel = PageTablePanel()\npanel.widget", outputs=[_view(panel.widget)]),
            _code("panel.run();"),
            _code("panel = ExperimentPanel(session, size)\npanel.widget", outputs=[_view(experiment)]),
            _code("teardown(session)", outputs=[_view(closing)]),
            _code("panel = PipelinePanel(session, size, planted_run)\npanel.widget", outputs=[_view(idle)]),
        ],
        widget_views=[progress, panel.widget, experiment, closing, idle],
    )
    assert site_pages.live_panels(lesson) == 2  # no progress bar, teardown, or panel that did not run
    page = site_pages.for_site(lesson, BOKEH_SRC)
    text = _all_text(page)
    assert site_pages.WIDGET_VIEW not in text and "widgets" not in page.metadata
    assert page.cells[1].outputs == []  # a progress bar is transient: left out
    table_panel = page.cells[2].outputs
    note = table_panel[0].data["text/html"]
    assert "workbench-live-panel" in note and "In JupyterLab the panel is live" in note
    assert "segment MiB = <code>64</code>" in note and "most tasks = <code>4</code>" in note
    assert "4 processes: 512 KiB of page tables" in table_panel[1].data["text/html"]
    assert [o.data["text/html"] for o in page.cells[5].outputs] == ["<p>Run All stops here</p>"]
    assert [list(o.data) for o in table_panel[2:]] == [["text/html"], ["application/javascript", site_pages.BOKEH_EXEC]]
    assert "page tables, 64 MiB segment" in table_panel[3].data["application/javascript"]
    shown = page.cells[4].outputs
    note = shown[0].data["text/html"]
    assert "application = <code>kmeans</code>" in note and "variants = <code>files, rro</code>" in note
    assert "done: files 0.0202 s" in shown[1].data["text/html"] and "speed-up" in shown[2].data["text/html"]
    assert 'data-root-id="' + gantt.id + '"' in shown[3].data["text/html"]  # the jupyter_bokeh figure, static
    script = shown[4].data["application/javascript"]
    assert "embed_items_notebook" in script and "blocks: median run" in script
    left = page.cells[6].outputs  # a panel the lesson leaves for the learner: said so, not "after one Run"
    assert (
        "workbench-live-panel-idle" in left[0].data["text/html"]
        and "Run All does not press it" in left[0].data["text/html"]
    )
    assert "Set the knobs" in left[1].data["text/html"]


def test_bokehjs_comes_once_from_the_sites_static_file(tmp_path):
    load = _display({"application/javascript": "/* 4 MB of BokehJS */", site_pages.BOKEH_LOAD: "/* again */"})
    lesson = _executed_lesson(
        [
            _code("setup_notebook()", outputs=[load, _display({"text/plain": "{'scheduler': ...}"})]),
            _code("show(figure)", outputs=_bokeh_show_outputs("one")),
            _code("setup_notebook()", outputs=[load]),
            _code("show(figure)", outputs=_bokeh_show_outputs("two")),
        ]
    )
    page = site_pages.for_site(lesson, BOKEH_SRC)
    text = _all_text(page)
    assert "4 MB of BokehJS" not in text and site_pages.BOKEH_LOAD not in text
    assert text.count(f'src=\\"{BOKEH_SRC}\\"') == 1  # one script, where the first load was
    assert page.cells[0].outputs[0].data == {"text/html": f'<script type="text/javascript" src="{BOKEH_SRC}"></script>'}
    assert page.cells[2].outputs == []
    # a page that draws figures without a load output still gets the script, before the first embedding
    bare = site_pages.for_site(_executed_lesson([_code("show(figure)", outputs=_bokeh_show_outputs("one"))]), BOKEH_SRC)
    div, script, embed = bare.cells[0].outputs
    assert "data-root-id" in div.data["text/html"] and BOKEH_SRC in script.data["text/html"]
    assert "embed_items_notebook" in embed.data["application/javascript"]

    js = site_pages.write_bokeh_js(tmp_path / "_static")
    assert js.name == site_pages.bokeh_js_name() and "Bokeh" in js.read_text()
    assert 1_000_000 < js.stat().st_size < 3_000_000  # BokehJS, without its 1.8 MB MathJax bundle
    assert site_pages.write_bokeh_js(tmp_path / "m", mathjax=True).stat().st_size > js.stat().st_size + 1_000_000
    assert not site_pages.needs_mathjax([page])
    tex = _executed_lesson([_code("show(f)", outputs=[_display({"application/javascript": 'title: "$$x^2$$"'})])])
    assert site_pages.needs_mathjax([tex])


def test_the_link_check_names_each_link_that_opens_nothing(tmp_path):
    (tmp_path / "docs" / "course").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "theme.css").write_text("")
    (tmp_path / "index.html").write_text(
        '<link href="_static/theme.css" rel="stylesheet"><a href="docs/course/setup.html#what-you-need">setup</a>'
        '<a href="notebooks/">lessons</a><a href="https://example.org/x.html">out</a><a href="mailto:x@y">m</a>'
        '<img src="data:image/png;base64,AA"><script>var s = "<a href=\'nowhere.html\'>";</script>'
    )
    (tmp_path / "notebooks" / "index.html").write_text('<a id="top" href="#top">top</a>')
    (tmp_path / "docs" / "course" / "setup.html").write_text(
        '<section id="what-you-need"></section><a href="../../notebooks/00-welcome.html">00</a>'
        '<a href="../../index.html#nope">home</a><img src="../../../outside.png"><a href="#here">x</a>'
    )
    assert site.broken_links(tmp_path) == [
        "docs/course/setup.html: ../../notebooks/00-welcome.html opens nothing "
        "(notebooks/00-welcome.html is not in the site)",
        "docs/course/setup.html: ../../index.html#nope names no anchor of index.html",
        "docs/course/setup.html: ../../../outside.png leaves the site",
        "docs/course/setup.html: #here names no anchor of docs/course/setup.html",
    ]


# -- the real site ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_site() -> Path:
    return site.build()


@pytest.mark.timeout(1200)
def test_make_site_builds_the_course_offline(built_site):
    root = built_site.parent
    assert built_site.name == "index.html" and built_site.exists()
    for page in site.PAGES:
        assert (root / site.COURSE_DIR / f"{page}.html").exists(), page
    pages = sorted((root / site.LESSON_DIR).glob("*.html"))
    assert [p.stem for p in pages] == [p.stem for p in site.lessons()]
    total = site.size_bytes(root)
    assert total <= site.MAX_BYTES, f"the site is {total / 2**20:.1f} MiB"
    bokeh_js = root / "_static" / site_pages.bokeh_js_name()
    assert bokeh_js.stat().st_size > 1_000_000
    for page in pages:
        html = page.read_text()
        assert page.stat().st_size < 1_500_000, page.name  # BokehJS is not inlined in a page
        assert "Bokeh" in html and "<script" in html, page.name  # figures embedded
        loads = re.findall(r'<script[^>]+src="([^"]*bokeh[^"]*)"', html)
        assert loads == [f"../_static/{bokeh_js.name}"], (page.name, loads)  # BokehJS once, from the site
        fetched = re.findall(r'<(?:script|img|iframe)[^>]+src="https?:|<link[^>]+href="https?:', html)
        assert not fetched, (page.name, fetched)  # nothing from the network: the site works offline
        for banner in ("An Exception was encountered", "papermill encountered an exception", "Compute Failed"):
            assert banner not in html, (page.name, banner)
        assert "Traceback (most recent call last)" not in html and "Traceback: '" not in html, page.name
        assert "injected-parameters" not in html and "# Parameters\n" not in html, page.name
        assert site_pages.WIDGET_VIEW not in html and site_pages.WIDGET_STATE not in html, page.name
        executed = nbformat.read(site.EXECUTED / f"{page.stem}.ipynb", as_version=4)
        assert html.count('class="admonition note workbench-live-panel"') == site_pages.live_panels(executed), page.name
        intended = sum("raises-exception" in c.metadata.get("tags", []) for c in executed.cells)
        assert html.count("workbench-intended-error") == intended, page.name
    bench_page = (root / site.COURSE_DIR / "bench-results.html").read_text()
    if site.latest_bench_results() is None:
        assert "No results of" in bench_page
    else:  # this machine's newest 'bench all' run, its figures beside it
        assert 'href="../../bench/results.html"' in bench_page and (root / "bench" / "results.html").is_file()
    # one relative link works here as in the repository: the site has its layout, and every link opens a page
    assert site.broken_links(root) == []
    assert 'href="../docs/course/bibliography.html"' in site.lesson_page(root, "00").read_text()
    assert 'href="../../notebooks/00-welcome.html' in (root / site.COURSE_DIR / "syllabus.html").read_text()
    lesson02 = site.lesson_page(root, "02").read_text()
    assert "workbench-intended-error" in lesson02 and "ValueError: assignment destination is read-only" in lesson02
    assert "workbench-live-panel" in site.lesson_page(root, "00").read_text()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium: 'apt-get install chromium' (.ci/run does it)")
@pytest.mark.timeout(600)
def test_every_lesson_page_shows_its_figures_in_a_browser(built_site):
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_browser import ARTIFACTS

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    elsewhere: list[str] = []
    with site.serve(built_site.parent) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=site.CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            # sphinx-thebe's script is included twice by Jupyter Book 1.x; its redeclaration is not ours
            page.on("pageerror", lambda e: None if "THEBE_JS_URL" in str(e) else errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if "BokehJS" in m.text else None)
            page.on("request", lambda r: None if r.url.startswith((url, "data:")) else elsewhere.append(r.url))
            page.goto(f"{url}/index.html")
            links = page.locator("a[href^='notebooks/']").evaluate_all("els => els.map(e => e.getAttribute('href'))")
            assert sorted(set(links)) == [f"notebooks/{p.stem}.html" for p in site.lessons()]
            for link in sorted(set(links)):
                page.goto(f"{url}/{link}")
                page.locator("canvas").first.wait_for(timeout=60_000)  # a bokeh figure drew itself
                figures = page.locator("div[data-root-id]")
                drawn = page.locator("div[data-root-id] canvas")
                # every embedded figure drew: bokeh draws each root (and its tools) in a shadow root
                page.wait_for_function(
                    "n => document.querySelectorAll('div[data-root-id]').length === n"
                    " && [...document.querySelectorAll('div[data-root-id]')].every(d => d.children.length > 0)",
                    arg=figures.count(),
                    timeout=60_000,
                )
                assert drawn.count() >= 1, link
                for note in page.locator(".cell", has=page.locator(".workbench-live-panel")).all():
                    note.locator("canvas").first.wait_for(timeout=60_000)  # the panel's figure, static
            page.screenshot(path=str(ARTIFACTS / "site-last-lesson.png"))
        finally:
            browser.close()
    assert not errors, errors
    assert not elsewhere, elsewhere  # the site asks nothing of the network


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium: 'apt-get install chromium' (.ci/run does it)")
@pytest.mark.timeout(600)
def test_screenshots_of_lesson_02_and_of_a_live_panel(built_site, tmp_path):
    pytest.importorskip("playwright.sync_api")
    taken = site.screenshots(built_site.parent, tmp_path)
    assert [p.name for p in taken] == [name for name, _, _ in site.SHOTS]
    for shot in taken:
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", shot.name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert (width, height) == (1200, 900), shot.name
        assert 20_000 < len(data) < 200_000, (shot.name, len(data))  # a drawn page, small enough to commit


def test_the_benchmark_page_says_what_to_run_when_this_machine_has_no_results(tmp_path):
    (tmp_path / site.COURSE_DIR).mkdir(parents=True)
    (tmp_path / site.COURSE_DIR / "bench-results.md").write_text((site.COURSE / "bench-results.md").read_text())
    site._bench_results_page(tmp_path, None)
    text = (tmp_path / site.COURSE_DIR / "bench-results.md").read_text()
    assert text.count(site_pages.NO_BENCH_RESULTS) == 1 and "make bench" in text  # no figures made up
    assert not (tmp_path / "_extra").exists()
    assert site.latest_bench_results(tmp_path / "no-runs") is None
    with pytest.raises(ValueError, match="needs one"):
        site_pages.with_bench_results("# a page without the markers\n", "results")
