"""Shared fixtures: one LocalCluster for the whole test session, always closed."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import workbench


@pytest.fixture(scope="session")
def session(tmp_path_factory):
    """Two worker processes, one thread each: the shape of this 2-core machine.

    Its active store lives in a temporary directory, and must be empty when the tests end
    (every test and application variant deletes what it put in the store).
    """
    from workbench.runtime.store import Store

    with workbench.start(n_workers=2, timeout=60) as s:
        store = Store(s, tmp_path_factory.mktemp("store"))
        yield s
        left = store.objects()
        store.close()
        assert left.empty, f"the tests left {len(left)} objects in the active store:\n{left}"
        stale = _stale_task_threads(s)
        assert not any(stale.values()), f"threads Dask counts as running a task, none running: {stale}"


def _stale_task_threads(session, timeout=10.0):
    """Per worker, the threads Dask lists as running a task, once what runs has ended (a bounded wait).
    A thread left there for good (Dask's runner failed on a task's error) breaks the worker's profiler."""
    deadline = time.monotonic() + timeout
    while True:
        left = session.client.run(lambda dask_worker: len(dask_worker.active_threads))
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)  # a poll interval of a bounded wait on a state, not a timing assumption


@pytest.fixture
def stale_task_threads():
    """:func:`_stale_task_threads`, for tests that check a failure left the workers sound."""
    return _stale_task_threads


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20260101)


# -- the test session must leave /dev/shm (and its tier directory) as it found them -------------
_SHM_BEFORE: set[str] = set()
# Tier files the tests and their workers make go to a directory of this test session (workers
# inherit the variable), which must be empty of files at the end.
_TIER_DIR = tempfile.mkdtemp(prefix="workbench-test-tiers-")
os.environ["WORKBENCH_TIER_DIR"] = _TIER_DIR


def _workbench_segments() -> set[str]:
    from workbench.memory import shm

    return {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")} if shm.SHM_DIR.is_dir() else set()


def pytest_sessionstart(session):
    _SHM_BEFORE.update(_workbench_segments())


def pytest_sessionfinish(session, exitstatus):
    leaked = sorted(_workbench_segments() - _SHM_BEFORE)
    if leaked:
        print(f"\nFAILED: the tests left {len(leaked)} shared-memory segments in /dev/shm: {leaked}")
        session.exitstatus = 1
    tier_files = sorted(str(p) for p in Path(_TIER_DIR).rglob("*") if not p.is_dir())
    shutil.rmtree(_TIER_DIR, ignore_errors=True)
    if tier_files:
        print(f"\nFAILED: the tests left {len(tier_files)} files in the tier directory: {tier_files}")
        session.exitstatus = 1
