"""A store backend: a worker plugin holding the objects that live on one Dask worker.

The object table maps ``(id, version)`` to the live Python object. Active methods run here, on a
thread, under the object's read/write lock (:class:`~workbench.runtime.store.model.ReadWriteLock`).
Two ways in:

* a Dask task (``run_active``), pinned to this worker, so calls compose with other tasks and their
  results are futures;
* the ``workbench_store`` handler, a direct message from a client or another backend (one round
  trip, no scheduler): plain-value calls, fetching a copy, taking a copy from another backend,
  the disk tier. Its operations are :class:`~workbench.runtime.store.protocol.BackendOp`, each
  handled by the method :data:`BACKEND_HANDLERS` names (``BackendOp.CALL``: :meth:`StoreBackend.op_call`).

What a backend asks of the catalogue and of other backends goes through its
:class:`~workbench.runtime.store.link.Link` (``self.link``), as a client's questions do.

Beyond ``memory_limit`` bytes the least recently used objects go to the disk tier (a pickle per
version in the store directory) and come back when next used.
"""

from __future__ import annotations

import asyncio
import errno
import os
import pickle
import stat
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle
from distributed import get_worker
from distributed.core import Status
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

import workbench.runtime.store.tiering as tiering
from workbench.memory import tiers
from workbench.memory.placement import DynamicPolicy, Usage
from workbench.runtime import failures
from workbench.runtime.store.current import install_persister
from workbench.runtime.store.errors import NotHere, StoreError, check_writable
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import (
    ObjectRef,
    ReadWriteLock,
    StoredHandle,
    catalogue_entry,
    detach_result,
    set_arrays_writeable,
    state_nbytes,
)
from workbench.runtime.store.protocol import (
    HANDLER,
    PLUGIN_NAME,
    BackendOp,
    CatalogueOp,
    error_reply,
    found,
    handler_for,
    result_reply,
)
from workbench.runtime.trace import EVENT_TOPIC, record

PLAIN = (type(None), bool, int, float, str)  # replies msgpack carries as they are
LOCK_WAIT_SECONDS = 60.0  # longest wait for an object's lock, or for another call reading it from disk
COPY_THREADS = 32  # a backend's threads for copies of its objects (each may wait for its object's lock)


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
    sends it, then releases the lock (:meth:`StoreBackend.send_locked`)."""

    obj: Any
    entry: Entry


def release_unsent(done: Future[Any]) -> None:
    """A finished operation's :class:`SendLocked` result that will not be sent: its lock released."""
    if not done.cancelled() and done.exception() is None and isinstance(done.result(), SendLocked):
        done.result().entry.lock.release(False, copy=True)


def disk_path(directory: str, oid: str, version: int) -> Path:
    """Where version ``version`` of object ``oid`` is flushed under ``directory``."""
    return Path(directory) / "objects" / f"{oid}-v{version}.pkl"


