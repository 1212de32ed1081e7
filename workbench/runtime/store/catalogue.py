"""The store's catalogue: a scheduler plugin that knows every object, persisted in SQLite.

It holds, per object id and version: the class, its active methods, size, kind (object or block
collection), disk copy, which version is current, and aliases; these are written to an SQLite file
so they survive a cluster restart. Locations (which workers hold a copy in memory) live only in
memory: a restarted cluster has new workers, and an object comes back from its disk copy when it is
next used. Clients and backends reach the catalogue through one scheduler handler,
``workbench_store``, whose operations are its methods decorated with
:func:`~workbench.runtime.store.wire.catalogue_op` (``op_records`` is the operation ``records``: see
:mod:`~workbench.runtime.store.wire`); a worker that leaves is dropped from every location at once.
An operation that changes the file is answered once its change is committed (see
:mod:`~workbench.runtime.store.catalogue_file`): what a caller was told is done survives a killed scheduler.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

import workbench.runtime.store.wire as wire
from workbench.names import did_you_mean
from workbench.runtime.dask_seam import add_scheduler_handler, release_unrunnable, worker_addresses
from workbench.runtime.store.catalogue_file import Batch, CatalogueFile, Statement
from workbench.runtime.store.model import check_alias
from workbench.runtime.store.protocol import (
    ACTIVE_KEY_MARK,
    HANDLER,
    PLUGIN_NAME,
    LoadClaim,
    Missing,
    Record,
    answer,
    encode_locations,
    without_gc,
)
from workbench.runtime.store.wire import catalogue_op


def release_stuck_calls(scheduler: Any) -> list[str]:
    """Active calls pinned to backends that have all left run on any worker now; their keys.

    Dask keeps a task whose every allowed worker left waiting ("no-worker") for ever. An active
    call's body finds its object gone from its backend and uses a replica or a disk copy, or fails
    with an error naming the object and the lost backend. The scheduler's task state is changed
    through :func:`~workbench.runtime.dask_seam.release_unrunnable` (``unrunnable``,
    ``set_restrictions``, ``transitions``, as distributed's shuffle does): the one place the store
    changes it.
    """
    return release_unrunnable(scheduler, lambda key, allowed, live: ACTIVE_KEY_MARK in key and not (allowed & live))


DELETE_OBJECT = "DELETE FROM objects WHERE oid=? AND version=?"


def _check_count(operation: str, n: int) -> None:
    """A ``ValueError`` for a count of backends below 0 (it would answer none, or turn the round robin back)."""
    if n < 0:
        raise ValueError(f"the store catalogue's {operation!r} takes n, a count of backends >= 0, got {n!r}")


class StoreCatalogue(SchedulerPlugin):
    """Scheduler-side catalogue of the store, kept in ``directory/catalogue.sqlite``."""

    name = PLUGIN_NAME
    idempotent = True  # registering again (a second Store on the same cluster) keeps this one

    def __init__(self, directory: str):
        self.directory = str(directory)
        self.token = uuid.uuid4().hex  # tells this registration from a later one of the same directory
        self.objects: dict[tuple[str, int], dict[str, Any]] = {}
        self.current: dict[str, int] = {}
        self.aliases: dict[str, str] = {}
        # Indexes, so that no operation scans every object: the versions of each object, the
        # aliases of each object.
        self.versions: dict[str, set[int]] = {}
        self.aliases_of: dict[str, set[str]] = {}
        self.locations: dict[tuple[str, int], set[str]] = {}
        self.lost_from: dict[tuple[str, int], list[str]] = {}  # the last locations of objects no live worker holds
        self.loading: dict[tuple[str, int], str] = {}  # objects being read back from disk -> the one backend doing it
        self.last_holder: dict[tuple[str, int], str] = {}  # objects evicted to disk -> the backend they left
        self._turn = 0
        # Messages the catalogue was sent, by operation (issue 36: counts that predict scale)
        self.received: Counter[str] = Counter()
        self.file: CatalogueFile | None = None  # the SQLite file, open from start() to close()
        self._written: Future[None] | None = None  # the last write the operation running now handed over

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, scheduler: Any) -> None:
        """Open the SQLite file, read it into memory, and register the handler on the scheduler."""
        self.scheduler = scheduler
        self.file = CatalogueFile(self.directory)
        try:
            self.objects, self.current, self.aliases = self.file.read()
        except RuntimeError:
            self.file.close()
            raise
        for oid, version in self.objects:
            self.versions.setdefault(oid, set()).add(version)
        for alias, oid in self.aliases.items():
            self.aliases_of.setdefault(oid, set()).add(alias)
        add_scheduler_handler(scheduler, HANDLER, self.handle)

    async def close(self) -> None:
        """Close the SQLite file (every write handed over is committed first)."""
        self.close_database()

    def close_database(self) -> None:
        """Close the SQLite file, its writes committed (the scheduler closes, or the store is taken off
        the cluster)."""
        if self.file is not None:
            self.file.close()

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        """Forget ``worker``'s copies; active calls stuck waiting for it may run elsewhere."""
        for key, held_by in self.locations.items():
            if worker in held_by:
                held_by.discard(worker)
                if not held_by:  # remembered for the error that names the backend it was lost with
                    self.lost_from[key] = [worker]
        release_stuck_calls(scheduler)

    # -- the handler -----------------------------------------------------------------------------
    async def handle(self, action: str, **kwargs: Any) -> dict[str, Any]:
        """The ``workbench_store`` handler: the reply of :meth:`run` by the one error rule of both ends
        (:func:`~workbench.runtime.store.protocol.answer`)."""
        return await answer(lambda: self.run(action, kwargs))

    def run(self, action: str, kwargs: dict[str, Any]) -> Any:
        """The result of the catalogue operation called ``action`` (found in :data:`wire.CATALOGUE
        <workbench.runtime.store.wire.CATALOGUE>`, its arguments checked), run on the scheduler's event
        loop: one operation at a time, so each is atomic (``claim_load`` relies on it). An operation
        that wrote to the file gives an awaitable of its result, done once that write is committed
        (the reply waits for it; the event loop does not)."""
        operation = wire.CATALOGUE.find(action)
        arguments = operation.checked(kwargs)
        self.received[operation.name] += 1
        self._written = None
        result = operation.handler(self, **arguments)
        written, self._written = self._written, None
        if written is None:
            return result
        return self._when_committed(written, result)

    async def _when_committed(self, written: Future[None], result: Any) -> Any:
        """``result`` once ``written`` is committed (a ``StoreError`` if it could not be)."""
        assert self.file is not None
        await self.file.committed(written)
        return result

    def _set_alias(self, alias: str, oid: str) -> None:
        """``alias`` names ``oid`` (in both maps; an alias names one object)."""
        previous = self.aliases.get(alias)
        if previous is not None and previous != oid:
            self.aliases_of.get(previous, set()).discard(alias)
        self.aliases[alias] = oid
        self.aliases_of.setdefault(oid, set()).add(alias)

    def _commit(self, statements: Sequence[Statement] = (), batches: Sequence[Batch] = ()) -> None:
        """Write ``statements`` then ``batches`` to the SQLite file as one transaction, off the event
        loop (in order); the operation's reply waits until it is committed (see :meth:`run`)."""
        assert self.file is not None
        written = self.file.write(statements, batches)
        if written is not None:
            self._written = written

    def _live_workers(self) -> list[str]:
        return sorted(worker_addresses(self.scheduler))

    # -- operations (each defined by its handler, see workbench.runtime.store.wire) ---------------------
    @catalogue_op()
    def op_backends(self, n: int = 1, exclude: list[str] | None = None) -> list[str]:
        """``n`` backends in round-robin order (skipping ``exclude`` when others exist)."""
        _check_count("backends", n)
        workers = self._live_workers()
        if not workers:
            raise RuntimeError("the cluster has no workers: the store has no backend to place objects on")
        candidates = [w for w in workers if w not in set(exclude or ())] or workers
        chosen = [candidates[(self._turn + i) % len(candidates)] for i in range(n)]
        self._turn += n
        return chosen

    @catalogue_op()
    def op_turn(self, n: int, exclude: list[str] | None = None) -> dict[str, Any]:
        """The backends and where ``n`` placements start in their round-robin order (the caller
        places object ``i`` on ``workers[(start + i) % len(workers)]``): the answer to ``backends(n)``
        without a list of ``n`` addresses."""
        _check_count("turn", n)
        workers = self._live_workers()
        if not workers:
            raise RuntimeError("the cluster has no workers: the store has no backend to place objects on")
        candidates = [w for w in workers if w not in set(exclude or ())] or workers
        start = self._turn
        self._turn += n
        return {"workers": candidates, "start": start}

    @catalogue_op()
    def op_register_groups(self, groups: list[dict[str, Any]]) -> int:
        """``op_register`` of a batch sent by columns: each group's ``common`` fields (class, methods,
        kind, version ...) once, then its ``entries`` (id, size, worker, alias); one commit for all."""
        entries = []
        with without_gc():
            for group in groups:
                common = dict(group.get("common") or {})
                entries.extend({**common, **e} for e in group["entries"])
        return self.op_register(entries)

    @catalogue_op()
    def op_register(self, entries: list[dict[str, Any]]) -> int:
        """Add objects (id, version, class, methods, size, kind, meta, worker, alias) in one commit."""
        for e in entries:
            alias = e.get("alias")
            check_alias(alias)  # the clients check first; a message from elsewhere is checked here too
            if alias is not None and alias in self.aliases and self.aliases[alias] != e["oid"]:
                raise ValueError(
                    f"alias {alias!r} is already taken by object {self.aliases[alias][:8]}: choose another alias, "
                    f"or delete that object first (store.get_by_alias({alias!r}).delete())"
                )
        now = time.time()
        object_rows, current_rows, alias_rows = [], [], []
        dumped: dict[int, str] = {}  # a batch's entries share their methods and meta: dumped once

        def dump(value: Any) -> str:
            text = dumped.get(id(value))
            if text is None:
                text = dumped[id(value)] = json.dumps(value)
            return text

        with without_gc():
            for e in entries:
                key = (e["oid"], int(e["version"]))
                record = {
                    "class_label": e["class_label"],
                    "kind": e.get("kind", "object"),
                    "nbytes": int(e["nbytes"]),
                    "methods": e.get("methods", {}),
                    "meta": e.get("meta", {}),
                    "disk_path": e.get("disk_path"),
                    "created": now,
                }
                self.objects[key] = record
                self.versions.setdefault(key[0], set()).add(key[1])
                if e.get("worker"):
                    self.locations.setdefault(key, set()).add(e["worker"])
                object_rows.append(
                    (
                        key[0],
                        key[1],
                        record["class_label"],
                        record["kind"],
                        record["nbytes"],
                        dump(record["methods"]),
                        dump(record["meta"]),
                        record["disk_path"],
                        now,
                    )
                )
                if e.get("current", True):
                    self.current[key[0]] = key[1]
                    current_rows.append(key)
                if e.get("alias") is not None:
                    self._set_alias(e["alias"], key[0])
                    alias_rows.append((e["alias"], key[0]))
        self._commit(  # one transaction
            batches=[
                ("INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?,?,?,?,?)", object_rows),
                ("INSERT OR REPLACE INTO current VALUES (?,?)", current_rows),
                ("INSERT OR REPLACE INTO aliases VALUES (?,?)", alias_rows),
            ]
        )
        return len(entries)

    @catalogue_op(resend=True)
    def op_alias(self, alias: str) -> str:
        """The object id of ``alias``; an error with close matches when there is none."""
        if alias in self.aliases:
            return self.aliases[alias]
        hint = did_you_mean(alias, self.aliases, n=3)
        raise KeyError(
            f"no object has alias {alias!r}"
            + (f"; {hint}" if hint else f"; the store has {len(self.aliases)} aliases (store.aliases() lists them)")
        )

    @catalogue_op(resend=True)
    def op_set_alias(self, alias: str, oid: str) -> None:
        """Give object ``oid`` the alias ``alias``."""
        check_alias(alias)
        if alias in self.aliases and self.aliases[alias] != oid:
            raise ValueError(f"alias {alias!r} is already taken by object {self.aliases[alias][:8]}")
        self._set_alias(alias, oid)
        self._commit([("INSERT OR REPLACE INTO aliases VALUES (?,?)", (alias, oid))])

    @catalogue_op(resend=True)
    def op_records(self, refs: list[tuple[str, int | None]]) -> list[dict[str, Any]]:
        """For each ``[oid, version or None]``: its :class:`Record` with live locations, or why it is
        :class:`Missing` (as message parts)."""
        live = set(worker_addresses(self.scheduler))
        out = []
        for oid, version in refs:
            if version is None:
                if oid not in self.current:
                    out.append(Missing(oid, None, "deleted").to_wire())
                    continue
                version = self.current[oid]
            key = (oid, int(version))
            record = self.objects.get(key)
            if record is None:
                out.append(Missing(oid, version, "deleted").to_wire())
                continue
            held_by = sorted(self.locations.get(key, set()) & live)
            out.append(
                Record(
                    oid=oid,
                    version=key[1],
                    workers=held_by,
                    current=self.current.get(oid) == key[1],
                    lost_from=[] if held_by else self.lost_from.get(key, []),
                    aliases=sorted(self.aliases_of.get(oid, ())),
                    **record,
                ).to_wire()
            )
        return out

    @catalogue_op(resend=True)
    def op_locations(self, oids: str) -> dict[str, Any]:
        """Live locations of each object's current version, for ``oids`` joined by newlines, in the
        compact reply of :func:`~workbench.runtime.store.protocol.encode_locations`. A location
        query costs what it asks for, not what the catalogue holds.
        """
        if not isinstance(oids, str):
            raise ValueError(f"locations takes object ids joined by newlines, got {type(oids).__name__}")
        current, locations = self.current.get, self.locations.get
        empty: frozenset[str] = frozenset()
        with without_gc():
            held_by = [
                None if (version := current(oid)) is None else locations((oid, version), empty)
                for oid in (oids.split("\n") if oids else ())
            ]
        return encode_locations(held_by, set(worker_addresses(self.scheduler)))

    @catalogue_op(resend=True)
    def op_add_location(self, oid: str, version: int, worker: str) -> None:
        """``worker`` holds the object now; a ``KeyError`` if it was deleted meanwhile (the backend then
        drops its copy: a location of a deleted object would keep that copy alive for ever)."""
        key = (oid, int(version))
        if key not in self.objects:
            raise KeyError(f"object {oid[:8]} v{version} was deleted meanwhile: it is no longer in the store")
        self.locations.setdefault(key, set()).add(worker)
        for pending in (self.lost_from, self.loading, self.last_holder):
            pending.pop(key, None)

    @catalogue_op()
    def op_claim_load(self, oid: str, version: int, worker: str | None = None) -> dict[str, Any]:
        """Where an object only on disk comes back: one backend, whoever asks.

        This handler runs on the scheduler's one event loop, so the choice is atomic: it is
        recorded, and every later caller until the object is loaded gets the same backend. (Two
        callers that each reloaded on their own backend made two diverging copies, and concurrent
        writes were lost.) The backend is the one the object was evicted from while it lives, so
        calls already pinned there still find it; else the asking backend ``worker``; else the
        next in turn. Returns a :class:`LoadClaim` (as a message part): the locations when it is in
        memory somewhere already, else the backend to load it on and its disk copy.
        """
        key = (oid, int(version))
        record = self.objects.get(key)
        if record is None:
            raise KeyError(f"object {oid[:8]} v{version} is not in the store (deleted?)")
        live = set(worker_addresses(self.scheduler))
        held_by = sorted(self.locations.get(key, set()) & live)
        if held_by:
            return LoadClaim(held_by).to_wire()
        if not record["disk_path"]:
            return LoadClaim([], lost_from=tuple(self.lost_from.get(key, []))).to_wire()
        target = self.loading.get(key)
        if target not in live:
            preferred = [w for w in (self.last_holder.get(key), worker) if w in live]
            target = preferred[0] if preferred else self.op_backends(1)[0]
            self.loading[key] = target
        return LoadClaim([], load_on=target, disk_path=record["disk_path"]).to_wire()

    @catalogue_op(resend=True)
    def op_remove_location(self, oid: str, version: int, worker: str) -> None:
        """A backend no longer holds this version."""
        key = (oid, int(version))
        held_by = self.locations.get(key, set())
        held_by.discard(worker)
        if not held_by and key in self.objects:  # evicted: it comes back here (see op_claim_load)
            self.last_holder[key] = worker

    @catalogue_op(resend=True)
    def op_set_disk(self, oid: str, version: int, disk_path: str | None) -> bool:
        """Record the object's disk copy (None: it has none); False when the object was deleted meanwhile."""
        key = (oid, int(version))
        if key not in self.objects:
            return False
        self.objects[key]["disk_path"] = disk_path
        self._commit([("UPDATE objects SET disk_path=? WHERE oid=? AND version=?", (disk_path, oid, int(version)))])
        return True

    @catalogue_op(resend=True)
    def op_set_nbytes(self, oid: str, version: int, nbytes: int) -> None:
        """Record the size of a version after a writing method."""
        key = (oid, int(version))
        if key in self.objects:
            self.objects[key]["nbytes"] = int(nbytes)
            self._commit([("UPDATE objects SET nbytes=? WHERE oid=? AND version=?", (int(nbytes), oid, int(version)))])

    @catalogue_op()
    def op_new_version(self, oid: str, version: int, worker: str) -> int:
        """Register version ``max + 1`` of ``oid``, copied from ``version`` on ``worker`` (not current yet)."""
        source = self.objects.get((oid, int(version)))
        if source is None:
            raise KeyError(f"object {oid[:8]} has no version {version}")
        new = 1 + max(self.versions[oid])
        self.op_register(
            [{**source, "oid": oid, "version": new, "worker": worker, "current": False, "disk_path": None}]
        )
        return new

    @catalogue_op()
    def op_consolidate(self, oid: str, version: int) -> list[dict[str, Any]]:
        """Make ``version`` current; the replaced version is dropped. Returns what backends must drop."""
        if (oid, int(version)) not in self.objects:
            raise KeyError(f"object {oid[:8]} has no version {version} (consolidated or deleted already?)")
        old = self.current.get(oid)
        self.current[oid] = int(version)
        statements: list[Statement] = [("INSERT OR REPLACE INTO current VALUES (?,?)", (oid, int(version)))]
        dropped = []
        if old is not None and old != int(version):
            dropped.append(self._forget((oid, old), set(worker_addresses(self.scheduler))))
            statements.append((DELETE_OBJECT, (oid, old)))
        self._commit(statements)
        return dropped

    @catalogue_op()
    def op_delete(self, oids: list[str]) -> list[dict[str, Any]]:
        """Forget every version of ``oids`` and their aliases; returns what backends must drop."""
        live = set(worker_addresses(self.scheduler))
        objects: list[tuple[Any, ...]] = []
        aliases: list[tuple[Any, ...]] = []
        dropped = []
        with without_gc():
            for oid in oids:
                for version in sorted(self.versions.get(oid, ())):
                    dropped.append(self._forget((oid, version), live))
                    objects.append((oid, version))
                self.current.pop(oid, None)
                for alias in sorted(self.aliases_of.pop(oid, ())):
                    del self.aliases[alias]
                    aliases.append((alias,))
            current = [(oid,) for oid in oids]
        self._commit(  # one transaction
            batches=[
                (DELETE_OBJECT, objects),
                ("DELETE FROM current WHERE oid=?", current),
                ("DELETE FROM aliases WHERE alias=?", aliases),
            ]
        )
        return dropped

    def _forget(self, key: tuple[str, int], live: set[str]) -> dict[str, Any]:
        """Forget version ``key`` in memory (its row is the caller's to delete); what its backends must drop."""
        record = self.objects.pop(key)
        versions = self.versions.get(key[0])
        if versions is not None:
            versions.discard(key[1])
            if not versions:
                del self.versions[key[0]]
        for pending in (self.lost_from, self.loading, self.last_holder):
            pending.pop(key, None)
        held_by = sorted(self.locations.pop(key, set()) & live)
        return {"oid": key[0], "version": key[1], "workers": held_by, "disk_path": record["disk_path"]}

    @catalogue_op(resend=True)
    def op_list(self) -> list[dict[str, Any]]:
        """Every object version: id, version, class, kind, size, locations, disk copy, aliases."""
        live = set(worker_addresses(self.scheduler))
        by_oid = self.aliases_of
        return [
            {
                "oid": oid,
                "version": version,
                "current": self.current.get(oid) == version,
                "class": r["class_label"],
                "kind": r["kind"],
                "nbytes": r["nbytes"],
                "workers": sorted(self.locations.get((oid, version), set()) & live),
                "disk_path": r["disk_path"],
                "aliases": sorted(by_oid.get(oid, [])),
            }
            for (oid, version), r in sorted(self.objects.items(), key=lambda kv: kv[1]["created"])
        ]

    @catalogue_op(resend=True)
    def op_aliases(self) -> dict[str, str]:
        """Alias -> object id, for every alias."""
        return dict(self.aliases)

    @catalogue_op(resend=True)
    def op_directory(self) -> str:
        """The store's directory."""
        return self.directory
