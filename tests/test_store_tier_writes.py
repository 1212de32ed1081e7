"""The store's tiers under hostile use (issue 25, 1-4 and 7-11): a write is never lost or undone,
aliases stay aliases, a batch placement is all or nothing, odd names and budgets are clear, and no
tier file outlives its object."""

from __future__ import annotations

import math

import numpy as np
import pytest
from store_helpers import Bag, tier_files

import workbench.runtime.store.backend_ops as backend_ops
from workbench.memory import tiers
from workbench.runtime.store import ArrayBlock, Store, store_for

FILE_TIERS = ["mapped", "cached"]


@pytest.fixture
def store(session):
    return store_for(session)


@pytest.fixture
def budgets(store):
    """Set every backend's cache budget and memory limit for one test; the old ones are put back."""
    old_cache: dict[str, int] = {}
    old_limit: dict[str, int | None] = {}

    def set_budgets(cache_bytes: int | None = None, memory_limit: int | None = None) -> None:
        for w in store.backends():
            if cache_bytes is not None:
                old_cache.setdefault(w, store.link.backend(w, backend_ops.op_set_cache, nbytes=cache_bytes))
            if memory_limit is not None:
                old_limit.setdefault(w, store.link.backend(w, backend_ops.op_set_memory_limit, nbytes=memory_limit))

    yield set_budgets
    for w, nbytes in old_cache.items():
        store.link.backend(w, backend_ops.op_set_cache, nbytes=nbytes)
    for w, limit in old_limit.items():
        store.link.backend(w, backend_ops.op_set_memory_limit, nbytes=limit)


@pytest.mark.parametrize("tier", FILE_TIERS)
@pytest.mark.parametrize("value", [None, [1, 2, 3], "text"])
def test_a_writing_method_binding_a_non_array_keeps_it_and_frees_the_file(store, tier, value):
    proxy = store.make_persistent(Bag(data=np.arange(4.0), other=np.ones(3)))
    try:
        proxy.place(tier)
        files = len(tier_files(store))
        proxy.bind.value("data", value)
        assert proxy.read.value("data") == value  # not undone back to the old array
        assert len(tier_files(store)) == files - 1  # its file was released
        assert proxy.read.value("other").sum() == 3.0 and proxy.tier() == tier
        proxy.bind.value("data", np.full(2, 5.0))  # an array again: kept (in DRAM until the next placement)
        assert proxy.read.value("data").sum() == 10.0
        proxy.place("dram")
        proxy.place(tier)
        assert proxy.read.value("data").sum() == 10.0
        proxy.forget.value("data")  # deleted: its file goes too
        assert not proxy.has.value("data") and len(tier_files(store)) == files - 1
    finally:
        proxy.delete()
    assert not any(proxy.oid in f for f in tier_files(store))


def test_a_cached_object_larger_than_the_cache_keeps_every_in_place_write(store, budgets):
    budgets(cache_bytes=10_000)  # room for one of the two 8 kB arrays
    proxy = store.make_persistent(Bag(a=np.zeros(1000), b=np.zeros(1000)))
    try:
        proxy.place("cached")
        proxy.add.value(1.0, "a", "b")
        assert (proxy.read.value("a").sum(), proxy.read.value("b").sum()) == (1000.0, 1000.0)
        proxy.add.value(1.0, "b", "a")
        proxy.place("mapped")  # what the files hold
        assert (proxy.read.value("a").sum(), proxy.read.value("b").sum()) == (2000.0, 2000.0)
    finally:
        proxy.delete()


@pytest.mark.parametrize("tier", FILE_TIERS)
def test_two_attributes_that_are_one_array_stay_one_array(store, tier):
    shared = np.zeros(100)
    proxy = store.make_persistent(Bag(a=shared, b=shared, c=np.ones(10)))
    try:
        proxy.place(tier)
        assert proxy.same.value("a", "b")
        assert len([f for f in tier_files(store) if proxy.oid in f]) == 2  # one file for a and b
        proxy.add.value(1.0, "a")
        assert proxy.read.value("b").sum() == 100.0  # as on dram: b is a
        proxy.bind.value("a", np.full(100, 3.0))  # a rebound: b keeps the array it had
        assert (proxy.read.value("a").sum(), proxy.read.value("b").sum()) == (300.0, 100.0)
        proxy.bind_to.value("c", "b")  # bound to another attribute's array: an alias again
        proxy.add.value(1.0, "c")
        assert proxy.same.value("b", "c") and proxy.read.value("b").sum() == 200.0
        assert len([f for f in tier_files(store) if proxy.oid in f]) == 2
        proxy.place("dram")
        assert proxy.same.value("b", "c")
    finally:
        proxy.delete()
    assert not any(proxy.oid in f for f in tier_files(store))


@pytest.mark.parametrize("tier", FILE_TIERS)
def test_an_attribute_bound_to_a_new_attribute_s_array_stays_its_alias(store, tier):
    """A new attribute (no file yet) and a filed one bound to its array are one array after the call
    (the store's state machine found them split: the filed one became a file of its own)."""
    proxy = store.make_persistent(Bag(b=np.zeros(500)))
    try:
        proxy.place(tier)
        proxy.bind.value("c", np.full(3, 7.0))  # new: stays in DRAM until the next placement
        proxy.bind_to.value("b", "c")
        assert proxy.same.value("b", "c")
        proxy.add.value(1.0, "c")
        assert proxy.read.value("b").tolist() == [8.0] * 3 and proxy.same.value("b", "c")
    finally:
        proxy.delete()
    assert not any(proxy.oid in f for f in tier_files(store))


