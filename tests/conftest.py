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
