"""``make site``: the course as a static web site, built offline with Jupyter Book 1.x (Sphinx).

The site holds the syllabus, the instructor guide, the learner setup page (``docs/course/``),
every lesson executed at the "ci" size with its solutions, outputs and bokeh figures included, and
the latest ``workbench bench all`` results of the machine that builds it (``bench-results``: the
goals as tables, and the run's page of figures copied to ``bench/results.html``).
Each lesson page is made from its executed copy by ``workbench.teach.site_pages``: intended errors
shown as intended, parameters cells hidden, live panels drawn as their Run left them, and BokehJS
loaded from one file in the site's ``_static/`` (once per site, no network). Lessons already
executed by the notebook tests (``build/executed/solutions/``) are reused when newer than their
source; the others are executed here. Jupyter Book 2 (mystmd) fetches its theme at build time,
which CI cannot reach: hence 1.x.

The site is laid out like the repository: the course pages under ``docs/course/``, the lessons under
``notebooks/``, the home page at the top. So one relative link works on the site, on GitHub and in
JupyterLab (served from the repository's root by ``make lab``, Binder and the hub's copy): a lesson's
``../docs/course/bibliography.md``, a course page's ``../../notebooks/00-welcome.ipynb``.

``python -m workbench.teach.site [--out build/site]`` builds it and prints its size;
``build/site/index.html`` is the home. ``--screenshots docs/course/site-screenshots`` also takes
the screenshots of lesson 02's page and of a live panel's page in headless Chromium (Playwright).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html.parser
import http.server
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

import nbformat
import yaml

from workbench.teach import api_reference, site_pages
from workbench.teach.execute import execute

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
COURSE = ROOT / "docs" / "course"
EXECUTED = ROOT / "build" / "executed" / "solutions"
SOLUTIONS = ROOT / "workbench" / "teach" / "solutions"  # the solutions manual, one page per lesson
COURSE_DIR = COURSE.relative_to(ROOT).as_posix()  # where the site puts the course pages: as the repository does
LESSON_DIR = NOTEBOOKS.relative_to(ROOT).as_posix()  # and the lessons
SOURCE = ROOT / "build" / "site-source"
OUT = ROOT / "build" / "site"
PAGES = (  # every page of docs/course/, in the site's order (a test holds the two equal)
    "syllabus",
    "setup",
    "learner-profiles",
    "instructor-guide",
    "troubleshooting",
    "bench-results",
    "deploy",
    "cluster",
    "wrap-up",
    "glossary",
    "bibliography",
    "code-of-conduct",
    "LICENSE",
)
API_PAGE = "api"  # the API reference (workbench.teach.api_reference), at the site's top beside index
BENCH = ROOT / "build" / "bench"  # where 'workbench bench all' writes its runs (HOST-TIME/results.json)
BUILD_SECONDS = 900
MAX_BYTES = 10 * 2**20  # the whole site, BokehJS included once
SCREENSHOTS = ROOT / "docs" / "course" / "site-screenshots"
# Debian's Chromium, headless, for a closed network (no background connections or updates).
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def lessons() -> list[Path]:
    """The lesson notebooks, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


def executed_lessons(executed: Path = EXECUTED) -> list[Path]:
    """Each lesson executed with its solutions at size "ci": reused when newer than the lesson and its
    solutions page (the manual's code runs in it), else run now."""
    copies = []
    for lesson in lessons():
        copy = executed / lesson.name
        manual = SOLUTIONS / f"lesson{lesson.name[:2]}.md"
        sources = [lesson, *([manual] if manual.exists() else [])]
        if not copy.exists() or copy.stat().st_mtime < max(source.stat().st_mtime for source in sources):
            print(f"executing {lesson.name} at size 'ci' ...", flush=True)
            copy = execute(lesson, executed, "solutions")
        copies.append(copy)
    return copies


