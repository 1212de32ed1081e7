"""The tour lesson in a real browser: JupyterLab + headless Chromium (Debian's) via Playwright.

Runs every cell through JupyterLab's own "Run All Cells", then checks that no cell errored, that
an ipywidget and bokeh plots rendered, and saves screenshots to build/artifacts/browser/.
Skipped, with how to enable it, where Chromium or Playwright is missing.

The server gets the project's JupyterLab settings (``jupyter-config/``, as ``make lab`` does), so no
news or update toast appears; the test never clicks a notification anyway (a toast moves and
detaches while it animates: clicking one is a race), only menus and modal dialogs, which stay put.
Both tests use one server (a start is seconds of two busy cores); each page opens on a fresh
workspace (``?reset``), and each test leaves no kernel and no settings of its own behind.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from browser_helpers import ARTIFACTS, lesson_lab, needs_chromium, shut_down_kernels

from workbench.teach.site import CHROMIUM, CHROMIUM_ARGS  # Debian's Chromium, flags for a closed network

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "01-locality-tour.ipynb"

pytestmark = [needs_chromium, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory):
    """JupyterLab serving a temporary copy of the lesson at size "ci" (``browser_helpers.lesson_lab``): its
    URL, token and user-settings directory (read when a page loads: a test may add its settings there)."""
    scratch = tmp_path_factory.mktemp("lab")
    with lesson_lab(NOTEBOOK, scratch) as (url, token):
        yield url, token, scratch / "user-settings"


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(".jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent.trim())")


def _wait_for_kernel(page, seconds: float = 120) -> None:
    """Wait until the notebook's Python 3 kernel is idle, answering what a learner would answer.

    When the notebook opens before JupyterLab has listed the kernels, it asks "Select Kernel" with
    Python 3 proposed: accept it (a modal dialog: it stays until answered). Any other dialog fails
    the test. Notifications are never clicked.
    """
    deadline = time.monotonic() + seconds
    while True:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():
            text = dialog.first.inner_text()
            if "Select Kernel" not in text:
                page.screenshot(path=str(ARTIFACTS / "01-locality-tour-dialog.png"))
                pytest.fail("JupyterLab opened a dialog: " + text[:1000])
            page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True).click()
        kernel = (
            page.locator(".jp-Toolbar-kernelName").first.inner_text()
            if page.locator(".jp-Toolbar-kernelName").count()
            else ""
        )
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
        if "Python 3" in kernel and idle:
            return
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / "01-locality-tour-no-kernel.png"))
            pytest.fail(f"the notebook's kernel did not start within {seconds} s (toolbar says {kernel!r})")
        time.sleep(0.5)


def test_tour_runs_in_jupyterlab_and_renders_widgets_and_plots(jupyter_lab):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra has it)")
    url, token, _ = jupyter_lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/{NOTEBOOK}?reset&token={token}")
            page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=90_000)
            _wait_for_kernel(page)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

            deadline = time.monotonic() + 400
            while True:  # every code cell has run: none waiting ("[ ]", "[*]"), the last one numbered
                prompts = _prompts(page)  # a cell with hidden input shows an empty prompt
                if prompts and all(p not in ("[ ]:", "[*]:") for p in prompts) and prompts[-1][1:-2].isdigit():
                    break
                if page.locator("[data-mime-type='application/vnd.jupyter.error']").count():
                    break
                assert time.monotonic() < deadline, f"cells did not finish: {prompts}"
                time.sleep(1)

            # the shipped settings took effect: JupyterLab never asked about news
            assert page.get_by_text("official Jupyter news").count() == 0, (
                "the news toast appeared: jupyter-config/ not applied?"
            )
            errors = page.locator("[data-mime-type='application/vnd.jupyter.error']")
            if errors.count():
                page.screenshot(path=str(ARTIFACTS / "01-locality-tour-error.png"))
            assert errors.count() == 0, errors.first.inner_text()[:2000]

            run_button = page.locator(".jupyter-widgets button", has_text="Run")
            run_button.first.wait_for(timeout=30_000)
            panel_canvases = page.locator(".jupyter-widgets canvas")  # BokehModel figures inside the panel
            panel_canvases.first.wait_for(timeout=60_000)
            assert page.locator(".jp-OutputArea canvas").count() >= 5  # the lesson's bokeh plots
            run_button.first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "01-locality-tour-panel.png"))
            page.locator(".jp-OutputArea canvas").first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "01-locality-tour.png"))
        finally:
            browser.close()
            shut_down_kernels(url, token)  # the lesson's kernel, and the cluster it started


def test_dask_task_stream_pane_renders_in_jupyterlab(jupyter_lab):
    """dask-labextension, pointed at a workbench session's cluster as ``make lab`` points it (the
    dashboard link through JupyterLab's proxy), opens the Task Stream pane and the pane renders."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra has it)")
    import json

    import dask

    import workbench

    url, token, settings = jupyter_lab
    plugin_settings = settings / "dask-labextension" / "plugin.jupyterlab-settings"
    plugin_settings.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with dask.config.set({"distributed.dashboard.link": "/proxy/{port}/status"}):  # the Makefile's LAB_DASK
        session = workbench.start(n_workers=1, dashboard=True)
        link = session.client.dashboard_link
    try:
        assert link.startswith("/proxy/") and link.endswith("/status"), link
        plugin_settings.write_text(json.dumps({"defaultURL": link}))
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{url}/lab?reset&token={token}")
                page.wait_for_selector(".jp-LabShell", timeout=90_000)
                sidebar_tab = page.locator(".lm-TabBar-tab[data-id='dask-dashboard-launcher']")
                sidebar_tab.wait_for(timeout=60_000)
                sidebar_tab.click()
                assert page.locator(".dask-URLInput-wrapper input").input_value() == link
                # the button is enabled once the extension's server side reached the dashboard
                task_stream = page.locator(
                    ".dask-DashboardListing-item:not(.dask-mod-disabled)", has_text="Task Stream"
                )
                task_stream.wait_for(timeout=60_000)
                task_stream.click()
                pane = page.locator(".dask-DaskDashboard-widget iframe").first
                pane.wait_for(timeout=60_000)
                assert f"/proxy/{link.split('/')[2]}/individual-task-stream" in pane.get_attribute("src")
                pane.content_frame.locator("canvas").first.wait_for(timeout=60_000)  # bokeh drew the pane
                page.screenshot(path=str(ARTIFACTS / "dask-task-stream-pane.png"))
            finally:
                browser.close()
    finally:
        plugin_settings.unlink(missing_ok=True)
        session.close()