def test_an_attribute_that_is_part_of_another_is_refused_before_any_file(store):
    proxy = store.make_persistent(Bag(whole=np.zeros(100)))
    try:
        proxy.bind_view.value("half", "whole", 50)  # made where it lives: a pickled view arrives as a copy
        with pytest.raises(tiers.TierError, match="'whole' and 'half' overlap in memory"):
            proxy.place("mapped")
        assert proxy.tier() == "dram" and not any(proxy.oid in f for f in tier_files(store))
        proxy.add.value(1.0, "half")
        assert proxy.read.value("whole").sum() == 50.0
    finally:
        proxy.delete()


@pytest.mark.filterwarnings("ignore:the matrix subclass")
@pytest.mark.parametrize("value", [np.ma.MaskedArray([1.0, 2.0, 3.0], mask=[0, 1, 0]), np.matrix([[1.0, 2.0]])])
def test_an_array_subclass_is_refused_on_a_file_tier_and_kept_on_dram(store, value):
    proxy = store.make_persistent(Bag(plain=np.ones(4), special=value))
    try:
        with pytest.raises(tiers.TierError, match=f"'special' is a numpy.*{type(value).__name__}.*keep it on dram"):
            proxy.place("mapped")
        assert proxy.tier() == "dram" and not any(proxy.oid in f for f in tier_files(store))
        back = proxy.read.value("special")
        assert type(back) is type(value) and back.sum() == value.sum()
    finally:
        proxy.delete()


def test_any_attribute_name_gets_a_file_and_nothing_outlives_the_object(store):
    proxy = store.make_persistent(Bag(a=np.ones(3), données=np.full(3, 2.0), **{"x y": np.full(3, 3.0)}))
    try:
        proxy.place("mapped")
        assert proxy.tier() == "mapped"
        assert len([f for f in tier_files(store) if proxy.oid in f]) == 3
        proxy.add.value(1.0, "données")
        proxy.place("cached")
        assert proxy.read.value("données").sum() == 9.0 and proxy.read.value("x y").sum() == 9.0
    finally:
        proxy.delete()
    assert not any(proxy.oid in f for f in tier_files(store))


def test_a_batch_placement_over_the_memory_limit_places_every_object(store, budgets):
    budgets(memory_limit=20_000)  # two blocks of 8 kB in DRAM; the others go to disk as they come
    proxies = [store.make_persistent(ArrayBlock(np.full(1000, float(i)))) for i in range(10)]
    try:
        assert store.place(proxies, "mapped") == 10
        assert [p.tier() for p in proxies] == ["mapped"] * 10
        assert [p.apply.value(np.sum) for p in proxies] == [1000.0 * i for i in range(10)]
    finally:
        store.delete(proxies)


def test_a_batch_placement_that_fails_leaves_every_object_where_it_was(store):
    good = [store.make_persistent(ArrayBlock(np.full(10, float(i)))) for i in range(3)]
    bad = store.make_persistent(Bag(m=np.ma.MaskedArray([1.0, 2.0], mask=[1, 0])), backend=good[0].locations()[0])
    try:
        good[1].place("cached")
        with pytest.raises(tiers.TierError, match="'m' is a numpy.ma"):
            store.place([*good, bad], "mapped")
        assert [p.tier() for p in good] == ["dram", "cached", "dram"] and bad.tier() == "dram"
    finally:
        store.delete([*good, bad])


def test_a_batch_placement_takes_duplicates_and_collections_and_names_what_it_cannot_place(store):
    proxy = store.make_persistent(ArrayBlock(np.ones(8)))
    collection = store.persist_blocks([np.full(4, 1.0), np.full(4, 2.0)])
    try:
        assert store.place([proxy, proxy], "disk") == 1
        assert proxy.tier() == "disk" and proxy.apply.value(np.sum) == 8.0
        assert store.place([proxy, proxy], "mapped") == 1 and proxy.tier() == "mapped"
        assert store.place([collection, proxy], "mapped") == 3  # a collection stands for its blocks
        assert [b.tier() for b in collection] == ["mapped", "mapped"]
        with pytest.raises(TypeError, match="store.place takes proxies and collections, got int 3"):
            store.place([proxy, 3], "dram")
        assert proxy.tier() == "mapped"
    finally:
        proxy.delete()
        collection.delete()


def test_memory_limits_are_checked_one_way(session, store):
    for bad in [math.nan, "100", 1.5, -1, True]:
        with pytest.raises(ValueError, match="memory_limit is bytes per backend"):
            Store(session, memory_limit=bad)
        with pytest.raises(ValueError, match="memory_limit is bytes per backend"):
            store.set_memory_limit(bad)


def test_a_memory_limit_of_zero_keeps_nothing_in_dram(store, budgets):
    budgets(memory_limit=0)
    proxies = [store.make_persistent(ArrayBlock(np.full(100, float(i)))) for i in range(3)]
    try:
        assert len([t for t in store.backend_tables()["oid"] if t in {p.oid for p in proxies}]) <= 1
        assert [p.apply.value(np.sum) for p in proxies] == [0.0, 100.0, 200.0]
    finally:
        store.delete(proxies)
