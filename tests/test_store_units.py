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
import subprocess
import tempfile
import threading
import time
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import store_helpers
from distributed.core import Status
from distributed.protocol import dumps, loads
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule
from store_helpers import Counter

import workbench.runtime.store.tiering as tiering
from workbench.memory import owners, shm, tiers
from workbench.runtime.store import BackendUnreachable, NotHere, StoreError, UnknownAlias, backend_ops, catalogue_file
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.catalogue import StoreCatalogue, release_stuck_calls
from workbench.runtime.store.catalogue_file import CatalogueFile
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef, catalogue_entry
from workbench.runtime.store.protocol import ACTIVE_KEY_MARK, Call, Missing, Record, answer, unpack_reply

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
            handling = asyncio.ensure_future(self.wire.catalogue.handle(action=action, **kwargs))
            await asyncio.sleep(0)  # one step: a reply that waits for no write is ready now
            if not handling.done() and self.wire.writes is not None:
                self.wire.writes.gate.set()  # the reply waits for its write: let the writer commit
            reply = await handling
            if self.wire.writes is not None:
                self.wire.writes.gate.clear()
            return loads(dumps(reply))
        backend = self.wire.backends.get(self.address)
        if backend is None:
            raise OSError(f"connection to {self.address} refused")
        comm = Comm()
        reply = await backend.handle(comm, action=action, **kwargs)
        if self.wire.drop_replies.get(action):  # the backend did it; its reply is lost on the way
            self.wire.drop_replies[action] -= 1
            raise OSError(f"connection to {self.address} reset before its reply to {action!r} arrived")
        return comm.written if reply is Status.dont_reply else loads(dumps(reply))


class GatedWrites:
    """A catalogue's file written only while a reply waits for it: its writer thread commits a write
    once :attr:`gate` is set (the stand-in comm sets it for a reply that is not ready without it), the
    slowest writer a caller can meet. :meth:`kill` ends the catalogue as SIGKILL would: what was not
    committed is lost."""

    def __init__(self, catalogue: StoreCatalogue):
        self.gate, self.killed = threading.Event(), threading.Event()
        file = catalogue.file
        assert file is not None
        commit = file._commit

        def gated(*args: Any) -> None:
            self.gate.wait()
            if not self.killed.is_set():
                commit(*args)

        file._commit = gated  # type: ignore[method-assign]
        self.catalogue = catalogue

    def kill(self) -> None:
        self.killed.set()
        self.gate.set()
        self.catalogue.close_database()  # the writes still queued commit nothing

    def close(self) -> None:
        self.gate.set()
        self.catalogue.close_database()


class Wire:
    """Messages between a catalogue and backends in this process, each end reached by a :class:`Link`."""

    def __init__(self, catalogue: StoreCatalogue, gated: bool = False):
        self.catalogue = catalogue
        self.backends: dict[str, StoreBackend] = {}
        self.drop_replies: dict[str, int] = {}  # operation -> how many of its next backend replies are lost
        self.writes = GatedWrites(catalogue) if gated else None

    def link(self, here: str | None = None, load_here: Any = None, timeout: float = TIMEOUT) -> Link:
        """A link as a client's (``here`` None) or the backend ``here``'s."""
        return Link(
            lambda: Endpoint(self, None),
            lambda address: Endpoint(self, address),
            lambda function: asyncio.run(function()),
            timeout,
            here=here,
            load_here=load_here,
        )

    def add_backend(self, address: str, directory: str, memory_limit: int | None = None) -> StoreBackend:
        backend = StoreBackend(directory, memory_limit=memory_limit, timeout=TIMEOUT)
        backend.attach(StandInWorker(address), self.link(address, load_here=lambda *key: backend.table.load(*key)))
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
    link.catalogue(StoreCatalogue.op_register, entries=[entry])
    return ObjectRef(oid, 0, alias)


