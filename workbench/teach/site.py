"""``make site``: the course as a static web site, built offline with Jupyter Book 1.x (Sphinx).

The site holds the syllabus, the instructor guide, the learner setup page (``docs/course/``) and
every lesson executed at the "ci" size with its solutions, outputs and bokeh figures included
(BokehJS is inlined in each page, so the site needs no network). Lessons already executed by the
notebook tests (``build/executed/solutions/``) are reused when newer than their source; the others
are executed here. Jupyter Book 2 (mystmd) fetches its theme at build time, which CI cannot reach:
hence 1.x.

``python -m workbench.teach.site [--out build/site]`` builds it; ``build/site/index.html`` is the home.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from workbench.teach.execute import execute

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
COURSE = ROOT / "docs" / "course"
EXECUTED = ROOT / "build" / "executed" / "solutions"
SOURCE = ROOT / "build" / "site-source"
OUT = ROOT / "build" / "site"
PAGES = ("syllabus", "setup", "instructor-guide")
BUILD_SECONDS = 900


def lessons() -> list[Path]:
    """The lesson notebooks, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


def executed_lessons(executed: Path = EXECUTED) -> list[Path]:
    """Each lesson executed with its solutions at size "ci": reused when newer than the lesson, else run now."""
    copies = []
    for lesson in lessons():
        copy = executed / lesson.name
        if not copy.exists() or copy.stat().st_mtime < lesson.stat().st_mtime:
            print(f"executing {lesson.name} at size 'ci' ...", flush=True)
            copy = execute(lesson, executed, "solutions")
        copies.append(copy)
    return copies


def _config() -> dict:
    """Jupyter Book's _config.yml: no execution (the copies are executed), nothing fetched from the network."""
    return {
        "title": "Locality Workbench: a course on data locality in HPC Python",
        "author": "Locality Workbench",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        # no dollar math: a "$" in prose stays a dollar, and no page loads MathJax from a CDN
        "parse": {"myst_enable_extensions": ["colon_fence", "substitution", "tasklist"]},
        "html": {"use_repository_button": False, "use_issues_button": False, "use_edit_page_button": False},
        "launch_buttons": {"notebook_interface": "jupyterlab", "binderhub_url": "", "thebe": False},
        "sphinx": {
            "config": {
                # no require.js or widget manager from a CDN: the figures are static bokeh, inlined
                "nb_ipywidgets_js": {},
                "html_show_copyright": False,
                "html_copy_source": False,
                "suppress_warnings": ["mystnb.unknown_mime_type", "myst.header"],
            }
        },
    }


def _toc(pages: Sequence[str], notebooks: Sequence[Path]) -> dict:
    return {
        "format": "jb-book",
        "root": "index",
        "parts": [
            {"caption": "The course", "chapters": [{"file": page} for page in pages]},
            {
                "caption": "Lessons (executed at size ci)",
                "chapters": [{"file": f"lessons/{p.stem}"} for p in notebooks],
            },
        ],
    }


def _index(notebooks: Sequence[Path]) -> str:
    rows = "\n".join(f"- [{p.stem}](lessons/{p.stem}.ipynb)" for p in notebooks)
    return (
        "# Locality Workbench: the course\n\n"
        "Two days on data locality for data-intensive Python on HPC machines: shared memory and "
        "recurrent read-only arguments, the active object store, SplIter partitions, memory tiers, "
        "in-place array channels and execution models, measured live on a Dask cluster, then a "
        "capstone in which you find and fix the locality problems of a pipeline.\n\n"
        "- [Syllabus and schedule](syllabus.md)\n- [Learner setup](setup.md)\n"
        "- [Instructor guide](instructor-guide.md)\n\n"
        "## Lessons\n\nEach page is the lesson executed at the small *ci* size (seconds on a laptop), "
        "its figures computed by that run; the exercises' solutions are shown.\n\n" + rows + "\n"
    )


def assemble(source: Path = SOURCE, executed: Path = EXECUTED) -> Path:
    """The Jupyter Book source tree: config, table of contents, the course pages and the executed lessons."""
    notebooks = executed_lessons(executed)
    if source.exists():
        shutil.rmtree(source)
    (source / "lessons").mkdir(parents=True)
    for page in PAGES:
        shutil.copy(COURSE / f"{page}.md", source / f"{page}.md")
    for notebook in notebooks:
        shutil.copy(notebook, source / "lessons" / notebook.name)
    (source / "index.md").write_text(_index(notebooks))
    (source / "_config.yml").write_text(yaml.safe_dump(_config(), sort_keys=False))
    (source / "_toc.yml").write_text(yaml.safe_dump(_toc(PAGES, notebooks), sort_keys=False))
    return source


def build(out: Path = OUT, source: Path = SOURCE, executed: Path = EXECUTED) -> Path:
    """Build the site into ``out`` and return ``out / "index.html"``."""
    assemble(source, executed)
    work = source.parent / "site-build"
    cli = "import sys; from jupyter_book.cli.main import main; sys.exit(main())"
    command = [sys.executable, "-c", cli, "build", str(source), "--path-output", str(work)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"jupyter-book failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(work / "_build" / "html", out)
    return out / "index.html"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build the course site."""
    parser = argparse.ArgumentParser(prog="python -m workbench.teach.site", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the site goes (default build/site)")
    args = parser.parse_args(argv)
    index = build(args.out)
    print(f"course site: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
