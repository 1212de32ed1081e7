"""Issue 46, item 6: what the README tells a learner about Dask's dashboard works with Run All.

JupyterLab started as ``make lab`` starts it (the project's settings, the Makefile's ``LAB_DASK``
environment), lesson 00 at size ``ci`` run with JupyterLab's own "Run All Cells" in headless Chromium
(Debian's, via Playwright). Then, as the README says: the session cell shows the dashboard's links;
the Task Stream link, opened in the browser, shows the tasks the lesson ran (its ``histogramdd``
tasks), because Run All left the cluster running (the last cell is a button) and the scheduler
recorded the task stream from the start. Every wait is bounded and waits on a state; nothing
transient is clicked (the Run menu and a kernel dialog only, as in tests/test_browser.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from browser_helpers import ARTIFACTS, lesson_lab, needs_chromium

from workbench.teach.site import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "00-welcome.ipynb"
LESSON_TASK = "histogramdd"  # lesson 00 submits kernels.histogramdd itself: a task name of that lesson

pytestmark = [needs_chromium, pytest.mark.timeout(600)]


def lab_dask_environment() -> dict[str, str]:
    """The Makefile's ``LAB_DASK`` settings (what ``make lab`` gives every lesson's kernel), as a dict."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("LAB_DASK :="))
    return dict(word.split("=", 1) for word in line.split(":=", 1)[1].split())


@pytest.fixture
def jupyter_lab(tmp_path):
    """JupyterLab serving lesson 00 at size "ci" with ``make lab``'s Dask settings (``LAB_DASK``)."""
    with lesson_lab(NOTEBOOK, tmp_path, lab_dask_environment()) as lab:
        yield lab


def _wait_until(what: str, seconds: float, probe, page):
    """``probe()`` once it returns something true, polled until ``seconds`` pass; past them the test
    fails saying ``what``, with a screenshot."""
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / "dashboard-run-all-timeout.png"))
            pytest.fail(f"{what} within {seconds} s")
        time.sleep(0.5)  # the poll interval of a bounded wait on a state


def _kernel_idle(page) -> bool:
    """Whether the notebook's Python 3 kernel is up and idle; accepts JupyterLab's "Select Kernel"
    dialog (a modal: it stays until answered) and fails on any other dialog."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count():
        text = dialog.first.inner_text()
        if "Select Kernel" not in text:
            pytest.fail("JupyterLab opened a dialog: " + text[:1000])
        dialog.get_by_role("button", name="Select", exact=True).click()
    kernel = page.locator(".jp-Toolbar-kernelName")
    named = kernel.count() and "Python 3" in kernel.first.inner_text()
    return bool(named and page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count())


def _all_ran(page) -> bool:
    """Every code cell has run (no "[ ]" or "[*]" prompt, the last one numbered), or one errored."""
    prompts = page.eval_on_selector_all(".jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent.trim())")
    if page.locator("[data-mime-type='application/vnd.jupyter.error']").count():
        return True
    return bool(prompts) and all(p not in ("[ ]:", "[*]:") for p in prompts) and prompts[-1][1:-2].isdigit()


TASK_NAMES = """() => {
  const names = [];
  for (const doc of (window.Bokeh && window.Bokeh.documents) || []) {
    const models = doc.all_models ? [...doc.all_models] : [...doc._all_models.values()];
    for (const m of models) {
      if (m.data && m.data.name && m.data.duration) names.push(...Array.from(m.data.name));
    }
  }
  return names;
}"""


def test_after_run_all_the_session_cells_task_stream_link_shows_the_lessons_tasks(jupyter_lab):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra has it)")
    url, token = jupyter_lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=90_000)
            _wait_until("the notebook's kernel was not idle", 120, lambda: _kernel_idle(page), page)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            _wait_until("Run All did not finish", 420, lambda: _all_ran(page), page)
            errors = page.locator("[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()[:2000]

            # the session cell's output: its links, the cluster still running (the last cell is a button)
            link = page.locator(".jp-OutputArea-output a", has_text="Task Stream").first
            href = link.get_attribute("href")
            assert re.fullmatch(r"/proxy/\d+/individual-task-stream", href or ""), href
            link.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "dashboard-session-cell.png"))
            close_button = page.locator(".jupyter-widgets button", has_text="Close the cluster")
            close_button.first.wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "dashboard-run-all-lesson.png"))

            pane = context.new_page()  # the link opens in a browser tab: same cookies (the token's)
            pane.goto(f"{url}{href}")
            names = _wait_until(
                f"the Task Stream page at {href} showed no {LESSON_TASK} task",
                120,
                lambda: [n for n in pane.evaluate(TASK_NAMES) if n == LESSON_TASK],
                pane,
            )
            assert names, names
            pane.locator("canvas").first.wait_for(timeout=30_000)  # bokeh drew it
            pane.screenshot(path=str(ARTIFACTS / "dashboard-task-stream-after-run-all.png"))
        finally:
            browser.close()