def put(wire: Wire, obj: Any, worker: str, alias: str | None = None) -> ObjectRef:
    """``obj`` stored on backend ``worker`` as the client does it: registered, then sent."""
    ref = register(wire.client, obj, worker, alias)
    wire.client.backend(worker, backend_ops.op_put, oid=ref.oid, version=0, obj=obj)
    return ref


def call(link: Link, ref: ObjectRef, worker: str, method: str, writes: bool = False, *args: Any) -> Any:
    """``method`` of the object ``ref`` run on backend ``worker`` as ``proxy.method.value`` runs it (one
    :class:`Call`, sent by the link's one loop)."""
    return link.call(lambda again: (ref, worker), Call.new(method, writes, args, {}))


# -- the one error rule ------------------------------------------------------------------------------
def test_every_error_of_an_operation_becomes_its_reply_and_a_cancellation_passes(wire):
    """A message an end cannot take (no such operation, an argument unknown, missing or of the wrong
    type) is answered with the error that says so, as every error of an operation is; the link refuses
    to send one before it leaves."""

    def at_catalogue(**message: Any) -> Any:
        return unpack_reply(loads(dumps(asyncio.run(wire.catalogue.handle(**message)))), "the scheduler")

    def at_backend(**message: Any) -> Any:
        return unpack_reply(loads(dumps(asyncio.run(wire.backends[A].handle(Comm(), **message)))), A)

    with pytest.raises(ValueError, match="the store catalogue has no operation 'nope'; it has .*records"):
        at_catalogue(action="nope")
    with pytest.raises(ValueError, match="a store backend has no operation 'nope'; it has .*table"):
        at_backend(action="nope")
    with pytest.raises(TypeError, match="unexpected keyword argument 'extra': aliases\\(\\)"):
        at_catalogue(action="aliases", extra=1)
    with pytest.raises(TypeError, match="'evict' is missing argument 'version': evict\\(oid: str, version: int\\)"):
        at_backend(action="evict", oid="o" * 32)
    with pytest.raises(TypeError, match="'evict' takes version: int, got str '0'"):
        at_backend(action="evict", oid="o" * 32, version="0")
    with pytest.raises(TypeError, match="unexpected keyword"):  # refused by the sender: it never leaves
        wire.client.catalogue(StoreCatalogue.op_aliases, extra=1)
    with pytest.raises(TypeError, match="'table' got an unexpected keyword argument 'extra'"):
        wire.client.backend(A, backend_ops.op_table, extra=1)
    with pytest.raises(TypeError, match="a store backend is sent one of its operations .*got 'table'"):
        wire.client.backend(A, "table")
    with pytest.raises(TypeError, match="the store catalogue is sent one of its operations"):
        wire.client.catalogue(backend_ops.op_table)
    assert wire.backends[A].received["table"] == 0  # nothing malformed reached a handler

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
    assert wire.client.catalogue(StoreCatalogue.op_alias, alias="counter") == ref.oid
    with pytest.raises(UnknownAlias, match="did you mean 'counter'"):
        wire.client.catalogue(StoreCatalogue.op_alias, alias="countr")
    with pytest.raises(ValueError, match="already taken"):
        register(wire.client, Counter(np.ones(2)), B, alias="counter")
    assert isinstance(wire.client.record(ObjectRef("0" * 32)), Missing)


def test_locations_answer_per_object_in_the_compact_reply(wire):
    one, two = (register(wire.client, Counter(np.ones(1)), w) for w in (A, B))
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=two.oid, version=0, worker=A)
    gone = register(wire.client, Counter(np.ones(1)), A)
    wire.client.catalogue(StoreCatalogue.op_delete, oids=[gone.oid])
    assert wire.client.locations([one, two, gone]) == [[A], [A, B], []]
    with pytest.raises(KeyError, match="deleted meanwhile"):
        wire.client.catalogue(StoreCatalogue.op_add_location, oid=gone.oid, version=0, worker=A)


