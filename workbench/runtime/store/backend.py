"""A store backend: a worker plugin holding the objects that live on one Dask worker.

The object table maps ``(id, version)`` to the live Python object. Active methods run here, on a
thread, under the object's read/write lock (:class:`~workbench.runtime.store.model.ReadWriteLock`).
Two ways in:

* a Dask task (``run_active``), pinned to this worker, so calls compose with other tasks and their
  results are futures;
* the ``workbench_store`` handler, a direct message from a client or another backend (one round
  trip, no scheduler): plain-value calls, fetching a copy, taking a copy from another backend,
  the disk tier.

Beyond ``memory_limit`` bytes the least recently used objects go to the disk tier (a pickle per
version in the store directory) and come back when next used.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle
from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize
from distributed.utils import sync

from workbench.runtime.store.catalogue import ACTIVE_KEY_MARK, ERROR_KEY, HANDLER, PLUGIN_NAME
from workbench.runtime.store.errors import BackendUnreachable, NotHere, StoreError, object_lost
from workbench.runtime.store.model import ObjectRef, ReadWriteLock, set_arrays_writeable, state_nbytes
from workbench.runtime.trace import EVENT_TOPIC, record

PLAIN = (type(None), bool, int, float, str)  # replies msgpack carries as they are
WAIT_SECONDS = 60.0  # longest wait for a lock, the catalogue or another backend


@dataclass
class Entry:
    obj: Any
    nbytes: int
    lock: ReadWriteLock = field(default_factory=ReadWriteLock)
    last_used: float = field(default_factory=time.monotonic)
    disk_path: str | None = None


def disk_path(directory: str, oid: str, version: int) -> Path:
    return Path(directory) / "objects" / f"{oid}-v{version}.pkl"


def write_object(path: Path, obj: Any) -> int:
    """Pickle ``obj`` (classes by value where registered) to ``path`` atomically; returns bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(partial, "wb") as f:
            cloudpickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path.stat().st_size


def read_object(path: str | Path) -> Any:
    with open(path, "rb") as f:
        return pickle.load(f)


