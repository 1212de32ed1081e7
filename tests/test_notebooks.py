"""Every lesson is executed at the small "ci" size, as CI and a learner's first run would do.

The executed copy is kept in build/executed/ for debugging (with outputs; never committed).
Cells tagged ``raises-exception`` demonstrate an error on purpose: they must raise, and nothing
else may. (papermill reports any error output, tagged or not, so the check is done here.)
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
CELL_TIMEOUT = 600  # seconds per cell; the test itself has pytest-timeout's limit below


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_at_ci_size(notebook: Path):
    papermill = pytest.importorskip("papermill")
    EXECUTED.mkdir(parents=True, exist_ok=True)
    output = EXECUTED / notebook.name
    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters={"size": "ci"},
            cwd=str(notebook.parent),
            execution_timeout=CELL_TIMEOUT,
            progress_bar=False,
        )
    except papermill.PapermillExecutionError:
        pass  # judged below, cell by cell
    executed = nbformat.read(output, as_version=4)
    unexpected, missing = [], []
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        expected = "raises-exception" in cell.metadata.get("tags", [])
        if errors and not expected:
            unexpected.append(f"cell {index}: {errors[0].ename}: {errors[0].evalue}\n{cell.source}")
        if expected and not errors:
            missing.append(f"cell {index} is tagged raises-exception but did not raise:\n{cell.source}")
    assert not unexpected, "\n\n".join(unexpected) + f"\n(executed copy: {output})"
    assert not missing, "\n\n".join(missing)
    last = [c for c in executed.cells if c.cell_type == "code"][-1]
    assert last.execution_count is not None, f"the notebook stopped before its last cell ({output})"