def test_a_negative_count_of_backends_is_refused_not_answered_with_none(wire):
    """backends(n=-1) answered [] and turn(n=-1) moved the round robin back: both refuse it."""
    assert list(wire.client.catalogue(StoreCatalogue.op_backends, n=2)) == [A, B]
    for op in (StoreCatalogue.op_backends, StoreCatalogue.op_turn):
        with pytest.raises(ValueError, match=rf"'{op.name}' takes n, a count of backends >= 0, got -1"):
            wire.client.catalogue(op, n=-1)
    assert list(wire.client.catalogue(StoreCatalogue.op_backends, n=0)) == []
    assert list(wire.client.catalogue(StoreCatalogue.op_backends, n=1)) == [A]  # the turn did not move back


def test_a_disk_copy_is_claimed_for_one_backend_whoever_asks(wire):
    ref = register(wire.client, Counter(np.ones(1)), A)
    wire.client.catalogue(StoreCatalogue.op_set_disk, oid=ref.oid, version=0, disk_path="/s/objects/x.pkl")
    wire.client.catalogue(StoreCatalogue.op_remove_location, oid=ref.oid, version=0, worker=A)
    claims = [
        wire.client.catalogue(StoreCatalogue.op_claim_load, oid=ref.oid, version=0, worker=w) for w in (B, None, B)
    ]
    assert {c["load_on"] for c in claims} == {A}  # where it was evicted from, for every caller
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=ref.oid, version=0, worker=A)
    claim = wire.client.catalogue(StoreCatalogue.op_claim_load, oid=ref.oid, version=0, worker=B)
    assert list(claim["workers"]) == [A] and claim["load_on"] is None


def test_a_worker_that_leaves_loses_its_copies_and_frees_the_calls_pinned_to_it(wire):
    kept, lost = (register(wire.client, Counter(np.ones(1)), GONE) for _ in range(2))
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=kept.oid, version=0, worker=A)
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
    link.catalogue(StoreCatalogue.op_delete, oids=[r.oid for r in refs[:10]])
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
    copy = wire.client.backend(A, backend_ops.op_get, oid=ref.oid, version=0)
    assert isinstance(copy, Counter) and copy.values.tolist() == [0.0, 2.0, 4.0, 6.0]
    lock = wire.backends[A].table[(ref.oid, 0)].lock
    assert lock.acquire(True, timeout=0)  # the copy's shared lock was released once it was sent
    lock.release(True)
    with pytest.raises(ValueError, match="read-only"):  # the method's own error, raised at the caller
        call(wire.client, ref, A, "sneaky_write")
    with pytest.raises(AttributeError, match="has no method 'nope'"):
        call(wire.client, ref, A, "nope")
    with pytest.raises(NotHere):
        wire.client.backend(B, backend_ops.op_get, oid=ref.oid, version=0)
    with pytest.raises(BackendUnreachable, match=GONE):
        wire.client.backend(GONE, backend_ops.op_null)


# -- active calls: one id, run once, two budgets -----------------------------------------------------
def wait_until(condition: Any, what: str) -> None:
    """Return once ``condition()`` holds; fail after ``TIMEOUT`` seconds saying ``what`` was awaited."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"waited {TIMEOUT} s for {what}"
        time.sleep(0.002)


def test_a_reply_lost_after_the_backend_applied_a_write_is_answered_from_memory(wire):
    """The connection fails after backend A scaled the counter: the link sends the same call again,
    and A answers it from its memory of the call's id instead of scaling the counter a second time."""
    ref = put(wire, Counter(np.arange(4.0)), A)
    wire.drop_replies[backend_ops.op_call.name] = 1
    assert call(wire.client, ref, A, "scale", True, 2.0) is None
    assert wire.backends[A].received[backend_ops.op_call.name] == 2  # sent twice
    assert wire.backends[A].table[(ref.oid, 0)].obj.values.tolist() == [0.0, 2.0, 4.0, 6.0]  # applied once


