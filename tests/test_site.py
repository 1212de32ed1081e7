"""``make site``: the course site builds offline from the lessons executed at size ci, and in a real
browser every lesson page shows its bokeh figures.

Runs after tests/test_notebooks.py (file order), whose executed copies it reuses.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path

import pytest

from workbench.teach import site

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def built_site() -> Path:
    return site.build()


@pytest.mark.timeout(1200)
def test_make_site_builds_the_course_offline(built_site):
    root = built_site.parent
    assert built_site.name == "index.html" and built_site.exists()
    for page in site.PAGES:
        assert (root / f"{page}.html").exists(), page
    pages = sorted((root / "lessons").glob("*.html"))
    assert [p.stem for p in pages] == [p.stem for p in site.lessons()]
    for page in pages:
        html = page.read_text()
        assert "Bokeh" in html and "<script" in html, page.name  # BokehJS inlined, figures embedded
        fetched = re.findall(r'<(?:script|img|iframe)[^>]+src="https?:|<link[^>]+href="https?:', html)
        assert not fetched, (page.name, fetched)  # nothing from the network: the site works offline


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium: 'apt-get install chromium' (.ci/run does it)")
@pytest.mark.timeout(600)
def test_every_lesson_page_shows_its_figures_in_a_browser(built_site):
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_browser import ARTIFACTS, CHROMIUM_ARGS

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_site.parent))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                # sphinx-thebe's script is included twice by Jupyter Book 1.x; its redeclaration is not ours
                page.on("pageerror", lambda e: None if "THEBE_JS_URL" in str(e) else errors.append(str(e)))
                page.goto(f"{url}/index.html")
                links = page.locator("a[href^='lessons/']").evaluate_all("els => els.map(e => e.getAttribute('href'))")
                assert sorted(set(links)) == [f"lessons/{p.stem}.html" for p in site.lessons()]
                for link in sorted(set(links)):
                    page.goto(f"{url}/{link}")
                    page.locator("canvas").first.wait_for(timeout=60_000)  # a bokeh figure drew itself
                    assert page.locator("canvas").count() >= 1, link
                page.screenshot(path=str(ARTIFACTS / "site-last-lesson.png"))
            finally:
                browser.close()
    finally:
        server.shutdown()
    assert not errors, errors
