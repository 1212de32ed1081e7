"""The course documents hold together: every relative link of every Markdown page (``README.md``,
``docs/**/*.md`` and the project's other pages) and of every lesson's Markdown cells opens a file of
the repository, the glossary sends each term to the lesson that teaches it, the bibliography links
every entry, and the README and setup page give the clone and Binder addresses.

One relative link works in the three places a page is read because they all have the repository's
layout: GitHub; JupyterLab, which ``make lab`` and Binder serve from the repository's root (and the
hub from the learner's copy, ``workbench.teach.course``); and the course site, which puts the course
pages under ``docs/course/`` and the lessons under ``notebooks/`` (``workbench.teach.site``). A page
the site carries may link only to pages the site carries (tests/test_site.py checks the built site's
links too).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import nbformat
import pytest

from workbench import doctor
from workbench.teach import site

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "docs" / "course"
NOTEBOOKS = ROOT / "notebooks"
PAGES = sorted(COURSE.glob("*.md"))
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
SKIPPED = {".git", ".venv", "build", "node_modules", ".pytest_cache", ".ipynb_checkpoints"}
MARKDOWN = sorted(
    p for p in ROOT.rglob("*.md") if not SKIPPED & set(p.relative_to(ROOT).parts) and not p.name.startswith(".")
)
ON_THE_SITE = {*(COURSE / f"{page}.md" for page in site.PAGES), *LESSONS}  # what the course site carries
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target><[^>]+>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(?P<target>\S+)", re.MULTILINE)  # [name]: target
HREF = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=[\"'](?P<target>[^\"']+)[\"']", re.IGNORECASE)
FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
BINDER = re.compile(
    r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]"
    r"\(https://mybinder\.org/v2/gh/(?P<org>[\w.-]+)/(?P<repo>[\w.-]+)/HEAD\?urlpath=lab/tree/notebooks\)"
)
CLONE = re.compile(r"git clone https://github\.com/(?P<org>[\w.-]+)/(?P<repo>[\w.-]+)\.git")


def markdown_links(text: str) -> list[str]:
    """Link targets of Markdown text (inline, reference-style, and HTML ``href``/``src``), outside code
    blocks and inline code."""
    text = CODE.sub("", FENCE.sub("", text))
    found = [(m.start(), m["target"].strip("<>")) for m in LINK.finditer(text)]
    found += [(m.start(), m["target"]) for pattern in (REFERENCE, HREF) for m in pattern.finditer(text)]
    return [target for _, target in sorted(found)]


def links(path: Path) -> list[str]:
    """Link targets of a Markdown page, or of a notebook's Markdown cells."""
    if path.suffix == ".ipynb":
        cells = nbformat.read(path, as_version=4).cells
        return [t for c in cells if c.cell_type == "markdown" for t in markdown_links(c.source)]
    return markdown_links(path.read_text())


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("//")


def headings(path: Path) -> set[str]:
    """GitHub-style anchors of a page's headings (a notebook's: of its Markdown cells')."""
    if path.suffix == ".ipynb":
        cells = nbformat.read(path, as_version=4).cells
        lines = [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()]
    else:
        lines = FENCE.sub("", path.read_text()).splitlines()
    slugs = set()
    for line in lines:
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def resolve(page: Path, target: str) -> Path:
    """The file a relative link of ``page`` opens: the same in the repository, on GitHub, in
    JupyterLab served from the repository's root and on the course site."""
    path = target.split("#", 1)[0].split("?", 1)[0]
    return (page.parent / path).resolve() if path else page


def broken_links(page: Path, root: Path = ROOT, on_the_site: set[Path] = ON_THE_SITE) -> list[str]:
    """What is wrong with each relative link of ``page`` (a Markdown page or a notebook) of the
    repository at ``root`` whose course site carries ``on_the_site``; empty if nothing."""
    wrong = []
    for target in [t for t in links(page) if relative(t)]:
        path = resolve(page, target)
        if not path.is_relative_to(root):
            wrong.append(f"[{target}] leaves the repository ({path})")
        elif not path.is_file():
            wrong.append(f"[{target}] opens nothing ({path.relative_to(root)} is not a file of the repository)")
        elif page in on_the_site and path not in on_the_site:
            wrong.append(f"[{target}] opens {path.relative_to(root)}, which the course site does not carry")
        elif "#" in target and target.split("#", 1)[1] not in headings(path):
            wrong.append(f"[{target}] names no heading of {path.relative_to(root)}")
    return wrong


