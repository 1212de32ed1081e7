"""The store when things go wrong: a killed backend, memory pressure, a cluster restart.

Each test starts its own small cluster (killing workers of the shared one would disturb other tests).
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


def test_memory_pressure_sends_objects_to_disk_and_they_come_back(tmp_path):
    with workbench.start(n_workers=1, timeout=60) as session:
        store = Store(session, tmp_path, memory_limit=3 * 8_100)  # room for three objects of 8 kB and a bit
        proxies = store.make_persistent_many([Counter(np.full(1000, float(i))) for i in range(6)])
        table = store.backend_tables()
        assert len(table) == 3  # the three least recently used went to disk
        on_disk = store.objects()
        assert on_disk["disk_path"].notna().sum() >= 3
        assert [p.total.value() for p in proxies] == [1000.0 * i for i in range(6)]  # all reload
        assert len(store.backend_tables()) <= 3
        store.clear()
        assert not list((tmp_path / "objects").glob("*.pkl"))  # deleting removes disk copies too
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


def _read_while_the_holder_evicts(ref):
    """On a backend that does not hold ``ref``: read it, the holder evicting it to disk just after
    the catalogue named it (the race, made certain), and return the copy's total."""
    from workbench.runtime.store.tasks import local_backend

    link = local_backend().link
    original = link.backend

    def evict_first(address, op, **kwargs):
        if op == "get" and not evicted:
            evicted.append(original(address, "evict", oid=kwargs["oid"], version=kwargs["version"]))
        return original(address, op, **kwargs)

    evicted: list[int] = []
    link.backend = evict_first
    try:
        _, entry = local_backend().table.obtain(ref, "race", for_write=False)
    finally:
        del link.backend  # the link's own method again
    assert evicted and evicted[0] > 0, "the holder did not evict the object"
    return entry.obj.total()


def test_a_read_racing_an_eviction_asks_the_catalogue_again(tmp_path):
    """The holder the catalogue named evicts the object (its memory limit) before the copy is made:
    the reader asks the catalogue again and reads the disk copy back, never a NotHere."""
    with workbench.start(n_workers=2, timeout=60) as session:
        store = Store(session, tmp_path)
        holder, reader = session.workers()
        proxy = store.make_persistent(Counter(np.full(1000, 3.0)), backend=holder)
        future = session.client.submit(_read_while_the_holder_evicts, proxy.ref, workers=[reader], pure=False)
        assert session.gather(future, timeout=60) == 3000.0
        store.clear()
        store.close()