def test_a_write_whose_outcome_was_forgotten_is_refused_not_run_again(wire):
    ref = put(wire, Counter(np.arange(2.0)), A)
    wire.backends[A].call_memory.keep_seconds = -1.0  # every outcome is forgotten at the next call
    sent = Call.new("scale", True, (3.0,), {}).at(ref).to_wire()
    wire.client.backend(A, backend_ops.op_call, call=sent, wait=TIMEOUT)
    with pytest.raises(StoreError, match="it is not run twice"):
        wire.client.backend(A, backend_ops.op_call, call=sent, wait=TIMEOUT)
    assert wire.backends[A].table[(ref.oid, 0)].obj.values.tolist() == [0.0, 3.0]
    with pytest.raises(ValueError, match="budget is a finite number of seconds"):
        wire.client.backend(A, backend_ops.op_call, call={**sent, "budget": float("nan")}, wait=0)


def test_a_method_longer_than_the_link_timeout_runs_on_and_its_budget_ends_the_wait(wire):
    """A link whose messages wait 0.2 s: a method that runs until the test meets it is asked about
    again and again ("still running"), never reported unreachable, and its value arrives; a call past
    its own budget raises a TimeoutError that says it still runs."""
    ref = put(wire, Counter(np.ones(2)), A)
    client, backend, token = wire.link(timeout=0.2), wire.backends[A], uuid.uuid4().hex
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(call(client, ref, A, "meet", False, token, 2, TIMEOUT)))
    caller.start()
    wait_until(
        lambda: backend.received[backend_ops.op_call.name] >= 4, "the caller to ask about its running call 3 times"
    )
    store_helpers._BARRIERS.setdefault(token, threading.Barrier(2)).wait(TIMEOUT)  # the method ends now
    caller.join(TIMEOUT)
    assert answers == [True]
    late = uuid.uuid4().hex
    with pytest.raises(TimeoutError, match=f"ran past its budget of 0.3 s: it still runs on backend {A}"):
        client.call(lambda again: (ref, A), Call.new("meet", False, (late, 2, TIMEOUT), {}, budget=0.3))
    store_helpers._BARRIERS.setdefault(late, threading.Barrier(2)).wait(TIMEOUT)


def test_an_operation_that_writes_is_answered_once_its_write_is_committed(tmp_path):
    """``flush()`` returns when the catalogue answers ``set_disk``: the row must be in the file then (a
    scheduler killed right after loses nothing it acknowledged), however slow the writer thread is."""
    catalogue = start_catalogue(tmp_path, [A])
    writes = GatedWrites(catalogue)
    oid = uuid.uuid4().hex

    async def ask(action: str, **kwargs: Any) -> Any:
        handling = asyncio.ensure_future(catalogue.handle(action=action, **kwargs))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not handling.done(), f"{action} was answered before its write was committed"
        writes.gate.set()
        reply = await handling
        writes.gate.clear()
        return reply

    try:
        asyncio.run(ask(StoreCatalogue.op_register.name, entries=[catalogue_entry(Counter, oid, 0, A, 8, None)]))
        asyncio.run(
            ask(StoreCatalogue.op_set_disk.name, oid=oid, version=0, disk_path=str(tmp_path / "objects" / "x.pkl"))
        )
        (row,) = catalogue_file.read(tmp_path)["objects"]  # read as a restarted scheduler would
        assert row["oid"] == oid and row["disk_path"] == str(tmp_path / "objects" / "x.pkl")
    finally:
        writes.close()


