"""The store's two ends tested without a cluster: the catalogue's and the backends' handlers, in this
process, behind stand-ins for Dask's scheduler, workers and comms (as distributed's shuffle tests its
run logic against stand-ins for remote calls). The cluster tests keep the wiring.

The stand-in comm sends every message and reply through Dask's own serialisation (``dumps`` then
``loads``), so what a handler gets and what a caller raises are what they would be over TCP.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import sqlite3
import tempfile
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed.core import Status
from distributed.protocol import dumps, loads
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule
from store_helpers import Counter

from workbench.runtime.store import BackendUnreachable, NotHere, StoreError, UnknownAlias
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.catalogue import StoreCatalogue, release_stuck_calls
from workbench.runtime.store.catalogue_file import CatalogueFile
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef, catalogue_entry
from workbench.runtime.store.protocol import ACTIVE_KEY_MARK, BackendOp, Call, CatalogueOp, Missing, Record, answer

A, B, GONE = "tcp://10.0.0.1:1", "tcp://10.0.0.2:1", "tcp://10.0.0.3:1"  # names only: nothing is reached
TIMEOUT = 30.0  # the stand-in link's timeout: a bound, never waited for unless a test fails


# -- stand-ins ---------------------------------------------------------------------------------------
class StandInScheduler:
    """What the catalogue uses of Dask's scheduler: its workers, its handlers, the tasks no worker can
    run, and the public calls that change a task's restrictions and state."""

    def __init__(self, workers: list[str]):
        self.workers = dict.fromkeys(workers)
        self.handlers: dict[str, Any] = {}
        self.unrunnable: dict[Any, float] = {}
        self.restrictions: dict[str, Any] = {}
        self.recommended: dict[str, str] = {}

    def set_restrictions(self, worker: dict[str, Any]) -> None:
        self.restrictions.update(worker)
        for ts in self.unrunnable:
            if ts.key in worker:
                ts.worker_restrictions = worker[ts.key]

    def transitions(self, recommendations: dict[str, str], stimulus_id: str) -> None:
        assert stimulus_id
        self.recommended.update(recommendations)


@dataclass(eq=False)
class StandInTask:
    """What the catalogue reads of a Dask task state: its key and the workers it may run on."""

    key: str
    worker_restrictions: set[str] | None


class StandInWorker:
    """What a backend uses of its Dask worker: its address, threads, memory limit, handlers, event log."""

    def __init__(self, address: str):
        self.address = address
        self.handlers: dict[str, Any] = {}
        self.state = types.SimpleNamespace(nthreads=1)
        self.memory_manager = types.SimpleNamespace(memory_limit=None)
        self.events: list[tuple[str, Any]] = []

    def log_event(self, topic: str, msg: Any) -> None:
        self.events.append((topic, msg))


class Comm:
    """A connection a backend may write its reply to itself (``send_locked``)."""

    def __init__(self) -> None:
        self.written: Any = None

    async def write(self, msg: Any, serializers: Any = None) -> int:
        self.written = loads(dumps(msg))
        return 0


class Endpoint:
    """The ``workbench_store`` handler of one end, as an rpc to it: the catalogue (``address`` None) or
    the backend at ``address`` (an address with no backend refuses the connection)."""

    def __init__(self, wire: Wire, address: str | None):
        self.wire, self.address = wire, address

    async def workbench_store(self, action: str, **kwargs: Any) -> Any:
        kwargs = loads(dumps(kwargs))
        if self.address is None:
            return loads(dumps(await self.wire.catalogue.handle(action=action, **kwargs)))
        backend = self.wire.backends.get(self.address)
        if backend is None:
            raise OSError(f"connection to {self.address} refused")
        comm = Comm()
        reply = await backend.handle(comm, action=action, **kwargs)
        return comm.written if reply is Status.dont_reply else loads(dumps(reply))


