"""The store when things go wrong: a killed backend, a cluster restart.

Each test starts its own small cluster (killing workers of the shared one would disturb other tests).
Memory pressure and a read racing an eviction are tested without a cluster (``test_store_units``).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from store_helpers import Counter

import workbench
from workbench.runtime.store import ObjectLost, Store, UnknownAlias


def _kill(session, worker: str) -> None:
    """SIGKILL one worker process and wait until the scheduler has removed it."""
    pid = session.run(os.getpid)[worker]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while worker in session.workers():
        assert time.monotonic() < deadline, f"the scheduler did not notice {worker} dying"
        time.sleep(0.05)


def _wait_until_executing(session, worker: str, future) -> None:
    """Wait (bounded) until ``future``'s task runs on ``worker``."""

    def executing(dask_worker, key=future.key) -> bool:
        return any(ts.key == key for ts in dask_worker.state.executing)

    deadline = time.monotonic() + 60
    while not session.run(executing, workers=[worker])[worker]:
        assert time.monotonic() < deadline, f"{future.key} did not start on {worker}"
        time.sleep(0.05)


def test_killed_backend_errors_name_the_object_and_replicas_survive(tmp_path):
    with workbench.start(n_workers=2, timeout=60) as session:
        store = Store(session, tmp_path)
        doomed, survivor = session.workers()
        lone = store.make_persistent(Counter(np.arange(4.0)), alias="lone", backend=doomed)
        twin = store.make_persistent(Counter(np.ones(4)), alias="twin", backend=doomed)
        twin.replicate(survivor)
        saved = store.make_persistent(Counter(np.full(4, 2.0)), alias="saved", backend=doomed)
        saved.flush()
        in_flight = lone.slow_read(60.0)  # running on the doomed backend when it dies
        _wait_until_executing(session, doomed, in_flight)
        _kill(session, doomed)

        with pytest.raises(ObjectLost, match=rf"'lone'.*{doomed}"):
            lone.total.value()
        with pytest.raises(ObjectLost, match=rf"'lone'.*{doomed}"):
            session.gather(lone.total(), timeout=30)
        with pytest.raises(ObjectLost, match="'lone'"):
            session.gather(in_flight, timeout=60)  # the call in flight fails with the same clear error
        assert twin.total.value() == 4.0 and session.gather(twin.total()) == 4.0  # the replica answers
        assert store.get_by_alias("saved").total.value() == 8.0  # reloaded from its disk copy
        store.clear()
        store.close()


def test_catalogue_and_flushed_objects_survive_a_cluster_restart(tmp_path):
    with workbench.start(n_workers=2, timeout=60) as session:
        store = Store(session, tmp_path)
        kept = store.make_persistent(Counter(np.arange(5.0)), alias="kept")
        kept.scale.value(3.0)
        store.make_persistent(Counter(np.ones(2)), alias="volatile")  # never written to disk
        version = kept.new_version()
        version.scale.value(2.0)
        version.consolidate()
        assert store.flush([kept]) == 1
        store.close()

    with workbench.start(n_workers=2, timeout=60) as session:  # new processes, new addresses
        store = Store(session, tmp_path)
        assert sorted(store.aliases()) == ["kept", "volatile"]
        again = store.get_by_alias("kept")
        assert again.version == 1 and again.total.value() == 60.0
        with pytest.raises(ObjectLost, match="'volatile'.*no replica and no disk copy"):
            store.get_by_alias("volatile").total.value()
        with pytest.raises(UnknownAlias, match="'kept'"):
            store.get_by_alias("kep")
        store.clear()
        store.close()
