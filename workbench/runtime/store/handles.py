"""Handles on stored objects, as the caller holds them: ``Proxy``, ``ActiveMethod``,
``BlockCollection``.

``proxy.method(*args)`` runs on the backend holding the object and returns a Dask future: its task
is made by :func:`active_task`, the one maker of active-call tasks (its body is
:func:`~workbench.runtime.store.tasks.run_active`), and submitted by :func:`submit_active`;
``proxy.method.value(*args)`` sends the backend the operation :func:`backend_ops.op_call
<workbench.runtime.store.backend_ops.op_call>` through the store's link (:meth:`Link.call
<workbench.runtime.store.link.Link.call>`); ``.local`` fetches a copy and runs here. A handle holds
its :class:`Owner` (the ``Store`` it came from): its link for messages, its session for tasks. A
handle travels as its reference and its store's key; where it arrives it belongs to the store of
that key open in that process, else the current one (:func:`owner_of`,
:mod:`~workbench.runtime.store.current`). ``persist_here`` and ``run_active_to_store`` are here
too: task bodies that make new handles.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, cast

import numpy as np
from distributed import Future

import workbench.runtime.store.backend_ops as backend_ops
import workbench.runtime.store.tiering as tiering
from workbench import kernels
from workbench.runtime.dask_seam import serialized
from workbench.runtime.session import PinnedCall, Session
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.current import current_store, open_stores, store_named
from workbench.runtime.store.errors import StoreError, check_writable
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import (
    ObjectRef,
    PersistentObject,
    StoredHandle,
    active,
    check_alias,
    check_method,
    class_name,
    ship_by_value,
)
from workbench.runtime.store.protocol import Call, Resolved, call_task_name, found
from workbench.runtime.store.tasks import local_backend, run_active, run_non_active
from workbench.runtime.trace import task_key


class Owner(Protocol):
    """What a handle needs of the store it belongs to (a :class:`~workbench.runtime.store.client.Store`
    is one): the link its messages go through, the session its tasks go to, its calls' budget, the reader of a
    collection's blocks inside a task, and the store's deletion (which also removes disk copies)."""

    link: Link
    session: Session
    call_timeout: float  # seconds an active method called with .value() may take
    key: str  # which store: its cluster's scheduler and its directory

    @property
    def read_blocks(self) -> Callable[[list[Any]], list[np.ndarray]]:
        """The task-side reader of a collection's blocks (a plain function: it travels to the workers)."""
        ...

    def delete(self, objects: Iterable[StoredHandle]) -> None:
        """Delete objects: every version, alias, replica and disk copy."""
        ...

    def drop_deleted(self, dropped: list[dict[str, Any]]) -> None:
        """Make the backends forget what the catalogue deleted, and remove the disk copies."""
        ...


