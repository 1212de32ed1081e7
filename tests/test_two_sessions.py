"""Two sessions in one kernel, each with its own store (issue 50): a proxy that travelled (pickled, as a
task argument or a saved notebook variable is) finds the store it belongs to, not the one opened last."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from store_helpers import Counter

import workbench
from workbench.runtime.store import Store, StoreError, current_store


def test_a_proxy_that_travelled_finds_its_own_store_while_another_is_current(tmp_path):
    with workbench.start(n_workers=1, timeout=60) as a, workbench.start(n_workers=1, timeout=60) as b:
        store_a = Store(a, tmp_path / "a")
        try:
            proxy = store_a.make_persistent(Counter(np.arange(4.0)), alias="mine")
            travelled = pickle.dumps(proxy)
            store_b = Store(b, tmp_path / "b")  # opened last: the current store
            try:
                b_proxy = store_b.make_persistent(Counter(np.arange(10.0)), alias="mine")
                assert current_store() is store_b
                arrived = pickle.loads(travelled)
                assert arrived.store is store_a and arrived.total.value() == 6.0  # A's object, not B's "mine"
                assert pickle.loads(pickle.dumps(b_proxy)).total.value() == 45.0
                store_a.close()
                with pytest.raises(StoreError, match=r"belongs to the store .*, which is not open in this process"):
                    pickle.loads(travelled).total.value()  # never B's object of the same alias
                b_proxy.delete()
            finally:
                store_b.close()
        finally:
            store_a.close()


def test_a_proxy_that_travelled_where_no_store_is_open_names_its_store_not_open_one_first(monkeypatch):
    """A proxy given to a task on a worker (where no store is open) said "no store is open: store =
    Store(session) first", though its user had opened one, in the process they work in."""
    from workbench.runtime.store import current
    from workbench.runtime.store.handles import Proxy
    from workbench.runtime.store.model import ObjectRef

    # as on a worker: no store open in the process (the suite's session store is, in this one)
    monkeypatch.setattr(current, "_store", None)
    monkeypatch.setattr(current, "_open", {})
    made = Proxy(ObjectRef("0123456789", 1, "mine"), {"total": False}, store_key="tcp://a:1 /data/a")
    travelled = pickle.loads(pickle.dumps(made))
    with pytest.raises(StoreError, match=r"store tcp://a:1 /data/a, and no store is open in this process.*future"):
        travelled.total.value()


def test_a_block_collection_travels_as_its_proxies_do(tmp_path):
    """A BlockCollection pickled (a saved notebook variable) raised "cannot pickle '_asyncio.Task'": it
    carried its Store, client and all. It travels as its blocks and its store's name, and finds its own
    store while another is current."""
    with workbench.start(n_workers=1, timeout=60) as a, workbench.start(n_workers=1, timeout=60) as b:
        store_a = Store(a, tmp_path / "a")
        try:
            travelled = pickle.dumps(store_a.persist_blocks([np.arange(3.0), np.arange(3.0, 6.0)], alias="arr"))
            store_b = Store(b, tmp_path / "b")
            try:
                store_b.persist_blocks([np.zeros(3)], alias="arr")
                arrived = pickle.loads(travelled)
                assert arrived.store is store_a and arrived.fetch().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
                assert len(arrived.locations()) == 2
                store_a.close()
                with pytest.raises(StoreError, match=r"belongs to the store .*, which is not open in this process"):
                    pickle.loads(travelled).locations()
            finally:
                store_b.close()
        finally:
            store_a.close()


def test_two_sessions_hold_their_own_tier_sets_with_their_own_settings():
    """Each session's dram and gpu arrays, DRAM cache, DRAM budget and device limit are its own (issue
    50): an array session A placed is not among B's, B's settings are not A's, closing B brings A's set
    back into use, and closing A frees A's arrays."""
    from workbench.memory import tier_set, tiers
    from workbench.runtime.strategies import tiers as tier_strategies
    from workbench.settings import DRAM_BUDGET, GPU_BYTES, Settings

    def settings(budget: str, device: str) -> Settings:
        return Settings({**Settings.read().environ, DRAM_BUDGET: budget, GPU_BYTES: device})

    before = tiers.current()
    with workbench.start(n_workers=1, timeout=60, settings=settings("1000", "1MiB")) as a:
        assert tiers.current() is a.tier_set
        tiers.place("mine", np.arange(3.0), "dram")
        with workbench.start(n_workers=1, timeout=60, settings=settings("2000", "2MiB")) as b:
            assert tiers.current() is b.tier_set and tiers.names("dram") == []
            tiers.place("mine", np.zeros(2), "dram")  # the same name in B: no clash
            assert tier_strategies.settings().dram_budget == 2000 and b.tier_set.device.limit() == 2 * 2**20
            with tier_set.using(a.tier_set):  # A's world, by name, while B is in use
                assert tiers.open_array("mine", "dram").array.tolist() == [0.0, 1.0, 2.0]
                assert tier_strategies.settings().dram_budget == 1000 and a.tier_set.device.limit() == 2**20
        assert b.tier_set.closed and b.tier_set.counters()["dram_arrays"] == 0  # B's arrays went with B
        assert tiers.current() is a.tier_set and tiers.names("dram") == ["mine"]  # A's set back in use
    assert a.tier_set.closed and a.tier_set.counters()["dram_arrays"] == 0
    assert tiers.current() is before


def test_a_dram_budget_configured_before_start_holds_in_the_session_and_one_configured_in_it_stays_there():
    """``configure(dram_budget=...)`` before ``workbench.start()`` (where no session is: the process's
    set) is the budget of the session started after it, as it was before sessions owned their sets; one
    configured in the session is that session's only."""
    from workbench.memory import tier_set, tiers
    from workbench.runtime.strategies import tiers as tier_strategies

    previous = tiers.PROCESS.dram_budget
    with tier_set.using(tiers.PROCESS):  # where no session is (another test's may be in use here)
        tier_strategies.configure(dram_budget=123_456)
    try:
        with workbench.start(n_workers=1, timeout=60) as session:
            assert tiers.current() is session.tier_set and tier_strategies.settings().dram_budget == 123_456
            tier_strategies.configure(dram_budget=654_321)
        assert tiers.PROCESS.dram_budget == 123_456  # the session's own went with it
    finally:
        tiers.PROCESS.dram_budget = previous


def test_a_session_whose_cached_copy_cannot_be_written_back_still_closes_its_client_and_cluster(tmp_path):
    """A dirty cached copy whose file another process replaced (another shape) cannot be written back
    when the session closes: the error says so, and the session's client and cluster close all the same."""
    from workbench.memory import shm, tier_set, tiers

    session = workbench.start(n_workers=1, timeout=60)
    try:
        handle = tiers.place("swapped", np.zeros(4), "cached", directory=tmp_path)
        copy = handle.array
        copy[:] = 1.0
        session.tier_set.cache.mark_dirty(handle)
        del copy
        shm.delete("swapped", tmp_path)  # replaced behind the cache's back, as another process would
        view, _ = shm.copy_in("swapped", np.zeros(8), directory=tmp_path)
        del view
        with pytest.raises(tiers.TierError, match=r"holds a \(8,\) float64 array, not \(4,\)"):
            session.close()
        assert session.client.status == "closed" and session.cluster.status.name == "closed"
        assert tier_set.active() is not session.tier_set
    finally:
        session.close()
        shm.delete("swapped", tmp_path)