class Wire:
    """Messages between a catalogue and backends in this process, each end reached by a :class:`Link`."""

    def __init__(self, catalogue: StoreCatalogue):
        self.catalogue = catalogue
        self.backends: dict[str, StoreBackend] = {}

    def link(self, here: str | None = None, load_here: Any = None) -> Link:
        """A link as a client's (``here`` None) or the backend ``here``'s."""
        return Link(
            lambda: Endpoint(self, None),
            lambda address: Endpoint(self, address),
            lambda function: asyncio.run(function()),
            TIMEOUT,
            here=here,
            load_here=load_here,
        )

    def add_backend(self, address: str, directory: str, memory_limit: int | None = None) -> StoreBackend:
        backend = StoreBackend(directory, memory_limit=memory_limit, timeout=TIMEOUT)
        backend.attach(StandInWorker(address), self.link(address, load_here=backend.op_load))
        self.backends[address] = backend
        return backend


def start_catalogue(directory: Path, workers: list[str]) -> StoreCatalogue:
    catalogue = StoreCatalogue(str(directory))
    asyncio.run(catalogue.start(StandInScheduler(workers)))
    return catalogue


@pytest.fixture
def wire(tmp_path):
    """A catalogue and two backends (A, B) in this process; a client's link is ``wire.client``."""
    wire = Wire(start_catalogue(tmp_path, [A, B]))
    for address in (A, B):
        wire.add_backend(address, str(tmp_path))
    wire.client = wire.link()
    yield wire
    for backend in wire.backends.values():
        backend.teardown(backend.worker)
    wire.catalogue.close_database()


def register(link: Link, obj: Any, worker: str | None, alias: str | None = None) -> ObjectRef:
    """Record ``obj`` in the catalogue as held by ``worker``; its reference."""
    oid = uuid.uuid4().hex
    entry = catalogue_entry(type(obj), oid, 0, worker, 8, alias)
    link.catalogue(CatalogueOp.REGISTER, entries=[entry])
    return ObjectRef(oid, 0, alias)


def put(wire: Wire, obj: Any, worker: str, alias: str | None = None) -> ObjectRef:
    """``obj`` stored on backend ``worker`` as the client does it: registered, then sent."""
    ref = register(wire.client, obj, worker, alias)
    wire.client.backend(worker, BackendOp.PUT, oid=ref.oid, version=0, obj=obj)
    return ref


def call(link: Link, ref: ObjectRef, worker: str, method: str, writes: bool = False, *args: Any) -> Any:
    """``method`` of the object ``ref`` run on backend ``worker`` as ``proxy.method.value`` runs it (one
    :class:`Call`, sent by the link's one loop)."""
    return link.call(lambda again: (ref, worker), Call.new(method, writes, args, {}))


# -- the one error rule ------------------------------------------------------------------------------
def test_every_error_of_an_operation_becomes_its_reply_and_a_cancellation_passes(wire):
    with pytest.raises(ValueError, match="the store catalogue has no operation 'nope'"):
        wire.client.catalogue("nope")
    with pytest.raises(ValueError, match="a store backend has no operation 'nope'"):
        wire.client.backend(A, "nope")
    with pytest.raises(TypeError, match="unexpected keyword"):  # not only KeyError/ValueError/RuntimeError
        wire.client.catalogue(CatalogueOp.ALIASES, extra=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        wire.client.backend(A, BackendOp.TABLE, extra=1)

    async def cancelled() -> None:
        raise asyncio.CancelledError

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(answer(cancelled))
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(answer(interrupted))


# -- the catalogue -----------------------------------------------------------------------------------
def test_register_records_and_aliases(wire):
    ref = register(wire.client, Counter(np.ones(2)), A, alias="counter")
    (record,) = wire.client.records([ref])
    assert isinstance(record, Record) and record.workers == [A] and record.aliases == ["counter"]
    assert record.class_label.endswith("Counter") and record.methods["scale"] is True
    assert wire.client.catalogue(CatalogueOp.ALIAS, alias="counter") == ref.oid
    with pytest.raises(UnknownAlias, match="did you mean 'counter'"):
        wire.client.catalogue(CatalogueOp.ALIAS, alias="countr")
    with pytest.raises(ValueError, match="already taken"):
        register(wire.client, Counter(np.ones(2)), B, alias="counter")
    assert isinstance(wire.client.record(ObjectRef("0" * 32)), Missing)


def test_locations_answer_per_object_in_the_compact_reply(wire):
    one, two = (register(wire.client, Counter(np.ones(1)), w) for w in (A, B))
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=two.oid, version=0, worker=A)
    gone = register(wire.client, Counter(np.ones(1)), A)
    wire.client.catalogue(CatalogueOp.DELETE, oids=[gone.oid])
    assert wire.client.locations([one, two, gone]) == [[A], [A, B], []]
    with pytest.raises(KeyError, match="deleted meanwhile"):
        wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=gone.oid, version=0, worker=A)


