"""Run a lesson as CI and the course site do: at the "ci" size, with the solutions manual's answers
or as a learner who got every exercise wrong, and read what its check cells said.

A lesson notebook holds no solutions (:mod:`workbench.teach.manual`): each mode injects cells
before each check cell, from the manual: "solutions" the worked solution (tagged ``solution`` and
``hide-cell``), "learner" the manual's wrong answer (tagged ``learner-answer``), and "both" the wrong
answer and a copy of the check cell (tagged ``learner-answer``), then the worked solution and the
check: a learner who got the exercise wrong, checked, then fixed it, all in one Run All. "both" is
what the notebook tests run (one execution per lesson instead of two; see docs/architecture.md's
decisions): :func:`solutions_view` gives its solutions-only copy, which ``make site`` shows.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

import nbformat

from workbench.teach.feedback import MIME
from workbench.teach.manual import ManualError, solutions

MODES = ("solutions", "learner", "both")
CELL_TIMEOUT = 300  # seconds per cell: a ci-size cell takes under a minute; a hung kernel fails in 5, not 10
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](\d\d\.\d+)["']""")
SOLUTION_TAGS, LEARNER_TAGS = ["solution", "hide-cell"], ["learner-answer"]


def checked_exercise(cell: nbformat.NotebookNode) -> str | None:
    """The exercise id a ``check``-tagged cell checks (``check("03.2", ...)``), else None."""
    if "check" not in cell.metadata.get("tags", []):
        return None
    found = _CHECK_CALL.search(cell.source)
    return found.group(1) if found else None


def with_answers(notebook: nbformat.NotebookNode, lesson: str, mode: str) -> nbformat.NotebookNode:
    """The lesson with cells injected before each check cell: the manual's solution ("solutions"), its
    wrong answer ("learner"), or the wrong answer, a copy of the check, then the solution ("both"). A
    check cell whose exercise has no manual entry is refused."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    manual = solutions(lesson)
    notebook = nbformat.from_dict(notebook)
    cells = []
    for cell in notebook.cells:
        id = checked_exercise(cell)
        if id is not None:
            if id not in manual:
                raise ManualError(f"lesson {lesson} checks exercise {id}, which its solutions page lacks")
            entry = manual[id]
            if mode in ("learner", "both"):
                cells.append(nbformat.v4.new_code_cell(entry.wrong, metadata={"tags": list(LEARNER_TAGS)}))
            if mode == "both":
                tags = [*cell.metadata.get("tags", []), *LEARNER_TAGS]
                cells.append(nbformat.v4.new_code_cell(cell.source, metadata={"tags": tags}))
            if mode in ("solutions", "both"):
                cells.append(nbformat.v4.new_code_cell(entry.code, metadata={"tags": list(SOLUTION_TAGS)}))
        cells.append(cell)
    notebook.cells = cells
    return notebook


LEARNER_PARAMETERS = {"repeats": 2}  # the learner run checks the feedback, not the statistics: fewer repeats
ENGINE = "workbench"  # papermill's engine for the lessons: nbclient's, with the Output widget that does not hang


@functools.cache
def headless_engine() -> tuple[type, type]:
    """Papermill's nbclient engine, registered as :data:`ENGINE`, with one change: its stand-in for an
    Output widget (nbclient's ``OutputWidget``, the browser's part when a cell writes into one, as
    the live panels do) keeps the outputs it captures but does not send them back to the kernel.
    Returns (the engine, its Output widget stand-in).

    That send goes out on the shell socket while nbclient waits on the same socket for the cell's
    reply; the wait may then miss the reply until the cell's time limit runs out, and returns it
    only then (nbclient issue 312): a panel's Run cell that the kernel finished in 3 s was recorded
    as 300 s at size lab. Nothing in a lesson reads an Output widget's outputs back in the kernel,
    so headless the send is not needed."""
    from nbclient.output_widget import OutputWidget
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.utils import merge_kwargs, remove_args

    class HeadlessOutputWidget(OutputWidget):
        """nbclient's Output widget stand-in, whose captured outputs stay in the client (and the notebook
        it writes), not sent back to the kernel."""

        def sync_state(self) -> None:
            pass

    class Client(PapermillNotebookClient):
        def reset_execution_trackers(self) -> None:
            super().reset_execution_trackers()
            self.widget_registry = {"@jupyter-widgets/output": {"OutputModel": HeadlessOutputWidget}}

    class Engine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(
            cls, nb_man, kernel_name, log_output=False, stdout_file=None, stderr_file=None, start_timeout=60,
            execution_timeout=None, **kwargs,
        ):  # fmt: skip
            # as papermill's NBClientEngine does (papermill 2.7), with Client for its client
            kwargs = remove_args(["input_path"], **kwargs)
            safe_kwargs = remove_args(["timeout", "startup_timeout"], **kwargs)
            final_kwargs = merge_kwargs(
                safe_kwargs,
                timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
                startup_timeout=start_timeout,
                kernel_name=kernel_name,
                log=logging.getLogger("papermill"),
                log_output=log_output,
                stdout_file=stdout_file,
                stderr_file=stderr_file,
            )
            return Client(nb_man, **final_kwargs).execute()

    papermill_engines.register(ENGINE, Engine)
    return Engine, HeadlessOutputWidget


def execute(
    notebook: Path, out_dir: Path, mode: str = "solutions", size: str = "ci", cell_timeout: float = CELL_TIMEOUT
) -> Path:
    """Execute ``notebook`` with papermill into ``out_dir`` (same file name) and return the copy.

    An error in a cell does not raise here: the executed copy holds it, for the caller to judge
    cell by cell (cells tagged ``raises-exception`` fail on purpose). A cell that runs past
    ``cell_timeout`` seconds raises nbclient's ``CellTimeoutError``.
    """
    import papermill

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    headless_engine()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = nbformat.read(notebook, as_version=4)
    source = with_answers(source, notebook.name[:2], mode)
    prepared = out_dir / f".input-{notebook.name}"
    nbformat.write(source, prepared)
    output = out_dir / notebook.name
    try:
        papermill.execute_notebook(
            str(prepared),
            str(output),
            parameters={"size": size, **(LEARNER_PARAMETERS if mode == "learner" else {})},
            cwd=str(notebook.parent),
            engine_name=ENGINE,
            execution_timeout=cell_timeout,
            progress_bar=False,
        )
    except papermill.PapermillExecutionError:
        pass  # the executed copy records the error
    finally:
        prepared.unlink(missing_ok=True)
    return output


def solutions_view(executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """An executed "both" copy without its learner cells (the wrong answers and their checks): what
    a "solutions" run shows, for the course site."""
    view = nbformat.from_dict(executed)
    view.cells = [c for c in view.cells if LEARNER_TAGS[0] not in c.metadata.get("tags", [])]
    return view


def check_verdicts(executed: nbformat.NotebookNode) -> list[tuple[int, dict | None]]:
    """(cell index, the check's machine-readable verdict or None) for every cell tagged ``check``."""
    verdicts = []
    for index, cell in enumerate(executed.cells):
        if "check" in cell.metadata.get("tags", []):
            found = [o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})]
            verdicts.append((index, found[0] if found else None))
    return verdicts
