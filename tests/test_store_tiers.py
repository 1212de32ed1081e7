"""The active store on memory tiers: place, run in place, results to volatile/store/in-place, cold
runs, dynamic placement with its reasons in the trace, and nothing left behind."""

from __future__ import annotations

import time

import numpy as np
import pytest
from store_helpers import tier_files

import workbench.runtime.store.backend_ops as backend_ops
from workbench.memory import placement, shm
from workbench.runtime import trace
from workbench.runtime.store import ArrayBlock, active, store_for


@pytest.fixture
def store(session):
    return store_for(session)


def test_an_object_moves_through_every_tier_and_computes_the_same(store):
    data = np.random.default_rng(3).random((200, 30))
    proxy = store.make_persistent(ArrayBlock(data))
    try:
        assert proxy.tier() == "dram"
        expected = data.sum()
        for tier in ["mapped", "cached", "dram", "mapped", "disk", "mapped"]:
            (placed,) = proxy.place(tier)
            assert placed["tier"] == tier
            assert proxy.apply.value(np.sum) == pytest.approx(expected)  # runs where it is, on its tier
            assert proxy.tier() == ("dram" if tier == "disk" else tier)  # staged back into DRAM by the call
        assert tier_files(store)  # on mapped now: its file exists
    finally:
        proxy.delete()
    assert tier_files(store) == []  # deleting the object freed its file


def test_a_writing_method_on_a_mapped_object_writes_its_file_in_place(store):
    a = store.make_persistent(ArrayBlock(np.ones((32, 32))))
    where = a.locations()[0]
    b = store.make_persistent(ArrayBlock(np.full((32, 32), 2.0)), backend=where)
    c = store.make_persistent(ArrayBlock(np.zeros((32, 32))), backend=where)
    try:
        c.place("mapped")
        c.fma.value(a, b)  # C += A @ B, straight into the mapping
        c.fma.value(a, b)
        assert c.tier() == "mapped"
        assert c.apply.value(np.sum) == pytest.approx(2 * 64.0 * 32 * 32)
        (file,) = [f for f in tier_files(store) if c.oid in f]
        from workbench.memory import tiers

        on_disk = tiers.read_file(file.removeprefix(shm.PREFIX), store.directory / "tiers" / "mapped")
        assert on_disk.sum() == pytest.approx(2 * 64.0 * 32 * 32)  # durable: msync-ed after the write
        with pytest.raises(Exception, match="read-only"):
            c.apply.value(_write_into)
    finally:
        for p in (a, b, c):
            p.delete()


def _write_into(data: np.ndarray) -> None:
    data[0, 0] = 1.0  # a read-only call may not write a mapped object either


def test_a_result_kept_in_the_store_on_a_tier(store):
    a = store.make_persistent(ArrayBlock(np.ones((16, 4))))
    b = store.make_persistent(ArrayBlock(np.full((16, 4), 3.0)), backend=a.locations()[0])
    try:
        result = a.plus.to_store("mapped")(b).result(timeout=60)
        assert result.tier() == "mapped" and result.locations() == a.locations()  # nothing travelled
        assert result.apply.value(np.sum) == pytest.approx(4.0 * 64)
        volatile = a.plus.value(b)
        assert np.array_equal(volatile, np.full((16, 4), 4.0))
        with pytest.raises(ValueError, match="no tier 'nvm'"):
            a.plus.to_store("nvm")
        with pytest.raises(TypeError, match="a result kept in the store must be"):
            a.shape.to_store("dram")().result(timeout=60)
        result.delete()
    finally:
        a.delete()
        b.delete()


def test_cooling_makes_the_next_call_read_from_the_device(store):
    proxy = store.make_persistent(ArrayBlock(np.ones(1_000_000)))
    try:
        proxy.place("mapped")
        proxy.apply.value(np.sum)
        (eviction,) = proxy.cool()
        if eviction["evicted"]:
            assert eviction["resident_after"] <= eviction["nbytes"] // 20
        else:
            assert eviction["reason"]  # e.g. the store directory is on tmpfs: said, not assumed
        assert proxy.apply.value(np.sum) == 1_000_000.0
    finally:
        proxy.delete()


