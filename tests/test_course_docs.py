"""The course documents hold together: every relative link in ``docs/course/*.md`` and ``README.md``
opens a file of the repository, the glossary sends each term to the lesson that teaches it, the
bibliography links every entry, and the README and setup page give the clone and Binder addresses.

Course pages are written for the course site, where ``workbench.teach.site`` puts them side by side
and the lessons under ``lessons/``: a page's ``lessons/NN-name.ipynb`` is ``notebooks/NN-name.ipynb``
here, and any other relative link must stay inside ``docs/course/``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from workbench import doctor
from workbench.teach import site

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "docs" / "course"
NOTEBOOKS = ROOT / "notebooks"
LESSONS = "lessons/"  # where the site puts the lessons, next to the course pages
PAGES = sorted(COURSE.glob("*.md"))
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
BINDER = re.compile(
    r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]"
    r"\(https://mybinder\.org/v2/gh/(?P<org>[\w.-]+)/(?P<repo>[\w.-]+)/HEAD\?urlpath=lab/tree/notebooks\)"
)
CLONE = re.compile(r"git clone https://github\.com/(?P<org>[\w.-]+)/(?P<repo>[\w.-]+)\.git")


def links(path: Path) -> list[str]:
    """Link targets of a markdown file, outside code blocks and inline code."""
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    return [m["target"] for m in LINK.finditer(text)]


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)


def headings(path: Path) -> set[str]:
    """GitHub-style anchors of a page's headings."""
    slugs = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def resolve(page: Path, target: str) -> Path:
    """The repository file a relative link of ``page`` opens (lessons/ mapped to notebooks/ for course pages)."""
    path = target.split("#", 1)[0]
    if page.parent == COURSE and path.startswith(LESSONS):
        return NOTEBOOKS / path[len(LESSONS) :]
    return (page.parent / path).resolve() if path else page


def test_the_site_puts_lessons_under_lessons_next_to_the_course_pages():
    toc = site._toc(["setup"], [NOTEBOOKS / "00-welcome.ipynb"])
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    assert "setup" in files and "lessons/00-welcome" in files


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=lambda p: p.name)
def test_every_relative_link_opens_a_file_of_the_repository(page):
    for target in [t for t in links(page) if relative(t)]:
        path = resolve(page, target)
        assert path.is_file(), f"{page.name}: [{target}] opens nothing ({path})"
        if page.parent == COURSE and not target.startswith(LESSONS):
            assert path.parent == COURSE, f"{page.name}: [{target}] leaves docs/course/ (the site would break it)"
        if "#" in target:
            anchor = target.split("#", 1)[1]
            assert anchor in headings(path), f"{page.name}: [{target}] names no heading of {path.name}"


def test_the_pages_link_to_each_other_and_to_the_lessons():
    targets = {page.name: [t for t in links(page) if relative(t)] for page in [*PAGES, ROOT / "README.md"]}
    assert sum(map(len, targets.values())) > 60, "the link pattern finds the pages' links"
    linked = {Path(t.split("#")[0]).name for ts in targets.values() for t in ts}
    assert {p.name for p in PAGES} <= linked, "every course page is linked from another"


def test_the_link_check_catches_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](missing.md) `[b](in-code.md)`\n```\n[c](in-fence.md)\n```\n[d](https://example.org)\n")
    assert links(page) == ["missing.md", "https://example.org"]
    assert not resolve(page, "missing.md").is_file()
    assert resolve(COURSE / "glossary.md", "lessons/00-welcome.ipynb") == NOTEBOOKS / "00-welcome.ipynb"


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
        targets = [m["target"] for m in LINK.finditer(paragraph)]
        lesson_links = [t for t in targets if t.startswith(LESSONS)]
        assert lesson_links or "bibliography.md" in targets, f"{term}: no lesson (or reference) to learn it from"
        for target in lesson_links:
            assert (NOTEBOOKS / target[len(LESSONS) :]).is_file(), f"{term}: {target} is not a lesson"
            lessons_taught.add(target)
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z*\[])", paragraph.split("Taught in")[0].strip())
        assert len(sentences) <= 4, f"{term}: a glossary entry is one or two sentences"
    assert len(lessons_taught) == len(sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))), "every lesson teaches a term"


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