def write_object(path: Path, obj: Any) -> int:
    """Pickle ``obj`` (classes by value where registered) to ``path`` atomically, readable by its
    owner only (0600); returns bytes written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
            cloudpickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path.stat().st_size


def in_objects_directory(directory: str | Path, path: str | Path) -> bool:
    """Whether ``path`` names a file directly in the store's ``objects`` directory (the only place
    its disk copies are read from or deleted)."""
    candidate = Path(path)
    return (
        candidate.name not in ("", ".", "..") and candidate.parent.resolve() == (Path(directory) / "objects").resolve()
    )


def read_object(directory: str | Path, path: str | Path) -> Any:
    """The object pickled in ``path``, if that is a disk copy this store may load; a ``StoreError`` if not.

    Loading a pickle runs code, so the catalogue's path is untrusted input: only a regular file
    directly in this store's ``objects`` directory, owned by this user, is read. A catalogue edited
    to point elsewhere (``/tmp/evil.pkl``, ``../../x``), a symlink, a FIFO or another user's file is
    refused. The checks are made on the opened file itself (no window to swap it in between).
    """
    candidate = Path(path)
    if not in_objects_directory(directory, candidate):
        raise StoreError(
            f"the catalogue names {path} as a disk copy, outside this store's {Path(directory) / 'objects'}: refused "
            "(edited catalogue?)"
        )
    refused = StoreError(
        f"the disk copy {candidate} is not a regular file owned by this user: refused (only files the store "
        "wrote itself are loaded, since loading a pickle runs code)"
    )
    try:  # O_NONBLOCK: a FIFO put there must not hang the backend; it is refused below
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileNotFoundError(f"the disk copy {candidate} is missing (deleted by hand?)") from None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink
            raise refused from None
        raise
    with open(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise refused
        return pickle.load(f)


class StoreBackend(WorkerPlugin):
    """The object table of one worker, and the operations on it."""

    name = PLUGIN_NAME
    idempotent = True  # a second Store on the same cluster must not wipe the table

    def __init__(
        self,
        directory: str,
        memory_limit: int | None = None,
        memory_fraction: float = 0.5,
        tier: str = "dram",
        cache_bytes: int | None = None,
        persister: Callable[[Any, str | None, str | None], Any] | None = None,
        *,
        timeout: float,
    ):
        self.directory = str(directory)
        # The store's timeout (its session's, which the Store passes): the longest wait of each message
        # this backend sends, to the catalogue or another backend (see workbench.runtime.store.link).
        self.timeout = timeout
        # What PersistentObject.make_persistent calls in this worker's tasks (the Store passes
        # workbench.runtime.store.local.persist_anywhere): installed in setup, not at import.
        self.persister = persister
        self.memory_limit = memory_limit
        self.memory_fraction = memory_fraction
        self.default_tier = tiering.check_tier(tier)
        self.cache_bytes = cache_bytes
        self.dynamic = DynamicPolicy(int(cache_bytes or memory_limit or 256 * 2**20))
        # An upper bound of the table's bytes, kept as objects arrive, so that taking an object in
        # does not count (and sort) the whole table: that happens only when the bound passes the limit.
        self.used_bound = 0
        # Messages this backend was sent, by operation (issue 36: counts that predict scale)
        self.received: Counter[str] = Counter()

    # -- lifecycle -------------------------------------------------------------------------------
    def setup(self, worker: Any) -> None:
        """Attach to the worker: its comm handler, and the link to the catalogue and the other backends."""
        self.worker = worker
        self.link = Link.of_worker(worker, self.timeout, load_here=self.op_load)
        self.table: dict[tuple[str, int], Entry] = {}
        self.table_lock = threading.RLock()
        self.load_locks: dict[tuple[str, int], threading.Lock] = {}  # one reader of a disk copy at a time
        threads = max(2, worker.state.nthreads)
        self.calls = ThreadPoolExecutor(threads, thread_name_prefix="workbench-store-call")
        self.io = ThreadPoolExecutor(4, thread_name_prefix="workbench-store-io")
        # Copies (get, push, copy_version) wait for their object's lock while a writing method runs:
        # threads of their own, so they do not hold up the other operations (a fetch of another
        # object, a put, a load) until COPY_THREADS copies wait at once.
        self.copies = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="workbench-store-copy")
        if self.memory_limit is None and worker.memory_manager.memory_limit:
            self.memory_limit = int(worker.memory_manager.memory_limit * self.memory_fraction)
        self.cache = tiers.DramCache(int(self.cache_bytes or self.memory_limit or 256 * 2**20))
        self.policy_lock = threading.Lock()  # one dynamic placement pass at a time
        self.tag = uuid.uuid4().hex[:8]  # in tier file names: backends of one node never share a file
        worker.handlers[HANDLER] = self.handle
        if self.persister is not None:
            install_persister(self.persister)

    def teardown(self, worker: Any) -> None:
        """Detach from the worker (the objects go with it)."""
        worker.handlers.pop(HANDLER, None)
        self.calls.shutdown(wait=False, cancel_futures=True)
        self.io.shutdown(wait=False, cancel_futures=True)
        self.copies.shutdown(wait=False, cancel_futures=True)
        with self.table_lock:
            entries = list(self.table.values())
            self.table.clear()
        for entry in entries:  # tier files go with their objects (a PMEM directory outlives the store's)
            tiering.release(entry.placement)

    # -- messages --------------------------------------------------------------------------------
    async def handle(self, comm: Any, action: str, serializers: Any = None, **kwargs: Any) -> Any:
        """The ``workbench_store`` handler: runs the operation ``action`` (a :class:`BackendOp`, by
        :data:`BACKEND_HANDLERS`) on a thread (calls and I/O apart). A :class:`SendLocked` result is
        written to ``comm`` here, its object's lock held until it is sent (``serializers``: the
        caller's, as Dask would write the reply)."""
        handler = handler_for(BACKEND_HANDLERS, action, "a store backend")
        self.received[action] += 1
        pool = self.calls if action == BackendOp.CALL else self.copies if action in COPIES else self.io
        running = pool.submit(handler, self, **kwargs)
        try:
            result = await asyncio.wrap_future(running)
        except asyncio.CancelledError:  # the worker is closing: a lock the thread still takes is given back
            running.add_done_callback(release_unsent)
            raise
        except Exception as error:  # the caller raises it (Dask would log every one as a server crash)
            return error_reply(error)
        if isinstance(result, SendLocked):
            return await self.send_locked(comm, serializers, result)
        if action == BackendOp.CALL and not isinstance(result, PLAIN):
            result = to_serialize(result)  # numpy buffers travel as frames, the rest pickled
        return result_reply(result)

    async def send_locked(self, comm: Any, serializers: Any, held: SendLocked) -> Any:
        """Write ``held``'s object as the reply on ``comm``, then release its shared lock.

        Dask pickles a reply (numpy arrays as frames that point into the arrays) only when it writes
        it, after the handler returned: with the lock released then, a writing method could change
        the object between frames, and the caller would get half of its write. The write here returns
        once every byte has left this process, so no copy of the arrays is made. Returns
        ``Status.dont_reply`` (sent already), or the error reply of an object that cannot be
        serialised (nothing was sent)."""
        try:
            await comm.write(result_reply(to_serialize(held.obj)), serializers=serializers)
        except OSError:  # the connection failed: Dask's handler loop ends it
            raise
        except Exception as error:  # serialising failed before anything was written
            return error_reply(error)
        finally:
            held.entry.lock.release(False, copy=True)
        return Status.dont_reply

    def trace(self, action: str, start: float, nbytes: int, task: str, source: str = "") -> None:
        """Record a store event (transfer, load, evict ...) in the worker's trace events."""
        self.worker.log_event(
            EVENT_TOPIC,
            record(
                action,
                start,
                time.time(),
                worker=self.worker.address,
                thread=threading.get_ident(),
                task=task,
                nbytes=nbytes,
                source=source,
            ),
        )

    # -- the table -------------------------------------------------------------------------------
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
            with self.table_lock:
                self.table[key] = entry
                self.used_bound += entry.nbytes
            if announce:
                try:
                    self.link.catalogue(CatalogueOp.ADD_LOCATION, oid=oid, version=key[1], worker=self.worker.address)
                except BaseException:
                    with self.table_lock:
                        if self.table.get(key) is entry:
                            del self.table[key]
                    raise
        finally:
            entry.lock.release(True)
        if self.default_tier != "dram":
            self.op_place(oid, key[1], self.default_tier, reason="the store's default tier")
        self.make_room(keep=key)
        return entry.nbytes

    def add_many(self, keys: list[tuple[str, int]], objs: list[Any], nbytes: list[int] | None = None) -> int:
        """Take many objects into the table, then make room once; returns their bytes (``nbytes``:
        their sizes, when the sender measured them already)."""
        total = 0
        sizes = nbytes if nbytes is not None and len(nbytes) == len(objs) else [state_nbytes(o) for o in objs]
        with self.table_lock:
            for (oid, version), obj, size in zip(keys, objs, sizes):
                set_arrays_writeable(obj, False)
                entry = Entry(obj, int(size))
                self.table[(oid, int(version))] = entry
                total += entry.nbytes
            self.used_bound += total
        if self.default_tier != "dram":
            for oid, version in keys:
                self.op_place(oid, int(version), self.default_tier, reason="the store's default tier")
        self.make_room()
        return total

    async def register_and_add_many_here(self, objs: list[Any], oids: list[str]) -> int:
        """:meth:`register_and_add_many` from the worker's event loop (``Client.run``): the catalogue
        is asked without blocking the loop, the objects are taken in on a thread (taking them may
        evict others to disk, which asks the catalogue too)."""
        groups, sizes = self._groups(objs, oids)
        await self.link.catalogue_async(CatalogueOp.REGISTER_GROUPS, groups=groups)
        return await asyncio.to_thread(self.add_many, [(oid, 0) for oid in oids], objs, sizes)

    def register_and_add_many(self, objs: list[Any], oids: list[str]) -> int:
        """Record many objects in the catalogue as held here (one message, one transaction), then
        take them into the table (version 0)."""
        groups, sizes = self._groups(objs, oids)
        self.link.catalogue(CatalogueOp.REGISTER_GROUPS, groups=groups)
        return self.add_many([(oid, 0) for oid in oids], objs, sizes)

    def _groups(self, objs: list[Any], oids: list[str]) -> tuple[list[dict[str, Any]], list[int]]:
        """Catalogue entries of objects held here, by columns (per class: what they share once)."""
        sizes = [state_nbytes(obj) for obj in objs]
        groups: dict[type, dict[str, Any]] = {}
        for obj, oid, size in zip(objs, oids, sizes):
            cls = type(obj)
            if cls not in groups:
                common = catalogue_entry(cls, "", 0, self.worker.address, 0, None)
                groups[cls] = {
                    "common": {k: common[k] for k in ("version", "class_label", "kind", "methods", "meta", "worker")},
                    "entries": [],
                }
            groups[cls]["entries"].append({"oid": oid, "nbytes": size})
        return list(groups.values()), sizes

    def register_and_add(self, obj: Any, oid: str, alias: str | None) -> int:
        """Record ``obj`` in the catalogue as held here, then take it into the table (version 0)."""
        self.link.catalogue(
            CatalogueOp.REGISTER,
            entries=[catalogue_entry(type(obj), oid, 0, self.worker.address, state_nbytes(obj), alias)],
        )
        return self.add(oid, 0, obj)

    def make_room(self, keep: tuple[str, int] | None = None) -> None:
        """Evict least recently used objects to disk until the table fits ``memory_limit`` (None: no
        limit; 0: nothing stays). Objects whose arrays are in tier files hold little DRAM: they go last."""
        if self.memory_limit is None:
            return
        with self.table_lock:
            if self.used_bound <= self.memory_limit:
                return
            used = self.used_bound = sum(e.nbytes for e in self.table.values())
            if used <= self.memory_limit:
                return
            victims = sorted((e.placement.tier != "dram", e.last_used, k) for k, e in self.table.items() if k != keep)
        for _, _, key in victims:
            if used <= self.memory_limit:
                break
            used -= self.op_evict(*key, wait=0.0)  # a busy object stays: evict an idle one instead
        with self.table_lock:
            self.used_bound = sum(e.nbytes for e in self.table.values())

    def local(self, ref: ObjectRef) -> Entry | None:
        """The table's entry of exactly this version, or None (marks it used)."""
        with self.table_lock:
            entry = self.table.get((ref.oid, ref.version))  # type: ignore[arg-type]
        if entry is not None:
            entry.last_used = time.monotonic()
        return entry

    def here(self, oid: str, version: int) -> Entry:
        """This backend's entry for the object, or ``NotHere``."""
        entry = self.local(ObjectRef(oid, version))
        if entry is None:
            raise NotHere(f"object {oid[:8]} v{version} is not on backend {self.worker.address}")
        return entry

    def obtain(self, ref: ObjectRef, task: str, for_write: bool) -> tuple[ObjectRef, Entry]:
        """The entry for ``ref`` here: local, reloaded from disk, or (for reads) a copy from its holder.

        The holder the catalogue named can evict the object to disk (its memory limit) or drop it
        between the catalogue's answer and the copy: the catalogue is then asked again, by the link's
        one rule (:meth:`~workbench.runtime.store.link.Link.retrying`).
        """
        if for_write:  # a writing method runs only on a holder: the proxy asks again, elsewhere
            return self._obtain_once(ref, task, for_write)
        return self.link.retrying(lambda again: self._obtain_once(ref, task, for_write))

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
            raise NotHere(
                f"{ref.label()} is held by {workers}, not by this backend {self.worker.address}: a writing "
                "method runs only where the object is. Call it again (the proxy asks the catalogue for the new "
                "location)"
            )
        source = workers[0]
        start = time.time()
        obj = self.link.backend(source, BackendOp.GET, oid=ref.oid, version=ref.version)
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
        obj = self.link.backend(source, BackendOp.GET, oid=ref.oid, version=resolved.ref.version)
        self.trace("transfer", start, state_nbytes(obj), f"store-get {task}", source=source)
        return obj

    # -- running methods -------------------------------------------------------------------------
    def locked(
        self,
        ref: ObjectRef,
        task: str,
        writes: bool,
        find: Callable[[ObjectRef], tuple[ObjectRef, Entry]] | None = None,
        copy: bool = False,
    ) -> tuple[ObjectRef, Entry]:
        """The entry for ``ref`` under its lock (exclusive if ``writes``, else shared); release it
        with ``entry.lock.release(writes)`` (``copy``: shared for a copy of the object,
        :class:`~workbench.runtime.store.model.ReadWriteLock`; released with ``copy=True``).

        ``find`` looks the entry up (default :meth:`obtain`: local, reloaded from disk, or a copy for
        reads). Once locked, the entry is checked to be still the table's: one evicted (or replaced)
        between finding and locking it is looked up again, since a write to it would be lost.
        """
        find = find or (lambda r: self.obtain(r, task, for_write=writes))
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            ref, entry = find(ref)
            if not entry.lock.acquire(writes, timeout=max(0.0, deadline - time.monotonic()), copy=copy):
                raise TimeoutError(f"{ref.label()}: waited {LOCK_WAIT_SECONDS} s for its lock to run {task!r}")
            with self.table_lock:
                current = self.table.get((ref.oid, ref.version))  # type: ignore[arg-type]
            if current is entry or entry.copy:
                return ref, entry
            entry.lock.release(writes, copy=copy)
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
        with self.table_lock:
            self.used_bound += max(0, grown)
        if entry.disk_path:  # the disk copy is now stale
            Path(entry.disk_path).unlink(missing_ok=True)
            entry.disk_path = None
            self.link.catalogue(CatalogueOp.SET_DISK, oid=ref.oid, version=ref.version, disk_path=None)

    def invoke(self, ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``method`` on the object named by ``ref``, under its lock, with proxy arguments resolved."""
        args, kwargs = self.resolve_arguments(args, kwargs, method)
        ref, entry = self.locked(ref, method, writes)
        was_hot = self.dynamic.hot(entry.reads, entry.writes)
        try:
            if writes:
                self.check_single_copy(ref, entry, method)
            bound = getattr(entry.obj, method, None)
            if bound is None:
                raise AttributeError(f"{ref.label()} ({type(entry.obj).__name__}) has no method {method!r}")
            if writes:
                set_arrays_writeable(entry.obj, True)
            if not writes:
                entry.reads += 1
            try:
                with tiering.in_use(entry.obj, entry.placement, writes):
                    return detach_result(bound(*args, **kwargs), entry.obj)
            finally:
                if writes:
                    self.wrote(ref, entry)
        finally:
            entry.lock.release(writes)
            if entry.managed and not entry.copy and self.dynamic.hot(entry.reads, entry.writes) != was_hot:
                self.place_dynamically()  # its use changed class: the placement may change (this call pays)

    def resolve_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], task: str
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Proxies among the arguments become their objects (this backend's, or a fetched copy)."""

        def resolve(value: Any) -> Any:
            if isinstance(value, StoredHandle):
                _, entry = self.obtain(value.ref, task, for_write=False)
                return entry.obj
            return value

        return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}

    # -- operations (BackendOp.X is handled by op_x, see BACKEND_HANDLERS) --------------------------
    def op_call(
        self,
        oid: str,
        version: int,
        method: str,
        writes: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        pinned: bool = False,
    ) -> Any:
        """Run an active method here (a direct message from a client)."""
        return self.invoke(ObjectRef(oid, version, pinned=pinned), method, writes, tuple(args), dict(kwargs))

    def op_put(self, oid: str, version: int, obj: Any, announce: bool = False) -> int:
        """Take a copy of an object (a move or a replica); ``announce``: record this backend as a holder."""
        return self.add(oid, version, obj, announce=announce)

    def op_put_many(
        self, keys: list[list[Any]], data: bytes, buffers: list[Any], nbytes: list[int] | None = None
    ) -> int:
        """Take a batch of new objects (``keys``: ``[oid, version]`` each), one message for all: the
        objects pickled together by the client (``data``), their arrays' buffers out of band."""
        objs = pickle.loads(data, buffers=buffers)
        if not isinstance(objs, list) or len(keys) != len(objs):
            raise ValueError(f"put_many got {len(keys)} keys for a batch of {type(objs).__name__}")
        return self.add_many([(str(k[0]), int(k[1])) for k in keys], objs, nbytes)

    def op_drop_many(self, keys: list[list[Any]]) -> int:
        """Forget a batch of objects here (a batch that failed elsewhere); how many were held."""
        return sum(bool(self.op_drop(str(k[0]), int(k[1]))) for k in keys)

    def held(self, ref: ObjectRef) -> tuple[ObjectRef, Entry]:
        """``ref`` and this backend's entry of exactly that version, or ``NotHere`` (a ``find`` of
        :meth:`locked` for operations on a version held here)."""
        return ref, self.here(ref.oid, ref.version)  # type: ignore[arg-type]

    def op_get(self, oid: str, version: int) -> SendLocked:
        """The object, for another backend or a client to copy: under its shared lock, which
        :meth:`send_locked` releases once the reply is sent. So the copy is all before or all after
        any write, and other readers and copies are not held up."""
        _, entry = self.locked(ObjectRef(oid, int(version)), "get", False, find=self.held, copy=True)
        return SendLocked(entry.obj, entry)

    def op_push(self, oid: str, version: int, target: str, move: bool = False) -> int:
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
                target, BackendOp.PUT, oid=oid, version=version, obj=to_serialize(entry.obj), announce=True
            )
            self.trace("transfer", start, entry.nbytes, "store-push", source=self.worker.address)
            if move:  # the catalogue first, the table after, as an eviction does
                self.link.catalogue(
                    CatalogueOp.REMOVE_LOCATION, oid=oid, version=int(version), worker=self.worker.address
                )
                with self.table_lock:
                    if self.table.get((oid, int(version))) is entry:
                        del self.table[(oid, int(version))]
                tiering.release(entry.placement)
            else:
                entry.replicated = True
            return entry.nbytes
        finally:
            entry.lock.release(False, copy=True)

    def op_copy_version(self, oid: str, version: int, new_version: int) -> int:
        """Copy a version into a new one here (``new_version``), pickled under the object's shared lock."""
        ref, entry = self.locked(ObjectRef(oid, int(version)), "new_version", False, find=self.held, copy=True)
        try:
            data = cloudpickle.dumps(entry.obj, protocol=pickle.HIGHEST_PROTOCOL)  # arrays in band: a copy
        finally:
            entry.lock.release(False, copy=True)
        return self.add(oid, new_version, pickle.loads(data))

    def op_drop(self, oid: str, version: int) -> bool:
        """Forget a version here (and free its tier files); whether it was held."""
        with self.table_lock:
            entry = self.table.pop((oid, int(version)), None)
        if entry is not None:
            tiering.release(entry.placement)
        return entry is not None

    def op_flush(self, oid: str, version: int) -> str:
        """Write the object to the disk tier (it stays in memory too); returns the file."""
        entry = self.here(oid, version)
        if not entry.lock.acquire(False, timeout=LOCK_WAIT_SECONDS):  # no writing method runs meanwhile
            raise TimeoutError(f"object {oid[:8]}: a writing method held it for {LOCK_WAIT_SECONDS} s")
        try:
            return self._write_to_disk(oid, int(version), entry)
        finally:
            entry.lock.release(False)

    def _write_to_disk(self, oid: str, version: int, entry: Entry) -> str:
        """The disk copy of ``entry`` (written unless it has an up-to-date one); the caller holds its lock."""
        if entry.disk_path is None or not Path(entry.disk_path).exists():
            path = disk_path(self.directory, oid, version)
            start = time.time()
            written = write_object(path, entry.obj)
            self.trace("tier-write", start, written, "store-flush")
            if not self.link.catalogue(CatalogueOp.SET_DISK, oid=oid, version=version, disk_path=str(path)):
                path.unlink(missing_ok=True)  # deleted meanwhile: no file outlives its object
                raise StoreError(f"object {oid[:8]} v{version} was deleted while it was written to disk")
            entry.disk_path = str(path)
        return entry.disk_path

    def op_evict(self, oid: str, version: int, wait: float = LOCK_WAIT_SECONDS) -> int:
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
            with self.table_lock:
                if self.table.get(key) is not entry:  # evicted or dropped meanwhile
                    return 0
            try:
                self._write_to_disk(oid, key[1], entry)
            except StoreError:  # deleted meanwhile: nothing to keep, on disk or here
                self.op_drop(oid, key[1])
                return entry.nbytes
            # The catalogue first, the table after: while the catalogue names this backend, the
            # object is in its table (a call arriving meanwhile waits for the lock, then reloads).
            self.link.catalogue(CatalogueOp.REMOVE_LOCATION, oid=oid, version=key[1], worker=self.worker.address)
            with self.table_lock:
                self.table.pop(key, None)
            tiering.release(entry.placement)  # the disk copy has the arrays now
            return entry.nbytes
        finally:
            entry.lock.release(True)

    def op_load(self, oid: str, version: int, disk_path: str) -> int:
        """Read the object from the disk tier into this backend's memory (once, however many ask)."""
        key = (oid, int(version))
        with self.table_lock:
            load_lock = self.load_locks.setdefault(key, threading.Lock())
        if not load_lock.acquire(timeout=LOCK_WAIT_SECONDS):
            raise TimeoutError(
                f"object {oid[:8]} v{version}: another call read it from disk for over {LOCK_WAIT_SECONDS} s"
            )
        try:
            if self.local(ObjectRef(oid, version)) is not None:
                return 0
            start = time.time()
            obj = read_object(self.directory, disk_path)
            nbytes = self.add(oid, key[1], obj, disk=str(disk_path), announce=True)
            self.trace("tier-read", start, nbytes, "store-load")
            return nbytes
        finally:  # callers already waiting hold the lock object, take it in turn and find the object loaded
            with self.table_lock:
                if self.load_locks.get(key) is load_lock:
                    del self.load_locks[key]
            load_lock.release()

    # -- tiers -------------------------------------------------------------------------------------
    def op_place(self, oid: str, version: int, tier: str, reason: str = "") -> dict[str, Any]:
        """Put the object's numpy attributes on ``tier`` (``disk``: evict it to the disk tier, staged back
        when used); a tier event in the trace says what moved and why. Returns the placement."""
        tier = tiering.check_tier(tier)
        key = (oid, int(version))
        if tier == tiering.DYNAMIC:  # under the dynamic policy from now on: cold (mapped) until its use says otherwise
            entry = self.here(oid, key[1])
            entry.managed = True
            if entry.placement.tier in ("dram", "mapped"):
                self.trace("place", time.time(), 0, f"place {entry.placement.tier}->dynamic: {reason or 'asked'}")
                return {"tier": entry.placement.tier, "from": entry.placement.tier, "dram_bytes": entry.nbytes}
            tier = "mapped"
        if tier == "disk":
            entry = self.here(oid, key[1])
            old = entry.placement.tier
            start = time.time()
            freed = self.op_evict(oid, key[1])
            disk_copy = entry.disk_path
            if disk_copy:
                try:
                    tiers.evict_pages(disk_copy)  # staged back from the device, not the page cache
                except FileNotFoundError:
                    pass  # a writing call made the copy stale and deleted it meanwhile: nothing to cool
            self.trace("demote", start, freed, f"place {old}->disk: {reason or 'asked'}", source=old)
            return {"tier": "disk", "from": old, "dram_bytes": 0, "seconds": time.time() - start}
        ref, entry = self.locked(ObjectRef(oid, key[1]), "place", True, find=lambda r: (r, self.here(r.oid, r.version)))
        try:
            old = entry.placement.tier
            start = time.time()
            entry.placement = tiering.place_state(
                entry.obj,
                entry.placement,
                tier,
                tiering.tier_directory(self.directory),
                f"{oid}-v{key[1]}-{self.tag}",
                self.cache,
            )
            before, entry.nbytes = entry.nbytes, dram_bytes(entry)
            with self.table_lock:
                self.used_bound += max(0, entry.nbytes - before)
            action = "promote" if tier == "dram" and old != "dram" else "demote" if old == "dram" else "place"
            moved = entry.placement.tier_bytes or entry.nbytes
            self.trace(action, start, moved, f"place {old}->{tier}: {reason or 'asked'}", source=old)
            placed = {"tier": tier, "from": old, "dram_bytes": entry.nbytes, "seconds": time.time() - start}
        finally:
            entry.lock.release(True)
        if tier == "dram":
            self.make_room(keep=key)
        return placed

    def op_cool(self, oid: str, version: int) -> list[dict[str, Any]]:
        """Make the object's tier files cold (out of the DRAM cache and the page cache); what each
        eviction achieved (``evicted`` False with a reason where the medium cannot be cold)."""
        ref, entry = self.locked(
            ObjectRef(oid, int(version)), "cool", True, find=lambda r: (r, self.here(r.oid, r.version))
        )
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

    def op_place_many(self, keys: list[list[Any]], tier: str, reason: str = "") -> dict[str, list[list[Any]]]:
        """:meth:`op_place` for a batch of objects held here: ``placed`` (``[oid, version, tier it was on]``
        each) and ``missing`` (``[oid, version]`` of those no longer here: evicted to disk or moved
        meanwhile; the caller brings them back and asks again). All or nothing here: if one cannot
        be placed, those placed before it go back to their tiers and the error is raised."""
        placed: list[list[Any]] = []
        missing: list[list[Any]] = []
        try:
            for oid, version in keys:
                try:
                    done = self.op_place(str(oid), int(version), tier, reason)
                except NotHere:
                    missing.append([str(oid), int(version)])
                    continue
                placed.append([str(oid), int(version), done["from"]])
        except BaseException:
            self.unplace(placed, tier)
            raise
        return {"placed": placed, "missing": missing}

    def op_unplace_many(self, placed: list[list[Any]], tier: str) -> int:
        """Put objects placed by :meth:`op_place_many` back on the tiers they were on; how many went back."""
        return self.unplace(placed, tier)

    def unplace(self, placed: list[list[Any]], tier: str) -> int:
        """Put each ``[oid, version, old tier]`` back on its old tier (best effort: an object gone since stays gone)."""
        back = 0
        for oid, version, old in reversed(placed):
            if old == tier or tier == tiering.DYNAMIC:
                continue
            try:
                self.op_place(str(oid), int(version), str(old), reason="a batch placement failed: put back")
                back += 1
            except Exception:  # noqa: S112 - gone meanwhile, or the old tier failed too: the caller's error says why
                continue
        return back

    def op_cool_many(self, keys: list[list[Any]]) -> list[dict[str, Any]]:
        """:meth:`op_cool` for a batch of objects held here; every eviction."""
        return [e for oid, version in keys for e in self.op_cool(str(oid), int(version))]

    def op_set_memory_limit(self, nbytes: int | None) -> int | None:
        """Set the bytes of objects this backend keeps in DRAM before evicting to disk (None: no
        limit), evicting now what is over it; the old limit."""
        if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
            raise ValueError(f"a memory limit is a number of bytes >= 0 (or None), got {nbytes!r}")
        old, self.memory_limit = self.memory_limit, nbytes
        with self.table_lock:
            self.used_bound = sum(e.nbytes for e in self.table.values())
        self.make_room()
        return old

    def op_set_cache(self, nbytes: int) -> int:
        """Set the byte budget of this backend's DRAM cache (entries over it go now); the old budget."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"a cache budget is a number of bytes >= 0, got {nbytes!r}")
        with self.cache.lock:
            old, self.cache.budget = self.cache.budget, nbytes
            while self.cache.used > nbytes and self.cache.evict_oldest():  # entries a call holds stay until it ends
                pass
        return old

    def op_rebalance(self, budget: int | None = None, hot_reads: int | None = None) -> list[dict[str, Any]]:
        """Set the dynamic policy's DRAM ``budget`` (and ``hot_reads``) when given, and place the
        dynamically managed objects here by it now; the moves made, each with its reason."""
        if budget is not None or hot_reads is not None:
            self.dynamic = DynamicPolicy(
                self.dynamic.budget if budget is None else int(budget),
                self.dynamic.hot_reads if hot_reads is None else int(hot_reads),
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
            with self.table_lock:
                entries = {f"{oid}-v{version}": (oid, version, e) for (oid, version), e in self.table.items()}
            usages = [
                Usage(key, int(e.placement.tier_bytes or e.nbytes), e.reads, e.writes, e.placement.tier)
                for key, (_, _, e) in entries.items()
                if e.managed and e.placement.tier in ("dram", "mapped")
            ]
            moves = []
            for decision in self.dynamic.decide(usages):
                oid, version, _ = entries[decision.key]
                try:
                    self.op_place(oid, version, decision.tier, reason=decision.reason)
                except NotHere:  # dropped or evicted meanwhile: nothing to place
                    continue
                moves.append({"oid": oid, "version": version, "tier": decision.tier, "reason": decision.reason})
            return moves
        finally:
            self.policy_lock.release()

    def op_table(self) -> list[dict[str, Any]]:
        """What this backend holds: one row per object version."""
        with self.table_lock:
            return [
                {
                    "oid": oid,
                    "version": version,
                    "class": type(e.obj).__name__,
                    "nbytes": e.nbytes,
                    "on_disk": e.disk_path is not None,
                    "tier": e.placement.tier,
                }
                for (oid, version), e in self.table.items()
            ]

    def op_null(self) -> None:
        """Nothing: the cost of a message round trip."""
        return None


def dram_bytes(entry: Entry) -> int:
    """Bytes of the object held in the worker's memory (its tier files not counted)."""
    return max(0, state_nbytes(entry.obj) - entry.placement.tier_bytes)