def test_tier_files_of_killed_backends_are_freed_and_a_live_backends_are_kept(wire, tmp_path, monkeypatch):
    """A ``mapped`` object's tier files name the worker process that wrote them: once it is dead (a
    killed kernel's worker, here a process that has exited) a new backend on the store frees them, as
    ``workbench.start()`` and ``workbench shm clean`` do; a live backend's files are never touched."""
    directory = tiering.tier_directory(str(tmp_path))
    exited = subprocess.Popen(["true"])
    exited.wait()
    here = owners.this_process()
    assert here is not None
    dead = here._replace(pid=exited.pid, start=0)
    live = put(wire, Counter(np.arange(8.0)), A)
    wire.client.backend(A, backend_ops.op_place, oid=live.oid, version=0, tier="mapped")
    monkeypatch.setattr(owners, "this_process", lambda: dead)  # the next files are written by the dead process
    killed = put(wire, Counter(np.arange(8.0)), B)
    wire.client.backend(B, backend_ops.op_place, oid=killed.oid, version=0, tier="mapped")
    monkeypatch.undo()
    files = {s.name: s for s in shm.list_segments(directory)}
    assert len(files) == 2 and all(s.lifetime == "owner" for s in files.values())
    dead_files = [n for n, s in files.items() if s.reclaimable]
    assert len(dead_files) == 1 and killed.oid in dead_files[0]
    wire.backends[B].table.entries.clear()  # B was killed: its table and mappings are gone, not torn down
    wire.add_backend(B, str(tmp_path))  # a new backend on the store's directory
    assert sorted(s.name for s in shm.list_segments(directory)) == sorted(set(files) - set(dead_files))
    assert tiers.reclaim_store_files(tmp_path) == []  # the live backend's file stays
    assert call(wire.client, live, A, "total") == 28.0


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
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=ref.oid, version=0, worker=A)
    wire.client.backend(A, backend_ops.op_push, oid=ref.oid, version=0, target=B)
    assert wire.client.record(ref).workers == [A, B]
    with pytest.raises(StoreError, match="replicas"):  # a write would make them differ
        wire.backends[A].invoke(ObjectRef(ref.oid, 0), "scale", True, (2.0,), {})
    wire.client.backend(B, backend_ops.op_drop, oid=ref.oid, version=0)
    wire.client.catalogue(StoreCatalogue.op_remove_location, oid=ref.oid, version=0, worker=B)
    wire.client.backend(A, backend_ops.op_push, oid=ref.oid, version=0, target=B, move=True)
    assert wire.client.record(ref).workers == [B]
    assert (ref.oid, 0) not in wire.backends[A].table and (ref.oid, 0) in wire.backends[B].table


def test_evict_writes_a_private_disk_copy_and_a_call_loads_it_back_once(wire):
    ref = put(wire, Counter(np.arange(5.0)), A)
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=ref.oid, version=0, worker=A)
    assert wire.client.backend(A, backend_ops.op_evict, oid=ref.oid, version=0) > 0
    record = wire.client.record(ref)
    assert record.workers == [] and Path(record.disk_path).stat().st_mode & 0o777 == 0o600
    assert (ref.oid, 0) not in wire.backends[A].table
    assert wire.client.backend(A, backend_ops.op_load, oid=ref.oid, version=0, disk_path=record.disk_path) > 0
    assert wire.client.backend(A, backend_ops.op_load, oid=ref.oid, version=0, disk_path=record.disk_path) == 0
    wire.client.backend(A, backend_ops.op_evict, oid=ref.oid, version=0)
    (resolved,) = wire.client.resolve([ref])  # read back on the backend it left, which holds it again
    assert resolved.workers == [A] and wire.client.backend(A, backend_ops.op_table)[0]["on_disk"]
    with pytest.raises(StoreError, match="outside this store's"):
        wire.client.backend(B, backend_ops.op_load, oid=ref.oid, version=0, disk_path="/tmp/evil.pkl")


