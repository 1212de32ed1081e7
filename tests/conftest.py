"""Shared fixtures: one LocalCluster for the whole test session, always closed."""
from __future__ import annotations

import pytest

import workbench


@pytest.fixture(scope="session")
def session():
    """Two worker processes, one thread each: the shape of this 2-core machine."""
    with workbench.start(n_workers=2, timeout=60) as s:
        yield s


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20260101)


# -- the test session must leave /dev/shm as it found it ---------------------------------------
_SHM_BEFORE: set[str] = set()


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
