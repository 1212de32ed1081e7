"""The store as a client opens it: ``Store`` (registration, placement, lookup, lifecycle).

``store = Store(session)`` registers the catalogue on the scheduler and a backend on every worker;
a second ``Store`` on the same cluster joins them, and ``store.close()`` takes them off again when
this ``Store`` registered them (``store.owns_registration``). ``proxy = store.make_persistent(obj)``
places ``obj`` on a backend and returns a :class:`~workbench.runtime.store.handles.Proxy`; what runs
inside tasks is in :mod:`workbench.runtime.store.local`. Its messages to the catalogue and the
backends, and its handles', go through its :class:`~workbench.runtime.store.link.Link` (``store.link``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
import pandas as pd

import workbench.runtime.store.backend_ops as backend_ops
import workbench.runtime.store.tiering as tiering
from workbench.kernels.cache import private_directories
from workbench.memory.tiers import others_could_swap
from workbench.runtime.blocks import persist_row_blocks
from workbench.runtime.dask_seam import has_worker_plugin, remove_scheduler_plugin, scheduler_plugin, serialized
from workbench.runtime.session import Session
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.catalogue_file import default_directory
from workbench.runtime.store.current import clear_current_store, install_persister, opened_store, set_current_store
from workbench.runtime.store.disk import in_objects_directory
from workbench.runtime.store.errors import BackendUnreachable, StoreError, UnknownAlias
from workbench.runtime.store.handles import ArrayBlock, BlockCollection, Proxy, check_persistable
from workbench.runtime.store.link import Link
from workbench.runtime.store.local import block_arrays, persist_anywhere, store_blocks_here
from workbench.runtime.store.model import (
    ObjectRef,
    PersistentObject,
    StoredHandle,
    catalogue_entry,
    check_alias,
    class_name,
    new_object_ids,
    ship_by_value,
    state_nbytes,
    stop_shipping,
)
from workbench.runtime.store.protocol import (
    CALL_SECONDS,
    HANDLER,
    PLUGIN_NAME,
    Missing,
    Record,
    Resolved,
    check_budget,
    found,
    without_gc,
)


class Registration(NamedTuple):
    """The store registered on a cluster: its directory, whether that exists, and its token."""

    directory: Path
    exists: bool
    token: str


def _registration_on_scheduler(dask_scheduler: Any = None) -> tuple[str, bool, str] | None:
    """On the scheduler: the registered store's directory, whether it still exists there, its token."""
    plugin = scheduler_plugin(dask_scheduler, PLUGIN_NAME)
    return None if plugin is None else (plugin.directory, os.path.isdir(plugin.directory), plugin.token)


def _registration(session: Session) -> Registration | None:
    """The store registered on ``session``'s cluster, or None."""
    found = session.run_on_scheduler(_registration_on_scheduler)
    return None if found is None else Registration(Path(found[0]), bool(found[1]), str(found[2]))


def registered_directory(session: Session) -> Path | None:
    """The directory of the store on ``session``'s cluster; None when the cluster has no usable store.

    A registration whose directory no longer exists (as the scheduler sees it) counts as none: it
    is the throwaway store of a run that crashed, and the next ``Store(session, directory)``
    replaces it. So ``Store(session, mine if registered_directory(session) is None else None)``
    opens a store of one's own, or joins the one the cluster has.
    """
    found = _registration(session)
    return found.directory if found is not None and found.exists else None


def _detach_catalogue(dask_scheduler: Any = None) -> bool:
    """On the scheduler: remove the catalogue plugin and its handler, closing its SQLite file.

    (Dask's ``unregister_scheduler_plugin`` only forgets the plugin: the handler would stay and the
    file would stay open.)"""
    plugin = remove_scheduler_plugin(dask_scheduler, PLUGIN_NAME, handler=HANDLER)
    if plugin is not None:
        plugin.close_database()
    return plugin is not None


def _has_backends(dask_scheduler: Any = None) -> bool:
    """On the scheduler: whether the store's worker plugin is registered."""
    return has_worker_plugin(dask_scheduler, PLUGIN_NAME)


def detach(session: Session) -> None:
    """Take the store off ``session``'s cluster: backends drop their tables, the catalogue closes."""
    if session.run_on_scheduler(
        _has_backends
    ):  # (asked first: the scheduler logs a refused unregistration as an error)
        try:
            session.bounded(session.client.unregister_worker_plugin, PLUGIN_NAME, where="removing the store's backends")
        except ValueError:  # removed meanwhile by another client
            pass
    session.run_on_scheduler(_detach_catalogue)