class StoreBackend(WorkerPlugin):
    """The object table of one worker, and the operations on it."""

    name = PLUGIN_NAME
    idempotent = True  # a second Store on the same cluster must not wipe the table

    def __init__(self, directory: str, memory_limit: int | None = None, memory_fraction: float = 0.5):
        self.directory = str(directory)
        self.memory_limit = memory_limit
        self.memory_fraction = memory_fraction

    # -- lifecycle -------------------------------------------------------------------------------
    def setup(self, worker: Any) -> None:
        self.worker = worker
        self.table: dict[tuple[str, int], Entry] = {}
        self.table_lock = threading.RLock()
        threads = max(2, worker.state.nthreads)
        self.calls = ThreadPoolExecutor(threads, thread_name_prefix="workbench-store-call")
        self.io = ThreadPoolExecutor(4, thread_name_prefix="workbench-store-io")
        if self.memory_limit is None and worker.memory_manager.memory_limit:
            self.memory_limit = int(worker.memory_manager.memory_limit * self.memory_fraction)
        worker.handlers[HANDLER] = self.handle

    def teardown(self, worker: Any) -> None:
        worker.handlers.pop(HANDLER, None)
        self.calls.shutdown(wait=False, cancel_futures=True)
        self.io.shutdown(wait=False, cancel_futures=True)
        self.table.clear()

    # -- messages --------------------------------------------------------------------------------
    async def handle(self, action: str, **kwargs: Any) -> Any:
        op = action
        """The ``workbench_store`` handler: runs ``op_<op>`` on a thread (calls and I/O apart)."""
        method = getattr(self, f"op_{op}", None)
        if method is None:
            raise ValueError(f"a store backend has no operation {op!r}")
        pool = self.calls if op == "call" else self.io
        try:
            result = await asyncio.get_running_loop().run_in_executor(pool, lambda: method(**kwargs))
        except Exception as error:  # the caller raises it (Dask would log every one as a server crash)
            return {ERROR_KEY: to_serialize(_picklable(error))}
        if op in ("call", "get") and not isinstance(result, PLAIN):
            return to_serialize(result)  # numpy buffers travel as frames, the rest pickled
        return result

    def catalogue(self, op: str, **kwargs: Any) -> Any:
        """A catalogue operation from a worker thread (the scheduler answers over the worker's link)."""
        return raise_error(sync(self.worker.loop, lambda: asyncio.wait_for(self.worker.scheduler.workbench_store(action=op, **kwargs), WAIT_SECONDS)))

    def backend(self, address: str, op: str, **kwargs: Any) -> Any:
        """An operation on another backend (or this one), from a worker thread."""
        async def ask() -> Any:
            return await asyncio.wait_for(self.worker.rpc(address).workbench_store(action=op, **kwargs), WAIT_SECONDS)

        try:
            reply = sync(self.worker.loop, ask)
        except (OSError, asyncio.TimeoutError) as error:
            raise BackendUnreachable(f"backend {address} did not answer {op!r} ({type(error).__name__}: {error})") from error
        return raise_error(reply)

    def trace(self, action: str, start: float, nbytes: int, task: str, source: str = "") -> None:
        self.worker.log_event(
            EVENT_TOPIC,
            record(action, start, time.time(), worker=self.worker.address, thread=threading.get_ident(), task=task, nbytes=nbytes, source=source),
        )

    # -- the table -------------------------------------------------------------------------------
    def add(self, oid: str, version: int, obj: Any, disk: str | None = None) -> int:
        set_arrays_writeable(obj, False)  # read-only at rest: only writing methods may change it
        nbytes = state_nbytes(obj)
        with self.table_lock:
            self.table[(oid, int(version))] = Entry(obj, nbytes, disk_path=disk)
        self.make_room(keep=(oid, int(version)))
        return nbytes

    def register_and_add(self, obj: Any, oid: str, alias: str | None) -> int:
        """Record ``obj`` in the catalogue as held here, then take it into the table (version 0)."""
        from workbench.runtime.store.model import catalogue_entry

        self.catalogue("register", entries=[catalogue_entry(type(obj), oid, 0, self.worker.address, state_nbytes(obj), alias)])
        return self.add(oid, 0, obj)

    def make_room(self, keep: tuple[str, int] | None = None) -> None:
        """Evict least recently used objects to disk until the table fits ``memory_limit``."""
        if not self.memory_limit:
            return
        with self.table_lock:
            used = sum(e.nbytes for e in self.table.values())
            victims = sorted((e.last_used, k) for k, e in self.table.items() if k != keep)
        for _, key in victims:
            if used <= self.memory_limit:
                break
            freed = self.op_evict(*key)
            used -= freed

    def local(self, ref: ObjectRef) -> Entry | None:
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
        """The entry for ``ref`` here: local, reloaded from disk, or (for reads) a copy from its holder."""
        entry = self.local(ref)
        if entry is not None:
            return ref, entry
        (info,) = self.catalogue("resolve", refs=[[ref.oid, None if not ref.pinned else ref.version]])
        if "missing" in info:
            raise StoreError(f"{ref.label()} was {info['missing']}: it is no longer in the store")
        ref = ObjectRef(ref.oid, info["version"], ref.alias or (info["aliases"] or [None])[0], info["class_label"], ref.pinned)
        entry = self.local(ref)
        if entry is not None:
            return ref, entry
        if info["workers"] and not for_write:
            source = info["workers"][0]
            start = time.time()
            obj = self.backend(source, "get", oid=ref.oid, version=ref.version)
            entry = Entry(obj, state_nbytes(obj))
            self.trace("transfer", start, entry.nbytes, f"store-get {task}", source=source)
            return ref, entry  # a copy for this call only: the object stays where it lives
        if info["workers"]:
            raise NotHere(
                f"{ref.label()} is held by {info['workers']}, not by this backend {self.worker.address}: a writing "
                "method runs only where the object is. Call it again (the proxy asks the catalogue for the new location)"
            )
        if info["disk_path"] and Path(info["disk_path"]).exists():
            self.op_load(ref.oid, ref.version, info["disk_path"])
            entry = self.local(ref)
            assert entry is not None
            return ref, entry
        raise object_lost(ref.label(), info["class_label"], list(info.get("lost_from", ())))

    def fetch_copy(self, ref: ObjectRef, task: str) -> Any:
        """A copy of the object through the store's API, even from this backend (the non-active way)."""
        (info,) = self.catalogue("resolve", refs=[[ref.oid, ref.version if ref.pinned else None]])
        if "missing" in info or not info["workers"]:
            ref, _ = self.obtain(ref, task, for_write=False)  # the same clear errors, or a reload from disk
            info = {"workers": [self.worker.address], "version": ref.version}
        source = info["workers"][0]
        start = time.time()
        obj = self.backend(source, "get", oid=ref.oid, version=info["version"])
        self.trace("transfer", start, state_nbytes(obj), f"store-get {task}", source=source)
        return obj

    # -- running methods -------------------------------------------------------------------------
    def invoke(self, ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``method`` on the object named by ``ref``, under its lock, with proxy arguments resolved."""
        ref, entry = self.obtain(ref, method, for_write=writes)
        args, kwargs = self.resolve_arguments(args, kwargs, method)
        if not entry.lock.acquire(writes, timeout=WAIT_SECONDS):
            raise TimeoutError(f"{ref.label()}: waited {WAIT_SECONDS} s for its lock to run {method!r}")
        try:
            bound = getattr(entry.obj, method, None)
            if bound is None:
                raise AttributeError(f"{ref.label()} ({type(entry.obj).__name__}) has no method {method!r}")
            if writes:
                set_arrays_writeable(entry.obj, True)
            try:
                return bound(*args, **kwargs)
            finally:
                if writes:
                    set_arrays_writeable(entry.obj, False)
                    entry.nbytes = state_nbytes(entry.obj)
                    if entry.disk_path:  # the disk copy is now stale
                        Path(entry.disk_path).unlink(missing_ok=True)
                        entry.disk_path = None
                        self.catalogue("set_disk", oid=ref.oid, version=ref.version, disk_path=None)
        finally:
            entry.lock.release(writes)

    def resolve_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any], task: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Proxies among the arguments become their objects (this backend's, or a fetched copy)."""
        from workbench.runtime.store.client import Proxy

        def resolve(value: Any) -> Any:
            if isinstance(value, Proxy):
                _, entry = self.obtain(value.ref, task, for_write=False)
                return entry.obj
            return value

        return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}

    # -- operations (reached as handle(op="x", ...)) -----------------------------------------------
    def op_call(self, oid: str, version: int, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any], pinned: bool = False) -> Any:
        return self.invoke(ObjectRef(oid, version, pinned=pinned), method, writes, tuple(args), dict(kwargs))

    def op_put(self, oid: str, version: int, obj: Any) -> int:
        return self.add(oid, version, obj)

    def op_get(self, oid: str, version: int) -> Any:
        entry = self.here(oid, version)
        return entry.obj

    def op_push(self, oid: str, version: int, target: str) -> int:
        """Send a copy of the object to backend ``target`` (a move or a replica)."""
        entry = self.here(oid, version)
        start = time.time()
        self.backend(target, "put", oid=oid, version=version, obj=to_serialize(entry.obj))
        self.trace("transfer", start, entry.nbytes, "store-push", source=self.worker.address)
        return entry.nbytes

    def op_copy_version(self, oid: str, version: int, new_version: int) -> int:
        entry = self.here(oid, version)
        copy = pickle.loads(cloudpickle.dumps(entry.obj, protocol=pickle.HIGHEST_PROTOCOL))
        return self.add(oid, new_version, copy)

    def op_drop(self, oid: str, version: int) -> bool:
        with self.table_lock:
            return self.table.pop((oid, int(version)), None) is not None

    def op_flush(self, oid: str, version: int) -> str:
        """Write the object to the disk tier (it stays in memory too); returns the file."""
        entry = self.here(oid, version)
        if entry.disk_path is None or not Path(entry.disk_path).exists():
            path = disk_path(self.directory, oid, int(version))
            start = time.time()
            if not entry.lock.acquire(False, timeout=WAIT_SECONDS):
                raise TimeoutError(f"object {oid[:8]}: a writing method held it for {WAIT_SECONDS} s")
            try:
                written = write_object(path, entry.obj)
            finally:
                entry.lock.release(False)
            self.trace("tier-write", start, written, "store-flush")
            entry.disk_path = str(path)
            self.catalogue("set_disk", oid=oid, version=int(version), disk_path=str(path))
        return entry.disk_path

    def op_evict(self, oid: str, version: int) -> int:
        """Move the object to the disk tier (written first if it has no disk copy); returns bytes freed."""
        if self.local(ObjectRef(oid, version)) is None:
            return 0
        self.op_flush(oid, version)
        with self.table_lock:
            entry = self.table.pop((oid, int(version)), None)
        self.catalogue("remove_location", oid=oid, version=int(version), worker=self.worker.address)
        return entry.nbytes if entry else 0

    def op_load(self, oid: str, version: int, disk_path: str) -> int:
        """Read the object from the disk tier into this backend's memory."""
        if self.local(ObjectRef(oid, version)) is not None:
            return 0
        start = time.time()
        obj = read_object(disk_path)
        nbytes = self.add(oid, version, obj, disk=disk_path)
        self.trace("tier-read", start, nbytes, "store-load")
        self.catalogue("add_location", oid=oid, version=int(version), worker=self.worker.address)
        return nbytes

    def op_table(self) -> list[dict[str, Any]]:
        with self.table_lock:
            return [
                {"oid": oid, "version": version, "class": type(e.obj).__name__, "nbytes": e.nbytes, "on_disk": e.disk_path is not None}
                for (oid, version), e in self.table.items()
            ]

    def op_null(self) -> None:
        return None


