"""The active object store: active vs non-active calls, aliases, locations, versions, tiers, errors."""

from __future__ import annotations

import sys
import textwrap
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import dask.array as da
import numpy as np
import pytest
from store_helpers import Counter, WithLock

from workbench.runtime import splitter
from workbench.runtime.store import ArrayBlock, BlockCollection, StoreError, UnknownAlias, current_store, store_for


@pytest.fixture
def store(session):
    return store_for(session)


@pytest.fixture
def counter(store):
    proxy = store.make_persistent(Counter(np.arange(10.0)), alias="counter")
    yield proxy
    proxy.delete()


def test_active_and_non_active_calls_give_the_same_answer(session, counter):
    future = counter.scaled_total(2.0, offset=1.0)
    assert session.gather(future) == 91.0  # a Dask future ...
    assert session.gather(session.client.submit(lambda x: x + 1, future)) == 92.0  # ... usable as a task argument
    assert counter.scaled_total.value(2.0, offset=1.0) == 91.0  # direct to the backend
    assert counter.scaled_total.local(2.0, offset=1.0) == 91.0  # fetched here, computed here
    assert session.gather(counter.scaled_total.non_active(2.0, offset=1.0)) == 91.0  # fetched by a task
    assert isinstance(counter.fetch(), Counter)


def test_active_call_runs_on_the_backend_holding_the_object(session, counter):
    (holder,) = counter.locations()
    thread_names = {counter.thread_name.value() for _ in range(3)}
    assert all(name.startswith("workbench-store-call") for name in thread_names)  # the backend's pool
    future = counter.total()
    session.wait(future)
    assert session.client.who_has([future])[future.key] == (holder,)


def test_writing_method_changes_the_stored_object(session, counter):
    counter.scale.value(2.0)
    assert counter.total.value() == 90.0
    session.gather(counter.scale(0.5))
    assert counter.total.value() == 45.0


def test_a_read_only_method_cannot_write_into_the_object(counter):
    with pytest.raises(ValueError, match="read-only"):
        counter.sneaky_write.value()
    assert counter.total.value() == 45.0


