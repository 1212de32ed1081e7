"""The page of a ``workbench bench all`` run in headless Chromium: every figure draws, offline, and a
screenshot shows the goals' bars; a page of dozens of goals draws too.

The results come from really running ``workbench bench all --only kernels --size ci`` once.
Skipped, with how to enable it, where Chromium or Playwright is missing.
"""

from __future__ import annotations

import copy
import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_helpers import ARTIFACTS, needs_chromium

from workbench.bench import page as bench_page
from workbench.bench import suite
from workbench.teach.site import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [needs_chromium, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "run"
    command = [sys.executable, "-m", "workbench.cli", "bench", "all", "--only", "kernels", "--size", "ci"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return suite.load(out / "results.json")


def _figures(results: dict) -> int:
    """The figures the page draws: one per mechanism with goals, one per goal with peers."""
    goals = [g for b in results["benchmarks"] if b["report"] for g in b["report"]["goals"]]
    mechanisms = {b["mechanism"] for b in results["benchmarks"] if b["report"] and b["report"]["goals"]}
    return len(mechanisms) + sum(bool(g["peers"]) for g in goals)


def _screenshot_of_drawn_page(path: Path, figures: int, shot: Path, seconds: float = 60) -> bytes:
    """Open ``path`` in headless Chromium, wait (bounded) until all ``figures`` have drawn their
    canvas, and return a full-page screenshot (saved to ``shot``). Fails on a page error or a request
    that leaves the file (the page must work offline)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra has it)")
    errors: list[str] = []
    elsewhere: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else elsewhere.append(r.url))
            page.goto(path.as_uri())
            deadline = time.monotonic() + seconds
            drawn = page.locator(".bk-Figure:has(canvas)")
            while drawn.count() < figures:
                assert time.monotonic() < deadline, f"{drawn.count()} of {figures} figures drew in {seconds} s"
                time.sleep(0.2)
            assert page.locator(".bk-Figure").count() == figures
            png = page.screenshot(full_page=True)
        finally:
            browser.close()
    assert not errors and not elsewhere, (errors, elsewhere)
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.write_bytes(png)
    return png


def _pixels_of(png: bytes, colour: str) -> int:
    from PIL import Image

    rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(count for count, pixel in image.getcolors(maxcolors=1 << 24) if pixel == rgb)


def test_the_results_page_draws_every_goal_in_a_browser(results, tmp_path):
    page = suite.write(results, tmp_path)[1]
    png = _screenshot_of_drawn_page(page, _figures(results), ARTIFACTS / "bench-all-results.png")
    goals = results["benchmarks"][0]["report"]["goals"]
    bars = _pixels_of(png, bench_page.MET) + _pixels_of(png, bench_page.NOT_MET)
    assert bars > 500 * len(goals), "the goals' bars (met or not met colours) are on the screenshot"
    if any(not g["met"] for g in goals):
        assert _pixels_of(png, bench_page.NOT_MET) > 500


def test_a_page_of_dozens_of_goals_draws(results, tmp_path):
    """The real run's kernels record repeated under 12 names and 4 mechanisms (36 goals or more): a
    test of the page's layout, not a run."""
    kernels = results["benchmarks"][0]
    many = copy.deepcopy(results)
    many["benchmarks"] = [
        {**copy.deepcopy(kernels), "name": f"kernels-{i}", "mechanism": f"mechanism {i % 4}"} for i in range(12)
    ]
    assert sum(len(b["report"]["goals"]) for b in many["benchmarks"] if b["report"]) >= 36
    page = suite.write(many, tmp_path)[1]
    png = _screenshot_of_drawn_page(page, _figures(many), ARTIFACTS / "bench-all-many-goals.png")
    assert _pixels_of(png, bench_page.MET) + _pixels_of(png, bench_page.NOT_MET) > 500 * 36