def _picklable(error: Exception) -> Exception:
    try:
        pickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return StoreError(f"{type(error).__name__}: {error}")


ERROR_TYPES = {"KeyError": KeyError, "ValueError": ValueError, "RuntimeError": RuntimeError}


def raise_error(reply: Any) -> Any:
    """Raise the exception a catalogue or backend reply carries; otherwise return the reply."""
    if isinstance(reply, dict) and ERROR_KEY in reply:
        error = reply[ERROR_KEY]
        if isinstance(error, dict):  # from the catalogue: a type name and a message
            raise ERROR_TYPES.get(error["type"], RuntimeError)(error["message"])
        raise error
    return reply


def local_backend() -> StoreBackend:
    """This worker's store backend (inside a task)."""
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise StoreError(f"worker {worker.address} has no store backend: open the store first (Store(session))")
    return plugin


def persist_here(obj: Any, alias: str | None = None) -> Any:
    """Inside a task: make ``obj`` an object of this worker's backend and return its proxy."""
    import uuid

    from workbench.runtime.store.client import Proxy, _check_persistable
    from workbench.runtime.store.model import class_name, ship_by_value

    _check_persistable(obj)
    ship_by_value(type(obj))
    oid = uuid.uuid4().hex
    local_backend().register_and_add(obj, oid, alias)
    return Proxy(ObjectRef(oid, 0, alias, class_name(type(obj))), type(obj).active_methods())


def run_active(ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of an active call: the method runs on this worker, where the object lives."""
    return local_backend().invoke(ref, method, writes, args, kwargs)


def run_non_active(ref: ObjectRef, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of a non-active call: fetch a copy of the object through the store, run the method here."""
    backend = local_backend()
    obj = backend.fetch_copy(ref, method)
    args, kwargs = backend.resolve_arguments(args, kwargs, method)
    return getattr(obj, method)(*args, **kwargs)


def task_key(method: str, active: bool) -> str:
    """A fresh key whose prefix reads ``<method>-active`` (or ``-non-active``) in task streams."""
    import uuid

    return f"{method}{ACTIVE_KEY_MARK if active else '-non-active-'}{uuid.uuid4().hex}"