class ActiveMethod:
    """``proxy.method``: call it for a future (runs on the holder); ``.value``, ``.local``, ``.non_active``."""

    def __init__(self, proxy: Proxy, name: str, writes: bool):
        self.proxy, self.name, self.writes = proxy, name, writes

    def __call__(self, *args: Any, **kwargs: Any) -> Future:
        """Run on the backend holding the object, as a Dask task; returns its future."""
        store = self.proxy.store
        (resolved,) = store.link.resolve([self.proxy.ref])
        (future,) = submit_active(store.session, [active_task(resolved, self.name, self.writes, args, kwargs)])
        return future

    def value(self, *args: Any, **kwargs: Any) -> Any:
        """Run on the backend holding the object and return the plain value (one direct round trip
        while the method runs under half the link's timeout). One call, one id: sent again where the
        object moved, its backend did not answer, or the method still runs, and never run twice
        (:meth:`Link.call <workbench.runtime.store.link.Link.call>`); the method may take the store's
        ``call_timeout``."""
        store = self.proxy.store
        args, kwargs = gather_futures(store.session, args, kwargs)
        call = Call.new(self.name, self.writes, as_message(args), as_message(kwargs), store.call_timeout)

        def locate(again: bool) -> tuple[ObjectRef, str]:
            ref, workers = self.proxy._resolved(refresh=again)
            check_writable(ref, workers, self.name, self.writes)
            return ref, workers[0]

        return store.link.call(locate, call)

    def local(self, *args: Any, **kwargs: Any) -> Any:
        """Non-active: fetch a copy of the object to this process and run the method here."""
        args, kwargs = gather_futures(self.proxy.store.session, args, kwargs)
        args = tuple(a.fetch() if isinstance(a, Proxy) else a for a in args)
        kwargs = {k: v.fetch() if isinstance(v, Proxy) else v for k, v in kwargs.items()}
        return getattr(self.proxy.fetch(), self.name)(*args, **kwargs)

    def non_active(self, *args: Any, **kwargs: Any) -> Future:
        """Non-active as a task: wherever it runs, it fetches a copy through the store and computes there."""
        return self.proxy.store.session.client.submit(
            run_non_active,
            self.proxy.ref,
            self.name,
            args,
            kwargs,
            pure=False,
            key=task_key(call_task_name(self.name, active=False)),
        )

    def to_store(self, tier: str = "dram", alias: str | None = None) -> Callable[..., Future]:
        """The call with its result kept in the store, on the backend that computed it, on ``tier``:
        ``proxy.add.to_store("mapped")(other)`` is a future of the new object's proxy (a numpy result
        becomes an :class:`ArrayBlock`). The thesis's ``store`` result placement: nothing travels."""
        tiering.check_tier(tier)
        check_alias(alias)

        def call(*args: Any, **kwargs: Any) -> Future:
            store = self.proxy.store
            (resolved,) = store.link.resolve([self.proxy.ref])
            task = active_task(resolved, self.name, self.writes, args, kwargs, kept=(tier, alias))
            (future,) = submit_active(store.session, [task])
            return future

        return call

    def __repr__(self) -> str:
        return f"<active method {self.name} ({'writes' if self.writes else 'read-only'}) of {self.proxy!r}>"


def run_active_to_store(
    ref: ObjectRef,
    method: str,
    writes: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    tier: str,
    alias: str | None,
) -> Proxy:
    """Task body: an active call whose result becomes a new object here, placed on ``tier``."""
    result = run_active(ref, method, writes, args, kwargs)
    if isinstance(result, np.ndarray):
        result = ArrayBlock(result)
    if not isinstance(result, PersistentObject):
        raise TypeError(
            f"{method!r} returned a {type(result).__name__}: a result kept in the store must be a numpy array "
            "or a PersistentObject (call the method without to_store for any other value)"
        )
    proxy = persist_here(result, alias)
    if tiering.placed_when_new(tier):
        local_backend().place(proxy.ref.oid, 0, tier, reason=f"the result of {method!r} placed on {tier}")
    return proxy


def active_task(
    target: Resolved,
    method: str,
    writes: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    kept: tuple[str, str | None] | None = None,
    name: str | None = None,
) -> PinnedCall:
    """The task of one active call of ``method`` on the object ``target`` resolved, pinned to the
    backends holding it (any of them, for a read): every active-call task is made here.

    ``kept``: ``(tier, alias)`` keeps the result in the store, a new object on that tier
    (:func:`run_active_to_store`); ``name``: what its key is named after (default: the method), a
    key that marks it active (``call_task_name``) so that the catalogue frees it when its backends leave.
    """
    check_writable(target.ref, target.workers, method, writes)
    key = task_key(call_task_name(name or method, active=True))
    if kept is None:
        return PinnedCall(run_active, (target.ref, method, writes, args, kwargs), target.workers, key)
    return PinnedCall(run_active_to_store, (target.ref, method, writes, args, kwargs, *kept), target.workers, key)


def submit_active(session: Session, tasks: Sequence[PinnedCall]) -> list[Future]:
    """Submit active-call tasks (:func:`active_task`), their futures in order: one task by
    ``client.submit``, which builds it with less overhead than a graph (the path ``workbench bench
    store`` times); several as one graph (one scheduler message for a whole collection, not one per block)."""
    if len(tasks) != 1:
        return session.submit_pinned(tasks)
    (task,) = tasks
    future = session.client.submit(
        task.function, *task.args, workers=list(task.worker), allow_other_workers=False, pure=False, key=task.key
    )
    return [future]