def test_the_site_lays_out_the_course_pages_and_the_lessons_as_the_repository_does():
    toc = site._toc(["setup"], [NOTEBOOKS / "00-welcome.ipynb"])
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    assert files == ["docs/course/setup", "notebooks/00-welcome", site.API_PAGE]  # the API page is written by the site
    assert (site.COURSE_DIR, site.LESSON_DIR) == ("docs/course", "notebooks")
    home = site._index([NOTEBOOKS / "00-welcome.ipynb"])
    targets = markdown_links(home)
    assert "notebooks/00-welcome.ipynb" in targets and "docs/course/syllabus.md" in targets
    written = f"{site.API_PAGE}.md"  # the site writes the API page beside the home page
    assert written in targets
    assert all((ROOT / t).is_file() for t in targets if relative(t) and t != written), "links as the repository's root"


def test_jupyterlab_serves_the_repositorys_root_and_opens_on_the_lessons():
    """``make lab`` serves the repository's root (so a lesson's ``../docs/...`` link opens) and opens on
    notebooks/; the Binder badge opens the same folder of repo2docker's copy of the repository."""
    makefile = (ROOT / "Makefile").read_text()
    lab = re.search(r"^lab:.*\n\t(?P<recipe>.*jupyter lab .*)$", makefile, re.MULTILINE)["recipe"]
    assert "--notebook-dir=. " in lab, lab
    assert "--LabApp.default_url=/lab/tree/notebooks " in lab, lab
    for text in ((ROOT / "README.md").read_text(), (COURSE / "setup.md").read_text()):
        assert "urlpath=lab/tree/notebooks)" in text


@pytest.mark.parametrize("page", [*MARKDOWN, *LESSONS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_opens_a_file_of_the_repository(page):
    assert not broken_links(page), f"{page.relative_to(ROOT)}:\n" + "\n".join(broken_links(page))


def test_the_pages_link_to_each_other_and_to_the_lessons():
    targets = {page: [t for t in links(page) if relative(t)] for page in [*MARKDOWN, *LESSONS]}
    assert sum(map(len, targets.values())) > 60, "the link pattern finds the pages' links"
    linked = {resolve(page, t) for page, ts in targets.items() for t in ts}
    assert set(PAGES) <= linked, "every course page is linked from another"
    assert set(LESSONS) <= linked, "every lesson is linked from a course page"
    assert {t for lesson in LESSONS for t in targets[lesson]}, "the lessons' links are found"


def test_the_link_check_catches_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](missing.md) `[b](in-code.md)`\n```\n[c](in-fence.md)\n```\n[d](https://example.org)\n"
        '[e]: ref.md\n<a href="html.md">f</a> ![g](<img.png>)\n'
    )
    assert links(page) == ["missing.md", "https://example.org", "ref.md", "html.md", "img.png"]
    # a repository of two course pages and a lesson: each kind of broken link is named
    course, notebooks = tmp_path / "docs" / "course", tmp_path / "notebooks"
    course.mkdir(parents=True)
    notebooks.mkdir()
    (tmp_path / "README.md").write_text("# Read me\n")
    (course / "setup.md").write_text("# Learner setup\n\n## What you need\n")
    glossary = course / "glossary.md"
    glossary.write_text(
        "[00](lessons/00-welcome.ipynb) [up](../../../outside.md) [readme](../../README.md) "
        "[setup](setup.md#nope) [fine](setup.md#what-you-need) [lesson](../../notebooks/00-welcome.ipynb#welcome)\n"
    )
    lesson = notebooks / "00-welcome.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# Welcome\n[setup](../docs/course/setup.md) [s](../docs/course/gone.md)")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), lesson)
    carried = {course / "setup.md", glossary, lesson}
    said = broken_links(glossary, tmp_path, carried)
    assert [w.split("] ", 1)[1].split(" ", 2)[:2] for w in said] == [
        ["opens", "nothing"], ["leaves", "the"], ["opens", "README.md,"], ["names", "no"]
    ], said  # fmt: skip
    assert broken_links(lesson, tmp_path, carried) == [
        "[../docs/course/gone.md] opens nothing (docs/course/gone.md is not a file of the repository)"
    ]
    assert broken_links(tmp_path / "README.md", tmp_path, carried) == []


