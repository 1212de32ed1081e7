"""Every lesson is executed at the small "ci" size twice, under Run All, from its solutions manual
(workbench/teach/solutions/):

- "solutions": each worked solution injected before its check cell — every check cell must pass;
- "learner": each of the manual's wrong answers injected instead, as a learner who got every exercise
  wrong and pressed Run All — every check cell must say "not yet", and nothing may raise (a check
  never stops a notebook that runs all its cells).

The executed copies are kept in build/executed/<mode>/ for debugging and for the course site (with
outputs; never committed). Cells tagged ``raises-exception`` demonstrate an error on purpose: they
must raise, and nothing else may. (papermill reports any error output, tagged or not, so the check is
done here.) The kernel runs with a temporary directory of its own, which must hold nothing of the
lesson's once its last cell ran.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import nbformat
import pytest

from workbench.teach import NOT_YET, PASSED, exercises
from workbench.teach.execute import check_verdicts, execute

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
MODES = {"solutions": PASSED, "learner": NOT_YET}
KEPT_BY_DASK = {"dask-scratch-space"}  # Dask's shared scratch directory: kept and reused by every cluster


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_at_ci_size(notebook: Path, mode: str, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("papermill")
    # the kernel's (and its workers') temporary directory, to see what the lesson leaves there; a short
    # path, as /tmp's: a fork server's socket path in it must fit in 107 bytes
    with tempfile.TemporaryDirectory(prefix="lwb-nb-", ignore_cleanup_errors=True) as directory:
        scratch = Path(directory)
        monkeypatch.setenv("TMPDIR", directory)
        output = execute(notebook, EXECUTED / mode, mode)
        left = sorted(p.name for p in scratch.iterdir() if p.name not in KEPT_BY_DASK)
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
    assert not left, f"the lesson left {left} in its temporary directory (a learner's /tmp fills run after run)"

    verdicts = check_verdicts(executed)
    lesson = notebook.name[:2]
    declared = [e.id for e in exercises(lesson)]
    assert [v["exercise"] for _, v in verdicts if v] == declared, f"check cells vs exercises of lesson {lesson}"
    wrong = [(i, v) for i, v in verdicts if v is None or v["status"] != MODES[mode]]
    assert not wrong, f"with {mode}, every check should say {MODES[mode]!r}: " + "; ".join(
        f"cell {i}: {v['exercise'] + ': ' + v['status'] + ' - ' + v['message'] if v else 'no verdict shown'}"
        for i, v in wrong
    )