def owner_of(store: Owner | None, key: str | None, label: str) -> Owner:
    """The store a handle (``label`` in messages) belongs to: ``store``, the one it was made by; after it
    travelled, the store open in this process that ``key`` names (two sessions' stores may be open in
    one kernel), else the current store (a handle made inside a task names none). A ``StoreError`` when
    the store it names is not open here: its calls would reach the wrong store, or none."""
    if store is not None:
        return store
    if key is not None:
        named = store_named(key)
        if named is not None:
            return cast(Owner, named)
        if open_stores():
            raise StoreError(
                f"{label} belongs to the store {key}, which is not open in this process "
                "(another store is): open it again on its cluster (Store(session, directory=...)), or use a proxy "
                "of the open store"
            )
        raise StoreError(  # e.g. a task on a worker that was given a proxy: "open a store first" misleads
            f"{label} belongs to the store {key}, and no store is open in this process "
            "(a task on a worker is such a process): call its methods where the store was opened (they run "
            "where the object is: proxy.method.future()), or open the store here (Store(session, directory=...))"
        )
    return cast(Owner, current_store())


class Proxy(StoredHandle):
    """A handle on a stored object: its active methods, location, replicas, versions and lifetime."""

    def __init__(
        self, ref: ObjectRef, methods: dict[str, bool], store: Owner | None = None, store_key: str | None = None
    ):
        self.ref = ref
        self.methods = dict(methods)
        self._store = store
        self._store_key = store.key if store is not None else store_key  # the store it belongs to, by name
        self._locations: list[str] | None = None  # the backends holding it, as last resolved

    @property
    def store(self) -> Owner:
        """The store this proxy belongs to: the one it was made by; after it travelled, the store open in
        this process that it names (two sessions' stores may be open in one kernel), else the current
        store (a proxy made inside a task names none). A ``StoreError`` when the store it names is not
        open here and another is: its calls would reach the wrong store."""
        return owner_of(self._store, self._store_key, self.ref.label())

    def __reduce__(self) -> tuple[Any, ...]:  # travels as its reference: ids, method names and its store's name
        return (Proxy, (self.ref, self.methods, None, self._store_key))

    def __getattr__(self, name: str) -> ActiveMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        writes = check_method(self.ref.class_label.rsplit(".", 1)[-1] or "this object", self.methods, name)
        return ActiveMethod(self, name, writes)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.methods))

    def __repr__(self) -> str:
        return f"<Proxy {self.ref.class_label.rsplit('.', 1)[-1]} {self.ref.label().removeprefix('object ')}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Proxy) and (self.ref.oid, self.ref.version) == (other.ref.oid, other.ref.version)

    def __hash__(self) -> int:
        return hash((self.ref.oid, self.ref.version))

    @property
    def oid(self) -> str:
        """The object's id."""
        return self.ref.oid

    @property
    def version(self) -> int | None:
        """The version this proxy names (None: whatever version is current)."""
        return self.ref.version

    def _resolved(self, refresh: bool = False) -> tuple[ObjectRef, list[str]]:
        """The object's version and the backends holding it (read back from disk first if needed),
        as last resolved unless ``refresh``."""
        if refresh or not self._locations:
            (resolved,) = self.store.link.resolve([self.ref])
            self.ref, self._locations = resolved.ref, resolved.workers
        return self.ref, self._locations

    def locations(self) -> list[str]:
        """Every backend holding the object in memory now (empty when it is only on disk)."""
        return self.store.link.locations([self.ref])[0]

    def info(self) -> dict[str, Any]:
        """The catalogue's record (:class:`~workbench.runtime.store.protocol.Record` as a dict): class,
        size, locations (``workers``), disk copy, aliases, version; a ``StoreError`` once it is deleted."""
        return found(self.store.link.record(self.ref), self.ref).as_dict()

    def fetch(self) -> Any:
        """A copy of the object, here (the non-active way to read it). A holder that drops or evicts it
        between the catalogue's answer and the copy makes it ask the catalogue again, as a backend's
        reads do (:meth:`Link.retrying <workbench.runtime.store.link.Link.retrying>`)."""
        link = self.store.link

        def once(again: bool) -> Any:
            ref, workers = self._resolved(refresh=True)
            return link.backend(workers[0], backend_ops.op_get, oid=ref.oid, version=ref.version)

        return link.retrying(once)

    def move(self, backend: str) -> Proxy:
        """Move the object to ``backend`` (copied backend to backend, then dropped at the source)."""
        ref, workers = self._resolved(refresh=True)
        self._check_backend(backend)
        if workers == [backend]:
            return self
        others = [w for w in workers if w != backend]
        if backend not in workers:  # else it holds a replica already: only the others go
            # The target records itself in the catalogue as a holder; the source drops the object
            # once it is there, before a writing call waiting for it can change the dropped copy.
            self.store.link.backend(
                workers[0], backend_ops.op_push, oid=ref.oid, version=ref.version, target=backend, move=True
            )
            others = others[1:]  # the source dropped itself
        for w in others:  # the replicas
            self.store.link.catalogue(StoreCatalogue.op_remove_location, oid=ref.oid, version=ref.version, worker=w)
            self.store.link.backend(w, backend_ops.op_drop, oid=ref.oid, version=ref.version)
        self._locations = [backend]
        return self

    def replicate(self, backend: str | None = None) -> str:
        """Copy the object to another backend (default: one that does not hold it); returns where."""
        ref, workers = self._resolved(refresh=True)
        if backend is None:
            (backend,) = self.store.link.catalogue(StoreCatalogue.op_backends, n=1, exclude=workers)
        self._check_backend(backend)
        if backend not in workers:
            # The target records itself in the catalogue as a holder.
            self.store.link.backend(workers[0], backend_ops.op_push, oid=ref.oid, version=ref.version, target=backend)
        self._locations = None
        return backend

    def drop_replicas(self) -> None:
        """Keep one copy only (before calling a writing method on a replicated object)."""
        ref, workers = self._resolved(refresh=True)
        for w in workers[1:]:
            self.store.link.catalogue(StoreCatalogue.op_remove_location, oid=ref.oid, version=ref.version, worker=w)
            self.store.link.backend(w, backend_ops.op_drop, oid=ref.oid, version=ref.version)
        self._locations = None

    def new_version(self) -> Proxy:
        """A copy of the object as a new version on the same backend; change it, then ``consolidate()``."""
        ref, workers = self._resolved(refresh=True)
        new = self.store.link.catalogue(
            StoreCatalogue.op_new_version, oid=ref.oid, version=ref.version, worker=workers[0]
        )
        self.store.link.backend(
            workers[0], backend_ops.op_copy_version, oid=ref.oid, version=ref.version, new_version=new
        )
        return Proxy(ObjectRef(ref.oid, new, ref.alias, ref.class_label, pinned=True), self.methods, self.store)

    def consolidate(self) -> Proxy:
        """Make this version the object's current one (its alias now names it); the old one is dropped."""
        if not self.ref.pinned:
            raise StoreError(
                f"{self.ref.label()} is the current version already: consolidate() a proxy from new_version()"
            )
        self.store.drop_deleted(
            self.store.link.catalogue(StoreCatalogue.op_consolidate, oid=self.ref.oid, version=self.ref.version)
        )
        return Proxy(
            ObjectRef(self.ref.oid, self.ref.version, self.ref.alias, self.ref.class_label), self.methods, self.store
        )

    def flush(self) -> str:
        """Write the object to the disk tier (it also stays in memory); returns the file."""
        ref, workers = self._resolved(refresh=True)
        return self.store.link.backend(workers[0], backend_ops.op_flush, oid=ref.oid, version=ref.version)

    def place(self, tier: str, reason: str = "") -> list[dict[str, Any]]:
        """Put the object's numpy attributes on ``tier`` on every backend holding it: ``dram``, ``mapped``
        (files mapped in place), ``cached`` (files through the backend's DRAM cache), ``disk``
        (evicted, staged back when used) or ``dynamic`` (the backend's policy moves it between
        ``mapped`` and ``dram`` by its use). Returns each backend's placement (tier, from, seconds)."""
        tier = tiering.check_tier(tier)
        ref, workers = self._resolved(refresh=True)
        placed = [
            self.store.link.backend(w, backend_ops.op_place, oid=ref.oid, version=ref.version, tier=tier, reason=reason)
            for w in workers
        ]
        if tiering.evicts(tier):
            self._locations = None
        return placed

    def tier(self) -> str:
        """The tier the object is on (``disk`` when no backend holds it in memory)."""
        info = self.info()
        ref, workers = ObjectRef(self.ref.oid, info["version"]), info["workers"]
        if not workers:
            return "disk"
        rows = self.store.link.backend(workers[0], backend_ops.op_table)
        return next((r["tier"] for r in rows if r["oid"] == ref.oid and r["version"] == ref.version), "disk")

    def cool(self) -> list[dict[str, Any]]:
        """Make the object's tier files cold on every holder (out of the DRAM cache and the page cache)
        for a cold run; each eviction says whether the medium could be made cold and why not."""
        ref, workers = self._resolved(refresh=True)
        return [
            e
            for w in workers
            for e in self.store.link.backend(w, backend_ops.op_cool, oid=ref.oid, version=ref.version)
        ]

    def evict(self) -> None:
        """Move the object to the disk tier only (reloaded into memory on its next use)."""
        ref, workers = self._resolved(refresh=True)
        for w in workers:
            self.store.link.backend(w, backend_ops.op_evict, oid=ref.oid, version=ref.version)
        self._locations = None

    def delete(self) -> None:
        """Delete the object: every version, replica, disk copy and alias."""
        self.store.delete([self])

    def _check_backend(self, backend: str) -> None:
        known = self.store.session.workers()
        if backend not in known:
            raise ValueError(f"backend {backend!r} is not a worker of this cluster; backends are {known}")


