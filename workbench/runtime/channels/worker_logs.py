"""A rank's channel failure is told to the caller once, not also logged by its worker.

A rank that fails with a :class:`~workbench.runtime.channels.transport.ChannelError` fails its task,
and Dask's worker logs "Compute Failed" with the task and its traceback at ERROR level on the
worker's stderr: in JupyterLab, a red block under a cell whose point is the error ``run_group``
raises (lesson 06's mismatched channels), while ``run_group`` already reports that error in full,
with every rank's part. :class:`RankFailureFilter` drops exactly those records: the "Compute
Failed" of a rank's task (key ``rank<r>-<group>``) whose exception is a ``ChannelError`` (its class,
or a subclass). Any other failure keeps its record: a rank's own ``ValueError``, any other task.

``run_group`` puts the filter on the workers through a worker plugin the session owns
(:meth:`~workbench.runtime.session.Session.own`): registered on the session's first group,
removed, with the filter, when the session closes. Dask's record is not a public API: its message
and the order of its arguments (key, state, task, exception text, traceback) are read here only,
and ``tests/test_channels_worker_logs.py`` fails when Dask changes them.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from workbench.runtime.channels.transport import ChannelError
from workbench.runtime.session import Session

PLUGIN_NAME = "workbench-rank-failure-filter"
QUIET_RANK_FAILURES = "rank failure logs"  # the name of a session's QuietRankFailures (Session.own)
WORKER_LOGGER = "distributed.worker"  # where Dask logs a task's failure
_RANK_KEY = re.compile(r"rank\d+-")  # run_group's rank tasks: key rank<r>-<group>


def _error_names(cls: type[BaseException]) -> set[str]:
    """``cls``'s name and its subclasses' names (the exception text starts with one of them)."""
    return {cls.__name__}.union(*(_error_names(sub) for sub in cls.__subclasses__()))


class RankFailureFilter(logging.Filter):
    """Drops Dask's "Compute Failed" record of a rank task that failed with a ``ChannelError``."""

    def __init__(self) -> None:
        super().__init__()
        self.names = _error_names(ChannelError)

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for a channel failure of a rank task; True for every other record."""
        args = record.args
        if not (isinstance(record.msg, str) and record.msg.startswith("Compute Failed")):
            return True
        if not (isinstance(args, tuple) and len(args) >= 4):
            return True
        key, exception_text = str(args[0]), str(args[3])
        reported = exception_text.split("(", 1)[0] in self.names
        return not (_RANK_KEY.match(key) and reported)


class RankFailureLogs(WorkerPlugin):
    """Puts a :class:`RankFailureFilter` on the worker's Dask logger; takes it off at teardown."""

    idempotent = True

    def __init__(self) -> None:
        self.filter: RankFailureFilter | None = None

    def setup(self, worker: Any) -> None:
        """Add the filter to the worker's logger (its process's ``distributed.worker``)."""
        self.filter = RankFailureFilter()
        logging.getLogger(WORKER_LOGGER).addFilter(self.filter)

    def teardown(self, worker: Any) -> None:
        """Take the filter off again."""
        if self.filter is not None:
            logging.getLogger(WORKER_LOGGER).removeFilter(self.filter)
            self.filter = None


class QuietRankFailures:
    """The session's registration of :class:`RankFailureLogs` on every worker (later ones included),
    entered by ``Session.own`` on the first group and unregistered when the session closes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.closed = True

    def __enter__(self) -> QuietRankFailures:
        self.session.bounded(
            self.session.client.register_plugin,
            RankFailureLogs(),
            name=PLUGIN_NAME,
            where="putting the rank-failure log filter on the workers",
        )
        self.closed = False
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.closed = True
        if self.session.client.status == "running":
            try:
                self.session.bounded(
                    self.session.client.unregister_worker_plugin,
                    PLUGIN_NAME,
                    where="taking the rank-failure log filter off the workers",
                )
            except Exception:  # noqa: BLE001 (a worker that left has no filter to take off)
                pass