def doctor_failures() -> set[str]:
    """The names of the checks ``workbench doctor`` can fail: each ``Check(name, ok, ...)`` made in
    workbench/doctor.py whose ``ok`` is not the constant True (read from its source, so a new check is
    found without a list to keep)."""
    failing = set()
    for node in ast.walk(ast.parse(Path(doctor.__file__).read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Check":
            values = [*node.args, *(k.value for k in node.keywords if k.arg in ("name", "ok"))]
            name, ok = values[0], values[1]
            assert isinstance(name, ast.Constant), f"line {node.lineno}: a doctor check's name is a literal"
            if not (isinstance(ok, ast.Constant) and ok.value is True):
                failing.add(name.value)
    return failing


def test_every_doctor_failure_has_its_section_on_the_troubleshooting_page():
    page = COURSE / "troubleshooting.md"
    failing = doctor_failures()
    assert {"operating system", "memory", "/dev/shm", "numba cache", "JupyterLab", "dashboard in JupyterLab"} <= failing
    assert "GPU" not in failing and "your segments" not in failing, "a check that never fails needs no section"
    sections = headings(page)
    for name in sorted(failing):
        slug = re.sub(r"[^\w\- ]", "", f"fail {name}".lower()).replace(" ", "-")
        assert slug in sections, f"{page.name} has no section '### FAIL {name}' for the doctor's failed check"
    assert doctor.TROUBLESHOOTING == page.relative_to(ROOT).as_posix()
    for symptom in ("kernel died", "port 8888 is in use", "dashboard not connected", "devshm is full",
                    "busy machine", "numba compiles", "link opens nothing"):  # fmt: skip
        assert any(symptom.replace(" ", "-") in s for s in sections), f"{page.name}: no section on '{symptom}'"
    for linking in ("instructor-guide.md", "setup.md"):
        assert "troubleshooting.md" in links(COURSE / linking), f"{linking} does not link the troubleshooting page"
    assert "troubleshooting" in site.PAGES


def test_the_instructor_guide_teaches_every_lesson_and_says_where_its_figures_come_from():
    guide = (COURSE / "instructor-guide.md").read_text()
    sections = dict(re.findall(r"^## (\d\d) · [^\n]*\n(.*?)(?=^## )", guide, re.MULTILINE | re.DOTALL))
    assert sorted(sections) == [p.name[:2] for p in LESSONS], "one section per lesson, '## NN · Title'"
    for number, text in sections.items():
        bullets = dict(re.findall(r"^- \*\*(\w[\w ]*)\.\*\* (.*?)(?=^- \*\*|^\||^To fill|\Z)", text, re.M | re.S))
        for part in ("Misconceptions", "Point at", "Expect", "Ask"):
            assert part in bullets, f"lesson {number}: no **{part}.** bullet"
        assert re.search(r"\b[Mm]easured\b", bullets["Expect"]), f"lesson {number}: Expect says no figure's source"


def glossary_entries() -> dict[str, str]:
    """Term -> its paragraph (``**Term.** definition ...``)."""
    text = (COURSE / "glossary.md").read_text()
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip().startswith("**")]
    return {p[2 : p.index("**", 2)].rstrip("."): p for p in paragraphs}


def test_the_glossary_defines_the_course_terms_and_links_where_each_is_taught():
    entries = glossary_entries()
    terms = [t.lower() for t in entries]
    assert terms == sorted(terms), "glossary terms are in alphabetical order"
    for wanted in ("RRO", "SplIter", "active object", "memory tier", "first touch", "page fault", "NUMA",
                   "page table", "rendezvous", "node id", "partition", "PSS"):  # fmt: skip
        assert any(wanted.lower() in t for t in terms), f"the glossary has no entry for {wanted}"
    lessons_taught = set()
    for term, paragraph in entries.items():
        targets = markdown_links(paragraph)
        lesson_links = [resolve(COURSE / "glossary.md", t) for t in targets if t.endswith(".ipynb")]
        assert lesson_links or "bibliography.md" in targets, f"{term}: no lesson (or reference) to learn it from"
        for lesson in lesson_links:
            assert lesson in LESSONS, f"{term}: {lesson} is not a lesson"
            lessons_taught.add(lesson)
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z*\[])", paragraph.split("Taught in")[0].strip())
        assert len(sentences) <= 4, f"{term}: a glossary entry is one or two sentences"
    assert lessons_taught == set(LESSONS), "every lesson teaches a term"


def test_every_bibliography_entry_has_a_link():
    text = (COURSE / "bibliography.md").read_text()
    entries = [e for e in re.split(r"\n(?=- )", text) if e.startswith("- ")]
    assert len(entries) >= 15
    for entry in entries:
        assert re.search(r"<https?://[^>\s]+>|\]\(https?://[^)\s]+\)", entry), f"no link: {entry[:80]}"
    for must in (
        "https://doi.org/10.1109/PyHPC51966.2020.00008",  # Foyer et al., the RRO paper
        "https://doi.org/10.1145/3208040.3208045",  # Hori et al., Process-in-Process
        "ArrayChannels.jl",
        "Bridging the Gap Between Object Stores and HPC",
        "https://docs.dask.org/",
        "https://numba.readthedocs.io/",
        "https://jobqueue.dask.org/",
        "https://carpentries.org/",
        "https://www.mpi-forum.org/docs/",
        "What Every Programmer Should Know About Memory",
    ):
        assert must in text, must


