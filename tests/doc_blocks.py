"""The documentation's code blocks as tests, through sybil: README.md, docs/*.md and docs/course/*.md.

Each fenced ``python`` block runs with sybil's own ``PythonCodeBlockParser``; the blocks of one page
share one namespace, in page order, as the cells of one notebook. Each fenced ``bash`` block runs
with :class:`ShellBlock`: the whole block as one ``bash -e -o pipefail`` script, as a user pastes
it into a terminal at the repository's root. Neither is a runner of this project's own: what is
project-specific is the page's glue below, and what a page declares beside its blocks.

A page declares the glue a block needs in the Markdown itself, where a reader of the source sees it:
``<!-- invisible-code-block: python ... -->`` (a session started, an environment variable set, the
arrays an example takes for granted), and ``<!-- skip: next "needs ..." -->`` before a block that
cannot run here, its reason naming what it needs (Slurm, MPI, a network, minutes). Everything else
is common to every page (:func:`open_page`, :func:`close_page`):

- the page gets a fresh directory that stands for the repository: ``.venv`` in it links the
  environment running the tests (so ``.venv/bin/workbench`` is this environment's), ``bash`` blocks
  run in it with that ``bin`` first on ``PATH``, and python blocks run in its ``notebooks/``, where
  a notebook opened by ``make lab`` runs; ``repository`` names it in the page's namespace;
- what the page started or changed is undone after its last block, whether its blocks passed or
  not: every workbench session in its namespace closed, the processes its ``bash`` blocks left
  running (a server started with ``&``) stopped, strategies and applications it registered
  forgotten, the environment and the working directory restored, its directory removed.

A ``bash`` block fails when it exits non-zero, runs past its time limit, or exits 0 while its
standard error holds a traceback or a log record at ERROR or CRITICAL (what a user would read as a
failure). The same holds for what a process it left running wrote, checked before it is stopped. A
python block fails when it raises, or when Dask or the workbench logged an ERROR in this process
while it ran (a local cluster's scheduler runs here: a scheduler-side traceback a notebook would
show fails the block).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

PAGES = ("README.md", "docs/*.md", "docs/course/*.md")  # relative to the repository root
SHELL_TIMEOUT = 180.0  # seconds per bash block; the longest one run here takes about 10 s
STOP_TIMEOUT = 15.0  # seconds for the processes a block left running to exit once told to
# What a user reads as a failure on stderr: a traceback, or a Python log record at ERROR or above
# (distributed's format: "2026-01-01 10:00:00,000 - distributed.core - ERROR - ...").
ERROR_OUTPUT = re.compile(r"^Traceback \(most recent call last\)|^.* - (?:ERROR|CRITICAL) - ", re.MULTILINE)
TAIL = 3000  # characters of a failing block's output shown
WATCHED_LOGGERS = ("distributed", "workbench")  # a python block fails on their ERROR records in this process


@dataclass
class Left:
    """A process group a ``bash`` block left running, and the file its standard error goes to."""

    pgid: int
    stderr: Path
    line: int


@dataclass
class Page:
    """What one page's blocks share, and what :func:`close_page` undoes."""

    repository: Path
    environ: dict[str, str]
    cwd: str
    strategies: set[str]
    apps: set[str]
    left: list[Left] = field(default_factory=list)
    blocks: int = 0


