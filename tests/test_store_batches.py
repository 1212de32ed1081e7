"""The store's batch paths: many objects in one catalogue transaction and one message per backend,
all or nothing."""

from __future__ import annotations

import threading

import dask.array as da
import numpy as np
import pytest

import workbench
from workbench.runtime.store import (
    ArrayBlock,
    BackendUnreachable,
    PersistentObject,
    Store,
    active,
    backend_ops,
    store_for,
)


class Box(PersistentObject):
    """One value and a method to read it."""

    def __init__(self, value):
        self.value = value

    @active
    def get(self):
        return self.value


def _fail_elsewhere(value, pid):
    import os

    if os.getpid() == pid:
        return Box(value)  # here (the client's own copy) it is harmless
    raise RuntimeError("this object refuses to be unpickled on a worker")


def _die_elsewhere(value, pid):
    import os

    if os.getpid() == pid:
        return Box(value)
    os._exit(1)  # the worker process dies while it takes the batch


class RefusesWorkers(Box):
    def __reduce__(self):
        import os

        return (_fail_elsewhere, (self.value, os.getpid()))


class KillsItsWorker(Box):
    def __reduce__(self):
        import os

        return (_die_elsewhere, (self.value, os.getpid()))


def _held(store: Store) -> int:
    return sum(len(store.link.backend(b, backend_ops.op_table)) for b in store.backends())


def test_a_batch_registers_in_one_go_and_answers(session):
    store = store_for(session)
    before = len(store.objects())
    proxies = store.make_persistent_many([Box(i) for i in range(500)], aliases=[f"box-{i}" for i in range(500)])
    try:
        assert len(store.objects()) == before + 500
        assert [p.get.value() for p in proxies[::97]] == list(range(0, 500, 97))
        where = store.locations(proxies)
        assert all(len(w) == 1 for w in where) and {w[0] for w in where} == set(store.backends())  # round-robin
        assert store.get_by_alias("box-123").get.value() == 123
        assert store.locations(proxies[:1] + proxies[:1]) == [where[0], where[0]]  # asked twice, answered twice
    finally:
        store.delete(proxies)
    assert store.locations(proxies[:2]) == [[], []]  # deleted objects are held nowhere


def test_one_unpicklable_object_stores_none_and_is_named(session):
    store = store_for(session)
    before, held = len(store.objects()), _held(store)
    batch = [Box(1), Box(2), Box(threading.Lock()), Box(4)]
    with pytest.raises(TypeError, match=r"object 2 of the batch \(Box\) cannot be pickled.*nothing was stored"):
        store.make_persistent_many(batch, aliases=["a1", "a2", "a3", "a4"])
    assert len(store.objects()) == before and _held(store) == held
    assert "a1" not in store.aliases()  # not even the aliases of the good objects


def test_a_backend_that_fails_takes_the_whole_batch_back(session):
    store = store_for(session)
    before, held = len(store.objects()), _held(store)
    batch = [Box(0), Box(1), RefusesWorkers(2), Box(3)]  # round-robin: both backends get a part
    with pytest.raises(RuntimeError, match="refuses to be unpickled"):
        store.make_persistent_many(batch)
    assert len(store.objects()) == before  # the catalogue forgot every object of the batch
    assert _held(store) == held  # and the backend that took its part dropped it


def test_a_worker_lost_during_a_batch_leaves_the_catalogue_consistent(tmp_path):
    with workbench.start(n_workers=2, timeout=60) as session, Store(session, tmp_path / "store") as store:
        survivor = store.backends()[0]
        killer = store.backends()[1]
        batch = [Box(0), KillsItsWorker(1), Box(2), Box(3)]
        with pytest.raises((BackendUnreachable, OSError, RuntimeError)):
            store.make_persistent_many(batch, backends=[survivor, killer, survivor, killer])
        assert store.objects().empty  # nothing registered remains
        assert len(store.link.backend(survivor, backend_ops.op_table)) == 0  # the survivor dropped its part
        proxy = store.make_persistent(Box(7), backend=survivor)  # and the store goes on
        assert proxy.get.value() == 7
        proxy.delete()


def test_persist_blocks_of_many_blocks_lands_where_they_are(session):
    store = store_for(session)
    array = session.client.persist(da.arange(4000.0).reshape(1000, 4).rechunk((16, 4)))
    collection = store.persist_blocks(array)
    try:
        assert len(collection) == 63
        assert collection.locations() == [[w] for w in collection.holders()]
        who_has = session.client.who_has(array)
        dask_holders = [sorted(who_has[k])[0] for k in (key for row in array.__dask_keys__() for key in row)]
        assert collection.holders() == dask_holders  # every block became an object where it already was
        np.testing.assert_array_equal(collection.fetch(), np.arange(4000.0).reshape(1000, 4))
        assert isinstance(collection[0].fetch(), ArrayBlock)
    finally:
        collection.delete()
