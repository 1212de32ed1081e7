"""A store backend: the worker plugin that holds the objects living on one Dask worker, and the
routing of the messages sent to it.

Its parts, each in its module: the object table (:class:`~workbench.runtime.store.table.ObjectTable`:
entries, locks, arrivals, copies, evictions), tier placement
(:class:`~workbench.runtime.store.placing.TierPlacement`), the disk files
(:mod:`~workbench.runtime.store.disk`) and the task bodies (:mod:`~workbench.runtime.store.tasks`).
Here: the plugin's lifecycle, running active methods (:meth:`StoreBackend.invoke`, under the
object's lock, on a thread), and the ``workbench_store`` handler, a direct message from a client or
another backend (one round trip, no scheduler). Its operations are defined once each in
:mod:`~workbench.runtime.store.backend_ops` (``op_call`` is the operation ``call``; see
:mod:`~workbench.runtime.store.wire`), each handing itself to the part that does it; :meth:`StoreBackend.run`
finds one by name, checks its arguments and runs it on its pool. Its replies follow the one error rule of both ends
(:func:`~workbench.runtime.store.protocol.answer`).

What a backend asks of the catalogue and of other backends goes through its
:class:`~workbench.runtime.store.link.Link` (``self.link``), as a client's questions do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

import workbench.runtime.store.backend_ops  # noqa: F401  (defines the operations this plugin answers)
import workbench.runtime.store.tiering as tiering
import workbench.runtime.store.wire as wire
from workbench.memory import tiers
from workbench.memory.placement import DynamicPolicy
from workbench.runtime.dask_seam import (
    DONT_REPLY,
    add_worker_handler,
    remove_worker_handler,
    serialized,
    worker_memory_limit,
    worker_threads,
)
from workbench.runtime.store.calls import CallMemory, CallRecord
from workbench.runtime.store.current import install_persister
from workbench.runtime.store.errors import NotHere, StoreError, check_writable
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef, StoredHandle, detach_result, set_arrays_writeable, stop_shipping
from workbench.runtime.store.placing import TierPlacement
from workbench.runtime.store.protocol import (
    HANDLER,
    PLUGIN_NAME,
    RESULT_KEY,
    Call,
    CallAnswer,
    answer,
    error_reply,
    found,
    result_reply,
)
from workbench.runtime.store.table import ObjectTable, SendLocked, release_unsent
from workbench.runtime.store.wire import Pool
from workbench.runtime.trace import EVENT_TOPIC, record

COPY_THREADS = 32  # a backend's threads for copies of its objects (each may wait for its object's lock)


class StoreBackend(WorkerPlugin):
    """The store's plugin on one worker: its object table, its tiers, and the messages to them."""

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
        # The dynamic policy's DRAM budget: the cache's, else the store's memory limit (as given: the
        # worker's share of its memory is not known before setup)
        self.dynamic_budget = int(cache_bytes or memory_limit or 256 * 2**20)
        # Messages this backend was sent, by operation (issue 36: counts that predict scale)
        self.received: Counter[str] = Counter()

    # -- lifecycle -------------------------------------------------------------------------------
    def setup(self, worker: Any) -> None:
        """Attach to the worker, reaching the catalogue and the other backends through the worker's
        connections (:meth:`Link.of_worker <workbench.runtime.store.link.Link.of_worker>`)."""
        self.attach(worker, Link.of_worker(worker, self.timeout, load_here=lambda *key: self.table.load(*key)))

    def attach(self, worker: Any, link: Link) -> None:
        """Attach to ``worker`` (its address, threads, memory limit, handlers, event log) with ``link``
        as the way to the catalogue and the other backends: the comm handler, the object table and its
        tiers. (Tests attach a backend to a stand-in worker and link, without a cluster.)"""
        self.worker, self.link = worker, link
        # Tier files that backends of a killed kernel left in this store's tier directory (their
        # worker processes are dead): freed before this backend makes its own.
        tiers.reclaim_store_files(self.directory)
        if self.memory_limit is None and worker_memory_limit(worker):
            self.memory_limit = int(worker_memory_limit(worker) * self.memory_fraction)
        self.table = ObjectTable(self.directory, self.link, worker.address, self.trace, self.memory_limit)
        cache = tiers.DramCache(int(self.cache_bytes or self.memory_limit or 256 * 2**20))
        dynamic = DynamicPolicy(self.dynamic_budget)
        self.placing = TierPlacement(self.table, self.directory, self.default_tier, cache, dynamic, self.trace)
        self.table.arrived = self.placing.arrived
        self.calls = ThreadPoolExecutor(max(2, worker_threads(worker)), thread_name_prefix="workbench-store-call")
        self.io = ThreadPoolExecutor(4, thread_name_prefix="workbench-store-io")
        # Copies (get, push, copy_version) wait for their object's lock while a writing method runs:
        # threads of their own, so they do not hold up the other operations (a fetch of another
        # object, a put, a load) until COPY_THREADS copies wait at once.
        self.copies = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="workbench-store-copy")
        # The active calls sent here, by id: a re-sent call is answered from here, never run twice
        # (outcomes kept well past the time a caller takes to send again: its link's timeout).
        self.call_memory = CallMemory(keep_seconds=max(60.0, 4 * self.link.timeout))
        add_worker_handler(worker, HANDLER, self.handle)
        if self.persister is not None:
            install_persister(self.persister)

    def teardown(self, worker: Any) -> None:
        """Detach from the worker (the objects go with it)."""
        remove_worker_handler(worker, HANDLER)
        stop_shipping(self)  # classes its tasks persisted (persist_here) no longer travel by value
        for pool in (self.calls, self.io, self.copies):
            pool.shutdown(wait=False, cancel_futures=True)
        for entry in self.table.clear():  # tier files go with their objects (a PMEM directory outlives the store's)
            tiering.release(entry.placement)

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

    # -- messages --------------------------------------------------------------------------------
    async def handle(self, comm: Any, action: str, serializers: Any = None, **kwargs: Any) -> Any:
        """The ``workbench_store`` handler: the reply of :meth:`run` by the one error rule
        (:func:`~workbench.runtime.store.protocol.answer`). A :class:`SendLocked` result is written to
        ``comm`` here, its object's lock held until it is sent (``serializers``: the caller's, as Dask
        would write the reply)."""
        reply = await answer(lambda: self.run(action, kwargs))
        held = reply.get(RESULT_KEY)
        if isinstance(held, SendLocked):
            return await self.send_locked(comm, serializers, held)
        return reply

    async def run(self, action: str, kwargs: dict[str, Any]) -> Any:
        """The result of the backend operation called ``action`` (found in :data:`wire.BACKEND
        <workbench.runtime.store.wire.BACKEND>`, its arguments checked), run where its definition
        says: on the event loop, or on a thread of its pool."""
        operation = wire.BACKEND.find(action)
        arguments = operation.checked(kwargs)
        self.received[operation.name] += 1
        if operation.pool is Pool.LOOP:
            return await operation.handler(self, **arguments)
        pool = self.copies if operation.pool is Pool.COPIES else self.io
        running = pool.submit(operation.handler, self, **arguments)
        try:
            return await asyncio.wrap_future(running)
        except asyncio.CancelledError:  # the worker is closing: a lock the thread still takes is given back
            running.add_done_callback(release_unsent)
            raise

    async def send_locked(self, comm: Any, serializers: Any, held: SendLocked) -> Any:
        """Write ``held``'s object as the reply on ``comm``, then release its shared lock.

        Dask pickles a reply (numpy arrays as frames that point into the arrays) only when it writes
        it, after the handler returned: with the lock released then, a writing method could change
        the object between frames, and the caller would get half of its write. The write here returns
        once every byte has left this process, so no copy of the arrays is made. Returns
        ``DONT_REPLY`` (sent already: Dask's ``Status.dont_reply``), or the error reply of an object that cannot be
        serialised (nothing was sent)."""
        try:
            await comm.write(result_reply(serialized(held.obj)), serializers=serializers)
        except OSError:  # the connection failed: Dask's handler loop ends it
            raise
        except Exception as error:  # serialising failed before anything was written
            return error_reply(error)
        finally:
            held.entry.lock.release(False, copy=True)
        return DONT_REPLY

    # -- running methods -------------------------------------------------------------------------
    def invoke(
        self,
        ref: ObjectRef,
        method: str,
        writes: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call: CallRecord | None = None,
    ) -> Any:
        """Run ``method`` on the object named by ``ref``, under its lock, with proxy arguments resolved.

        ``call``: the record of an active call (``backend_ops.op_call``): its deadline bounds the wait for the
        lock, the object and the arguments are found in one try each (its caller's loop tries again),
        and it is marked started just before the method runs. Without it (a task), they are found by
        the link's one rule and the lock waited for ``LOCK_WAIT_SECONDS``."""
        args, kwargs = self.resolve_arguments(args, kwargs, method, once=call is not None)
        ref, entry = self.table.locked(ref, method, writes, deadline=None if call is None else call.deadline)
        was_hot = self.placing.dynamic.hot(entry.reads, entry.writes)
        try:
            if writes:
                self.table.check_single_copy(ref, entry, method)
            bound = getattr(entry.obj, method, None)
            if bound is None:
                raise AttributeError(f"{ref.label()} ({type(entry.obj).__name__}) has no method {method!r}")
            if writes:
                set_arrays_writeable(entry.obj, True)
            else:
                entry.reads += 1
            if call is not None:
                call.started()
            try:
                with tiering.in_use(entry.obj, entry.placement, writes):
                    return detach_result(bound(*args, **kwargs), entry.obj)
            finally:
                if writes:
                    self.table.wrote(ref, entry)
        finally:
            entry.lock.release(writes)
            self.placing.after_call(entry, was_hot)

    def resolve_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], task: str, once: bool = False
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Proxies among the arguments become their objects (this backend's, or a fetched copy;
        ``once``: one try each, see :meth:`ObjectTable.obtain`)."""

        def resolve(value: Any) -> Any:
            if isinstance(value, StoredHandle):
                _, entry = self.table.obtain(value.ref, task, for_write=False, once=once)
                return entry.obj
            return value

        return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}

    # -- the in-process API: what task bodies on this worker use (never the table or the placement) --
    def copy_of(self, ref: ObjectRef, task: str) -> Any:
        """A copy of the object ``ref`` names, from wherever it is (a non-active call's)."""
        return self.table.fetch_copy(ref, task)

    def adopt(self, obj: Any, oid: str, alias: str | None) -> None:
        """Make ``obj`` the object ``oid`` (version 0) of this backend, registered in the catalogue."""
        self.table.register_and_add(obj, oid, alias)

    async def adopt_here(self, objs: list[Any], oids: list[str]) -> int:
        """:meth:`adopt` many objects in place, registered in one catalogue message; how many."""
        return await self.table.register_and_add_many_here(objs, oids)

    def place(self, oid: str, version: int, tier: str, reason: str) -> dict[str, Any]:
        """Put an object held here on ``tier`` (:meth:`TierPlacement.place`)."""
        return self.placing.place(oid, version, tier, reason)

    def held(self, ref: ObjectRef) -> Any:
        """The object ``ref`` names as this backend holds it, no copy and no lock (``local_object``);
        ``NotHere`` if it is not held here."""
        return _held_here(self.table, ref)[1].obj

    def writing(self, ref: ObjectRef) -> LocalWrite:
        """The object ``ref`` names under its exclusive lock, for a ``with`` block
        (``local_object(proxy, for_write=True)``)."""
        return LocalWrite(self.table, ref)

    # -- active calls ------------------------------------------------------------------------------
    async def answer_call(self, call: dict[str, Any], wait: float) -> dict[str, Any]:
        """The answer to an active call (:func:`backend_ops.op_call
        <workbench.runtime.store.backend_ops.op_call>`): the :class:`Call` ``call``, started on a call
        thread unless this backend has it already (a re-send, answered from :attr:`call_memory`: never
        run twice); its :class:`CallAnswer` once it ended, or "still running" after ``wait`` seconds
        (the caller asks again with the same call)."""
        sent = Call.from_wire(call)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
            raise ValueError(f"a call's wait is seconds >= 0, got {wait!r}")
        record = self.call_memory.begin(sent, lambda r: self.calls.submit(self._run_call, r))
        if not await self.call_memory.wait(record, min(float(wait), max(0.0, record.deadline - time.monotonic()))):
            return CallAnswer(sent.call_id, done=False).to_wire()
        return CallAnswer(sent.call_id, done=True, value=self.call_memory.outcome(record)).to_wire()

    def _run_call(self, record: CallRecord) -> None:
        """Run ``record``'s call (on a call thread) and end it with its value or error."""
        call = record.call
        try:
            if time.monotonic() > record.deadline:
                raise TimeoutError(
                    f"{call.label()} waited past its budget of {call.budget:g} s to start (it did not run)"
                )
            args, kwargs = call.args, call.kwargs
            value = self.invoke(call.ref, call.method, call.writes, tuple(args), dict(kwargs), call=record)
        except Exception as error:
            self.call_memory.end(record, error=error)
        except BaseException as error:  # the thread is ending (the worker closes): its callers are told
            self.call_memory.end(record, error=StoreError(f"{call.label()} was interrupted ({type(error).__name__})"))
            raise
        else:
            self.call_memory.end(record, value=value)


def _held_here(table: ObjectTable, ref: ObjectRef) -> tuple[ObjectRef, Any]:
    """``ref``'s version held in the backend's ``table`` (the current one, for a proxy of whatever is
    current) and its entry; ``NotHere`` if that backend does not hold it."""
    entry = table.local(ref) if ref.version is not None else None
    if entry is None:  # a proxy of "the current version": ask the catalogue which that is
        record = found(table.link.record(ref), ref)
        ref = ObjectRef(ref.oid, record.version, ref.alias, ref.class_label, ref.pinned)
        entry = table.local(ref)
    if entry is None:
        raise NotHere(
            f"{ref.label()} is not held by this backend ({table.address}): it lives on other backends "
            "(or only on disk). Run the task where the object lives (proxy.locations()), or call an active method, "
            "which does"
        )
    return ref, entry


class LocalWrite:
    """``local_object(proxy, for_write=True)``: the object under its exclusive lock for a ``with`` block."""

    def __init__(self, table: ObjectTable, ref: ObjectRef):
        self._table = table
        self._ref = ref
        self._entry: Any = None

    def __enter__(self) -> Any:
        if self._entry is not None:
            raise RuntimeError(f"{self._ref.label()}: this local_object(..., for_write=True) block is already open")
        table, ref = self._table, self._ref
        record = found(table.link.record(ref), ref)
        check_writable(ref, record.workers, "local_object(for_write=True)", True)
        ref = ObjectRef(ref.oid, record.version, ref.alias, ref.class_label, ref.pinned)
        self._ref, self._entry = table.locked(ref, "local_object", True, find=lambda r: _held_here(table, r))
        try:
            table.check_single_copy(self._ref, self._entry, "local_object(for_write=True)")
        except BaseException:
            entry, self._entry = self._entry, None
            entry.lock.release(True)
            raise
        set_arrays_writeable(self._entry.obj, True)
        return self._entry.obj

    def __exit__(self, *exc: object) -> None:
        entry, self._entry = self._entry, None
        try:
            self._table.wrote(self._ref, entry)
        finally:
            entry.lock.release(True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise TypeError(
            f"local_object(proxy, for_write=True) is a context manager, not the object (no .{name}): "
            "write inside `with local_object(proxy, for_write=True) as obj:`"
        )