def test_a_disk_copy_is_claimed_for_one_backend_whoever_asks(wire):
    ref = register(wire.client, Counter(np.ones(1)), A)
    wire.client.catalogue(CatalogueOp.SET_DISK, oid=ref.oid, version=0, disk_path="/s/objects/x.pkl")
    wire.client.catalogue(CatalogueOp.REMOVE_LOCATION, oid=ref.oid, version=0, worker=A)
    claims = [wire.client.catalogue(CatalogueOp.CLAIM_LOAD, oid=ref.oid, version=0, worker=w) for w in (B, None, B)]
    assert {c["load_on"] for c in claims} == {A}  # where it was evicted from, for every caller
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=ref.oid, version=0, worker=A)
    claim = wire.client.catalogue(CatalogueOp.CLAIM_LOAD, oid=ref.oid, version=0, worker=B)
    assert list(claim["workers"]) == [A] and claim["load_on"] is None


def test_a_worker_that_leaves_loses_its_copies_and_frees_the_calls_pinned_to_it(wire):
    kept, lost = (register(wire.client, Counter(np.ones(1)), GONE) for _ in range(2))
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=kept.oid, version=0, worker=A)
    scheduler = wire.catalogue.scheduler
    pinned = StandInTask(f"total{ACTIVE_KEY_MARK}abc", {GONE})
    elsewhere = StandInTask(f"total{ACTIVE_KEY_MARK}def", {A, GONE})
    plain = StandInTask("sum-abc", {GONE})
    scheduler.unrunnable = dict.fromkeys([pinned, elsewhere, plain], 0.0)
    wire.catalogue.remove_worker(scheduler, GONE)
    assert [r.workers for r in wire.client.records([kept, lost])] == [[A], []]
    assert wire.client.record(lost).lost_from == [GONE]
    assert scheduler.restrictions == {pinned.key: None} and scheduler.recommended == {pinned.key: "processing"}
    assert release_stuck_calls(scheduler) == []  # released once


def test_the_scheduler_api_the_catalogue_uses_is_dasks():
    """``release_stuck_calls`` uses these of Dask's scheduler; this fails when Dask changes them."""
    from distributed.scheduler import Scheduler, SchedulerState

    assert list(inspect.signature(Scheduler.set_restrictions).parameters) == ["self", "worker"]
    assert list(inspect.signature(Scheduler.transitions).parameters) == ["self", "recommendations", "stimulus_id"]
    assert "ts.worker_restrictions = " in inspect.getsource(Scheduler.set_restrictions)
    assert "self.unrunnable" in inspect.getsource(SchedulerState.__init__)


def test_catalogue_writes_are_ordered_flushed_on_close_and_a_failed_one_is_reported(tmp_path):
    catalogue = start_catalogue(tmp_path, [A])
    link = Wire(catalogue).link()
    refs = [register(link, Counter(np.ones(1)), A, alias=f"a{i}") for i in range(50)]
    link.catalogue(CatalogueOp.DELETE, oids=[r.oid for r in refs[:10]])
    catalogue.close_database()
    again = start_catalogue(tmp_path, [A])
    assert set(again.aliases) == {f"a{i}" for i in range(10, 50)} and len(again.objects) == 40
    again.close_database()

    file = CatalogueFile(tmp_path / "other")
    file.write([("INSERT INTO no_such_table VALUES (?)", (1,))])
    with pytest.raises(StoreError, match="could not be written.*no such table"):
        file.flush()
    with pytest.raises(StoreError, match="could not be written"):
        file.write([("DELETE FROM current WHERE oid=?", ("x",))])
    with pytest.raises(StoreError, match="could not be written"):
        file.close()
    assert file.closed