class ArrayBlock(PersistentObject):
    """One row block of a persistent collection: ``data`` is the block's numpy array."""

    def __init__(self, data: np.ndarray):
        self.data = data

    @active
    def apply(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(self.data, *args, **kwargs)`` where the block is (any kernel, no new class)."""
        return function(self.data, *args, **kwargs)

    @active
    def shape(self) -> tuple[int, ...]:
        """The block's shape, read where it lives."""
        return tuple(self.data.shape)

    @active(writes=True)
    def apply_in_place(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(self.data, *args, **kwargs)``, which may write into the block (a writing call:
        alone on the object; on a ``mapped`` block the writes go to its file and are made durable)."""
        return function(self.data, *args, **kwargs)

    @active
    def plus(self, other: ArrayBlock) -> np.ndarray:
        """``data + other.data`` (matrix addition where the blocks are; ``other`` resolved there)."""
        return kernels.matrix_add(self.data, other.data)

    @active(writes=True)
    def fma(self, a: ArrayBlock, b: ArrayBlock) -> None:
        """``data += a.data @ b.data`` written in place: on a ``mapped`` block, straight into its file
        (the thesis's in-place result placement); ``a`` and ``b`` are resolved where this block is."""
        kernels.multiply_accumulate(a.data, b.data, self.data)


class BlockCollection:
    """A blocked array whose row blocks are store objects; SplIter can partition it by location."""

    def __init__(
        self,
        store: Owner | None,
        oid: str,
        alias: str | None,
        blocks: list[Proxy],
        chunks: tuple[int, ...],
        shape: tuple[int, ...],
        dtype: np.dtype,
        store_key: str | None = None,
    ):
        self._store = store  # None: it travelled, and finds the store it names as its proxies do
        self._store_key = store.key if store is not None else store_key
        self.oid, self.alias = oid, alias
        self.blocks, self.chunks, self.shape, self.dtype = blocks, chunks, shape, dtype

    @property
    def store(self) -> Owner:
        """The store this collection belongs to: the one it was made by; after it travelled (pickled, as
        a saved notebook variable is), the one it names, found as a :attr:`Proxy.store` is."""
        return owner_of(self._store, self._store_key, ObjectRef(self.oid, alias=self.alias).label())

    def __reduce__(self) -> tuple[Any, ...]:  # travels as its blocks' proxies and its store's name, not the store
        arrived = (None, self.oid, self.alias, self.blocks, self.chunks, self.shape, self.dtype, self._store_key)
        return (BlockCollection, arrived)

    @property
    def read_here(self) -> Callable[[list[Proxy]], list[np.ndarray]]:
        """The function a task on a worker calls to read blocks of this collection there (a plain
        function of the store's, so that it travels to the workers; SplIter passes it to its tasks)."""
        return self.store.read_blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> Proxy:
        return self.blocks[index]

    def __iter__(self):
        return iter(self.blocks)

    def __repr__(self) -> str:
        name = self.alias or self.oid[:8]
        return f"<BlockCollection {name}: {len(self.blocks)} blocks, shape {self.shape}, {self.dtype}>"

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def offsets(self) -> np.ndarray:
        """Global first row of each block (and the total at the end)."""
        return np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)

    def locations(self) -> list[list[str]]:
        """Every backend holding each block, in block order, from one catalogue query (a block only on
        disk: [])."""
        return self.store.link.locations([b.ref for b in self.blocks])

    def holders(self) -> list[str]:
        """One backend holding each block (blocks only on disk are read back first), in block order."""
        return [resolved.workers[0] for resolved in self.store.link.resolve([b.ref for b in self.blocks])]

    def locality(self) -> dict[str, str]:
        """Block index (as text) -> the backend holding it (as PersistedBlocks.locality gives)."""
        return {f"({i}, 0)": (w or [""])[0] for i, w in enumerate(self.locations())}

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Future]:
        """``block.method(*args)`` on every block where it lives: one location query, one task per block."""
        if self.blocks:
            check_method("the blocks", self.blocks[0].methods, method)
        writes = self.blocks[0].methods.get(method, False) if self.blocks else False
        targets = self.store.link.resolve([b.ref for b in self.blocks])
        return submit_active(self.store.session, [active_task(t, method, writes, args, kwargs) for t in targets])

    def fetch(self) -> np.ndarray:
        """The whole array, here (every block copied to the caller)."""
        return (
            np.concatenate([b.fetch().data for b in self.blocks]) if self.blocks else np.empty(self.shape, self.dtype)
        )

    def delete(self) -> None:
        """Delete the collection and its blocks."""
        self.store.delete([*self.blocks, Proxy(ObjectRef(self.oid), {}, self.store)])
        self.blocks = []


# -- inside tasks: new handles ---------------------------------------------------------------------
def persist_here(obj: Any, alias: str | None = None) -> Proxy:
    """Inside a task: make ``obj`` an object of this worker's backend and return its proxy."""
    check_persistable(obj)
    check_alias(alias)
    ship_by_value(type(obj), local_backend())
    oid = uuid.uuid4().hex
    local_backend().adopt(obj, oid, alias)
    return Proxy(ObjectRef(oid, 0, alias, class_name(type(obj))), type(obj).active_methods())


# -- checks and message parts shared with the client and the task side ------------------------------
def check_persistable(obj: Any) -> None:
    """A ``TypeError`` saying what to do unless ``obj`` is a ``PersistentObject`` with active methods."""
    if isinstance(obj, Proxy):
        raise TypeError(f"{obj!r} is already persistent: it is a proxy of a stored object")
    if not isinstance(obj, PersistentObject):
        raise TypeError(
            f"make_persistent takes an instance of a PersistentObject subclass, got {type(obj).__name__}: "
            "derive your class from workbench.runtime.store.PersistentObject and mark methods with @active"
        )
    if not type(obj).active_methods():
        raise TypeError(
            f"{type(obj).__name__} has no @active method: mark the methods that should run in the store with @active"
        )


def gather_futures(
    session: Session, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with each Dask future among them replaced by its value (gathered at once)."""
    futures = [a for a in (*args, *kwargs.values()) if isinstance(a, Future)]
    if not futures:
        return args, kwargs
    values = dict(zip([f.key for f in futures], session.gather(futures)))
    pick = lambda a: values[a.key] if isinstance(a, Future) else a  # noqa: E731
    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}


def as_message(value: tuple[Any, ...] | dict[str, Any]) -> Any:
    """Arguments as a message part: empty ones as they are, others serialised by Dask (numpy as frames)."""
    return value if not value else serialized(value)