def open_page(namespace: dict[str, Any]) -> None:
    """Sybil's setup of a page: its directory standing for the repository, entered by python blocks."""
    from workbench import apps
    from workbench.runtime import strategies

    repository = Path(tempfile.mkdtemp(prefix="lwb-doc-"))
    (repository / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (repository / "notebooks").mkdir()
    namespace["_page"] = Page(repository, dict(os.environ), os.getcwd(), set(strategies.names()), set(apps.names()))
    namespace["__name__"] = "__main__"  # as in a notebook: classes defined here ship to workers by value
    namespace["repository"] = repository
    os.chdir(repository / "notebooks")


def close_page(namespace: dict[str, Any]) -> None:
    """Sybil's teardown of a page: undo what its blocks started or changed (see the module's doc).
    Raises AssertionError when a process a ``bash`` block left running wrote an error."""
    from workbench import apps
    from workbench.runtime import strategies
    from workbench.runtime.session import Session

    page: Page = namespace["_page"]
    problems = []
    try:
        for value in list(namespace.values()):
            if isinstance(value, Session):
                try:
                    value.close()
                except Exception as error:  # the next session and the processes are still to be stopped
                    problems.append(f"closing a session failed: {error!r}")
        for left in page.left:
            error = error_lines(left.stderr.read_text(errors="replace"))
            if error:
                problems.append(f"what the bash block at line {left.line} left running wrote:\n{error}")
            try:
                stop_group(left.pgid)
            except AssertionError as error:
                problems.append(str(error))
    finally:
        for name in set(strategies.names()) - page.strategies:
            strategies.unregister(name)
        for name in set(apps.names()) - page.apps:
            apps.unregister(name)
        os.environ.clear()
        os.environ.update(page.environ)
        os.chdir(page.cwd)
        shutil.rmtree(page.repository, ignore_errors=True)
    assert not problems, "\n\n".join(problems)


def wait_for(ready: Callable[[], Any], what: str, timeout: float) -> Any:
    """Poll ``ready()`` until it returns a true value (an ``OSError`` or ``ValueError`` it raises
    counts as not yet: a file being written) and return that; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = ready()
        except (OSError, ValueError):
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} was not ready within {timeout:.0f} s"
        time.sleep(0.05)  # a poll interval of a bounded wait, not a timing assumption


def error_lines(text: str) -> str:
    """The lines of ``text`` from its first traceback or error record on ("" when there is none)."""
    found = ERROR_OUTPUT.search(text)
    return text[found.start() :][:TAIL] if found else ""


def group_members(pgid: int) -> list[psutil.Process]:
    """The live processes (zombies left out) of process group ``pgid``."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (psutil.Error, ProcessLookupError):
            continue
    return members


def stop_group(pgid: int) -> None:
    """Stop process group ``pgid``: SIGTERM, then SIGKILL to what is left after :data:`STOP_TIMEOUT`."""
    for sig, timeout in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
        members = group_members(pgid)
        if not members:
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        psutil.wait_procs(members, timeout=timeout)
    left = group_members(pgid)
    assert not left, f"processes of group {pgid} outlived SIGKILL: {left}"


class ShellBlock:
    """Run a ``bash`` block as a user would paste it at the repository's root (see the module's doc).

    The block runs as one script (``export`` lines hold for the lines after them), in a process
    group of its own; its output goes to files, not pipes, since a command it starts with ``&`` may
    outlive it. Such processes are stopped after the page's last block.
    """

    def __init__(self, timeout: float = SHELL_TIMEOUT):
        self.timeout = timeout

    def __call__(self, example: Example) -> str | None:
        page: Page = example.namespace["_page"]
        page.blocks += 1
        bin_directory = page.repository / ".venv" / "bin"
        env = {**os.environ, "PATH": f"{bin_directory}{os.pathsep}{os.environ.get('PATH', '')}"}
        logs = page.repository / ".blocks"
        logs.mkdir(exist_ok=True)
        stdout_path, stderr_path = logs / f"{page.blocks}.out", logs / f"{page.blocks}.err"
        with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", str(example.parsed)],
                cwd=page.repository,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
            try:
                status = process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                status = None
        if status is None:
            stop_group(process.pid)
        elif group_members(process.pid):
            page.left.append(Left(process.pid, stderr_path, example.line))
        out, err = stdout_path.read_text(errors="replace"), stderr_path.read_text(errors="replace")
        shown = f"--- stdout ---\n{out[-TAIL:]}\n--- stderr ---\n{err[-TAIL:]}"
        if status is None:
            return f"the block did not finish within {self.timeout:.0f} s\n{shown}"
        if status != 0:
            return f"the block exited with status {status}\n{shown}"
        error = error_lines(err)
        if error:
            return f"the block exited 0, but its standard error holds an error:\n{error}"
        return None


class ErrorRecords(logging.Handler):
    """The records at ERROR and above of the loggers it is added to."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LoggedPython:
    """Sybil's ``PythonCodeBlockParser``, whose blocks also fail on an ERROR logged while they ran
    (:data:`WATCHED_LOGGERS`, in this process)."""

    def __init__(self) -> None:
        self.parser = PythonCodeBlockParser()

    def __call__(self, document: Any) -> Any:
        for region in self.parser(document):
            region.evaluator = self._watched(region.evaluator)
            yield region

    @staticmethod
    def _watched(evaluator: Callable[[Example], str | None]) -> Callable[[Example], str | None]:
        def evaluate(example: Example) -> str | None:
            __tracebackhide__ = True
            handler = ErrorRecords()
            loggers = [logging.getLogger(name) for name in WATCHED_LOGGERS]
            for logger in loggers:
                logger.addHandler(handler)
            try:
                failed = evaluator(example)
            finally:
                for logger in loggers:
                    logger.removeHandler(handler)
            if failed or not handler.records:
                return failed
            logged = "\n".join(
                logging.Formatter("%(name)s - %(levelname)s - %(message)s").format(r) for r in handler.records
            )
            return f"the block ran, but an error was logged while it ran:\n{logged[:TAIL]}"

        return evaluate


def markdown_sybil(root: Path, patterns: tuple[str, ...] = PAGES, shell_timeout: float = SHELL_TIMEOUT) -> Sybil:
    """The Sybil that runs the code blocks of the pages matching ``patterns`` under ``root``."""
    return Sybil(
        parsers=[SkipParser(), LoggedPython(), CodeBlockParser("bash", ShellBlock(shell_timeout))],
        patterns=list(patterns),
        path=str(root),
        setup=open_page,
        teardown=close_page,
        name="docs",
    )


def skip_at_block(item: Any, report: Any) -> None:
    """Report a skipped block at its page and line (sybil raises ``unittest.SkipTest``, which pytest
    reports at the line of unittest's that raised it), so the summary names the block and its reason."""
    example = getattr(item, "example", None)
    if report.skipped and isinstance(example, Example) and isinstance(report.longrepr, tuple):
        report.longrepr = (str(item.path), example.line, report.longrepr[2])