def test_a_catalogue_file_that_is_not_one_is_refused(tmp_path):
    with sqlite3.connect(tmp_path / "catalogue.sqlite") as db:
        db.execute("CREATE TABLE objects (oid TEXT)")
        db.execute("INSERT INTO objects VALUES ('x')")
    with pytest.raises(RuntimeError, match="is not a workbench store catalogue"):
        start_catalogue(tmp_path, [A])


# -- the backends ------------------------------------------------------------------------------------
def test_put_call_and_get_on_a_backend(wire):
    ref = put(wire, Counter(np.arange(4.0)), A)
    assert call(wire.client, ref, A, "total") == 6.0
    call(wire.client, ref, A, "scale", True, 2.0)
    copy = wire.client.backend(A, BackendOp.GET, oid=ref.oid, version=0)
    assert isinstance(copy, Counter) and copy.values.tolist() == [0.0, 2.0, 4.0, 6.0]
    lock = wire.backends[A].table[(ref.oid, 0)].lock
    assert lock.acquire(True, timeout=0)  # the copy's shared lock was released once it was sent
    lock.release(True)
    with pytest.raises(ValueError, match="read-only"):  # the method's own error, raised at the caller
        call(wire.client, ref, A, "sneaky_write")
    with pytest.raises(AttributeError, match="has no method 'nope'"):
        call(wire.client, ref, A, "nope")
    with pytest.raises(NotHere):
        wire.client.backend(B, BackendOp.GET, oid=ref.oid, version=0)
    with pytest.raises(BackendUnreachable, match=GONE):
        wire.client.backend(GONE, BackendOp.NULL)


def test_a_read_elsewhere_copies_and_a_write_elsewhere_is_sent_back(wire):
    ref = put(wire, Counter(np.arange(3.0)), A)
    b = wire.backends[B]
    assert b.invoke(ObjectRef(ref.oid), "total", False, (), {}) == 3.0  # a copy fetched from A, not kept
    assert b.table.local(ObjectRef(ref.oid, 0)) is None
    asked: list[Any] = []
    b.link.resolve = lambda refs: asked.append(refs) or Link.resolve(b.link, refs)  # type: ignore[method-assign]
    with pytest.raises(NotHere, match="a writing method runs only where the object is"):
        b.invoke(ObjectRef(ref.oid), "scale", True, (2.0,), {})
    assert len(asked) == 1  # sent back at once (the proxy calls its holder), not retried here


def test_push_replicates_or_moves_and_the_catalogue_follows(wire):
    ref = put(wire, Counter(np.ones(2)), A)
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=ref.oid, version=0, worker=A)
    wire.client.backend(A, BackendOp.PUSH, oid=ref.oid, version=0, target=B)
    assert wire.client.record(ref).workers == [A, B]
    with pytest.raises(StoreError, match="replicas"):  # a write would make them differ
        wire.backends[A].invoke(ObjectRef(ref.oid, 0), "scale", True, (2.0,), {})
    wire.client.backend(B, BackendOp.DROP, oid=ref.oid, version=0)
    wire.client.catalogue(CatalogueOp.REMOVE_LOCATION, oid=ref.oid, version=0, worker=B)
    wire.client.backend(A, BackendOp.PUSH, oid=ref.oid, version=0, target=B, move=True)
    assert wire.client.record(ref).workers == [B]
    assert (ref.oid, 0) not in wire.backends[A].table and (ref.oid, 0) in wire.backends[B].table