def test_dynamic_placement_moves_what_turns_hot_by_itself_and_explains_it(session, store):
    since = time.time()
    proxies = [store.make_persistent(ArrayBlock(np.full(1_000, float(i)))) for i in range(3)]
    holder = proxies[0].locations()[0]
    for p in proxies[1:]:
        p.move(holder)
    try:
        store.rebalance(budget=10_000)  # room in DRAM for one of these 8 kB objects per backend
        store.place(proxies, "mapped", reason="a test")
        store.place(proxies, "dynamic")
        assert [p.tier() for p in proxies] == ["mapped"] * 3
        for _ in range(3):
            proxies[0].apply.value(np.sum)  # hot after two reads: the backend promotes it itself
        assert [p.tier() for p in proxies] == ["dram", "mapped", "mapped"]
        for _ in range(2):
            proxies[1].apply.value(np.sum)  # hot too, but the budget is taken by a hotter one
        assert [p.tier() for p in proxies] == ["dram", "mapped", "mapped"]
        assert store.rebalance() == []  # steady: nothing to move
        deadline = time.monotonic() + 30
        while True:  # worker events arrive asynchronously: a bounded wait for them
            events = trace.worker_events(session, since)
            promotions = [e["task"] for e in events if e["action"] == "promote"]
            if promotions or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert any("place mapped->dram: reused: read 2x: hot, and it fits the DRAM budget" in t for t in promotions)
        assert any(e["action"] == "demote" and "place dram->mapped" in e["task"] for e in events)
    finally:
        store.rebalance(budget=256 * 2**20)
        store.delete(proxies)


def test_bad_tier_requests_are_clear(store):
    proxy = store.make_persistent(ArrayBlock(np.ones(4)))
    try:
        with pytest.raises(ValueError, match="no tier 'ssd'.*mapped, cached, disk, gpu, or the 'dynamic' placement"):
            proxy.place("ssd")
        with pytest.raises(ValueError, match="budget is DRAM bytes"):
            store.rebalance(-5)
    finally:
        proxy.delete()


def test_the_policy_puts_written_and_reused_objects_in_dram_within_the_budget():
    usages = [
        placement.Usage("cold", 100, reads=1, writes=0, tier="dram"),
        placement.Usage("hot", 100, reads=5, writes=0, tier="mapped"),
        placement.Usage("written", 100, reads=0, writes=2, tier="mapped"),
        placement.Usage("too-big", 1_000, reads=9, writes=0, tier="mapped"),
        placement.Usage("hot-in-dram", 100, reads=3, writes=0, tier="dram"),
    ]
    decisions = {d.key: d for d in placement.DynamicPolicy(budget=250).decide(usages)}
    assert decisions["written"].tier == "dram" and "written 2x" in decisions["written"].reason
    assert decisions["cold"].tier == "mapped" and "cold" in decisions["cold"].reason
    assert "too-big" not in decisions  # over the budget: stays mapped
    # budget 250: written (100) first, then the most reused that fits (hot, 5 reads); hot-in-dram leaves
    assert decisions["hot"].tier == "dram"
    assert decisions["hot-in-dram"].tier == "mapped" and "fill the DRAM budget" in decisions["hot-in-dram"].reason
    assert placement.DynamicPolicy(budget=10**9).decide([placement.Usage("x", 1, 0, 0, "mapped")]) == []
    with pytest.raises(ValueError, match="DRAM budget"):
        placement.DynamicPolicy(budget=-1)


def _add_one(data: np.ndarray) -> None:
    data += 1.0


@pytest.mark.parametrize("tier", ["mapped", "cached"])
def test_writes_to_a_tiered_object_are_seen_by_every_later_reader(store, tier):
    proxy = store.make_persistent(ArrayBlock(np.zeros(50_000)))
    try:
        proxy.place(tier)
        for expected in (1.0, 2.0):
            proxy.apply_in_place.value(_add_one)
            assert proxy.apply.value(np.sum) == expected * 50_000  # an active read, in place
            assert proxy.fetch().data.sum() == expected * 50_000  # a copy (the non-active way)
        proxy.place("dram")
        assert proxy.apply.value(np.sum) == 2.0 * 50_000
    finally:
        proxy.delete()


def _double(data: np.ndarray) -> np.ndarray:
    return data * 2


