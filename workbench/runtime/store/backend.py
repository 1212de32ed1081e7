"""A store backend: the worker plugin that holds the objects living on one Dask worker, and the
routing of the messages sent to it.

Its parts, each in its module: the object table (:class:`~workbench.runtime.store.table.ObjectTable`:
entries, locks, arrivals, copies, evictions), tier placement
(:class:`~workbench.runtime.store.placing.TierPlacement`), the disk files
(:mod:`~workbench.runtime.store.disk`) and the task bodies (:mod:`~workbench.runtime.store.tasks`).
Here: the plugin's lifecycle, running active methods (:meth:`StoreBackend.invoke`, under the
object's lock, on a thread), and the ``workbench_store`` handler, a direct message from a client or
another backend (one round trip, no scheduler). Its operations are
:class:`~workbench.runtime.store.protocol.BackendOp`, each handled by the method
:data:`BACKEND_HANDLERS` names (``BackendOp.CALL``: :meth:`StoreBackend.op_call`), which hands it to
the part that does it. Its replies follow the one error rule of both ends
(:func:`~workbench.runtime.store.protocol.answer`).

What a backend asks of the catalogue and of other backends goes through its
:class:`~workbench.runtime.store.link.Link` (``self.link``), as a client's questions do.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

import workbench.runtime.store.tiering as tiering
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
from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef, StoredHandle, detach_result, set_arrays_writeable, stop_shipping
from workbench.runtime.store.placing import TierPlacement
from workbench.runtime.store.protocol import (
    HANDLER,
    PLUGIN_NAME,
    RESULT_KEY,
    BackendOp,
    Call,
    CallAnswer,
    answer,
    error_reply,
    handler_for,
    result_reply,
)
from workbench.runtime.store.table import ObjectTable, SendLocked, release_unsent
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
        self.attach(worker, Link.of_worker(worker, self.timeout, load_here=self.op_load))

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
        """The result of the operation ``action`` (a :class:`BackendOp`, by :data:`BACKEND_HANDLERS`),
        run on a thread of its kind: calls, copies, the rest."""
        handler = handler_for(BACKEND_HANDLERS, action, "a store backend")
        self.received[action] += 1
        if inspect.iscoroutinefunction(handler):  # an active call: it runs on a call thread of its own
            return await handler(self, **kwargs)
        pool = self.copies if action in COPIES else self.io
        running = pool.submit(handler, self, **kwargs)
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

        ``call``: the record of an active call (``BackendOp.CALL``): its deadline bounds the wait for the
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

    # -- operations (BackendOp.X is handled by op_x, see BACKEND_HANDLERS) --------------------------
    async def op_call(self, call: dict[str, Any], wait: float = 0.0) -> dict[str, Any]:
        """Run an active method here (a direct message from a client): the :class:`Call` ``call``,
        started on a call thread unless this backend has it already (a re-send, answered from
        :attr:`call_memory`: never run twice); its :class:`CallAnswer` once it ended, or "still
        running" after ``wait`` seconds (the caller asks again with the same call)."""
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

    def op_put(self, oid: str, version: int, obj: Any, announce: bool = False) -> int:
        """Take a copy of an object (a move or a replica); ``announce``: record this backend as a holder."""
        return self.table.add(oid, version, obj, announce=announce)

    def op_put_many(
        self, keys: list[list[Any]], data: bytes, buffers: list[Any], nbytes: list[int] | None = None
    ) -> int:
        """Take a batch of new objects, one message for all (:meth:`ObjectTable.put_many`)."""
        return self.table.put_many(keys, data, buffers, nbytes)

    def op_drop(self, oid: str, version: int) -> bool:
        """Forget a version here (and free its tier files); whether it was held."""
        return self.table.drop(oid, version)

    def op_drop_many(self, keys: list[list[Any]]) -> int:
        """Forget a batch of objects here (a batch that failed elsewhere); how many were held."""
        return self.table.drop_many(keys)

    def op_get(self, oid: str, version: int) -> SendLocked:
        """The object for a copy, under its shared lock until :meth:`send_locked` has sent it."""
        return self.table.copy_out(oid, version)

    def op_push(self, oid: str, version: int, target: str, move: bool = False) -> int:
        """Send a copy of the object to backend ``target`` (a replica, or with ``move`` the object itself)."""
        return self.table.push(oid, version, target, move)

    def op_copy_version(self, oid: str, version: int, new_version: int) -> int:
        """Copy a version into a new one here (``new_version``)."""
        return self.table.copy_version(oid, version, new_version)

    def op_flush(self, oid: str, version: int) -> str:
        """Write the object to the disk tier (it stays in memory too); returns the file."""
        return self.table.flush(oid, version)

    def op_evict(self, oid: str, version: int) -> int:
        """Move the object to the disk tier; returns bytes freed."""
        return self.table.evict(oid, version)

    def op_load(self, oid: str, version: int, disk_path: str) -> int:
        """Read the object from the disk tier into this backend's memory (once, however many ask)."""
        return self.table.load(oid, version, disk_path)

    def op_place(self, oid: str, version: int, tier: str, reason: str = "") -> dict[str, Any]:
        """Put the object's numpy attributes on ``tier``; the placement (:meth:`TierPlacement.place`)."""
        return self.placing.place(oid, version, tier, reason)

    def op_place_many(self, keys: list[list[Any]], tier: str, reason: str = "") -> dict[str, list[list[Any]]]:
        """Place a batch of objects held here, all or nothing (:meth:`TierPlacement.place_many`)."""
        return self.placing.place_many(keys, tier, reason)

    def op_unplace_many(self, placed: list[list[Any]], tier: str) -> int:
        """Put objects placed by :meth:`op_place_many` back on the tiers they were on; how many went back."""
        return self.placing.unplace(placed, tier)

    def op_cool(self, oid: str, version: int) -> list[dict[str, Any]]:
        """Make the object's tier files cold; what each eviction achieved."""
        return self.placing.cool(oid, version)

    def op_cool_many(self, keys: list[list[Any]]) -> list[dict[str, Any]]:
        """:meth:`op_cool` for a batch of objects held here; every eviction."""
        return self.placing.cool_many(keys)

    def op_set_memory_limit(self, nbytes: int | None) -> int | None:
        """Set the bytes of objects kept in DRAM before evicting to disk (None: no limit); the old limit."""
        return self.table.set_memory_limit(nbytes)

    def op_set_cache(self, nbytes: int) -> int:
        """Set the byte budget of this backend's DRAM cache; the old budget."""
        return self.placing.set_cache(nbytes)

    def op_rebalance(self, budget: int | None = None, hot_reads: int | None = None) -> list[dict[str, Any]]:
        """Dynamic placement now, with a new budget when given; the moves made (:meth:`TierPlacement.rebalance`)."""
        return self.placing.rebalance(budget, hot_reads)

    def op_table(self) -> list[dict[str, Any]]:
        """What this backend holds: one row per object version."""
        return self.table.rows()

    def op_null(self) -> None:
        """Nothing: the cost of a message round trip."""
        return None


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