def test_evict_writes_a_private_disk_copy_and_a_call_loads_it_back_once(wire):
    ref = put(wire, Counter(np.arange(5.0)), A)
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=ref.oid, version=0, worker=A)
    assert wire.client.backend(A, BackendOp.EVICT, oid=ref.oid, version=0) > 0
    record = wire.client.record(ref)
    assert record.workers == [] and Path(record.disk_path).stat().st_mode & 0o777 == 0o600
    assert (ref.oid, 0) not in wire.backends[A].table
    assert wire.client.backend(A, BackendOp.LOAD, oid=ref.oid, version=0, disk_path=record.disk_path) > 0
    assert wire.client.backend(A, BackendOp.LOAD, oid=ref.oid, version=0, disk_path=record.disk_path) == 0
    wire.client.backend(A, BackendOp.EVICT, oid=ref.oid, version=0)
    (resolved,) = wire.client.resolve([ref])  # read back on the backend it left, which holds it again
    assert resolved.workers == [A] and wire.client.backend(A, BackendOp.TABLE)[0]["on_disk"]
    with pytest.raises(StoreError, match="outside this store's"):
        wire.client.backend(B, BackendOp.LOAD, oid=ref.oid, version=0, disk_path="/tmp/evil.pkl")


def test_memory_pressure_sends_objects_to_disk_and_they_come_back(wire):
    wire.client.backend(A, BackendOp.SET_MEMORY_LIMIT, nbytes=3 * 8_100)  # room for three objects of 8 kB
    refs = [put(wire, Counter(np.full(1000, float(i))), A) for i in range(6)]
    assert [r["oid"] for r in wire.client.backend(A, BackendOp.TABLE)] == [r.oid for r in refs[3:]]
    records = wire.client.records(refs)
    assert [bool(r.workers) for r in records] == [False] * 3 + [True] * 3
    assert all(r.disk_path for r in records[:3])  # the three least recently used went to disk
    totals = []
    for ref in refs:  # each comes back when used (and sends another to disk)
        (resolved,) = wire.client.resolve([ref])
        totals.append(call(wire.client, ref, resolved.workers[0], "total"))
    assert totals == [1000.0 * i for i in range(6)] and len(wire.backends[A].table) <= 3
    with pytest.raises(ValueError, match="memory limit is a number of bytes"):
        wire.client.backend(A, BackendOp.SET_MEMORY_LIMIT, nbytes=-1)


def test_a_read_racing_an_eviction_asks_the_catalogue_again(wire):
    """The holder the catalogue named evicts the object (its memory limit) before the copy is made:
    the reader asks the catalogue again and reads the disk copy back, never a NotHere."""
    ref = put(wire, Counter(np.full(1000, 3.0)), A)
    reader = wire.backends[B]
    evicted: list[int] = []

    def evict_first(address: str, op: str, **kwargs: Any) -> Any:
        if op == BackendOp.GET and not evicted:
            evicted.append(Link.backend(reader.link, address, BackendOp.EVICT, oid=ref.oid, version=0))
        return Link.backend(reader.link, address, op, **kwargs)

    reader.link.backend = evict_first  # type: ignore[method-assign]
    _, entry = reader.table.obtain(ObjectRef(ref.oid), "race", for_write=False)
    assert evicted and evicted[0] > 0, "the holder did not evict the object"
    assert entry.obj.total() == 3000.0


def test_a_write_racing_an_eviction_on_its_own_backend_reads_the_object_back_again(wire):
    """Another call evicts the object (its memory limit) between its reload on this backend and the
    write's look: the catalogue still names this backend, so the write tries again, never a NotHere."""
    ref = put(wire, Counter(np.full(1000, 3.0)), A)
    wire.client.catalogue(CatalogueOp.ADD_LOCATION, oid=ref.oid, version=0, worker=A)
    writer = wire.backends[A]
    wire.client.backend(A, BackendOp.EVICT, oid=ref.oid, version=0)
    evicted: list[int] = []

    def evict_after_reload(refs: Any) -> Any:
        resolved = Link.resolve(writer.link, refs)
        if not evicted:  # the first reload is undone at once, as a busy backend's memory limit would
            evicted.append(wire.client.backend(A, BackendOp.EVICT, oid=ref.oid, version=0))
        return resolved

    writer.link.resolve = evict_after_reload  # type: ignore[method-assign]
    writer.invoke(ObjectRef(ref.oid), "scale", True, (2.0,), {})
    assert evicted and evicted[0] > 0, "the object was not evicted between the reload and the write"
    assert writer.invoke(ObjectRef(ref.oid), "total", False, (), {}) == 6000.0


