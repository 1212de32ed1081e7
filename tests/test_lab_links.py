"""The course's links in JupyterLab, clicked in a real browser (Debian's Chromium via Playwright).

JupyterLab serves a learner's copy of the course (``workbench course copy``: the repository's
layout, as ``make lab`` serves the repository itself and the hub a learner's home) and opens at the
Makefile's default URL, on the lessons. A course page, opened as a rendered page, links a lesson:
the lesson opens; the lesson links the bibliography: it opens, rendered. Skipped, with how to
enable it, where Chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from browser_helpers import ARTIFACTS, needs_chromium

from workbench.teach import course
from workbench.teach.site import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[1]
WAIT_MS = 60_000

pytestmark = [needs_chromium, pytest.mark.timeout(300)]


def _default_url() -> str:
    """The page ``make lab`` opens (its ``--LabApp.default_url``)."""
    return re.search(r"--LabApp\.default_url=(\S+)", (ROOT / "Makefile").read_text())[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving a copy of the course, started as ``make lab`` starts it
    (``workbench.doctor.jupyter_lab``: the project's settings first); stopped afterwards."""
    from workbench import doctor

    course.copy_course(tmp_path / "course")
    settings = tmp_path / "user-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # every cell in the page (no windowing), so a link at a lesson's end can be clicked without scrolling
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    with doctor.jupyter_lab(env=env, root=tmp_path / "course") as (url, token):
        yield url, token


def _click(page, locator) -> None:
    """Click ``locator``, first answering JupyterLab's "Select Kernel" (a modal dialog a notebook may
    open before the kernels are listed); any other dialog fails the test."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():
            text = dialog.first.inner_text()
            assert "Select Kernel" in text, f"JupyterLab opened a dialog: {text[:500]}"
            dialog.get_by_role("button", name="Select", exact=True).click()
        try:
            locator.click(timeout=2_000)
            return
        except Exception:  # noqa: BLE001 - not clickable yet (a dialog over it, still drawing): try again
            assert time.monotonic() < deadline, f"could not click {locator}"


def _rendered_tab(page, name: str, heading: str) -> None:
    """Wait for the current tab to be ``name``, rendered (its first heading ``heading``)."""
    page.locator(".lm-TabBar-tab.lm-mod-current", has_text=name).first.wait_for(timeout=WAIT_MS)
    page.locator(".jp-RenderedMarkdown h1", has_text=heading).first.wait_for(timeout=WAIT_MS)


def test_a_course_page_links_a_lesson_and_the_lesson_links_the_bibliography_in_jupyterlab(lab):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra has it)")
    url, token = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # the Makefile's default URL: JupyterLab opens on the lessons
            page.goto(f"{url}{_default_url()}?token={token}")
            page.locator(".jp-DirListing-itemName", has_text="00-welcome.ipynb").wait_for(timeout=WAIT_MS)
            assert page.locator(".jp-BreadCrumbs").inner_text().strip().strip("/").endswith("notebooks")

            # the syllabus, rendered (a link opens a page rendered; the file browser opens it with "Open With")
            page.goto(f"{url}/lab/tree/docs/course?token={token}")
            item = page.locator(".jp-DirListing-item", has_text="syllabus.md").first
            item.click(button="right", timeout=WAIT_MS)
            page.locator(".lm-Menu-itemLabel", has_text="Open With").first.hover()
            page.locator(".lm-Menu-itemLabel", has_text="Markdown Preview").first.click()
            _rendered_tab(page, "syllabus.md", "Syllabus")

            # its link to lesson 00 (../../notebooks/00-welcome.ipynb) opens the lesson
            _click(page, page.locator(".jp-RenderedMarkdown a", has_text="00 · Welcome").first)
            page.locator(".lm-TabBar-tab.lm-mod-current", has_text="00-welcome.ipynb").wait_for(timeout=WAIT_MS)
            page.locator(".jp-Notebook .jp-MarkdownCell").first.wait_for(timeout=WAIT_MS)

            # the lesson's link to the course bibliography (../docs/course/bibliography.md) opens it, rendered
            _click(page, page.locator(".jp-Notebook .jp-RenderedMarkdown a", has_text="bibliography").first)
            _rendered_tab(page, "bibliography.md", "Bibliography")
            page.screenshot(path=str(ARTIFACTS / "lab-link-bibliography.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "lab-links-failed.png"))
            raise
        finally:
            browser.close()