def test_memory_pressure_sends_objects_to_disk_and_they_come_back(wire):
    wire.client.backend(A, backend_ops.op_set_memory_limit, nbytes=3 * 8_100)  # room for three objects of 8 kB
    refs = [put(wire, Counter(np.full(1000, float(i))), A) for i in range(6)]
    assert [r["oid"] for r in wire.client.backend(A, backend_ops.op_table)] == [r.oid for r in refs[3:]]
    records = wire.client.records(refs)
    assert [bool(r.workers) for r in records] == [False] * 3 + [True] * 3
    assert all(r.disk_path for r in records[:3])  # the three least recently used went to disk
    totals = []
    for ref in refs:  # each comes back when used (and sends another to disk)
        (resolved,) = wire.client.resolve([ref])
        totals.append(call(wire.client, ref, resolved.workers[0], "total"))
    assert totals == [1000.0 * i for i in range(6)] and len(wire.backends[A].table) <= 3
    with pytest.raises(ValueError, match="memory limit is a number of bytes"):
        wire.client.backend(A, backend_ops.op_set_memory_limit, nbytes=-1)


def test_a_read_racing_an_eviction_asks_the_catalogue_again(wire):
    """The holder the catalogue named evicts the object (its memory limit) before the copy is made:
    the reader asks the catalogue again and reads the disk copy back, never a NotHere."""
    ref = put(wire, Counter(np.full(1000, 3.0)), A)
    reader = wire.backends[B]
    evicted: list[int] = []

    def evict_first(address: str, op: str, **kwargs: Any) -> Any:
        if op == backend_ops.op_get and not evicted:
            evicted.append(Link.backend(reader.link, address, backend_ops.op_evict, oid=ref.oid, version=0))
        return Link.backend(reader.link, address, op, **kwargs)

    reader.link.backend = evict_first  # type: ignore[method-assign]
    _, entry = reader.table.obtain(ObjectRef(ref.oid), "race", for_write=False)
    assert evicted and evicted[0] > 0, "the holder did not evict the object"
    assert entry.obj.total() == 3000.0


def test_a_write_racing_an_eviction_on_its_own_backend_reads_the_object_back_again(wire):
    """Another call evicts the object (its memory limit) between its reload on this backend and the
    write's look: the catalogue still names this backend, so the write tries again, never a NotHere."""
    ref = put(wire, Counter(np.full(1000, 3.0)), A)
    wire.client.catalogue(StoreCatalogue.op_add_location, oid=ref.oid, version=0, worker=A)
    writer = wire.backends[A]
    wire.client.backend(A, backend_ops.op_evict, oid=ref.oid, version=0)
    evicted: list[int] = []

    def evict_after_reload(refs: Any) -> Any:
        resolved = Link.resolve(writer.link, refs)
        if not evicted:  # the first reload is undone at once, as a busy backend's memory limit would
            evicted.append(wire.client.backend(A, backend_ops.op_evict, oid=ref.oid, version=0))
        return resolved

    writer.link.resolve = evict_after_reload  # type: ignore[method-assign]
    writer.invoke(ObjectRef(ref.oid), "scale", True, (2.0,), {})
    assert evicted and evicted[0] > 0, "the object was not evicted between the reload and the write"
    assert writer.invoke(ObjectRef(ref.oid), "total", False, (), {}) == 6000.0


def test_a_load_that_finds_the_object_held_already_tells_the_catalogue(wire):
    """A counter on A with a disk copy; the catalogue drops A's location (its worker left) while A's
    table still holds it. Reading it back lands on A, finds it there, and A is named again: before,
    the load returned at once and the catalogue named no one (the model test found it)."""
    ref = put(wire, Counter(np.ones(4)), A)
    wire.client.backend(A, backend_ops.op_flush, oid=ref.oid, version=0)
    scheduler = wire.catalogue.scheduler
    del scheduler.workers[A]
    wire.catalogue.remove_worker(scheduler, A)
    scheduler.workers[A] = None
    assert wire.client.records([ref])[0].workers == []
    (resolved,) = wire.client.resolve([ref])
    assert wire.client.records([ref])[0].workers == resolved.workers
    assert call(wire.client, ref, resolved.workers[0], "total") == 4.0


