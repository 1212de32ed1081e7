"""Run a lesson as CI and the course site do: at the "ci" size, with the hidden solutions or without
them (as a learner first sees it), and read what its check cells said.

Used by the notebook tests and by ``make site`` (the site shows the lessons executed with solutions).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from workbench.teach.feedback import MIME

MODES = ("solutions", "stubs")
CELL_TIMEOUT = 300  # seconds per cell: a ci-size cell takes under a minute; a hung kernel fails in 5, not 10


def without_solutions(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The lesson as a learner first sees it: the hidden solution cells (tag ``solution``) left out."""
    notebook = nbformat.from_dict(notebook)
    notebook.cells = [c for c in notebook.cells if "solution" not in c.metadata.get("tags", [])]
    return notebook


STUB_PARAMETERS = {"repeats": 2}  # the stubs run checks the exercises, not the statistics: fewer repeats


def execute(notebook: Path, out_dir: Path, mode: str = "solutions", size: str = "ci") -> Path:
    """Execute ``notebook`` with papermill into ``out_dir`` (same file name) and return the copy.

    An error in a cell does not raise here: the executed copy holds it, for the caller to judge
    cell by cell (cells tagged ``raises-exception`` fail on purpose).
    """
    import papermill

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    source = nbformat.read(notebook, as_version=4)
    if mode == "stubs":
        source = without_solutions(source)
    prepared = out_dir / f".input-{notebook.name}"
    nbformat.write(source, prepared)
    output = out_dir / notebook.name
    try:
        papermill.execute_notebook(
            str(prepared),
            str(output),
            parameters={"size": size, **(STUB_PARAMETERS if mode == "stubs" else {})},
            cwd=str(notebook.parent),
            execution_timeout=CELL_TIMEOUT,
            progress_bar=False,
        )
    except papermill.PapermillExecutionError:
        pass  # the executed copy records the error
    finally:
        prepared.unlink(missing_ok=True)
    return output


def check_verdicts(executed: nbformat.NotebookNode) -> list[tuple[int, dict | None]]:
    """(cell index, the check's machine-readable verdict or None) for every cell tagged ``check``."""
    verdicts = []
    for index, cell in enumerate(executed.cells):
        if "check" in cell.metadata.get("tags", []):
            found = [o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})]
            verdicts.append((index, found[0] if found else None))
    return verdicts