def _config() -> dict:
    """Jupyter Book's _config.yml: no execution (the copies are executed), nothing fetched from the network,
    no link to a page the site does not have (the theme's download button links ``_sources/``, which is
    not copied), and the pages' ``#heading`` links resolved as GitHub resolves them."""
    launch = {"notebook_interface": "jupyterlab", "binderhub_url": "", "thebe": False}
    return {
        "title": "Locality Workbench: a course on data locality in HPC Python",
        "author": "Locality Workbench",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        # no dollar math: a "$" in prose stays a dollar, and no page loads MathJax from a CDN
        "parse": {"myst_enable_extensions": ["colon_fence", "substitution", "tasklist"]},
        "html": {"use_repository_button": False, "use_issues_button": False, "use_edit_page_button": False},
        "launch_buttons": launch,
        "sphinx": {
            "config": {
                # no require.js or widget manager from a CDN: panels are drawn from their saved state
                "nb_ipywidgets_js": {},
                "html_show_copyright": False,
                "html_copy_source": False,
                "html_extra_path": ["_extra"],
                "suppress_warnings": ["mystnb.unknown_mime_type", "myst.header"],
                # replaces the theme options Jupyter Book derives from html: and launch_buttons: above
                "html_theme_options": {"launch_buttons": launch, "use_download_button": False},
                "myst_heading_anchors": 3,  # [x](#a-heading): GitHub's anchors, to level 3
            }
        },
    }


def _toc(pages: Sequence[str], notebooks: Sequence[Path]) -> dict:
    return {
        "format": "jb-book",
        "root": "index",
        "parts": [
            {"caption": "The course", "chapters": [{"file": f"{COURSE_DIR}/{page}"} for page in pages]},
            {
                "caption": "Lessons (executed at size ci)",
                "chapters": [{"file": f"{LESSON_DIR}/{p.stem}"} for p in notebooks],
            },
            {"caption": "The library", "chapters": [{"file": API_PAGE}]},
        ],
    }


def _index(notebooks: Sequence[Path]) -> str:
    """The home page, at the site's top: what the course is, each course page (under ``docs/course/``)
    and each lesson (under ``notebooks/``)."""
    c = COURSE_DIR
    rows = "\n".join(f"- [{p.stem}]({LESSON_DIR}/{p.stem}.ipynb)" for p in notebooks)
    return (
        "# Locality Workbench: the course\n\n"
        "Two days on data locality for data-intensive Python on HPC machines: shared memory and "
        "recurrent read-only arguments, the active object store, SplIter partitions, memory tiers, "
        "in-place array channels and execution models, measured live on a Dask cluster, then a "
        "capstone in which you find and fix the locality problems of a pipeline.\n\n"
        f"- [Syllabus and schedule]({c}/syllabus.md)\n- [Learner setup]({c}/setup.md)\n"
        f"- [Who the course is for]({c}/learner-profiles.md)\n- [Instructor guide]({c}/instructor-guide.md)\n"
        f"- [Helpers' troubleshooting]({c}/troubleshooting.md): each `workbench doctor` failure and each common "
        "symptom, with its fix\n"
        f"- [This machine's benchmarks]({c}/bench-results.md): every goal, as the machine that built the site "
        "measured it\n"
        f"- [Deploying for a class]({c}/deploy.md): one JupyterHub server, an HPC centre with Slurm, Binder\n"
        f"- [Going to a cluster]({c}/cluster.md) and the [wrap-up]({c}/wrap-up.md)\n"
        f"- [Glossary]({c}/glossary.md), [bibliography]({c}/bibliography.md), "
        f"[code of conduct]({c}/code-of-conduct.md)\n"
        f"- The course material is [CC-BY-4.0]({c}/LICENSE.md)\n"
        f"- The library's [API reference]({API_PAGE}.md): every public name, from its docstring\n\n"
        "## Lessons\n\nEach page is the lesson executed at the small *ci* size (seconds on a laptop), "
        "its figures computed by that run; the exercises' solutions are shown.\n\n" + rows + "\n"
    )


def latest_bench_results(root: Path = BENCH, hostname: str | None = None) -> Path | None:
    """The newest ``results.json`` of ``workbench bench all`` under ``root/*/`` made on this machine
    (its hostname, or ``hostname``), or None."""
    import socket

    from workbench.bench import suite

    hostname = socket.gethostname() if hostname is None else hostname
    found = []
    for path in root.glob("*/results.json"):
        try:
            results = suite.load(path)
        except (OSError, ValueError):
            continue  # not a results file of bench all: not this page's business
        if results["machine"]["hostname"] == hostname and suite.finished(results):  # not one stopped or running
            found.append((path.stat().st_mtime, path))
    return max(found)[1] if found else None