# -- the catalogue against a model -------------------------------------------------------------------
class CatalogueMachine(RuleBasedStateMachine):
    """Registrations, aliases, moves, deletions, departures, restarts and kills of a catalogue against a
    dict; and counters on two backends, written with calls whose reply may be lost after the backend
    applied them, flushed to disk, and killed with their cluster right after.

    The catalogue's writer commits only while a reply waits for it (:class:`GatedWrites`): a kill
    loses every write no reply waited for, so the model holds exactly what callers were told is done.
    """

    objects = Bundle("objects")
    counters = Bundle("counters")

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="catalogue-model-"))
        self.wire = Wire(start_catalogue(self.directory, [A, B]), gated=True)
        self.start_backends()
        self.link = self.wire.client = self.wire.link()
        self.model: dict[str, dict[str, Any]] = {}  # oid -> {"aliases": set, "holders": set}
        # counter oid -> {"value": its values' each, "flushed": the value its disk copy holds, or None}
        self.counters_model: dict[str, dict[str, Any]] = {}

    @property
    def catalogue(self) -> StoreCatalogue:
        return self.wire.catalogue

    def start_backends(self) -> None:
        for backend in self.wire.backends.values():
            backend.teardown(backend.worker)
        for address in (A, B):
            self.wire.add_backend(address, str(self.directory))

    def new_cluster(self) -> None:
        """A new scheduler on the catalogue's file, and new workers: every location is gone."""
        self.wire.catalogue = start_catalogue(self.directory, [A, B])
        self.wire.writes = GatedWrites(self.wire.catalogue)
        self.start_backends()
        for m in self.model.values():
            m["holders"].clear()
        for oid, c in list(self.counters_model.items()):
            if c["flushed"] is None:  # memory only: lost with its workers
                del self.counters_model[oid]
            else:
                c["value"] = c["flushed"]

    @rule(target=objects, worker=st.sampled_from([A, B]), alias=st.sampled_from([None, "x", "y", "z"]))
    def register(self, worker: str, alias: str | None) -> str:
        taken = alias is not None and any(alias in m["aliases"] for m in self.model.values())
        oid = uuid.uuid4().hex
        entry = catalogue_entry(Counter, oid, 0, worker, 8, alias)
        if taken:
            with pytest.raises(ValueError, match="already taken"):
                self.link.catalogue(StoreCatalogue.op_register, entries=[entry])
            return oid  # never registered: later rules find it missing
        self.link.catalogue(StoreCatalogue.op_register, entries=[entry])
        self.model[oid] = {"aliases": {alias} - {None}, "holders": {worker}}
        return oid

    @rule(oid=objects, alias=st.sampled_from(["x", "y", "z"]))
    def set_alias(self, oid: str, alias: str) -> None:
        owner = next((o for o, m in self.model.items() if alias in m["aliases"]), None)
        if oid not in self.model or (owner is not None and owner != oid):
            if owner is not None and owner != oid:
                with pytest.raises(ValueError, match="already taken"):
                    self.link.catalogue(StoreCatalogue.op_set_alias, alias=alias, oid=oid)
            return
        self.link.catalogue(StoreCatalogue.op_set_alias, alias=alias, oid=oid)
        self.model[oid]["aliases"].add(alias)

    @rule(oid=objects, leaving=st.sampled_from([A, B]), arriving=st.sampled_from([A, B]))
    def move(self, oid: str, leaving: str, arriving: str) -> None:
        if oid not in self.model:
            return
        self.link.catalogue(StoreCatalogue.op_add_location, oid=oid, version=0, worker=arriving)
        self.link.catalogue(StoreCatalogue.op_remove_location, oid=oid, version=0, worker=leaving)
        holders = self.model[oid]["holders"]
        holders.add(arriving)
        holders.discard(leaving)

    @rule(oid=consumes(objects))
    def delete(self, oid: str) -> None:
        self.link.catalogue(StoreCatalogue.op_delete, oids=[oid])
        self.model.pop(oid, None)

    @rule(worker=st.sampled_from([A, B]))
    def worker_leaves_and_comes_back(self, worker: str) -> None:
        scheduler = self.catalogue.scheduler
        del scheduler.workers[worker]
        self.catalogue.remove_worker(scheduler, worker)
        scheduler.workers[worker] = None
        for m in self.model.values():
            m["holders"].discard(worker)

    @rule(target=counters, worker=st.sampled_from([A, B]))
    def store_counter(self, worker: str) -> str:
        ref = put(self.wire, Counter(np.ones(4)), worker)
        self.model[ref.oid] = {"aliases": set(), "holders": {worker}}
        self.counters_model[ref.oid] = {"value": 1.0, "flushed": None}
        return ref.oid

    def reachable(self, oid: str) -> bool:
        """Whether the counter can be called: held by a backend the catalogue names, or on disk."""
        return oid in self.counters_model and bool(self.model[oid]["holders"] or self.counters_model[oid]["flushed"])

    def holder(self, oid: str) -> tuple[ObjectRef, str]:
        (resolved,) = self.link.resolve([ObjectRef(oid)])  # read back from disk first where it is only there
        self.model[oid]["holders"] = set(resolved.workers)
        return resolved.ref, resolved.workers[0]

    @rule(oid=counters, factor=st.sampled_from([2.0, 3.0]), reply_lost=st.booleans())
    def scale(self, oid: str, factor: float, reply_lost: bool) -> None:
        """A writing call; with ``reply_lost`` the connection fails after the backend applied it."""
        if not self.reachable(oid):
            return
        self.wire.drop_replies[backend_ops.op_call.name] = int(reply_lost)
        self.link.call(lambda again: self.holder(oid), Call.new("scale", True, (factor,), {}))
        assert self.wire.drop_replies[backend_ops.op_call.name] == 0
        counter = self.counters_model[oid]
        counter["value"] *= factor
        counter["flushed"] = None  # a write deletes the stale disk copy

    @rule(oid=counters)
    def flush(self, oid: str) -> None:
        if not self.reachable(oid):
            return
        _, worker = self.holder(oid)
        self.link.backend(worker, backend_ops.op_flush, oid=oid, version=0)
        self.counters_model[oid]["flushed"] = self.counters_model[oid]["value"]

    @rule()
    def restart(self) -> None:
        """The cluster restarts: the catalogue reads its file back; locations are gone (new workers)."""
        assert self.wire.writes is not None
        self.wire.writes.close()
        self.new_cluster()

    @rule()
    def kill(self) -> None:
        """Scheduler and workers are killed (SIGKILL: nothing is closed); a new cluster reads the file."""
        assert self.wire.writes is not None
        self.wire.writes.kill()
        self.new_cluster()

    @invariant()
    def agrees_with_the_model(self) -> None:
        oids = sorted(self.model)
        records = self.link.records([ObjectRef(o) for o in oids])
        assert [(r.oid, set(r.aliases), set(r.workers)) for r in records] == [
            (o, self.model[o]["aliases"], self.model[o]["holders"]) for o in oids
        ]
        assert {r.oid for r in records if r.disk_path} == {o for o, c in self.counters_model.items() if c["flushed"]}
        aliases = {a: o for o, m in self.model.items() for a in m["aliases"]}
        assert self.link.catalogue(StoreCatalogue.op_aliases) == aliases
        assert len(self.link.catalogue(StoreCatalogue.op_list)) == len(self.model)

    @invariant()
    def counters_hold_each_write_once(self) -> None:
        for oid, counter in self.counters_model.items():
            if self.model[oid]["holders"]:  # (one on disk only is checked when a rule reads it back)
                total = self.link.call(lambda again, oid=oid: self.holder(oid), Call.new("total", False, (), {}))
                assert total == 4 * counter["value"]

    def teardown(self) -> None:
        for backend in self.wire.backends.values():
            backend.teardown(backend.worker)
        if self.wire.writes is not None:
            self.wire.writes.close()
        shutil.rmtree(self.directory)


CatalogueMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)
test_the_catalogue_against_a_model = CatalogueMachine.TestCase
