"""A backend's object table: the objects one worker holds, their locks, and how they come and go.

The table maps ``(id, version)`` to an :class:`Entry`: the live Python object, its size, its
read/write lock (:class:`~workbench.runtime.store.model.ReadWriteLock`), its disk copy and its tier.
Objects arrive (a put, a registration, a read back from disk), are found for a call (:meth:`ObjectTable.obtain`:
here, read back from disk, or a copy from their holder), are copied out under their shared lock,
and leave (dropped, moved, evicted to the disk tier when the table holds more than ``memory_limit``
bytes). What the table asks of the catalogue and of other backends goes through its
:class:`~workbench.runtime.store.link.Link`; where its arrays are placed is
:mod:`~workbench.runtime.store.placing`'s job, told of each arrival (:attr:`ObjectTable.arrived`).
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cloudpickle

import workbench.runtime.store.backend_ops as backend_ops
import workbench.runtime.store.tiering as tiering
from workbench.runtime.dask_seam import serialized
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.disk import disk_path, read_object, write_object
from workbench.runtime.store.errors import NotHere, StoreError, check_writable
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef, ReadWriteLock, catalogue_entry, set_arrays_writeable, state_nbytes
from workbench.runtime.store.protocol import found

LOCK_WAIT_SECONDS = 60.0  # longest wait for an object's lock, or for another call reading it from disk
Key = tuple[str, int]  # an object version: (id, version)


class Trace(Protocol):
    """Records a store event (transfer, load, evict ...) in the worker's trace events."""

    def __call__(self, action: str, start: float, nbytes: int, task: str, source: str = "") -> None:
        """Record ``action`` from ``start`` to now, of ``nbytes``, named ``task``, from ``source``."""
        ...


@dataclass
class Entry:
    """An object in a backend's table: the object, its size, its lock, its disk copy."""

    obj: Any
    nbytes: int
    lock: ReadWriteLock = field(default_factory=ReadWriteLock)
    last_used: float = field(default_factory=time.monotonic)
    disk_path: str | None = None
    copy: bool = False  # a copy fetched from another backend for one read-only call, not in the table
    placement: tiering.Placement = field(default_factory=tiering.Placement)  # its tier, its tier files
    reads: int = 0  # calls that read it here (what dynamic placement weighs)
    writes: int = 0  # calls that changed it here
    managed: bool = False  # placed by the backend's dynamic policy (``place("dynamic")``)
    replicated: bool = False  # a replica of it was pushed to another backend: a write asks the catalogue first


@dataclass(frozen=True)
class SendLocked:
    """An operation's reply that is an object held under its shared lock (``entry``'s): the handler
    sends it, then releases the lock (:meth:`StoreBackend.send_locked
    <workbench.runtime.store.backend.StoreBackend.send_locked>`)."""

    obj: Any
    entry: Entry


def release_unsent(done: Future[Any]) -> None:
    """A finished operation's :class:`SendLocked` result that will not be sent: its lock released."""
    if not done.cancelled() and done.exception() is None and isinstance(done.result(), SendLocked):
        done.result().entry.lock.release(False, copy=True)


def dram_bytes(entry: Entry) -> int:
    """Bytes of the object held in the worker's memory (its tier files not counted)."""
    return max(0, state_nbytes(entry.obj) - entry.placement.tier_bytes)


class _EvictedMeanwhile(NotHere):
    """The catalogue names this backend, but the object left its table again (evicted to disk by
    another call) before a writing method could take it: read back and tried again."""