def _bench_results_page(source: Path, results_path: Path | None) -> None:
    """Fill the course page ``bench-results`` with ``results_path``'s run and copy its page of
    figures into the site (BokehJS from the site's one file); without results, say what to run."""
    from workbench.bench import suite
    from workbench.bench.page import write_page

    results = None if results_path is None else suite.load(results_path)
    page = source / COURSE_DIR / "bench-results.md"
    up = "../" * len(Path(COURSE_DIR).parts)  # from the page's folder to the site's top, where _extra/ goes
    section = site_pages.bench_results_markdown(results, f"{up}bench/results.html")
    page.write_text(site_pages.with_bench_results(page.read_text(), section))
    if results is not None:
        (source / "_extra" / "bench").mkdir(parents=True, exist_ok=True)
        write_page(results, source / "_extra" / "bench" / "results.html", f"../_static/{site_pages.bokeh_js_name()}")


def assemble(source: Path = SOURCE, executed: Path = EXECUTED, bench_results: Path | None = None) -> Path:
    """The Jupyter Book source tree: config, table of contents, the course pages (the benchmark page
    filled from ``bench_results``, default the newest results of this machine) and the executed lessons."""
    notebooks = executed_lessons(executed)
    if source.exists():
        shutil.rmtree(source)
    (source / LESSON_DIR).mkdir(parents=True)
    (source / COURSE_DIR).mkdir(parents=True)
    for page in PAGES:
        shutil.copy(COURSE / f"{page}.md", source / COURSE_DIR / f"{page}.md")
    _bench_results_page(source, bench_results if bench_results is not None else latest_bench_results())
    bokeh_src = "../" * len(Path(LESSON_DIR).parts) + f"_static/{site_pages.bokeh_js_name()}"  # from a lesson's page
    pages = [site_pages.for_site(nbformat.read(notebook, as_version=4), bokeh_src) for notebook in notebooks]
    # Into _static/ through html_extra_path: Jupyter Book puts every .js of the source's own _static/
    # into every page's head, the syllabus too; BokehJS is loaded by the lesson pages that draw figures.
    site_pages.write_bokeh_js(source / "_extra" / "_static", mathjax=site_pages.needs_mathjax(pages))
    for notebook, page in zip(notebooks, pages, strict=True):
        nbformat.write(page, source / LESSON_DIR / notebook.name)
    (source / "index.md").write_text(_index(notebooks))
    (source / f"{API_PAGE}.md").write_text(api_reference.markdown())
    (source / "_config.yml").write_text(yaml.safe_dump(_config(), sort_keys=False))
    (source / "_toc.yml").write_text(yaml.safe_dump(_toc(PAGES, notebooks), sort_keys=False))
    return source