def test_readme_and_setup_give_the_clone_and_binder_addresses_of_one_repository():
    readme = (ROOT / "README.md").read_text()
    setup = (COURSE / "setup.md").read_text()
    for text in (readme, setup):
        badge, clone = BINDER.search(text), CLONE.search(text)
        assert badge and clone, "a Binder badge pointing at notebooks/ and a git clone URL"
        assert (badge["org"], badge["repo"]) == (clone["org"], clone["repo"]) == ("YOUR-ORG", "locality-workbench")
        assert "YOUR-ORG" in text.replace(clone[0], "").replace(badge[0], ""), "the placeholder is explained"
    assert readme.index("mybinder.org/badge_logo.svg") < readme.index("## Quickstart"), "the badge opens the README"
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.search(r"```bash\n(.*?)```", quickstart, re.DOTALL)[1]
    assert re.search(r"^make lab\b", commands, re.MULTILINE) and re.search(r"^make test\b", commands, re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab:", makefile, re.MULTILINE) and re.search(r"^test:", makefile, re.MULTILINE)
    # what the Binder link builds: repo2docker reads binder/
    assert {"environment.yml", "postBuild", "start"} <= {p.name for p in (ROOT / "binder").iterdir()}
    assert "WORKBENCH_SIZE" in (ROOT / "binder" / "start").read_text()


def test_the_readme_and_setup_commands_run_as_written_after_make_lab():
    """make lab installs into .venv and activates nothing: each page says how to activate it, and every
    command of .venv in their shell blocks is typed with its path (a bare `workbench` is "not found")."""
    venv_command = re.compile(r"^(?:workbench|jupyter|pytest|dask-mpi|pip|python)\b")
    for page in (ROOT / "README.md", COURSE / "setup.md"):
        text = page.read_text()
        assert "source .venv/bin/activate" in text and ".venv/bin/workbench doctor" in text, page.name
        for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            for line in block.splitlines():
                shell = re.sub(r"\b[A-Za-z_]\w*=", " ", line.split("#", 1)[0])  # VAR=value: the value is run
                for command in re.split(r"&&|\|\||;|\$\(|\||\bexport\b", shell):
                    assert not venv_command.match(command.strip()), f"{page.name}: {line.strip()}"


def test_setup_says_linux_and_names_every_linux_only_interface_the_doctor_knows():
    setup = (COURSE / "setup.md").read_text()
    assert "Linux (x86-64 or arm64)" in setup and "WSL2" in setup and "Binder" in setup
    name = re.compile(r"/(?:proc|sys|dev)/[\w<>/.-]*\w|\b(?:os|mmap)\.\w+|\bMADV_\w+|\bVmPTE\b|\bPageTables\b|\bPSS\b")
    for item in doctor.LINUX_ONLY:
        names = name.findall(item.interface)
        assert names, item.interface
        for found in names:
            assert found in setup, f"setup.md does not name {found} ({item.measurement})"


def test_course_material_is_cc_by_and_code_keeps_the_project_licence():
    licence = (COURSE / "LICENSE.md").read_text()
    assert "CC-BY-4.0" in licence and "https://creativecommons.org/licenses/by/4.0/" in licence
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]  # an SPDX expression
    assert project in licence and project in (ROOT / "README.md").read_text()
    conduct = (COURSE / "code-of-conduct.md").read_text()
    assert "Contact for this course" in conduct and "docs.carpentries.org" in conduct


def test_the_site_carries_every_course_page():
    from workbench.teach import site

    assert sorted(site.PAGES) == sorted(p.stem for p in PAGES), "add the page to workbench.teach.site.PAGES"


def test_the_readmes_application_table_is_the_registrys():
    """The README's table of applications and variants is what `workbench run` runs (it once lacked
    variants that had been added since)."""
    from workbench.apps import registry

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("<!-- applications -->") : readme.index("<!-- /applications -->")]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    listed = {row[0].strip("| `"): [v.strip("` |") for v in row[-1].split(", ")] for row in rows}
    expected = {name: list(registry.get(name).variants) for name in registry.names()}
    assert listed == expected, "README.md's applications table differs from the registry: rewrite it from registry"


def test_the_wrap_up_counts_the_mechanisms_its_table_shows():
    page = (COURSE / "wrap-up.md").read_text()
    table = page[page.index("| mechanism |") :].split("\n\n")[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    words = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
    assert f"**Question:** {words[len(rows)]} mechanisms" in page, f"the table has {len(rows)} mechanisms"