def _create_private_directory(directory: Path) -> None:
    """The store directory, created private (0700), and its ``objects`` directory, kept private.

    Its pickles are loaded by the workers, so whoever may write there may run code in them (see
    the trust model in :mod:`workbench.runtime.store`). A directory the user chose and that exists
    keeps its mode; the store's own ``objects`` directory is made 0700 (an older store made it 0755).
    """
    private_directories(directory)  # each directory it makes 0700, whatever the umask (~/.cache/locality-workbench)
    objects = directory / "objects"
    objects.mkdir(mode=0o700, exist_ok=True)
    if objects.is_symlink() or not objects.is_dir():
        raise StoreError(f"{objects} is not a directory of the store's own (a symlink?): use another store directory")
    if objects.stat().st_uid == os.getuid():
        objects.chmod(0o700)
    _refuse_untrusted(directory)


def _refuse_untrusted(directory: Path) -> None:
    """A ``StoreError`` if ``directory`` or its ``objects`` exist and another user could change what is in
    them: write them (plant a pickle that the workers would load), or own, move or replace them or a
    directory above them (swap or delete the learner's disk copies). Each must be root's or this user's
    and writable by nobody else, under directories the same holds for, unless sticky
    (``workbench.memory.tiers.others_could_swap``)."""
    for path in (directory, directory / "objects"):
        if not path.is_dir():
            continue
        if path.stat().st_mode & stat.S_IWOTH:
            raise StoreError(
                f"the store directory {path} is writable by every user, who could plant a pickle that the workers "
                f"would load (and so run code as you): chmod o-w {str(path)!r}, or choose a directory of your own"
            )
        if problem := others_could_swap(path):
            raise StoreError(
                f"the store directory {path} is not safe from other users: {problem}, and so could swap or delete "
                "your disk copies, or plant a pickle that the workers would load (and so run code as you). Choose "
                "a directory of your own (only you, or root, own it and every directory above it; none is "
                "writable by others unless sticky)"
            )


MAX_BYTES = 2**63 - 1  # what a message (and the kernel) can carry as a byte count


