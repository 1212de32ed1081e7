"""Every lesson is executed at the small "ci" size, under Run All, from its solutions manual
(workbench/teach/solutions/), as a learner who first got every exercise wrong, then fixed it
(execute's "both" mode): before each check cell, the manual's wrong answer and a copy of the check
(which must say "not yet"), then the worked solution and the check (which must pass). Nothing may
raise: a check never stops a notebook that runs all its cells.

One run per lesson covers what a run with only wrong answers would, because no cell after an
exercise reads a name its answers bind (``test_no_cell_reads_a_learners_answer_after_its_check``):
the rest of the lesson runs the same whatever the learner answered.

The executed copies are kept in build/executed/both/, and their solutions-only views in
build/executed/solutions/ (the course site's pages), with outputs; never committed. Cells tagged
``raises-exception`` demonstrate an error on purpose: they must raise, and nothing else may.
(papermill reports any error output, tagged or not, so the check is done here.) No other cell may
show a Dask log line or a traceback: a ``WARNING``, ``ERROR`` or ``Traceback`` in any output
(:func:`stray_lines`). The kernel runs with a temporary directory of its own; once papermill has shut
the kernel down (a lesson's last cell leaves its cluster running: the kernel's shutdown closes it,
see workbench.teach.teardown), that directory must hold nothing of the lesson's, and /dev/shm no
segment of the lesson's.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from workbench.memory import shm
from workbench.teach import NOT_YET, PASSED, exercises
from workbench.teach.execute import LEARNER_TAGS, check_verdicts, checked_exercise, execute, solutions_view
from workbench.teach.manual import solutions

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
KEPT_BY_DASK = {"dask-scratch-space"}  # Dask's shared scratch directory: kept and reused by every cluster


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_at_ci_size(notebook: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("papermill")
    # the kernel's (and its workers') temporary directory, to see what the lesson leaves there; a short
    # path, as /tmp's: a fork server's socket path in it must fit in 107 bytes
    segments_before = {s.name for s in shm.list_segments()} if shm.SHM_DIR.is_dir() else set()
    with tempfile.TemporaryDirectory(prefix="lwb-nb-", ignore_cleanup_errors=True) as directory:
        scratch = Path(directory)
        monkeypatch.setenv("TMPDIR", directory)
        output = execute(notebook, EXECUTED / "both", "both")  # returns once papermill shut the kernel down
        left = sorted(p.name for p in scratch.iterdir() if p.name not in KEPT_BY_DASK)
    # the lesson's segments: new ones no live process owns (another test's, running beside this one, has a live owner)
    left_in_shm = sorted(
        s.name
        for s in (shm.list_segments() if shm.SHM_DIR.is_dir() else [])
        if s.name not in segments_before and not s.owner_alive
    )
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
    assert not left_in_shm, f"the lesson's kernel, shut down, left {left_in_shm} in /dev/shm"
    stray = stray_lines(executed)
    assert not stray, "Dask log lines or tracebacks in the lesson's outputs:\n" + "\n".join(stray) + f"\n({output})"

    verdicts = check_verdicts(executed)
    lesson = notebook.name[:2]
    declared = [e.id for e in exercises(lesson)]
    assert [v["exercise"] for _, v in verdicts if v][1::2] == declared, f"check cells vs exercises of lesson {lesson}"
    wrong = []
    for index, verdict in verdicts:
        learner = LEARNER_TAGS[0] in executed.cells[index].metadata.get("tags", [])
        expected = NOT_YET if learner else PASSED
        if verdict is None or verdict["status"] != expected:
            said = f"{verdict['exercise']}: {verdict['status']} - {verdict['message']}" if verdict else "no verdict"
            wrong.append(f"cell {index} ({'wrong answer' if learner else 'solution'}, should say {expected!r}): {said}")
    assert not wrong, "; ".join(wrong)
    view = EXECUTED / "solutions" / notebook.name
    view.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(solutions_view(executed), view)


STRAY = re.compile(r"\b(?:WARNING|ERROR)\b|Traceback")  # Dask's log levels, Python's tracebacks
TEXT_MIMES = ("text/plain", "text/markdown")


def stray_lines(executed: nbformat.NotebookNode) -> list[str]:
    """Every output line with ``WARNING``, ``ERROR`` or ``Traceback`` (a Dask log line, a traceback)
    outside the cells tagged ``raises-exception``, each as "cell N (its first line): the line", from
    stream, error and display text."""
    found = []
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code" or "raises-exception" in cell.metadata.get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                text = output.text
            elif output.output_type == "error":
                text = "\n".join([f"{output.ename}: {output.evalue}", *output.traceback])
            else:
                text = "\n".join(str(output.get("data", {}).get(mime, "")) for mime in TEXT_MIMES)
            first = cell.source.strip().splitlines()[0][:80] if cell.source.strip() else ""
            found += [
                f"cell {index} ({first}): {line.strip()[:300]}" for line in text.splitlines() if STRAY.search(line)
            ]
    return found


def test_stray_lines_finds_log_lines_and_tracebacks_outside_intended_error_cells():
    """The check above can fail: a Dask warning in a stream, a traceback in an error, an ERROR in a
    display, each named with its cell; an intended-error cell's traceback and plain text are not."""
    new_output, cell = nbformat.v4.new_output, nbformat.v4.new_code_cell
    warned = "2026-01-01 10:00:00,000 - distributed.scheduler - WARNING - Removing worker 'tcp://a' caused ..."
    notebook = nbformat.v4.new_notebook(
        cells=[
            cell("session = workbench.start()", outputs=[new_output("stream", name="stderr", text=warned + "\n")]),
            cell("1 / 0", outputs=[new_output("error", ename="ZeroDivisionError", evalue="", traceback=["Traceback"])]),
            cell("show()", outputs=[new_output("display_data", data={"text/plain": "x\nERROR - lost"})]),
            cell(
                "raise ValueError",
                metadata={"tags": ["raises-exception"]},
                outputs=[
                    new_output("error", ename="ValueError", evalue="", traceback=["Traceback (most recent call last):"])
                ],
            ),
            cell("print('errors: none; warnings off')", outputs=[new_output("stream", name="stdout", text="fine\n")]),
        ]
    )
    found = stray_lines(notebook)
    assert [line.split(":")[0] for line in found] == [
        "cell 0 (session = workbench.start())",
        "cell 1 (1 / 0)",
        "cell 2 (show())",
    ]
    assert "WARNING - Removing worker" in found[0] and found[2].endswith("ERROR - lost")


