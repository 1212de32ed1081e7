"""docs/architecture.md is checked against the code: the paths it names exist, every module is in its
Modules table, and its recipes are python blocks that none of its directives skips.

The recipes run as every code block of README.md and docs/ does, through sybil (conftest.py,
tests/doc_blocks.py). A recipe that drifts from the code fails there, as numba's documentation
examples fail its tests; a module added without a row, or a row naming a file that was moved or
removed, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
TOP_DIRECTORIES = ("workbench", "kernels", "datasets", "notebooks")
CHECKED_PACKAGES = ("workbench", "kernels", "datasets")  # every module of these has a row


def _section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/architecture.md has no '## {heading}' section"
    return match.group(1)


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block as (language, code), in document order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def tree_paths(text: str) -> list[str]:
    """The paths in the first column of the directory tree (the document's first fenced block)."""
    language, tree = _fenced_blocks(text)[0]
    assert language == "", "the document opens with the directory tree as a plain fenced block"
    return [line.split()[0] for line in tree.splitlines() if line.strip()]


def table_paths(text: str) -> list[list[str]]:
    """The paths each row of the Modules table names, resolved against the repository root.

    A row names one or several files in its first column: ``workbench/bench/store.py`` in full,
    ``bench/dataclay_peer.py`` under the row's top directory, ``fetch.py`` beside the path before
    it; ``NN`` stands for any two digits (``teach/lessonNN.py``) and a trailing ``/`` for a directory.
    """
    rows = []
    for line in _section(text, "Modules").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or cells[0] in ("module", "---"):
            continue
        top, directory, row = None, None, []
        for name in re.findall(r"`([^`]+)`", cells[0]):
            if name.split("/")[0] in TOP_DIRECTORIES:
                path = name
            elif "/" in name:
                assert top, f"row {cells[0]!r}: {name!r} comes before any full path"
                path = f"{top}/{name}"
            else:
                assert directory, f"row {cells[0]!r}: {name!r} comes before any full path"
                path = f"{directory}/{name}"
            top, directory = path.split("/")[0], path.rstrip("/").rsplit("/", 1)[0]
            row.append(path)
        assert row, f"a Modules row names no path: {line!r}"
        rows.append(row)
    return rows


def _matches(pattern: str) -> list[Path]:
    glob = pattern.rstrip("/").replace("NN", "[0-9][0-9]")
    return [p for p in ROOT.glob(glob) if p.is_dir() == pattern.endswith("/")]


def test_every_path_the_document_names_exists():
    text = DOC.read_text()
    missing = [p for p in tree_paths(text) if not (ROOT / p.rstrip("/")).exists()]
    missing += [p for row in table_paths(text) for p in row if not _matches(p)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_module_has_a_row_in_the_modules_table():
    named = {m.relative_to(ROOT).as_posix() for row in table_paths(DOC.read_text()) for p in row for m in _matches(p)}
    modules = sorted(
        m.relative_to(ROOT).as_posix()
        for package in CHECKED_PACKAGES
        for m in (ROOT / package).rglob("*.py")
        if m.name != "__init__.py"
    )
    assert modules, "no modules found: the test looks in the wrong place"
    unnamed = [m for m in modules if m not in named]
    assert not unnamed, f"modules with no row in docs/architecture.md's Modules table: {unnamed}"


def test_the_table_parser_reads_shortened_rows():
    """The reading rules themselves, on a made-up table (a parser that read nothing would pass the tests above)."""
    text = (
        "## Modules\n\n| module | job |\n|---|---|\n"
        "| `workbench/runtime/strategies/blocks.py`, `fetch.py`, `bench/store.py`, `dataclay_peer.py` | x |\n"
        "| `workbench/teach/lessonNN.py`, `teach/solutions/` | y |\n\n## Decisions\n"
    )
    assert table_paths(text) == [
        [
            "workbench/runtime/strategies/blocks.py",
            "workbench/runtime/strategies/fetch.py",
            "workbench/bench/store.py",
            "workbench/bench/dataclay_peer.py",
        ],
        ["workbench/teach/lessonNN.py", "workbench/teach/solutions/"],
    ]
    assert len(_matches("workbench/teach/lessonNN.py")) >= 9
    assert _matches("workbench/teach/solutions/") and not _matches("workbench/teach/solutions.py")


def test_the_recipes_are_python_blocks_that_run():
    """The recipes (add a strategy, add an application, run it) are python blocks, which sybil runs;
    the page skips none of its blocks (a recipe that no longer runs is fixed, not skipped)."""
    text = DOC.read_text()
    recipes = [code for language, code in _fenced_blocks(text) if language == "python"]
    assert len(recipes) >= 3, "the recipes (add a strategy, add an application, run it) are python blocks"
    assert "register(OneWorker())" in recipes[0] and "register(" in recipes[1] and "run_experiment(" in recipes[2]
    assert not re.search(r"^\s*<!--\s*skip:", text, flags=re.MULTILINE), (
        "docs/architecture.md skips a block: its recipes must run"
    )