def _check_bytes(value: object, what: str) -> int:
    """``value`` if it is a byte count: an int from 0 to 2**63 - 1; a ``ValueError`` saying ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
        raise ValueError(f"{what} (an int from 0 to 2**63 - 1), got {value!r}")
    return value


def _check_limit(value: object) -> int | None:
    """``value`` if it is a memory limit: None (no limit) or a byte count (0: nothing stays in DRAM)."""
    if value is None:
        return None
    return _check_bytes(value, "memory_limit is bytes per backend (None: no limit; 0: every object to disk)")


def store_for(session: Session) -> Store:
    """The store that work on ``session`` uses (the store strategies ask for it).

    The store the caller opened on ``session`` (the current one), else one the session opens for
    its own use (:meth:`~workbench.runtime.session.Session.own`): it joins the store the cluster
    already has (a user's, on a shared scheduler), or puts a throwaway one in a temporary directory;
    either way it is closed with the session, and a throwaway store's directory is removed. The store
    returned is the current one (what ``PersistentObject.make_persistent`` uses), as opening it made it.
    """
    current = opened_store()
    if isinstance(current, Store) and current.session is session and not current.closed:
        return current
    store = session.own("store", lambda: _session_store(session))
    set_current_store(store)
    return store


@contextlib.contextmanager
def _session_store(session: Session) -> Iterator[Store]:
    """A store of the session's own: the cluster's, or a throwaway one; closed (and removed) on exit."""
    with tempfile.TemporaryDirectory(prefix="workbench-session-store-") as directory:
        store = Store(session, directory if registered_directory(session) is None else None)
        try:
            yield store
        finally:
            store.close()


class Store:
    """The active object store of a Dask cluster: catalogue on the scheduler, backends on workers.

    directory: where the SQLite catalogue and the disk tier live (shared by every node for a
        multi-node cluster); ``$WORKBENCH_STORE_DIR`` or ``~/.cache/locality-workbench/store``.
    memory_limit: bytes of objects a backend keeps in memory before evicting the least recently
        used to disk (default: half the worker's memory limit): its DRAM budget.
    tier: where new objects' numpy attributes go (``dram``, ``mapped``, ``cached``; see
        :mod:`workbench.runtime.store.tiering`); ``proxy.place(tier)`` moves one object.
    cache_bytes: the byte budget of each backend's DRAM cache for ``cached`` objects (default:
        ``memory_limit``).
    call_timeout: seconds an active method called with ``proxy.method.value()`` may take on its
        backend, waiting for the object's lock included (default an hour); reaching the backend has
        the session's timeout per message, so a long method is never taken for an unreachable backend.
    """

    read_blocks = staticmethod(block_arrays)  # task-side reader of a collection's blocks (travels to workers)

    def __init__(
        self,
        session: Session,
        directory: str | Path | None = None,
        memory_limit: int | None = None,
        tier: str = "dram",
        cache_bytes: int | None = None,
        call_timeout: float = CALL_SECONDS,
    ):
        self.session = session
        #: Seconds an active method called with ``.value()`` may take (its calls' budget).
        self.call_timeout = check_budget(call_timeout)
        self.client = session.client
        self._closed = False
        #: How this store's messages (and its handles') reach the catalogue and the backends.
        self.link = Link.of_client(self.client, session.timeout)
        wanted = Path(directory or default_directory()).expanduser().resolve()
        _check_limit(memory_limit)
        if cache_bytes is not None:
            _check_bytes(cache_bytes, "cache_bytes is a number of bytes per backend")
        self._tier = tiering.check_tier(tier)
        if tiering.evicts(self._tier):
            raise ValueError(
                "new objects start in memory or in a mapped file: tier='dram', 'mapped', 'cached' or 'dynamic'"
            )
        self._cache_bytes = cache_bytes
        if directory is not None:
            _refuse_untrusted(wanted)  # before anything is sent
        self._token: str | None = None  # of the registration this Store made, if it made one
        found = _registration(session)
        if found is not None and not found.exists:
            # A stale registration: its directory is gone (the throwaway store of a run that
            # crashed before closing it). Nothing in it can be used any more: replace it.
            detach(session)
            found = None
        registered = None if found is None else found.directory
        if registered is not None and directory is not None and registered != wanted:
            raise StoreError(
                f"this cluster's store already uses {registered}; one cluster has one store. "
                f"Open Store(session, directory={str(registered)!r}), close that store first, "
                f"or start another cluster for {wanted}"
            )
        #: True when this Store put the store on the cluster (and so takes it off again in close()).
        self.owns_registration = registered is None
        self.directory = registered if registered is not None else wanted
        if self.owns_registration:
            _create_private_directory(self.directory)
            self._register(memory_limit)
        install_persister(persist_anywhere)  # PersistentObject.make_persistent here: into this store
        set_current_store(self)

    def _register(self, memory_limit: int | None) -> None:
        """Put the catalogue on the scheduler and a backend on every worker (bounded waits).

        If anything fails half-way, what was registered is taken off again. If another client
        registered a store in between, registering keeps that one (idempotent): refused here.
        """
        catalogue = StoreCatalogue(str(self.directory))
        try:
            self.session.bounded(
                self.client.register_plugin,
                catalogue,
                name=PLUGIN_NAME,
                where="registering the store's catalogue on the scheduler",
            )
            in_use = _registration(self.session)
            if in_use is None or in_use.token != catalogue.token:
                self.owns_registration = False
                raise StoreError(
                    "another client put a store on this cluster meanwhile"
                    f"{f', in {in_use.directory}' if in_use else ''}; "
                    "one cluster has one store. Open Store(session) to join it"
                )
            self._token = catalogue.token
            self.session.bounded(
                self.client.register_plugin,
                StoreBackend(
                    str(self.directory),
                    memory_limit,
                    tier=self._tier,
                    cache_bytes=self._cache_bytes,
                    persister=persist_anywhere,
                    timeout=self.link.timeout,  # the store's one timeout, on both ends
                ),
                name=PLUGIN_NAME,
                where="registering the store's backends on the workers",
            )
        except BaseException:
            if self.owns_registration:
                detach(self.session)
            raise

    def backends(self) -> list[str]:
        """Addresses of the workers with a backend."""
        return self.session.workers()

    def place(self, proxies: Iterable[StoredHandle | BlockCollection], tier: str, reason: str = "") -> int:
        """Put many objects on ``tier`` (one message per backend); see :meth:`Proxy.place`. A collection
        stands for its blocks, an object named twice is placed once; returns how many objects.

        All or nothing: objects a backend evicts to disk meanwhile (its memory limit) are brought
        back and placed too; if one cannot be placed, the objects placed before it go back to the
        tiers they were on, and the error says why."""
        tiering.check_tier(tier)
        refs = _batch_refs(proxies)
        if tiering.evicts(tier):  # objects only on disk are there already: nothing to load
            by_worker: dict[str, list[list[Any]]] = {}
            for ref, record in zip(refs, self.link.records(refs)):
                record = found(record, ref)
                for w in record.workers:
                    by_worker.setdefault(w, []).append([ref.oid, record.version])
            for w, keys in by_worker.items():
                self.link.backend(w, backend_ops.op_place_many, keys=keys, tier=tier, reason=reason)
            return len(refs)
        placed: dict[str, list[list[Any]]] = {}
        pending = refs
        try:
            for _ in range(len(refs) + 2):
                by_worker = {}
                for resolved in self.link.resolve(pending):  # objects on disk are loaded first
                    for w in resolved.workers:
                        by_worker.setdefault(w, []).append([resolved.ref.oid, resolved.ref.version])
                missing: set[str] = set()
                for w, keys in by_worker.items():
                    reply = self.link.backend(w, backend_ops.op_place_many, keys=keys, tier=tier, reason=reason)
                    placed.setdefault(w, []).extend(reply["placed"])
                    missing.update(str(k[0]) for k in reply["missing"])
                if not missing:
                    return len(refs)
                pending = [r for r in refs if r.oid in missing]
            raise StoreError(
                f"{len(pending)} of {len(refs)} objects kept going to disk while they were placed on {tier!r}: "
                "raise the memory limit (store.set_memory_limit) or place fewer at once"
            )
        except BaseException:
            for w, done in placed.items():
                try:
                    self.link.backend(w, backend_ops.op_unplace_many, placed=done, tier=tier)
                except Exception:  # noqa: S112 - the backend is gone: its objects with it; the error says why
                    continue
            raise

    def cool(self, proxies: Sequence[StoredHandle]) -> list[dict[str, Any]]:
        """Make many objects' tier files cold (one message per backend); every eviction (see :meth:`Proxy.cool`)."""
        by_worker: dict[str, list[list[Any]]] = {}
        for resolved in self.link.resolve([p.ref for p in proxies]):
            for w in resolved.workers:
                by_worker.setdefault(w, []).append([resolved.ref.oid, resolved.ref.version])
        return [e for w, keys in by_worker.items() for e in self.link.backend(w, backend_ops.op_cool_many, keys=keys)]

    def set_memory_limit(self, nbytes: int | None, backends: Iterable[str] | None = None) -> dict[str, int | None]:
        """Set the DRAM budget for objects of every backend (or of ``backends``: addresses), beyond which
        the least recently used go to the disk tier (None: no limit); each backend's old limit, to set back."""
        _check_limit(nbytes)
        chosen = self.backends() if backends is None else list(backends)
        return {w: self.link.backend(w, backend_ops.op_set_memory_limit, nbytes=nbytes) for w in chosen}

    def set_cache(self, nbytes: int) -> None:
        """Set every backend's DRAM cache budget (for ``cached`` objects) to ``nbytes``."""
        _check_bytes(nbytes, "a cache budget is bytes per backend")
        for w in self.backends():
            self.link.backend(w, backend_ops.op_set_cache, nbytes=nbytes)

    def set_dynamic_budget(self, budget: int) -> None:
        """Set every backend's DRAM budget for dynamic placement (``rebalance(budget)``), unless this
        store set that budget last already (then no message is sent)."""
        if getattr(self, "_dynamic_budget", None) != budget:
            self.rebalance(budget=budget)
            self._dynamic_budget = budget

    def rebalance(self, budget: int | None = None, hot_reads: int | None = None) -> list[dict[str, Any]]:
        """Dynamic placement now, on every backend, of the objects placed ``dynamic``: by their measured
        reads and writes, hot ones into DRAM within ``budget`` bytes per backend (when given, it
        becomes each backend's budget), cold ones in place on ``mapped`` (see
        :mod:`workbench.memory.placement`). Backends also do this by themselves when an object's use
        changes class. Returns the moves made, each with its reason (also in the trace)."""
        if budget is not None:
            _check_bytes(budget, "budget is DRAM bytes per backend")
        if hot_reads is not None and (isinstance(hot_reads, bool) or not isinstance(hot_reads, int) or hot_reads < 1):
            raise ValueError(f"hot_reads is a count >= 1, got {hot_reads!r}")
        return [
            {"worker": w, **move}
            for w in self.backends()
            for move in self.link.backend(w, backend_ops.op_rebalance, budget=budget, hot_reads=hot_reads)
        ]

    def close(self) -> None:
        """Close the store; safe to call twice.

        A store that put itself on the cluster (``owns_registration``) takes itself off again: the
        backends drop their tables and the catalogue closes its SQLite file, so objects held only
        in memory are gone, while flushed objects and the catalogue stay in ``directory`` for a
        later ``Store(session, directory)``. A store that joined one already on the cluster leaves
        it there. Either way this object stops being the current store.
        """
        clear_current_store(self)
        if self._closed:
            return
        self._closed = True
        stop_shipping(self)  # the modules of classes only this store sent by value pickle by reference again
        self.link.close(
            f"this store ({self.directory}) was closed: open it again with Store(session, {str(self.directory)!r}) "
            "(flushed objects come back from disk)"
        )
        if self.owns_registration and self.client.status != "closed":
            found = _registration(self.session)
            if found is not None and found.token == self._token:  # not replaced since (a stale store is)
                detach(self.session)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- placing objects -------------------------------------------------------------------------
    def make_persistent(self, obj: PersistentObject, alias: str | None = None, backend: str | None = None) -> Proxy:
        """Place ``obj`` on ``backend`` (default: round-robin) and return its proxy."""
        return self.make_persistent_many([obj], [alias], [backend] if backend else None)[0]

    def make_persistent_many(
        self,
        objs: Sequence[PersistentObject],
        aliases: Sequence[str | None] | None = None,
        backends: Sequence[str] | None = None,
    ) -> list[Proxy]:
        """Place many objects (round-robin unless ``backends`` says where); returns their proxies in order."""
        objs = list(objs)
        aliases = list(aliases) if aliases is not None else [None] * len(objs)
        if len(aliases) != len(objs):
            raise ValueError(f"{len(objs)} objects but {len(aliases)} aliases: give one alias (or None) per object")
        for cls in {type(obj) for obj in objs}:  # once per class, not per object
            check_persistable(next(obj for obj in objs if type(obj) is cls))
        for alias in aliases:
            check_alias(alias)
        known = set(self.backends())
        if backends is None:  # round-robin from where the catalogue's turn is
            turn = self.link.catalogue(StoreCatalogue.op_turn, n=len(objs))
            workers, start = list(turn["workers"]), int(turn["start"])
            backends = [workers[(start + i) % len(workers)] for i in range(len(objs))]
        backends = list(backends)
        if len(backends) != len(objs):
            raise ValueError(
                f"{len(objs)} objects but {len(backends)} backends: give one backend per object, or none (round-robin)"
            )
        for b in backends:
            if b not in known:
                raise ValueError(f"backend {b!r} is not a worker of this cluster; backends are {sorted(known)}")
        taken = self.link.catalogue(StoreCatalogue.op_aliases)
        for alias in aliases:
            if alias is not None and alias in taken:
                raise ValueError(
                    f"alias {alias!r} is already taken: choose another, "
                    f"or delete that object (store.get_by_alias({alias!r}).delete())"
                )
        if len({a for a in aliases if a is not None}) != len([a for a in aliases if a is not None]):
            raise ValueError(f"the aliases {aliases} repeat a name: each alias names one object")
        for cls in {type(obj) for obj in objs}:
            ship_by_value(cls, self)
        by_backend: dict[str, list[int]] = {}
        for i, b in enumerate(backends):
            by_backend.setdefault(b, []).append(i)
        # Serialized here, per backend, before anything is registered: an object that cannot be
        # pickled fails the batch with nothing stored, and each backend gets one message.
        payloads = {b: _serialized_batch([objs[i] for i in indexes], indexes) for b, indexes in by_backend.items()}
        oids = new_object_ids(len(objs))
        sizes = [state_nbytes(obj) for obj in objs]
        for b, indexes in by_backend.items():
            payloads[b]["nbytes"] = [sizes[i] for i in indexes]
        # Sent by columns: what a class's objects share once, then id, size, backend and alias each.
        groups: dict[type, dict[str, Any]] = {}
        with without_gc():
            for obj, oid, size, alias, b in zip(objs, oids, sizes, aliases, backends):
                cls = type(obj)
                if cls not in groups:
                    common = catalogue_entry(cls, "", 0, None, 0, None)
                    groups[cls] = {
                        "common": {k: common[k] for k in ("version", "class_label", "kind", "methods", "meta")},
                        "entries": [],
                    }
                entry = {"oid": oid, "nbytes": size, "worker": b}
                if alias is not None:
                    entry["alias"] = alias
                groups[cls]["entries"].append(entry)
        # In the catalogue first (one transaction): a backend taking objects may evict others to
        # disk, and tells the catalogue about objects it knows.
        self.link.catalogue(StoreCatalogue.op_register_groups, groups=list(groups.values()))
        self._put_batches(by_backend, payloads, oids)
        labels = {cls: (group["common"]["class_label"], group["common"]["methods"]) for cls, group in groups.items()}
        with without_gc():
            return [
                Proxy(ObjectRef(oid, 0, alias, labels[type(obj)][0]), labels[type(obj)][1], self)
                for obj, oid, alias in zip(objs, oids, aliases)
            ]

    def _put_batches(self, by_backend: dict[str, list[int]], payloads: dict[str, Any], oids: list[str]) -> None:
        """One ``put_many`` message per backend, all in flight together; if any fails, the batch is
        taken back everywhere (catalogue and backends) before the error is raised."""
        messages = {b: {"keys": [[oids[i], 0] for i in indexes], **payloads[b]} for b, indexes in by_backend.items()}
        _, failures = self.link.backends_together(backend_ops.op_put_many, messages)
        if failures:
            with contextlib.suppress(Exception):
                self.link.catalogue(StoreCatalogue.op_delete, oids=oids)
            for b in by_backend:  # a failed backend may be gone: asked briefly, in case it took its part
                with contextlib.suppress(Exception):
                    keys = [[oids[i], 0] for i in by_backend[b]]
                    self.link.backend(b, backend_ops.op_drop_many, keys=keys, timeout=2.0 if b in failures else None)
            b, error = next(iter(failures.items()))
            if isinstance(error, BackendUnreachable):
                cause = error.__cause__
                raise BackendUnreachable(
                    f"backend {b} did not take its {len(by_backend[b])} objects ({type(cause).__name__}: {cause}); "
                    f"none of the {len(oids)} objects was stored"
                ) from cause
            raise error

    def persist_blocks(
        self,
        array: da.Array | Sequence[np.ndarray],
        alias: str | None = None,
        block_class: type[PersistentObject] | None = None,
    ) -> BlockCollection:
        """A collection whose blocks are store objects (``ArrayBlock`` by default), one per row block.

        A Dask array is persisted if needed and each block becomes an object on the worker that
        already holds it (nothing moves); a list of numpy blocks is placed round-robin.
        """
        block_class = block_class or ArrayBlock
        if not (isinstance(block_class, type) and issubclass(block_class, PersistentObject)):
            raise TypeError(
                f"block_class must be a PersistentObject subclass taking the block's array, got {block_class!r}"
            )
        check_alias(alias)
        if alias is not None and alias in self.link.catalogue(StoreCatalogue.op_aliases):
            raise ValueError(f"alias {alias!r} is already taken: choose another, or delete that collection first")
        ship_by_value(block_class, self)
        if isinstance(array, da.Array):
            oids, chunks, shape, dtype = self._blocks_in_place(array, block_class)
        else:
            oids, chunks, shape, dtype = self._blocks_round_robin(array, block_class)
        meta = {
            "blocks": oids,
            "chunks": chunks,
            "shape": shape,
            "dtype": dtype,
            "block_class": class_name(block_class),
        }
        collection_oid = uuid.uuid4().hex
        self._register_collection(collection_oid, alias, meta)
        return self._collection(collection_oid, alias, meta, block_class)

    def _blocks_in_place(
        self, array: da.Array, block_class: type[PersistentObject]
    ) -> tuple[list[str], list[int], list[int], str]:
        """The row blocks of a Dask array made objects where they are: their ids, rows per block,
        the array's shape and dtype.

        Each worker takes the blocks it holds from its own memory (the client holds their futures,
        so they stay), all in one ``Client.run``: one catalogue message per worker, and no task with
        thousands of dependencies (Dask's cost there grows with the blocks)."""
        array, blocks, row_counts = persist_row_blocks(self.session, array, "persist_blocks")
        who_has = self.client.who_has(blocks)
        oids = new_object_ids(len(blocks))
        assignments: dict[str, tuple[list[Any], list[str]]] = {}
        for block, oid in zip(blocks, oids):
            keys, ids = assignments.setdefault(sorted(who_has[block.key])[0], ([], []))
            keys.append(block.key)
            ids.append(oid)
        try:
            self.session.run(store_blocks_here, assignments, block_class, workers=list(assignments))
        except BaseException:
            self.drop_deleted(self.link.catalogue(StoreCatalogue.op_delete, oids=oids))
            raise
        chunks = list(row_counts)
        return oids, chunks, [sum(chunks), *(int(n) for n in array.shape[1:])], str(array.dtype)

    def _blocks_round_robin(
        self, blocks: Sequence[np.ndarray], block_class: type[PersistentObject]
    ) -> tuple[list[str], list[int], list[int], str]:
        """Numpy row blocks made objects, placed round-robin: their ids, rows per block, the whole
        array's shape and dtype (a ``ValueError`` unless they are row blocks of one array)."""
        arrays = [np.asarray(a) for a in blocks]
        if not arrays:
            raise ValueError("persist_blocks got no blocks")
        odd = [
            i
            for i, a in enumerate(arrays)
            if a.ndim == 0 or a.shape[1:] != arrays[0].shape[1:] or a.dtype != arrays[0].dtype
        ]
        if odd:
            raise ValueError(
                f"persist_blocks takes row blocks of one array: block {odd[0]} has shape "
                f"{arrays[odd[0]].shape} and dtype {arrays[odd[0]].dtype}, block 0 {arrays[0].shape} and "
                f"{arrays[0].dtype} (the same but for the rows, at least 1-D)"
            )
        proxies = self.make_persistent_many([block_class(a) for a in arrays])
        chunks = [len(a) for a in arrays]
        return [p.ref.oid for p in proxies], chunks, [sum(chunks), *arrays[0].shape[1:]], str(arrays[0].dtype)

    def _register_collection(self, oid: str, alias: str | None, meta: dict[str, Any]) -> None:
        """Record the collection ``oid`` of the blocks ``meta`` lists in the catalogue; if that fails
        (e.g. the alias was taken meanwhile), the blocks are deleted too."""
        try:
            self.link.catalogue(
                StoreCatalogue.op_register,
                entries=[
                    {
                        "oid": oid,
                        "version": 0,
                        "class_label": "BlockCollection",
                        "kind": "collection",
                        "nbytes": 0,
                        "methods": {},
                        "meta": meta,
                        "alias": alias,
                        "worker": None,
                    }
                ],
            )
        except BaseException:
            self.drop_deleted(self.link.catalogue(StoreCatalogue.op_delete, oids=meta["blocks"]))
            raise

    def _collection(
        self, oid: str, alias: str | None, meta: dict[str, Any], block_class: type | None = None
    ) -> BlockCollection:
        """The collection ``oid`` (``block_class``: the blocks' class when the caller just made them,
        so nothing needs asking)."""
        if block_class is not None:
            label, methods = class_name(block_class), block_class.active_methods()
            blocks = [Proxy(ObjectRef(b, 0, None, label), methods, self) for b in meta["blocks"]]
            return BlockCollection(
                self, oid, alias, blocks, tuple(meta["chunks"]), tuple(meta["shape"]), np.dtype(meta["dtype"])
            )
        records = self.link.records([ObjectRef(b) for b in meta["blocks"]])
        blocks = [
            Proxy(ObjectRef(r.oid, r.version, None, r.class_label), r.methods, self)
            if isinstance(r, Record)
            else Proxy(ObjectRef(r.oid, r.version), {}, self)
            for r in records
        ]
        return BlockCollection(
            self, oid, alias, blocks, tuple(meta["chunks"]), tuple(meta["shape"]), np.dtype(meta["dtype"])
        )

    # -- finding objects -------------------------------------------------------------------------
    def get_by_alias(self, alias: str) -> Proxy | BlockCollection:
        """The object (or block collection) called ``alias``; ``UnknownAlias`` with close matches if none."""
        check_alias(alias)
        oid = self.link.catalogue(StoreCatalogue.op_alias, alias=alias)
        (record,) = self.link.records([ObjectRef(oid)])
        if isinstance(record, Missing):
            raise UnknownAlias(f"alias {alias!r} names object {oid[:8]}, which was {record.reason}")
        if record.kind == "collection":
            return self._collection(oid, alias, record.meta)
        return Proxy(ObjectRef(oid, record.version, alias, record.class_label), record.methods, self)

    def locations(self, objects: Iterable[Proxy]) -> list[list[str]]:
        """Every backend holding each object in memory, for many objects in one catalogue query
        (pinned versions are looked up as such; an object only on disk, or deleted, is held nowhere: [])."""
        return self.link.locations([p.ref for p in objects])

    def records(self, refs: Sequence[ObjectRef]) -> list[Record | Missing]:
        """The catalogue's record of each object (current version unless pinned) with its live
        locations, or why it is missing."""
        return self.link.records(refs)

    def resolve(self, refs: Sequence[ObjectRef]) -> list[Resolved]:
        """Each object's version now and every live backend holding it; objects only on disk are
        read back first (a ``StoreError`` for a deleted one, ``ObjectLost`` for a lost one)."""
        return self.link.resolve(refs)

    def objects(self) -> pd.DataFrame:
        """Every object version in the catalogue: id, class, kind, bytes, locations, disk copy, aliases."""
        return pd.DataFrame(
            self.link.catalogue(StoreCatalogue.op_list),
            columns=["oid", "version", "current", "class", "kind", "nbytes", "workers", "disk_path", "aliases"],
        )

    def aliases(self) -> dict[str, str]:
        """Alias -> object id, for every alias in the store."""
        return dict(self.link.catalogue(StoreCatalogue.op_aliases))

    def flush(self, objects: Iterable[Proxy] | None = None) -> int:
        """Write objects (default: every object in memory) to the disk tier; returns how many."""
        refs = (
            [p.ref for p in objects]
            if objects is not None
            else [
                ObjectRef(r["oid"], r["version"], pinned=True)
                for r in self.link.catalogue(StoreCatalogue.op_list)
                if r["workers"] and r["kind"] == "object"
            ]
        )
        count = 0
        for resolved in self.link.resolve(refs):
            self.link.backend(
                resolved.workers[0], backend_ops.op_flush, oid=resolved.ref.oid, version=resolved.ref.version
            )
            count += 1
        return count

    def delete(self, objects: Iterable[Proxy]) -> None:
        """Delete objects (every version, alias, replica and disk copy)."""
        self.drop_deleted(self.link.catalogue(StoreCatalogue.op_delete, oids=[p.ref.oid for p in objects]))

    def drop_deleted(self, dropped: list[dict[str, Any]]) -> None:
        """Make the backends forget what the catalogue deleted (one message per backend) and remove
        the disk copies (only inside this store's ``objects`` directory)."""
        by_worker: dict[str, list[list[Any]]] = {}
        for d in dropped:
            for worker in d["workers"]:
                by_worker.setdefault(worker, []).append([d["oid"], d["version"]])
        for worker, keys in by_worker.items():
            try:
                self.link.backend(worker, backend_ops.op_drop_many, keys=keys)
            except BackendUnreachable:  # the backend left meanwhile: nothing to drop there
                pass
        for d in dropped:
            if d["disk_path"] and in_objects_directory(self.directory, d["disk_path"]):  # never a file elsewhere
                Path(d["disk_path"]).unlink(missing_ok=True)

    def clear(self) -> int:
        """Delete every object of the store; returns how many objects were deleted."""
        oids = sorted({r["oid"] for r in self.link.catalogue(StoreCatalogue.op_list)})
        self.drop_deleted(self.link.catalogue(StoreCatalogue.op_delete, oids=oids))
        return len(oids)

    def backend_tables(self) -> pd.DataFrame:
        """What each backend holds in memory right now (asked of the backends themselves)."""
        rows = []
        for worker in self.backends():
            rows += [{"worker": worker, **r} for r in self.link.backend(worker, backend_ops.op_table)]
        return pd.DataFrame(rows, columns=["worker", "oid", "version", "class", "nbytes", "on_disk"])