class ObjectTable(Mapping[Key, Entry]):
    """The objects of one backend (a read-only mapping of its entries; hold :attr:`lock` to iterate).

    directory: the store's directory (its ``objects`` directory holds the disk copies).
    link: how the table reaches the catalogue and the other backends.
    address: the backend's address, as the catalogue names it.
    trace: records the table's events (transfers, disk reads and writes).
    memory_limit: bytes of objects kept in memory before the least recently used go to disk (None: no limit).
    """

    def __init__(self, directory: str, link: Link, address: str, trace: Trace, memory_limit: int | None = None):
        self.directory, self.link, self.address, self.trace = directory, link, address, trace
        self.memory_limit = memory_limit
        self.entries: dict[Key, Entry] = {}
        self.lock = threading.RLock()
        self.load_locks: dict[Key, threading.Lock] = {}  # one reader of a disk copy at a time
        # An upper bound of the table's bytes, kept as objects arrive, so that taking an object in
        # does not count (and sort) the whole table: that happens only when the bound passes the limit.
        self.used_bound = 0
        # Told of each object that arrives, before room is made: the backend places it on its default tier.
        self.arrived: Callable[[str, int], None] = lambda oid, version: None

    # -- the mapping (hold self.lock while iterating) ------------------------------------------------
    def __getitem__(self, key: Key) -> Entry:
        return self.entries[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> list[Entry]:
        """Forget every object; the entries that were held (their tier files are the caller's to release)."""
        with self.lock:
            entries = list(self.entries.values())
            self.entries.clear()
        return entries

    def rows(self) -> list[dict[str, Any]]:
        """What the table holds: one row per object version."""
        with self.lock:
            return [
                {
                    "oid": oid,
                    "version": version,
                    "class": type(e.obj).__name__,
                    "nbytes": e.nbytes,
                    "on_disk": e.disk_path is not None,
                    "tier": e.placement.tier,
                }
                for (oid, version), e in self.entries.items()
            ]

    # -- arrivals --------------------------------------------------------------------------------
    def add(self, oid: str, version: int, obj: Any, disk: str | None = None, announce: bool = False) -> int:
        """Take ``obj`` into the table (read-only at rest), then make room; returns its bytes.

        ``announce``: also tell the catalogue this backend holds it, while its exclusive lock is
        held. An eviction (which takes that lock) then always comes after, so the catalogue never
        names a backend that has evicted the object already. An object deleted meanwhile is not kept.
        """
        set_arrays_writeable(obj, False)  # read-only at rest: only writing methods may change it
        key = (oid, int(version))
        entry = Entry(obj, state_nbytes(obj), disk_path=disk)
        entry.lock.acquire(True)  # a new lock: free at once
        try:
            with self.lock:
                self.entries[key] = entry
                self.used_bound += entry.nbytes
            if announce:
                try:
                    self.link.catalogue(StoreCatalogue.op_add_location, oid=oid, version=key[1], worker=self.address)
                except BaseException:
                    self.remove(key, entry)
                    raise
        finally:
            entry.lock.release(True)
        self.arrived(oid, key[1])
        self.make_room(keep=key)
        return entry.nbytes

    def add_many(self, keys: list[Key], objs: list[Any], nbytes: list[int] | None = None) -> int:
        """Take many objects into the table, then make room once; returns their bytes (``nbytes``:
        their sizes, when the sender measured them already)."""
        total = 0
        sizes = nbytes if nbytes is not None and len(nbytes) == len(objs) else [state_nbytes(o) for o in objs]
        with self.lock:
            for (oid, version), obj, size in zip(keys, objs, sizes):
                set_arrays_writeable(obj, False)
                entry = Entry(obj, int(size))
                self.entries[(oid, int(version))] = entry
                total += entry.nbytes
            self.used_bound += total
        for oid, version in keys:
            self.arrived(oid, int(version))
        self.make_room()
        return total

    def put_many(self, keys: list[list[Any]], data: bytes, buffers: list[Any], nbytes: list[int] | None = None) -> int:
        """Take a batch of new objects (``keys``: ``[oid, version]`` each) pickled together by the
        client (``data``), their arrays' buffers out of band; returns their bytes."""
        objs = pickle.loads(data, buffers=buffers)
        if not isinstance(objs, list) or len(keys) != len(objs):
            raise ValueError(f"put_many got {len(keys)} keys for a batch of {type(objs).__name__}")
        return self.add_many([(str(k[0]), int(k[1])) for k in keys], objs, nbytes)

    async def register_and_add_many_here(self, objs: list[Any], oids: list[str]) -> int:
        """:meth:`register_and_add_many` from the worker's event loop (``Client.run``): the catalogue
        is asked without blocking the loop, the objects are taken in on a thread (taking them may
        evict others to disk, which asks the catalogue too)."""
        groups, sizes = self._groups(objs, oids)
        await self.link.catalogue_async(StoreCatalogue.op_register_groups, groups=groups)
        return await asyncio.to_thread(self.add_many, [(oid, 0) for oid in oids], objs, sizes)

    def register_and_add_many(self, objs: list[Any], oids: list[str]) -> int:
        """Record many objects in the catalogue as held here (one message, one transaction), then
        take them into the table (version 0)."""
        groups, sizes = self._groups(objs, oids)
        self.link.catalogue(StoreCatalogue.op_register_groups, groups=groups)
        return self.add_many([(oid, 0) for oid in oids], objs, sizes)

    def _groups(self, objs: list[Any], oids: list[str]) -> tuple[list[dict[str, Any]], list[int]]:
        """Catalogue entries of objects held here, by columns (per class: what they share once)."""
        sizes = [state_nbytes(obj) for obj in objs]
        groups: dict[type, dict[str, Any]] = {}
        for obj, oid, size in zip(objs, oids, sizes):
            cls = type(obj)
            if cls not in groups:
                common = catalogue_entry(cls, "", 0, self.address, 0, None)
                groups[cls] = {
                    "common": {k: common[k] for k in ("version", "class_label", "kind", "methods", "meta", "worker")},
                    "entries": [],
                }
            groups[cls]["entries"].append({"oid": oid, "nbytes": size})
        return list(groups.values()), sizes

    def register_and_add(self, obj: Any, oid: str, alias: str | None) -> int:
        """Record ``obj`` in the catalogue as held here, then take it into the table (version 0)."""
        self.link.catalogue(
            StoreCatalogue.op_register,
            entries=[catalogue_entry(type(obj), oid, 0, self.address, state_nbytes(obj), alias)],
        )
        return self.add(oid, 0, obj)

    def load(self, oid: str, version: int, disk_path: str) -> int:
        """Read the object from the disk tier into the table (once, however many ask); its bytes."""
        key = (oid, int(version))
        with self.lock:
            load_lock = self.load_locks.setdefault(key, threading.Lock())
        if not load_lock.acquire(timeout=LOCK_WAIT_SECONDS):
            raise TimeoutError(
                f"object {oid[:8]} v{version}: another call read it from disk for over {LOCK_WAIT_SECONDS} s"
            )
        try:
            held = self.local(ObjectRef(oid, version))
            if held is not None and self._announce_held(key, held):
                return 0
            start = time.time()
            obj = read_object(self.directory, disk_path)
            nbytes = self.add(oid, key[1], obj, disk=str(disk_path), announce=True)
            self.trace("tier-read", start, nbytes, "store-load")
            return nbytes
        finally:  # callers already waiting hold the lock object, take it in turn and find the object loaded
            with self.lock:
                if self.load_locks.get(key) is load_lock:
                    del self.load_locks[key]
            load_lock.release()

    def _announce_held(self, key: Key, entry: Entry) -> bool:
        """Tell the catalogue this backend holds ``key`` (a load found it here already: the catalogue
        had dropped this location, or another load beat this one to it). Under the entry's shared lock,
        so an eviction, which takes it exclusively, comes after; False when it was evicted meanwhile."""
        if not entry.lock.acquire(False, timeout=LOCK_WAIT_SECONDS):
            raise TimeoutError(f"object {key[0][:8]} v{key[1]}: a writing call held it for over {LOCK_WAIT_SECONDS} s")
        try:
            with self.lock:
                if self.entries.get(key) is not entry:
                    return False
            self.link.catalogue(StoreCatalogue.op_add_location, oid=key[0], version=key[1], worker=self.address)
            return True
        finally:
            entry.lock.release(False)

    # -- finding objects -------------------------------------------------------------------------
    def local(self, ref: ObjectRef) -> Entry | None:
        """The table's entry of exactly this version, or None (marks it used)."""
        with self.lock:
            entry = self.entries.get((ref.oid, ref.version))  # type: ignore[arg-type]
        if entry is not None:
            entry.last_used = time.monotonic()
        return entry

    def here(self, oid: str, version: int) -> Entry:
        """This backend's entry for the object, or ``NotHere``."""
        entry = self.local(ObjectRef(oid, version))
        if entry is None:
            raise NotHere(f"object {oid[:8]} v{version} is not on backend {self.address}")
        return entry

    def held(self, ref: ObjectRef) -> tuple[ObjectRef, Entry]:
        """``ref`` and this table's entry of exactly that version, or ``NotHere`` (a ``find`` of
        :meth:`locked` for operations on a version held here)."""
        return ref, self.here(ref.oid, ref.version)  # type: ignore[arg-type]

    def obtain(self, ref: ObjectRef, task: str, for_write: bool, once: bool = False) -> tuple[ObjectRef, Entry]:
        """The entry for ``ref`` here: local, reloaded from disk, or (for reads) a copy from its holder.

        The holder the catalogue named can evict the object to disk (its memory limit) or drop it
        between the catalogue's answer and the copy: the catalogue is then asked again, by the link's
        one rule (:meth:`~workbench.runtime.store.link.Link.retrying`). ``once``: one try, its
        ``NotHere`` or ``BackendUnreachable`` raised (an active call: its caller's one loop tries again).
        """
        if once:
            return self._obtain_once(ref, task, for_write)
        if for_write:  # a writing method runs only on a holder: the proxy asks again, elsewhere
            return self._obtain_for_write(ref, task)
        return self.link.retrying(lambda again: self._obtain_once(ref, task, for_write))

    def _obtain_for_write(self, ref: ObjectRef, task: str) -> tuple[ObjectRef, Entry]:
        """One :meth:`obtain` for a writing method. Tried again (the link's rule) while the catalogue
        names this backend as a holder, since another call may evict the object to disk between its
        reload here and the look; held elsewhere, ``NotHere`` at once (the proxy calls there)."""

        def attempt(again: bool) -> tuple[tuple[ObjectRef, Entry] | None, NotHere | None]:
            try:
                return self._obtain_once(ref, task, True), None
            except _EvictedMeanwhile:
                raise
            except NotHere as error:
                return None, error

        found, elsewhere = self.link.retrying(attempt)
        if elsewhere is not None:
            raise elsewhere
        assert found is not None
        return found

    def _obtain_once(self, ref: ObjectRef, task: str, for_write: bool) -> tuple[ObjectRef, Entry]:
        """One try of :meth:`obtain`."""
        entry = self.local(ref)
        if entry is not None:
            return ref, entry
        # Its version now and its holders; an object only on disk is read back first, on the one
        # backend the catalogue chooses (this one, or another: then used there or copied from there).
        (resolved,) = self.link.resolve([ref])
        ref, workers = resolved.ref, resolved.workers
        entry = self.local(ref)
        if entry is not None:
            return ref, entry
        if for_write:
            if self.address in workers:
                raise _EvictedMeanwhile(f"{ref.label()} left this backend {self.address} again before a write")
            raise NotHere(
                f"{ref.label()} is held by {workers}, not by this backend {self.address}: a writing "
                "method runs only where the object is. Call it again (the proxy asks the catalogue for the new "
                "location)"
            )
        source = workers[0]
        start = time.time()
        obj = self.link.backend(source, backend_ops.op_get, oid=ref.oid, version=ref.version)
        entry = Entry(obj, state_nbytes(obj), copy=True)
        self.trace("transfer", start, entry.nbytes, f"store-get {task}", source=source)
        return ref, entry  # a copy for this call only: the object stays where it lives

    def fetch_copy(self, ref: ObjectRef, task: str) -> Any:
        """A copy of the object through the store's API, even from this backend (the non-active way)."""
        return self.link.retrying(lambda again: self._fetch_copy_once(ref, task))

    def _fetch_copy_once(self, ref: ObjectRef, task: str) -> Any:
        """One try of :meth:`fetch_copy`: from the first holder the catalogue names (after reading the
        object back from disk where no backend holds it)."""
        (resolved,) = self.link.resolve([ref])
        source = resolved.workers[0]
        start = time.time()
        obj = self.link.backend(source, backend_ops.op_get, oid=ref.oid, version=resolved.ref.version)
        self.trace("transfer", start, state_nbytes(obj), f"store-get {task}", source=source)
        return obj

    # -- locking -----------------------------------------------------------------------------------
    def locked(
        self,
        ref: ObjectRef,
        task: str,
        writes: bool,
        find: Callable[[ObjectRef], tuple[ObjectRef, Entry]] | None = None,
        copy: bool = False,
        deadline: float | None = None,
    ) -> tuple[ObjectRef, Entry]:
        """The entry for ``ref`` under its lock (exclusive if ``writes``, else shared); release it
        with ``entry.lock.release(writes)`` (``copy``: shared for a copy of the object,
        :class:`~workbench.runtime.store.model.ReadWriteLock`; released with ``copy=True``).

        ``find`` looks the entry up (default :meth:`obtain`: local, reloaded from disk, or a copy for
        reads). Once locked, the entry is checked to be still the table's: one evicted (or replaced)
        between finding and locking it is looked up again, since a write to it would be lost.

        ``deadline`` (``time.monotonic()``): an active call's, which bounds the wait for the lock; the
        entry is then found once (``obtain``'s ``once``) and one that moved meanwhile is ``NotHere``:
        the caller's one loop asks again. Without it: ``LOCK_WAIT_SECONDS``, and found again here.
        """
        once = deadline is not None
        find = find or (lambda r: self.obtain(r, task, for_write=writes, once=once))
        waited = LOCK_WAIT_SECONDS if deadline is None else None
        deadline = time.monotonic() + LOCK_WAIT_SECONDS if deadline is None else deadline
        while True:
            ref, entry = find(ref)
            if not entry.lock.acquire(writes, timeout=max(0.0, deadline - time.monotonic()), copy=copy):
                raise TimeoutError(
                    f"{ref.label()}: waited {f'{waited} s' if waited else 'past the budget of the call'} for its lock "
                    f"to run {task!r} (it did not run)"
                )
            with self.lock:
                current = self.entries.get((ref.oid, ref.version))  # type: ignore[arg-type]
            if current is entry or entry.copy:
                return ref, entry
            entry.lock.release(writes, copy=copy)
            if once:
                raise NotHere(f"{ref.label()} left backend {self.address} while {task!r} waited for its lock")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{ref.label()}: it kept moving to disk for {LOCK_WAIT_SECONDS} s while {task!r} waited"
                )

    def check_single_copy(self, ref: ObjectRef, entry: Entry, task: str) -> None:
        """Before a write to ``entry``, its exclusive lock held: refused (``StoreError``) if this backend
        pushed a replica of it that the catalogue still names. The caller checked for replicas before
        sending the call, but a replica made while the call waited for the lock would differ from the
        object once written. Costs a catalogue message only after a replica was made here."""
        if not entry.replicated or entry.copy:
            return
        record = found(self.link.record(ObjectRef(ref.oid, ref.version, ref.alias, ref.class_label, pinned=True)), ref)
        check_writable(ref, record.workers, task, True)
        entry.replicated = False  # its replicas were dropped: writes go on without asking

    def wrote(self, ref: ObjectRef, entry: Entry) -> None:
        """After a write to ``entry``'s object, its exclusive lock still held: its arrays read-only
        again, its size updated, its disk copy (now stale) deleted."""
        set_arrays_writeable(entry.obj, False)
        entry.writes += 1
        grown = dram_bytes(entry) - entry.nbytes
        entry.nbytes += grown
        with self.lock:
            self.used_bound += max(0, grown)
        if entry.disk_path:  # the disk copy is now stale
            Path(entry.disk_path).unlink(missing_ok=True)
            entry.disk_path = None
            self.link.catalogue(StoreCatalogue.op_set_disk, oid=ref.oid, version=ref.version, disk_path=None)

    # -- copies out ------------------------------------------------------------------------------
    def copy_out(self, oid: str, version: int) -> SendLocked:
        """The object, for another backend or a client to copy: under its shared lock, which the
        sender releases once the reply is sent. So the copy is all before or all after any write,
        and other readers and copies are not held up."""
        _, entry = self.locked(ObjectRef(oid, int(version)), "get", False, find=self.held, copy=True)
        try:
            return SendLocked(self.leaving(entry, "store-get"), entry)
        except BaseException:
            entry.lock.release(False, copy=True)
            raise

    def leaving(self, entry: Entry, task: str) -> Any:
        """``entry``'s object as it may be pickled (the caller holds its lock): itself, or for an object
        on a ``counts_transfers`` tier (``gpu``) a copy with host arrays, the bytes copied off the device a
        transfer event."""
        tier = entry.placement.tier
        if not entry.placement.kind.counts_transfers:
            return entry.obj
        start = time.time()
        obj = tiering.on_host(entry.obj, entry.placement)
        self.trace("transfer", start, entry.placement.device_bytes, f"{tier}-to-host {task}", source=tier)
        return obj

    def push(self, oid: str, version: int, target: str, move: bool = False) -> int:
        """Send a copy of the object to backend ``target``, which records itself in the catalogue as a
        holder: a replica, or with ``move`` the object itself (dropped here once the copy is there).

        Under the object's shared lock until ``target`` has the copy (the send waits for its answer,
        so Dask has serialised the object by then: no copy of the arrays is needed). A writing method
        that waited meanwhile then finds a move's object gone (and is sent to the new holder) or a
        replica's object replicated (and is refused), instead of changing one copy only.
        """
        ref, entry = self.locked(ObjectRef(oid, int(version)), "push", False, find=self.held, copy=True)
        try:
            start = time.time()
            self.link.backend(
                target,
                backend_ops.op_put,
                oid=oid,
                version=version,
                obj=serialized(self.leaving(entry, "store-push")),
                announce=True,
            )
            self.trace("transfer", start, entry.nbytes, "store-push", source=self.address)
            if move:  # the catalogue first, the table after, as an eviction does
                self.link.catalogue(
                    StoreCatalogue.op_remove_location, oid=oid, version=int(version), worker=self.address
                )
                self.remove((oid, int(version)), entry)
            else:
                entry.replicated = True
            return entry.nbytes
        finally:
            entry.lock.release(False, copy=True)

    def copy_version(self, oid: str, version: int, new_version: int) -> int:
        """Copy a version into a new one here (``new_version``), pickled under the object's shared lock."""
        ref, entry = self.locked(ObjectRef(oid, int(version)), "new_version", False, find=self.held, copy=True)
        try:
            data = cloudpickle.dumps(self.leaving(entry, "new_version"), protocol=pickle.HIGHEST_PROTOCOL)  # a copy
        finally:
            entry.lock.release(False, copy=True)
        return self.add(oid, new_version, pickle.loads(data))

    # -- departures ------------------------------------------------------------------------------
    def remove(self, key: Key, entry: Entry) -> bool:
        """Take ``entry`` out of the table if it is still ``key``'s (and free its tier files); whether it was."""
        with self.lock:
            if self.entries.get(key) is not entry:
                return False
            del self.entries[key]
        tiering.release(entry.placement)
        return True

    def drop(self, oid: str, version: int) -> bool:
        """Forget a version here (and free its tier files); whether it was held."""
        with self.lock:
            entry = self.entries.pop((oid, int(version)), None)
        if entry is not None:
            tiering.release(entry.placement)
        return entry is not None

    def drop_many(self, keys: list[list[Any]]) -> int:
        """Forget a batch of objects here (a batch that failed elsewhere); how many were held."""
        return sum(bool(self.drop(str(k[0]), int(k[1]))) for k in keys)

    def flush(self, oid: str, version: int) -> str:
        """Write the object to the disk tier (it stays in memory too); returns the file."""
        entry = self.here(oid, version)
        if not entry.lock.acquire(False, timeout=LOCK_WAIT_SECONDS):  # no writing method runs meanwhile
            raise TimeoutError(f"object {oid[:8]}: a writing method held it for {LOCK_WAIT_SECONDS} s")
        try:
            return self.write_to_disk(oid, int(version), entry)
        finally:
            entry.lock.release(False)

    def write_to_disk(self, oid: str, version: int, entry: Entry) -> str:
        """The disk copy of ``entry`` (written unless it has an up-to-date one); the caller holds its lock."""
        if entry.disk_path is None or not Path(entry.disk_path).exists():
            path = disk_path(self.directory, oid, version)
            start = time.time()
            written = write_object(path, self.leaving(entry, "store-flush"))
            self.trace("tier-write", start, written, "store-flush")
            if not self.link.catalogue(StoreCatalogue.op_set_disk, oid=oid, version=version, disk_path=str(path)):
                path.unlink(missing_ok=True)  # deleted meanwhile: no file outlives its object
                raise StoreError(f"object {oid[:8]} v{version} was deleted while it was written to disk")
            entry.disk_path = str(path)
        return entry.disk_path

    def evict(self, oid: str, version: int, wait: float = LOCK_WAIT_SECONDS) -> int:
        """Move the object to the disk tier (written first if it has no disk copy); returns bytes freed.

        Under the object's exclusive lock, so no call is half-way through it: a writing method
        either finished before (and the copy has its change) or starts after, finds the entry
        gone and reloads it. ``wait``: how long to wait for calls in progress (0: skip a busy object).
        """
        key = (oid, int(version))
        entry = self.local(ObjectRef(oid, version))
        if entry is None or not entry.lock.acquire(True, timeout=wait):
            return 0
        try:
            with self.lock:
                if self.entries.get(key) is not entry:  # evicted or dropped meanwhile
                    return 0
            try:
                self.write_to_disk(oid, key[1], entry)
            except StoreError:  # deleted meanwhile: nothing to keep, on disk or here
                self.drop(oid, key[1])
                return entry.nbytes
            # The catalogue first, the table after: while the catalogue names this backend, the
            # object is in its table (a call arriving meanwhile waits for the lock, then reloads).
            self.link.catalogue(StoreCatalogue.op_remove_location, oid=oid, version=key[1], worker=self.address)
            self.remove(key, entry)  # the disk copy has the arrays now
            return entry.nbytes
        finally:
            entry.lock.release(True)

    def make_room(self, keep: Key | None = None) -> None:
        """Evict least recently used objects to disk until the table fits ``memory_limit`` (None: no
        limit; 0: nothing stays). Objects whose arrays are in tier files hold little DRAM: they go last."""
        if self.memory_limit is None:
            return
        with self.lock:
            if self.used_bound <= self.memory_limit:
                return
            used = self.used_bound = sum(e.nbytes for e in self.entries.values())
            if used <= self.memory_limit:
                return
            victims = sorted(
                (not e.placement.kind.counts_against_dram_budget, e.last_used, k)
                for k, e in self.entries.items()
                if k != keep
            )
        for _, _, key in victims:
            if used <= self.memory_limit:
                break
            used -= self.evict(*key, wait=0.0)  # a busy object stays: evict an idle one instead
        self.recount()

    def recount(self) -> None:
        """Count the table's bytes afresh (the bound :meth:`make_room` starts from)."""
        with self.lock:
            self.used_bound = sum(e.nbytes for e in self.entries.values())

    def set_memory_limit(self, nbytes: int | None) -> int | None:
        """Set the bytes of objects kept in DRAM before evicting to disk (None: no limit), evicting
        now what is over it; the old limit."""
        if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
            raise ValueError(f"a memory limit is a number of bytes >= 0 (or None), got {nbytes!r}")
        old, self.memory_limit = self.memory_limit, nbytes
        self.recount()
        self.make_room()
        return old
