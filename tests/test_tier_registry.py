"""Tiers are objects (issue 50): a tier added in one place (here, a second DRAM-like tier registered by
the test) is placed on, opened, listed, moved to and from, and freed through the ordinary
``workbench.memory.tiers`` calls, and a store backend keeps an object on it, with nothing else changed."""

from __future__ import annotations

import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import workbench.runtime.store.tiering as tiering
from workbench.memory import shm, tiers
from workbench.memory.tier_base import Tier, TierArray, TierError, UnknownTier
from workbench.runtime.store import ArrayBlock, backend_ops
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.model import ObjectRef

BOUND = 30.0


class ShelfArray(tiers.DramArray):
    """An array on the shelf: the shelf's own copy, process memory as dram's is."""

    tier = "shelf"


class ShelfTier(Tier):
    """A second DRAM-like tier under another name, with its own table of arrays: all it takes to add one."""

    name = "shelf"
    process_local = True
    counts_against_dram_budget = True

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()

    def put(
        self, name: str, array: Any, *, directory: Path | None, cache: Any, replace: bool, owner: Any, held: Any
    ) -> TierArray:
        """A copy of ``array`` on the shelf."""
        with self.lock:
            if name in self.arrays and not replace:
                raise TierError(f"{name!r} is on the shelf already")
            self.arrays[name] = np.array(array, copy=True)
            return ShelfArray(name, self.arrays[name])

    def open(self, name: str, *, directory: Path | None, cache: Any, writable: bool, held: Any) -> TierArray:
        """The shelf's array ``name``."""
        with self.lock:
            if name not in self.arrays:
                raise TierError(f"no shelf array {name!r}")
            return ShelfArray(name, self.arrays[name])

    def free(self, name: str, *, directory: Path | None, held: Any) -> bool:
        """Off the shelf."""
        with self.lock:
            return self.arrays.pop(name, None) is not None

    def names(self, *, directory: Path | None, held: Any) -> list[str]:
        """The shelf's names."""
        with self.lock:
            return sorted(self.arrays)


@pytest.fixture
def shelf():
    """The shelf tier, registered for the test and taken out after it."""
    tier = tiers.register(ShelfTier())
    try:
        yield tier
    finally:
        tiers.unregister("shelf")


def test_a_registered_tier_takes_every_tier_operation(shelf, tmp_path):
    data = np.arange(12.0).reshape(3, 4)
    placed = tiers.place("shelved", data, "shelf")
    assert placed.tier == "shelf" and tiers.names("shelf") == ["shelved"] and shelf.arrays["shelved"] is placed.array
    with pytest.raises(TierError, match="already"):
        tiers.place("shelved", data, "shelf")
    assert np.array_equal(tiers.open_array("shelved", "shelf").array, data)
    on_file = tiers.move(placed, "mapped", directory=tmp_path)  # off the shelf, onto a file tier
    assert on_file.tier == "mapped" and tiers.names("shelf") == [] and shm.exists("shelved", tmp_path)
    back = tiers.move(on_file, "shelf")  # and back: the file is freed
    assert back.tier == "shelf" and not shm.exists("shelved", tmp_path)
    assert np.array_equal(back.array, data)
    assert tiers.free("shelved", "shelf") and tiers.names("shelf") == []
    assert not tiers.free("shelved", "shelf")
    assert "shelf" in str(pytest.raises(UnknownTier, tiers.check_tier, "attic").value)  # named among the choices
    with pytest.raises(ValueError, match="registered already"):
        tiers.register(ShelfTier())


def test_an_unregistered_tier_is_unknown_again():
    tiers.register(ShelfTier())
    tiers.unregister("shelf")
    with pytest.raises(UnknownTier, match="no tier 'shelf'"):
        tiers.place("x", np.ones(2), "shelf")
    assert tiers.TIERS == tuple(tiers.REGISTRY) == ("dram", "mapped", "cached", "disk", "gpu")


def test_the_store_keeps_an_object_on_a_registered_tier(shelf, tmp_path):
    """A backend whose default tier is the shelf: an object put there is on it, its calls run on it,
    it moves to a file tier and back, a copy of it leaves whole, and dropping it frees its files."""
    worker = types.SimpleNamespace(
        address="tcp://127.0.0.1:1",
        handlers={},
        state=types.SimpleNamespace(nthreads=1),
        memory_manager=types.SimpleNamespace(memory_limit=None),
        log_event=lambda *args, **kwargs: None,
    )
    backend = StoreBackend(str(tmp_path), tier="shelf", timeout=BOUND)
    backend.setup(worker)
    try:
        oid = "s" * 32
        backend_ops.op_put.handler(backend, oid, 0, ArrayBlock(np.arange(10.0)))
        tier_of = lambda: next(r["tier"] for r in backend_ops.op_table.handler(backend) if r["oid"] == oid)  # noqa: E731
        assert tier_of() == "shelf"
        assert backend.invoke(ObjectRef(oid, 0), "apply", False, (np.sum,), {}) == 45.0
        moved = backend_ops.op_place.handler(backend, oid, 0, "mapped", reason="test")
        files = tiering.tier_directory(str(tmp_path))
        assert (moved["from"], tier_of()) == ("shelf", "mapped") and len(tiers.names("mapped", directory=files)) == 1
        assert backend.invoke(ObjectRef(oid, 0), "apply", False, (np.sum,), {}) == 45.0
        assert backend_ops.op_place.handler(backend, oid, 0, "shelf", reason="test")["from"] == "mapped"
        assert tier_of() == "shelf" and tiers.names("mapped", directory=files) == []
        sent = backend_ops.op_get.handler(backend, oid, 0)
        try:
            assert np.array_equal(sent.obj.data, np.arange(10.0))
        finally:
            sent.entry.lock.release(False, copy=True)
        assert backend_ops.op_drop.handler(backend, oid, 0)
    finally:
        backend.teardown(worker)