# -- helpers -------------------------------------------------------------------------------------
def _serialized_batch(objs: list[Any], indexes: list[int]) -> dict[str, Any]:
    """``objs`` pickled once, as one message part: cloudpickle (classes defined in a notebook travel by
    value), protocol 5 with numpy buffers out of band (sent as frames, not copied into the pickle).
    A ``TypeError`` names the first object that cannot be pickled (``indexes``: their places in the
    caller's batch)."""
    import cloudpickle

    buffers: list[Any] = []
    try:
        data = cloudpickle.dumps(objs, protocol=5, buffer_callback=buffers.append)
    except Exception as error:
        for index, obj in zip(indexes, objs):
            try:
                cloudpickle.dumps(obj, protocol=5)
            except Exception as culprit:
                raise TypeError(
                    f"object {index} of the batch ({type(obj).__name__}) cannot be pickled to ship it to a backend "
                    f"({culprit}); nothing was stored. Store only picklable state: drop open files, locks, sockets "
                    "or lambdas from its attributes, or recreate them in a method"
                ) from culprit
        raise TypeError(f"the batch cannot be pickled ({error}); nothing was stored") from error
    return {"data": data, "buffers": [serialized(b.raw()) for b in buffers]}


def _batch_refs(items: Iterable[Any]) -> list[ObjectRef]:
    """The objects a batch names, each once, in order: proxies, and the blocks of collections."""
    refs: dict[tuple[str, int | None], ObjectRef] = {}
    for item in items:
        for one in item.blocks if isinstance(item, BlockCollection) else [item]:
            ref = getattr(one, "ref", None)
            if not isinstance(ref, ObjectRef):
                raise TypeError(
                    f"store.place takes proxies and collections, got {type(one).__name__} {one!r}: "
                    "pass the proxies make_persistent returned (or a collection of them)"
                )
            refs.setdefault((ref.oid, ref.version if ref.pinned else None), ref)
    return list(refs.values())
