"""Object state on memory tiers: where a stored object's numpy attributes live.

An object in a backend's table is on one tier (thesis ch. 6):

* ``dram``: its arrays are in the worker's memory (the default, what ``memory_limit`` counts);
* ``mapped``: each numpy attribute is a file of the tier directory mapped into the worker, and
  active methods run on the mapping in place (read-only at rest, writeable during a writing
  method, ``msync``-ed after it);
* ``cached``: the same files, used through the backend's DRAM cache (a byte budget; Memory Mode
  in software): a call swaps in the cached DRAM copies, and a writing call writes through;
* ``disk``: the object is evicted to the store's disk tier (issue 6's pickle per version) and
  staged back into DRAM when used: one tier among these, through the same ``place`` call;
* ``dynamic``: not a place but a manager: the backend's
  :class:`~workbench.memory.placement.DynamicPolicy` moves the object between ``mapped`` and
  ``dram`` by its measured use, under a DRAM budget per backend, each move explained in the trace.

Files are named ``<oid>-v<version>-<attribute>`` in ``<store>/tiers/mapped`` (or
``$WORKBENCH_PMEM_DIR``), made and checked by :mod:`workbench.memory.tiers` (and so by
``workbench.memory.shm``'s file code): no second copy of that code here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.memory import tiers

STORE_TIERS = ("dram", "mapped", "cached", "disk", "dynamic")


@dataclass
class Placement:
    """The tier of one object version here, and the tier files of its numpy attributes."""

    tier: str = "dram"
    arrays: dict[str, tiers.TierArray] = field(default_factory=dict)

    @property
    def tier_bytes(self) -> int:
        """Bytes of the object's arrays held in tier files (not counted against DRAM)."""
        return sum(
            int(h.mapped.array.nbytes if isinstance(h, tiers.CachedArray) else h.array.nbytes)
            for h in self.arrays.values()
        )


def check_tier(tier: object) -> str:
    """``tier`` if the store can place objects there; a clear error otherwise."""
    if tier not in STORE_TIERS:
        raise ValueError(f"no store tier {tier!r}: an object can be placed on {', '.join(STORE_TIERS)}")
    return str(tier)


def tier_directory(store_directory: str) -> Path:
    """Where this store's mapped (and cached) files live: ``$WORKBENCH_PMEM_DIR/<store name>`` when set,
    else ``<store>/tiers/mapped`` (0700)."""
    pmem = os.environ.get(tiers.PMEM_ENV)
    base = Path(pmem) / f"store-{Path(store_directory).name}" if pmem else Path(store_directory) / "tiers" / "mapped"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


def _arrays(obj: Any) -> dict[str, np.ndarray]:
    state = getattr(obj, "__dict__", None) or {}
    return {k: v for k, v in state.items() if isinstance(v, np.ndarray) and v.size and not v.dtype.hasobject}


def _mapping(handle: tiers.TierArray) -> np.ndarray:
    """The mapping of a mapped or cached handle's file (what the object's attribute is at rest)."""
    return handle.mapped.array if isinstance(handle, tiers.CachedArray) else handle.array


def _stored(handle: tiers.TierArray, value: np.ndarray) -> bool:
    """Whether ``value`` is the handle's own mapping (else it is a new array, not yet in the file)."""
    view = (handle.mapped if isinstance(handle, tiers.CachedArray) else handle)._view  # type: ignore[union-attr]
    return view is not None and value is view


