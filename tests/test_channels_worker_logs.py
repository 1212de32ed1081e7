"""A rank's channel failure is reported to the caller once: its worker does not also log "Compute Failed"
(lesson 06's intended error shows no red block in JupyterLab); any other failure keeps its record."""

from __future__ import annotations

import logging
import uuid

import numpy as np
import pytest

from workbench.runtime.channels import ChannelError, ChannelMismatch, run_group
from workbench.runtime.channels.worker_logs import PLUGIN_NAME, WORKER_LOGGER, RankFailureFilter


def mismatched(rank):
    rank.channel("data", 10 + rank.rank, np.float64)  # rank 1 asks for 11 elements


def own_error(rank):
    raise ValueError(f"rank {rank.rank}'s own mistake")


def _failed_records(session) -> list[str]:
    """Every worker's "Compute Failed" records, as Dask keeps them (newest last)."""
    logs = session.client.get_worker_logs()
    return [message for records in logs.values() for _, message in records if "Compute Failed" in message]


class _Keep(logging.Handler):
    """Keeps the raw records of Dask's worker logger (message and arguments, before formatting)."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append((record.msg, record.args))


def _capture(dask_worker=None):
    """On a worker: keep what Dask's worker logger records from now on."""
    handler = _Keep()
    logger = logging.getLogger(WORKER_LOGGER)
    logger.addHandler(handler)
    dask_worker._workbench_keep = handler  # taken off by _captured
    return True


def _captured(dask_worker=None):
    handler = dask_worker._workbench_keep
    logging.getLogger(WORKER_LOGGER).removeHandler(handler)
    del dask_worker._workbench_keep
    return [(msg, [str(a) for a in args]) for msg, args in handler.records if str(msg).startswith("Compute Failed")]


def _fail():
    raise ChannelMismatch("a mismatch made on purpose")


def test_dask_logs_a_failed_task_as_the_filter_reads_it(session):
    """Dask's record is not a public API: this fails when its message or argument order changes."""
    worker = session.workers()[0]
    session.client.run(_capture, workers=[worker])
    key = f"probe-{uuid.uuid4().hex}"  # not a rank's key: the filter (on since a group ran) keeps it
    future = session.client.submit(_fail, key=key, workers=[worker], pure=False)
    with pytest.raises(ChannelMismatch):
        future.result(timeout=30)
    records = session.client.run(_captured, workers=[worker])[worker]
    assert len(records) == 1, records
    msg, args = records[0]
    assert args[0] == key and args[3].startswith("ChannelMismatch(")
    assert RankFailureFilter().filter(_record(msg, args))  # not a rank's task: kept
    rank = [f"rank0-{uuid.uuid4().hex}", *args[1:]]
    assert not RankFailureFilter().filter(_record(msg, rank))  # the same failure of a rank's task: dropped
    own = [*rank[:3], "ValueError('a rank's own mistake')", *rank[4:]]
    assert RankFailureFilter().filter(_record(msg, own))  # a rank's own error: kept


def _record(msg, args) -> logging.LogRecord:
    return logging.LogRecord(WORKER_LOGGER, logging.ERROR, __file__, 1, msg, tuple(args), None)


def test_a_ranks_channel_failure_is_not_logged_but_its_own_error_is(session):
    def mismatches() -> int:
        return sum("ChannelMismatch" in message for message in _failed_records(session))

    before = mismatches()
    with pytest.raises(ChannelError, match="every rank must make the same channels"):
        run_group(session, mismatched, ranks=2)
    assert all(session.client.run(lambda dask_worker: PLUGIN_NAME in dask_worker.plugins).values())
    assert mismatches() == before  # told once, by run_group
    with pytest.raises(ChannelError, match="ValueError: rank 0's own mistake"):
        run_group(session, own_error, ranks=2)
    assert any("own mistake" in message for message in _failed_records(session))  # a learner's own bug: kept