def local_backend() -> StoreBackend:
    """This worker's store backend (inside a task)."""
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise StoreError(f"worker {worker.address} has no store backend: open the store first (Store(session))")
    return plugin


def run_active(ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of an active call: the method runs on this worker, where the object lives."""
    return failures.sendable(local_backend().invoke, ref, method, writes, args, kwargs)


def run_non_active(ref: ObjectRef, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of a non-active call: fetch a copy of the object through the store, run the method here."""
    backend = local_backend()
    obj = backend.fetch_copy(ref, method)
    args, kwargs = backend.resolve_arguments(args, kwargs, method)
    return failures.sendable(getattr(obj, method), *args, **kwargs)


# The backend's handler of each operation: ``BackendOp.X`` is handled by ``StoreBackend.op_x``.
BACKEND_HANDLERS: dict[str, Callable[..., Any]] = {
    BackendOp.CALL: StoreBackend.op_call,
    BackendOp.PUT: StoreBackend.op_put,
    BackendOp.PUT_MANY: StoreBackend.op_put_many,
    BackendOp.DROP: StoreBackend.op_drop,
    BackendOp.DROP_MANY: StoreBackend.op_drop_many,
    BackendOp.GET: StoreBackend.op_get,
    BackendOp.PUSH: StoreBackend.op_push,
    BackendOp.COPY_VERSION: StoreBackend.op_copy_version,
    BackendOp.FLUSH: StoreBackend.op_flush,
    BackendOp.EVICT: StoreBackend.op_evict,
    BackendOp.LOAD: StoreBackend.op_load,
    BackendOp.PLACE: StoreBackend.op_place,
    BackendOp.PLACE_MANY: StoreBackend.op_place_many,
    BackendOp.UNPLACE_MANY: StoreBackend.op_unplace_many,
    BackendOp.COOL: StoreBackend.op_cool,
    BackendOp.COOL_MANY: StoreBackend.op_cool_many,
    BackendOp.SET_MEMORY_LIMIT: StoreBackend.op_set_memory_limit,
    BackendOp.SET_CACHE: StoreBackend.op_set_cache,
    BackendOp.REBALANCE: StoreBackend.op_rebalance,
    BackendOp.TABLE: StoreBackend.op_table,
    BackendOp.NULL: StoreBackend.op_null,
}

# The operations that copy an object under its shared lock: they run on the backend's copy threads.
COPIES = frozenset({BackendOp.GET, BackendOp.PUSH, BackendOp.COPY_VERSION})