def build(out: Path = OUT, source: Path = SOURCE, executed: Path = EXECUTED, bench_results: Path | None = None) -> Path:
    """Build the site into ``out`` and return ``out / "index.html"`` (``bench_results``: a results.json
    of ``workbench bench all`` for the benchmark page; default the newest of this machine)."""
    assemble(source, executed, bench_results)
    work = source.parent / "site-build"
    cli = "import sys; from jupyter_book.cli.main import main; sys.exit(main())"
    command = [sys.executable, "-c", cli, "build", str(source), "--path-output", str(work)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"jupyter-book failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if out.exists():
        shutil.rmtree(out)
    # the theme's source maps (3 MB) serve only a browser's developer tools: not shipped
    shutil.copytree(work / "_build" / "html", out, ignore=shutil.ignore_patterns("*.map", ".buildinfo"))
    return out / "index.html"


class _Links(html.parser.HTMLParser):
    """The link targets (``href``, ``src``) and the anchors (``id``, ``<a name>``) of one HTML page."""

    TAGS = ("a", "link", "script", "img", "iframe", "source", "area")

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Record the tag's anchor and its link."""
        values = {key: value for key, value in attrs if value is not None}
        self.anchors.update(values[key] for key in ("id", "name") if key in values and (key == "id" or tag == "a"))
        if tag in self.TAGS:
            self.targets += [values[key] for key in ("href", "src") if values.get(key)]


def _links_of(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(errors="replace"))
    parser.close()
    return parser


def broken_links(root: Path) -> list[str]:
    """Each relative link of the built site under ``root`` that opens nothing there: its page, the
    link and why (no such file, a file outside the site, no such anchor in the page it opens). Links
    with a scheme (``https:``, ``mailto:``, ``data:``) are not followed."""
    root = root.resolve()
    static = root / "_static"  # the theme's files: its .html there are templates, not pages
    pages = {page: _links_of(page) for page in sorted(root.rglob("*.html")) if not page.is_relative_to(static)}
    wrong = []
    for page, found in pages.items():
        for target in found.targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", target):
                continue
            parts = urllib.parse.urlsplit(target)
            path, anchor = urllib.parse.unquote(parts.path), urllib.parse.unquote(parts.fragment)
            opened = (page.parent / path).resolve() if path else page
            if opened.is_dir():
                opened = opened / "index.html"
            where = f"{page.relative_to(root)}: {target}"
            if not opened.is_relative_to(root):
                wrong.append(f"{where} leaves the site")
            elif not opened.is_file():
                wrong.append(f"{where} opens nothing ({opened.relative_to(root)} is not in the site)")
            elif anchor and opened in pages and anchor not in pages[opened].anchors:
                wrong.append(f"{where} names no anchor of {opened.relative_to(root)}")
    return wrong


def size_bytes(root: Path) -> int:
    """The bytes of every file under ``root`` (the site as it would be served or copied)."""
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        """No line per request."""


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on a free port of 127.0.0.1 while the block runs; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def lesson_page(root: Path, number: str) -> Path:
    """The built page of lesson ``number`` ("02"), found by its number, not its title."""
    found = sorted((root / LESSON_DIR).glob(f"{number}-*.html"))
    if not found:
        raise FileNotFoundError(f"no page for lesson {number} in {root / LESSON_DIR}")
    return found[0]


# What each screenshot shows: (file, lesson number, the element at the top of the view; None: the page's top).
SHOTS = (
    ("lesson-02-top.png", "02", None),
    ("lesson-02-intended-error.png", "02", ".workbench-intended-error"),
    ("lesson-00-live-panel.png", "00", ".workbench-live-panel"),
)


def _save_small(png: bytes, path: Path) -> None:
    """Save a screenshot with a palette of 256 colours (a page is text and flat colours: a third of
    the bytes, small enough to commit)."""
    import io

    from PIL import Image

    Image.open(io.BytesIO(png)).convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)


def screenshots(root: Path, out: Path = SCREENSHOTS, timeout_ms: int = 60_000) -> list[Path]:
    """Screenshots (PNG, 1200x900) of lesson 02's page (its top and its intended error) and of lesson
    00's live panel, as headless Chromium draws the built site at ``root``, once bokeh has drawn."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    taken = []
    with serve(root) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            for name, number, anchor in SHOTS:
                page.goto(f"{url}/{lesson_page(root, number).relative_to(root).as_posix()}")
                page.locator("canvas").first.wait_for(timeout=timeout_ms)  # bokeh has drawn
                if anchor is not None:
                    cell = page.locator(".cell", has=page.locator(anchor)).first
                    cell.wait_for(timeout=timeout_ms)
                    if anchor == ".workbench-live-panel":  # the panel's own figure (drawn in a shadow root)
                        cell.locator("canvas").first.wait_for(timeout=timeout_ms)
                    cell.evaluate("e => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 80)")
                _save_small(page.screenshot(), out / name)
                taken.append(out / name)
        finally:
            browser.close()
    return taken


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build the course site, print its size, optionally take its screenshots."""
    parser = argparse.ArgumentParser(prog="python -m workbench.teach.site", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the site goes (default build/site)")
    parser.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help=f"also save screenshots of lesson 02 and of a live panel there (the committed ones: {SCREENSHOTS})",
    )
    parser.add_argument(
        "--bench-results",
        type=Path,
        metavar="RESULTS_JSON",
        help=f"the 'workbench bench all' run the benchmark page shows (default: this machine's newest in {BENCH})",
    )
    args = parser.parse_args(argv)
    if args.bench_results is not None:  # a missing file or not a results file: said before the build
        from workbench.bench import suite

        try:
            suite.load(args.bench_results)
        except (OSError, ValueError) as error:
            parser.error(f"--bench-results: {error}")
    index = build(args.out, bench_results=args.bench_results)
    total = size_bytes(args.out)
    print(f"course site: {index} ({total / 2**20:.1f} MiB in all, the limit is {MAX_BYTES / 2**20:.0f} MiB)")
    wrong = broken_links(args.out)
    for line in wrong:
        print(f"broken link: {line}", file=sys.stderr)
    if args.screenshots is not None:
        for path in screenshots(args.out, args.screenshots):
            print(f"screenshot: {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