def _bound(code: str) -> set[str]:
    """Names a cell binds at its top level (assignments, imports, definitions; not comprehension variables)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp | ast.Lambda):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(code))
    return names


def _read(code: str) -> set[str]:
    """Names a cell reads (IPython's magics and shell lines left out)."""
    source = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_cell_reads_a_learners_answer_after_its_check(notebook: Path):
    """What makes one "both" run stand for a run with wrong answers only: the cells after an exercise
    never read a name the learner's answer (right or wrong) binds, so they run the same either way."""
    cells = nbformat.read(notebook, as_version=4).cells
    manual = solutions(notebook.name[:2])
    readers = []
    for index, cell in enumerate(cells):
        exercise = checked_exercise(cell)
        if exercise is None:
            continue
        answer = _bound(manual[exercise].code) | _bound(manual[exercise].wrong)
        for later in cells[index + 1 :]:
            if later.cell_type != "code" or checked_exercise(later) == exercise:
                continue
            read = (answer & _read(later.source)) - _bound(later.source)
            if read:
                readers.append(f"{exercise}: a later cell reads {sorted(read)}:\n{later.source[:200]}")
    assert not readers, "\n\n".join(readers)


def readme_nbval_command() -> str:
    """The nbval command README.md gives instructors for their fork's CI (the line with ``--nbval-lax``)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
    commands = [line for block in blocks for line in block.splitlines() if "--nbval-lax" in line]
    assert len(commands) == 1, f"README.md should give one nbval command in a bash block, found {commands}"
    return commands[0]


@pytest.mark.notebook
@pytest.mark.timeout(900)
def test_the_readmes_nbval_command_runs_a_lesson():
    """README's nbval command, as written there, on one short lesson (lesson 00) instead of all ten:
    it exits 0 and nbval ran every code cell of the lesson."""
    words = shlex.split(readme_nbval_command(), comments=True)
    env = dict(os.environ)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    assert env.get("WORKBENCH_SIZE") == "ci", "the README's command runs the lessons at size ci"
    assert words[-1] == "notebooks/", f"the README's command runs every lesson in notebooks/: {words}"
    lesson = ROOT / "notebooks" / "00-welcome.ipynb"
    # .venv/bin/ is the environment running this test; -p no:cacheprovider keeps .pytest_cache out of the tree
    words = [w.replace(".venv/bin/", f"{Path(sys.prefix) / 'bin'}/", 1) for w in words[:-1]]
    command = [*words, "-p", "no:cacheprovider", str(lesson.relative_to(ROOT))]
    with tempfile.TemporaryDirectory(prefix="lwb-nbval-", ignore_cleanup_errors=True) as directory:
        env["TMPDIR"] = directory  # the kernel's temporary files, removed with the directory
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{output[-4000:]}"
    cells = [c for c in nbformat.read(lesson, as_version=4).cells if c.cell_type == "code" and c.source.strip()]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) == len(cells), f"nbval should run {len(cells)} cells:\n{output[-4000:]}"