# -- the catalogue against a model -------------------------------------------------------------------
class CatalogueMachine(RuleBasedStateMachine):
    """Registrations, aliases, moves, deletions, departures and restarts of a catalogue against a dict."""

    objects = Bundle("objects")

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="catalogue-model-"))
        self.catalogue = start_catalogue(self.directory, [A, B])
        self.link = Wire(self.catalogue).link()
        self.model: dict[str, dict[str, Any]] = {}  # oid -> {"aliases": set, "holders": set}

    @rule(target=objects, worker=st.sampled_from([A, B]), alias=st.sampled_from([None, "x", "y", "z"]))
    def register(self, worker: str, alias: str | None) -> str:
        taken = alias is not None and any(alias in m["aliases"] for m in self.model.values())
        oid = uuid.uuid4().hex
        entry = catalogue_entry(Counter, oid, 0, worker, 8, alias)
        if taken:
            with pytest.raises(ValueError, match="already taken"):
                self.link.catalogue(CatalogueOp.REGISTER, entries=[entry])
            return oid  # never registered: later rules find it missing
        self.link.catalogue(CatalogueOp.REGISTER, entries=[entry])
        self.model[oid] = {"aliases": {alias} - {None}, "holders": {worker}}
        return oid

    @rule(oid=objects, alias=st.sampled_from(["x", "y", "z"]))
    def set_alias(self, oid: str, alias: str) -> None:
        owner = next((o for o, m in self.model.items() if alias in m["aliases"]), None)
        if oid not in self.model or (owner is not None and owner != oid):
            if owner is not None and owner != oid:
                with pytest.raises(ValueError, match="already taken"):
                    self.link.catalogue(CatalogueOp.SET_ALIAS, alias=alias, oid=oid)
            return
        self.link.catalogue(CatalogueOp.SET_ALIAS, alias=alias, oid=oid)
        self.model[oid]["aliases"].add(alias)

    @rule(oid=objects, leaving=st.sampled_from([A, B]), arriving=st.sampled_from([A, B]))
    def move(self, oid: str, leaving: str, arriving: str) -> None:
        if oid not in self.model:
            return
        self.link.catalogue(CatalogueOp.ADD_LOCATION, oid=oid, version=0, worker=arriving)
        self.link.catalogue(CatalogueOp.REMOVE_LOCATION, oid=oid, version=0, worker=leaving)
        holders = self.model[oid]["holders"]
        holders.add(arriving)
        holders.discard(leaving)

    @rule(oid=consumes(objects))
    def delete(self, oid: str) -> None:
        self.link.catalogue(CatalogueOp.DELETE, oids=[oid])
        self.model.pop(oid, None)

    @rule(worker=st.sampled_from([A, B]))
    def worker_leaves_and_comes_back(self, worker: str) -> None:
        scheduler = self.catalogue.scheduler
        del scheduler.workers[worker]
        self.catalogue.remove_worker(scheduler, worker)
        scheduler.workers[worker] = None
        for m in self.model.values():
            m["holders"].discard(worker)

    @rule()
    def restart(self) -> None:
        """The cluster restarts: the catalogue reads its file back; locations are gone (new workers)."""
        self.catalogue.close_database()
        self.catalogue = start_catalogue(self.directory, [A, B])
        self.link = Wire(self.catalogue).link()
        for m in self.model.values():
            m["holders"].clear()

    @invariant()
    def agrees_with_the_model(self) -> None:
        oids = sorted(self.model)
        records = self.link.records([ObjectRef(o) for o in oids])
        assert [(r.oid, set(r.aliases), set(r.workers)) for r in records] == [
            (o, self.model[o]["aliases"], self.model[o]["holders"]) for o in oids
        ]
        aliases = {a: o for o, m in self.model.items() for a in m["aliases"]}
        assert self.link.catalogue(CatalogueOp.ALIASES) == aliases
        assert len(self.link.catalogue(CatalogueOp.LIST)) == len(self.model)

    def teardown(self) -> None:
        self.catalogue.close_database()
        shutil.rmtree(self.directory)


CatalogueMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)
test_the_catalogue_against_a_model = CatalogueMachine.TestCase
