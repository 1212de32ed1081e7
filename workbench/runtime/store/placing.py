"""Where a backend's objects keep their arrays: tier placement, on request and by the dynamic policy.

An object's numpy attributes live on a tier (:mod:`~workbench.runtime.store.tiering`): ``dram``,
``mapped`` (files mapped in place), ``cached`` (files through the backend's DRAM cache) or ``disk``
(evicted to the disk tier, staged back when used). :class:`TierPlacement` moves the objects of one
:class:`~workbench.runtime.store.table.ObjectTable` between tiers, one at a time or a batch all or
nothing, and runs :class:`~workbench.memory.placement.DynamicPolicy` over those placed ``dynamic``.
Each move is a tier event in the trace that names its reason.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from typing import Any

import workbench.runtime.store.tiering as tiering
from workbench.memory import tiers
from workbench.memory.placement import DynamicPolicy, Usage
from workbench.runtime.store.errors import NotHere
from workbench.runtime.store.model import ObjectRef
from workbench.runtime.store.table import LOCK_WAIT_SECONDS, Entry, ObjectTable, Trace, dram_bytes


class TierPlacement:
    """The tiers of one backend's objects.

    table: the backend's objects.
    directory: the store's directory (tier files go to its tier directory).
    default_tier: where each arriving object is placed (``dram``: it stays as it came).
    cache: the backend's DRAM cache, for objects on ``cached``.
    dynamic: the policy of objects placed ``dynamic``.
    trace: records the tier events.
    """

    def __init__(
        self,
        table: ObjectTable,
        directory: str,
        default_tier: str,
        cache: tiers.DramCache,
        dynamic: DynamicPolicy,
        trace: Trace,
    ):
        self.table, self.directory, self.trace = table, directory, trace
        self.default_tier = tiering.check_tier(default_tier)
        self.cache, self.dynamic = cache, dynamic
        self.policy_lock = threading.Lock()  # one dynamic placement pass at a time
        self.tag = uuid.uuid4().hex[:8]  # in tier file names: backends of one node never share a file

    def arrived(self, oid: str, version: int) -> None:
        """An object arrived in the table: placed on the default tier (nothing to do for ``dram``, where a
        new object's arrays are)."""
        if tiering.placed_when_new(self.default_tier):
            self.place(oid, version, self.default_tier, reason="the store's default tier")

    def place(self, oid: str, version: int, tier: str, reason: str = "") -> dict[str, Any]:
        """Put the object's numpy attributes on ``tier`` (``disk``: evict it to the disk tier, staged back
        when used); a tier event in the trace says what moved and why. Returns the placement."""
        tier = tiering.check_tier(tier)
        version = int(version)
        if tier == tiering.DYNAMIC:  # under the dynamic policy from now on: cold (mapped) until its use says otherwise
            entry = self.table.here(oid, version)
            entry.managed = True
            if entry.placement.tier in (self.dynamic.hot_tier, self.dynamic.cold_tier):
                self.trace("place", time.time(), 0, f"place {entry.placement.tier}->dynamic: {reason or 'asked'}")
                return {"tier": entry.placement.tier, "from": entry.placement.tier, "dram_bytes": entry.nbytes}
            tier = self.dynamic.cold_tier
        if tiering.evicts(tier):
            return self._to_disk(oid, version, tier, reason)
        placed = self._in_memory(oid, version, tier, reason)
        if tiers.lookup(tier).counts_against_dram_budget:
            self.table.make_room(keep=(oid, version))
        return placed

    def _to_disk(self, oid: str, version: int, tier: str, reason: str) -> dict[str, Any]:
        """:meth:`place` on a ``staged`` tier (``disk``): evicted to the disk tier, its copy out of the page
        cache (staged back from the device)."""
        entry = self.table.here(oid, version)
        old = entry.placement.tier
        start = time.time()
        freed = self.table.evict(oid, version)
        disk_copy = entry.disk_path
        if disk_copy:
            try:
                tiers.evict_pages(disk_copy)  # staged back from the device, not the page cache
            except FileNotFoundError:
                pass  # a writing call made the copy stale and deleted it meanwhile: nothing to cool
        self.trace("demote", start, freed, f"place {old}->{tier}: {reason or 'asked'}", source=old)
        return {"tier": tier, "from": old, "dram_bytes": 0, "seconds": time.time() - start}

    def _in_memory(self, oid: str, version: int, tier: str, reason: str) -> dict[str, Any]:
        """:meth:`place` on a tier of the worker's node (dram, mapped, cached), under the object's exclusive lock."""
        ref, entry = self.table.locked(ObjectRef(oid, version), "place", True, find=self.table.held)
        try:
            old = entry.placement.tier
            start = time.time()
            entry.placement = tiering.place_state(
                entry.obj,
                entry.placement,
                tier,
                tiering.tier_directory(self.directory),
                f"{oid}-v{version}-{self.tag}",
                self.cache,
            )
            before, entry.nbytes = entry.nbytes, dram_bytes(entry)
            with self.table.lock:
                self.table.used_bound += max(0, entry.nbytes - before)
            counted, was_counted = (tiers.lookup(t).counts_against_dram_budget for t in (tier, old))
            action = "promote" if counted and not was_counted else "demote" if was_counted else "place"
            moved = entry.placement.tier_bytes or entry.placement.device_bytes or entry.nbytes
            self.trace(action, start, moved, f"place {old}->{tier}: {reason or 'asked'}", source=old)
            return {"tier": tier, "from": old, "dram_bytes": entry.nbytes, "seconds": time.time() - start}
        finally:
            entry.lock.release(True)

    def cool(self, oid: str, version: int) -> list[dict[str, Any]]:
        """Make the object's tier files cold (out of the DRAM cache and the page cache); what each
        eviction achieved (``evicted`` False with a reason where the medium cannot be cold)."""
        ref, entry = self.table.locked(ObjectRef(oid, int(version)), "cool", True, find=self.table.held)
        try:
            start = time.time()
            evictions = tiering.cool(entry.obj, entry.placement)
            nbytes = sum(e.resident_before - e.resident_after for e in evictions)
            self.trace(
                "evict", start, nbytes, f"cool {entry.placement.tier}: page cache dropped", source=entry.placement.tier
            )
            return [e.__dict__ for e in evictions]
        finally:
            entry.lock.release(True)

    def place_many(self, keys: list[list[Any]], tier: str, reason: str = "") -> dict[str, list[list[Any]]]:
        """:meth:`place` for a batch of objects held here: ``placed`` (``[oid, version, tier it was on]``
        each) and ``missing`` (``[oid, version]`` of those no longer here: evicted to disk or moved
        meanwhile; the caller brings them back and asks again). All or nothing here: if one cannot
        be placed, those placed before it go back to their tiers and the error is raised."""
        placed: list[list[Any]] = []
        missing: list[list[Any]] = []
        try:
            for oid, version in keys:
                try:
                    done = self.place(str(oid), int(version), tier, reason)
                except NotHere:
                    missing.append([str(oid), int(version)])
                    continue
                placed.append([str(oid), int(version), done["from"]])
        except BaseException:
            self.unplace(placed, tier)
            raise
        return {"placed": placed, "missing": missing}

    def unplace(self, placed: list[list[Any]], tier: str) -> int:
        """Put each ``[oid, version, old tier]`` of :meth:`place_many` back on its old tier (best effort:
        an object gone since stays gone); how many went back."""
        back = 0
        for oid, version, old in reversed(placed):
            if old == tier or tier == tiering.DYNAMIC:
                continue
            try:
                self.place(str(oid), int(version), str(old), reason="a batch placement failed: put back")
                back += 1
            except Exception:  # noqa: S112 - gone meanwhile, or the old tier failed too: the caller's error says why
                continue
        return back

    def cool_many(self, keys: list[list[Any]]) -> list[dict[str, Any]]:
        """:meth:`cool` for a batch of objects held here; every eviction."""
        return [e for oid, version in keys for e in self.cool(str(oid), int(version))]

    def set_cache(self, nbytes: int) -> int:
        """Set the byte budget of the DRAM cache (entries over it go now); the old budget."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"a cache budget is a number of bytes >= 0, got {nbytes!r}")
        with self.cache.lock:
            old, self.cache.budget = self.cache.budget, nbytes
            while self.cache.used > nbytes and self.cache.evict_oldest():  # entries a call holds stay until it ends
                pass
        return old

    def rebalance(self, budget: int | None = None, hot_reads: int | None = None) -> list[dict[str, Any]]:
        """Set the dynamic policy's DRAM ``budget`` (and ``hot_reads``) when given, and place the
        dynamically managed objects here by it now; the moves made, each with its reason."""
        if budget is not None or hot_reads is not None:
            self.dynamic = dataclasses.replace(
                self.dynamic,
                budget=self.dynamic.budget if budget is None else int(budget),
                hot_reads=self.dynamic.hot_reads if hot_reads is None else int(hot_reads),
            )
        return self.place_dynamically(wait=True)

    def place_dynamically(self, wait: bool = False) -> list[dict[str, Any]]:
        """One pass of :class:`~workbench.memory.placement.DynamicPolicy` over the objects placed
        ``dynamic`` here: hot ones into DRAM within its budget, cold ones in place on ``mapped``. Each
        move is a tier event whose task names its reason. Runs after a call whose object changed
        class (cold to hot), so it costs nothing while use is steady; a pass already running is
        not waited for unless ``wait``."""
        if not self.policy_lock.acquire(timeout=LOCK_WAIT_SECONDS if wait else 0):
            return []
        try:
            with self.table.lock:
                entries = {f"{oid}-v{version}": (oid, version, e) for (oid, version), e in self.table.items()}
            usages = [
                Usage(key, int(e.placement.tier_bytes or e.nbytes), e.reads, e.writes, e.placement.tier)
                for key, (_, _, e) in entries.items()
                if e.managed and e.placement.tier in (self.dynamic.hot_tier, self.dynamic.cold_tier)
            ]
            moves = []
            for decision in self.dynamic.decide(usages):
                oid, version, _ = entries[decision.key]
                try:
                    self.place(oid, version, decision.tier, reason=decision.reason)
                except NotHere:  # dropped or evicted meanwhile: nothing to place
                    continue
                moves.append({"oid": oid, "version": version, "tier": decision.tier, "reason": decision.reason})
            return moves
        finally:
            self.policy_lock.release()

    def after_call(self, entry: Entry, was_hot: bool) -> None:
        """After a call on ``entry``'s object (its lock released): a pass of the dynamic policy if its
        use changed class (cold to hot), so its placement may change (the call that changed it pays)."""
        if entry.managed and not entry.copy and self.dynamic.hot(entry.reads, entry.writes) != was_hot:
            self.place_dynamically()
