"""Every lesson is executed at the small "ci" size, as CI and a learner's first run would do.

The executed copy is kept in build/executed/ for debugging (with outputs; never committed).
"""
from __future__ import annotations

from pathlib import Path

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
    # Raises PapermillExecutionError naming the failing cell; the partial output is still saved.
    papermill.execute_notebook(
        str(notebook),
        str(EXECUTED / notebook.name),
        parameters={"size": "ci"},
        cwd=str(notebook.parent),
        execution_timeout=CELL_TIMEOUT,
        progress_bar=False,
    )