def test_writing_methods_on_one_object_run_one_at_a_time(counter):
    threads = [threading.Thread(target=counter.slow_increment.value) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counter.slow_increment.value() == 7  # no increment lost to a race


def test_read_only_methods_on_one_object_run_concurrently(counter):
    token = uuid.uuid4().hex
    with ThreadPoolExecutor(2) as pool:  # both calls must be inside the object at once to return True
        met = list(pool.map(lambda _: counter.meet.value(token, 2, 30.0), range(2)))
    assert met == [True, True]


def test_proxy_arguments_are_resolved_on_the_backend(session, store, counter):
    other = store.make_persistent(
        Counter(np.ones(5)), backend=[w for w in session.workers() if w not in counter.locations()][0]
    )
    try:
        assert counter.combined.value(other) == 50.0  # the other object travelled to counter's backend
        assert session.gather(counter.combined(other)) == 50.0
        assert counter.combined.local(other) == 50.0
    finally:
        other.delete()


def test_aliases_and_close_match_suggestions(store, counter):
    assert store.get_by_alias("counter").total.value() == 45.0
    assert store.aliases()["counter"] == counter.oid
    with pytest.raises(UnknownAlias, match="did you mean 'counter'"):
        store.get_by_alias("countr")
    with pytest.raises(ValueError, match="already taken"):
        store.make_persistent(Counter(np.ones(2)), alias="counter")


def test_missing_method_names_the_class_and_suggests(counter):
    with pytest.raises(AttributeError, match=r"Counter has no active method 'totl'.*did you mean 'total'"):
        counter.totl()


def test_bad_objects_give_clear_errors_and_nothing_is_registered(store):
    before = len(store.objects())
    with pytest.raises(TypeError, match="cannot be pickled"):
        store.make_persistent(WithLock())
    with pytest.raises(TypeError, match="PersistentObject subclass"):
        store.make_persistent([1, 2, 3])
    with pytest.raises(ValueError, match="not a worker of this cluster"):
        store.make_persistent(Counter(np.ones(2)), backend="tcp://nowhere:1")
    assert len(store.objects()) == before
    assert store.backend_tables().empty or len(store.backend_tables()) == before


def test_batch_location_query_move_and_replicas(session, store):
    workers = session.workers()
    proxies = store.make_persistent_many([Counter(np.full(4, i)) for i in range(6)])
    try:
        locations = store.locations(proxies)
        assert all(len(where) == 1 for where in locations)
        assert all(locations[i] != locations[i + 1] for i in range(5))  # round-robin over the two backends
        first = proxies[0]
        other = [w for w in workers if w not in first.locations()][0]
        first.move(other)
        assert first.locations() == [other] and first.total.value() == 0.0
        where = proxies[1].replicate()
        assert sorted(proxies[1].locations()) == sorted(workers) and where in workers
        assert session.gather([proxies[1].total() for _ in range(4)]) == [4.0] * 4
        with pytest.raises(StoreError, match="replicas"):
            proxies[1].scale.value(2.0)
        proxies[1].drop_replicas()
        proxies[1].scale.value(2.0)
        assert proxies[1].total.value() == 8.0
    finally:
        store.delete(proxies)
    assert store.locations(proxies) == [[]] * 6


def test_new_version_then_consolidate(store, counter):
    version = counter.new_version()
    version.scale.value(10.0)
    assert counter.total.value() == 45.0 and version.total.value() == 450.0  # the original is untouched
    version.consolidate()
    assert store.get_by_alias("counter").total.value() == 450.0
    assert counter.total.value() == 450.0  # an unpinned proxy follows the current version
    rows = store.objects()
    assert rows.loc[rows["oid"] == counter.oid, "version"].tolist() == [1]
    counter.scale.value(0.1)


def test_disk_tier_flush_evict_reload(store, counter):
    path = counter.flush()
    assert path.endswith(".pkl")
    counter.evict()
    assert counter.locations() == []
    assert counter.total.value() == pytest.approx(45.0)  # reloaded from disk on use
    assert len(counter.locations()) == 1


def test_persistent_collection_is_split_by_location(session, store):
    x = da.random.default_rng(7).random((1000, 3), chunks=(100, 3))
    expected = np.histogramdd(x.compute(), bins=4, range=[(0, 1)] * 3)[0]
    blocks = store.persist_blocks(x, alias="points")
    try:
        assert isinstance(store.get_by_alias("points"), BlockCollection) and len(blocks) == 10
        partitions = splitter.split(session, blocks)
        assert len(partitions) == 2
        holders = blocks.holders()
        assert all(holders[i] == p.worker for p in partitions for i in p.get_indexes())  # no block moves
        assert sorted(i for p in partitions for i in p.get_item_indexes()) == list(range(1000))
        count = lambda b: np.histogramdd(b, bins=4, range=[(0, 1)] * 3)[0]  # noqa: E731
        partials = splitter.run_partitions(session, partitions, count, merge=sum)
        assert np.array_equal(sum(session.gather(partials)), expected)
        active = session.gather(blocks.call("apply", count))
        assert np.array_equal(sum(active), expected)
        assert np.array_equal(blocks.fetch(), x.compute())
    finally:
        blocks.delete()
    with pytest.raises(UnknownAlias):
        store.get_by_alias("points")


def test_classes_from_a_local_module_ship_by_value(tmp_path, store, monkeypatch):
    module = tmp_path / "lab_model_for_store_test.py"
    module.write_text(
        textwrap.dedent("""
        from workbench.runtime.store import PersistentObject, active

        class Doubler(PersistentObject):
            def __init__(self, x):
                self.x = x

            @active
            def twice(self):
                return 2 * self.x
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not on the workers
    import lab_model_for_store_test as model

    proxy = store.make_persistent(model.Doubler(21))
    try:
        assert proxy.twice.value() == 42
    finally:
        proxy.delete()
        sys.modules.pop("lab_model_for_store_test", None)


def test_the_current_store_is_the_one_opened_last(store):
    assert current_store() is store
    proxy = ArrayBlock(np.arange(3)).make_persistent()
    try:
        assert proxy.shape.value() == (3,)
    finally:
        proxy.delete()


def test_more_bad_input_is_refused_clearly(session, store, tmp_path):
    from workbench.runtime.store import PersistentObject, Store, active

    class Plain(PersistentObject):  # no active method
        pass

    with pytest.raises(TypeError, match="no @active method"):
        store.make_persistent(Plain())
    with pytest.raises(TypeError, match="decorates a method"):
        active(42)
    with pytest.raises(StoreError, match="already uses"):
        Store(session, tmp_path / "another")  # one cluster, one store
    with pytest.raises(ValueError, match="bytes per backend"):
        Store(session, memory_limit=-1)
    with pytest.raises(ValueError, match="row blocks"):
        store.persist_blocks(da.zeros((10, 10), chunks=(5, 5)))
    with pytest.raises(ValueError, match="no blocks"):
        store.persist_blocks([])
    with pytest.raises(ValueError, match="one backend per object"):
        store.make_persistent_many([Counter(np.ones(2))] * 2, backends=session.workers()[:1])
    with pytest.raises(ValueError, match="repeat a name"):
        store.make_persistent_many([Counter(np.ones(2)), Counter(np.ones(2))], aliases=["twin", "twin"])
    assert current_store() is store  # a refused Store did not replace the current one


def test_calls_on_a_deleted_object_and_a_current_version_fail_clearly(store):
    proxy = store.make_persistent(Counter(np.ones(3)), alias="short-lived")
    with pytest.raises(StoreError, match="current version already"):
        proxy.consolidate()
    proxy.delete()
    with pytest.raises(StoreError, match="deleted"):
        proxy.total.value()
    with pytest.raises(StoreError, match="deleted"):
        proxy.total()
    assert "short-lived" not in store.aliases()


def test_a_collection_alias_that_is_taken_places_no_block(store, counter):
    before = len(store.objects())
    with pytest.raises(ValueError, match="already taken"):
        store.persist_blocks(da.ones((40, 2), chunks=(10, 2)), alias="counter")
    with pytest.raises(ValueError, match="already taken"):
        store.persist_blocks([np.ones((4, 2))] * 3, alias="counter")
    assert len(store.objects()) == before and len(store.backend_tables()) == before


def test_a_method_error_is_raised_once_not_retried(store):
    proxy = store.make_persistent(Counter(np.ones(3)))
    try:
        with pytest.raises(ValueError, match="read-only"):
            proxy.sneaky_write.value()
        assert proxy.slow_increment.value() == 1  # a writing method ran exactly once per call
        with pytest.raises(TypeError):
            proxy.scale.value()  # missing argument: the method's own error, raised as it is
        assert proxy.slow_increment.value() == 2
    finally:
        proxy.delete()