class Rebinder(ArrayBlock):
    """A block whose writing method binds a new array (not in place)."""

    @active(writes=True)
    def doubled(self) -> None:
        self.data = self.data * 2

    @active(writes=True)
    def grown(self) -> None:
        self.data = np.concatenate([self.data, self.data])


@pytest.mark.parametrize("tier", ["mapped", "cached"])
def test_a_writing_method_that_binds_a_new_array_keeps_its_change(store, tier):
    proxy = store.make_persistent(Rebinder(np.ones(100)))
    try:
        proxy.place(tier)
        proxy.doubled.value()
        assert proxy.apply.value(np.sum) == 200.0
        proxy.grown.value()
        assert proxy.shape.value() == (200,)
        proxy.cool()  # remapped from the file: the new version, not the old one
        assert proxy.apply.value(np.sum) == 400.0 and proxy.fetch().data.sum() == 400.0
    finally:
        proxy.delete()


def test_tiered_objects_survive_replicas_moves_and_a_return_to_the_cache(store):
    proxy = store.make_persistent(ArrayBlock(np.arange(1000.0)))
    try:
        proxy.replicate()
        proxy.place("mapped")  # each backend its own file: dropping a replica deletes only its own
        proxy.drop_replicas()
        proxy.cool()
        assert proxy.apply.value(np.sum) == 499_500.0
        other = next(w for w in store.backends() if w not in proxy.locations())
        proxy.move(other)
        proxy.place("mapped")
        assert proxy.apply.value(np.sum) == 499_500.0
        proxy.place("cached")
        proxy.apply.value(np.sum)  # a copy in the cache
        proxy.place("mapped")
        proxy.apply_in_place.value(_add_one)  # written through the mapping
        proxy.place("cached")
        assert proxy.apply.value(np.sum) == 500_500.0  # not the cache's old copy
    finally:
        proxy.delete()
    assert tier_files(store) == []


def test_byte_counts_beyond_what_a_message_carries_are_refused(store):
    for call in (
        lambda: store.rebalance(budget=2**70),
        lambda: store.set_memory_limit(2**70),
        lambda: store.set_cache(2**70),
    ):
        with pytest.raises(ValueError, match="2\\*\\*63 - 1"):
            call()


@pytest.mark.parametrize("tier", ["mapped", "cached"])
def test_cooling_never_leaves_an_attribute_without_its_array(tmp_path, monkeypatch, tier):
    """Dask serialises a copy of a store object without the object's lock (a reply, a push): while
    cool() makes the pages cold, the attribute holds a mapping of its file, never None."""
    from workbench.memory import tiers
    from workbench.runtime.store import tiering

    block = ArrayBlock(np.arange(4096.0))
    placement = tiering.place_state(block, tiering.Placement(), tier, tmp_path, f"cool-{tier}", tiers.DramCache(1024))
    evict_pages = tiers.evict_pages
    seen = []

    def watching(path):
        seen.append(block.__dict__["data"])  # what a copy serialised at this moment would carry
        return evict_pages(path)

    monkeypatch.setattr(tiers, "evict_pages", watching)
    try:
        tiering.cool(block, placement)
    finally:
        monkeypatch.undo()
        tiering.release(placement)
    assert len(seen) == 1 and isinstance(seen[0], np.ndarray) and seen[0].sum() == 4095 * 4096 / 2
    assert isinstance(block.data, np.ndarray) and not block.data.flags.writeable
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # released: no tier file left


def test_a_fetch_racing_an_eviction_asks_the_catalogue_again(store, monkeypatch):
    """The holder the catalogue named evicts the object (a place("disk"), its memory limit) before the
    copy is made: fetch() asks the catalogue again and gets the copy back from disk, not a NotHere."""
    proxy = store.make_persistent(ArrayBlock(np.full(1000, 3.0)))
    original = store.link.backend
    evicted = []

    def evict_first(address, op, **kwargs):
        if op is backend_ops.op_get and not evicted:
            evicted.append(original(address, backend_ops.op_evict, oid=kwargs["oid"], version=kwargs["version"]))
        return original(address, op, **kwargs)

    monkeypatch.setattr(store.link, "backend", evict_first)
    try:
        assert proxy.fetch().data.sum() == 3000.0
    finally:
        monkeypatch.undo()
        proxy.delete()
    assert evicted and evicted[0] > 0, "the holder did not evict the object"