def place_state(
    obj: Any, placement: Placement, tier: str, directory: Path, stem: str, cache: tiers.DramCache
) -> Placement:
    """Move ``obj``'s numpy attributes to ``tier`` (``dram``, ``mapped`` or ``cached``); the caller holds
    the object's exclusive lock. Returns the new placement; files the object no longer uses are freed.
    ``stem`` names the files: unique per object version *and* backend (two backends of one node
    holding replicas must never share a file: dropping one would delete the other's data)."""
    state = obj.__dict__
    new = Placement(tier)
    for handle in placement.arrays.values():  # cache copies are stale once the object changes tier
        tiers.forget_cached(handle.path)
    for attr, value in _arrays(obj).items():
        if tier == "dram":
            state[attr] = np.array(value, copy=True)  # promoted: a DRAM copy of the mapping
            continue
        name = f"{stem}-{attr}"
        old = placement.arrays.get(attr)
        if old is None or not _stored(old, value):  # not in a file yet (or rebound): a new version
            tiers.place(name, value, "mapped", directory=directory, replace=True)
        handle: tiers.TierArray = (
            tiers.MappedArray(name, directory, writable=True)
            if tier == "mapped"
            else tiers.CachedArray(name, directory, cache)
        )
        new.arrays[attr] = handle
        mapping = _mapping(handle)
        mapping.flags.writeable = False
        state[attr] = mapping
    if tier == "dram":
        release(placement)
    return new


def release(placement: Placement) -> None:
    """Free the tier files of ``placement`` (views still held stay valid until dropped)."""
    for handle in placement.arrays.values():
        tiers.forget_cached(handle.path)
        tiers.free(handle.name, "mapped", directory=handle.directory)
    placement.arrays.clear()


@contextmanager
def in_use(obj: Any, placement: Placement, writes: bool) -> Iterator[None]:
    """For one call: a ``cached`` object's attributes are its DRAM cache copies (hits or misses),
    then its mappings again; a ``mapped`` object's mappings are used as they are. After a writing
    call the changes are made durable (``msync``, or written through from the cache); an attribute
    the method bound to a *new* array (``self.data = self.data * 2``) is written as a new version of
    its file, so the change is kept whatever the tier."""
    given: dict[str, np.ndarray] = {}
    if placement.tier in ("mapped", "cached"):
        state = obj.__dict__
        for attr, handle in placement.arrays.items():
            array = handle.array if placement.tier == "cached" else state[attr]
            if placement.tier == "cached":
                array.flags.writeable = writes
                state[attr] = array
            given[attr] = array
    try:
        yield
    finally:
        if placement.tier in ("mapped", "cached"):
            _after_call(obj, placement, writes, given)


def _after_call(obj: Any, placement: Placement, writes: bool, given: dict[str, np.ndarray]) -> None:
    state = obj.__dict__
    for attr, handle in placement.arrays.items():
        current = state.get(attr)
        if writes and isinstance(current, np.ndarray) and current is not given[attr]:
            # rebound to a new array: its bytes become the file's new version (a new file: remap)
            tiers.place(handle.name, current, "mapped", directory=handle.directory, replace=True)
            (handle.mapped if isinstance(handle, tiers.CachedArray) else handle).unmap()  # type: ignore[union-attr]
        elif writes:
            handle.sync()  # msync a mapping; write a cached copy through (then out of the cache)
        mapping = _mapping(handle)
        mapping.flags.writeable = False
        state[attr] = mapping


def cool(obj: Any, placement: Placement) -> list[tiers.Eviction]:
    """Make the object's files cold: out of the DRAM cache and the page cache. Each attribute is
    swapped for a fresh mapping of its file (mapping reads nothing: no page comes back until a call
    touches it) *before* the pages are evicted, so the old mapping goes with its last view and the
    attribute always holds its array: a copy of the object that Dask serialises meanwhile, without
    the object's lock, sees the old mapping or the new one, never a missing array. A mapping still
    held elsewhere (such a transfer) keeps its pages: the eviction then says so."""
    evictions = []
    for attr, handle in placement.arrays.items():
        if isinstance(handle, tiers.CachedArray):
            handle.cache.drop(handle)
            mapped = handle.mapped
        else:
            mapped = handle  # type: ignore[assignment]
        mapped.sync()
        mapped.unmap()
        mapping = mapped.array  # mapped again (if this fails, the attribute keeps the mapping it had)
        mapping.flags.writeable = False
        obj.__dict__[attr] = mapping
        evictions.append(tiers.evict_pages(handle.path))  # type: ignore[arg-type]
    return evictions
