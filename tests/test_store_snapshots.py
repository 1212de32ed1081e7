"""Every copy the store makes of an object is of one version (issue 35, item 3).

A move, a replica, a fetch (``proxy.fetch()``, ``.local()``, ``.non_active()``) and ``new_version``
copy an object; a writing method may be half-way through it at that moment. Each test stops a
writer between its two halves at a gate (a file), starts a copy, and opens the gate once the copy
either finished (a torn copy: the store copied without the object's lock) or waits for the lock.
The copy must be all before or all after the write, and a write that returned True is kept.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from store_helpers import Halves, wait_for_file

import workbench.runtime.store.backend_ops as backend_ops
from workbench.runtime.store import NotHere, StoreError, store_for
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.model import ObjectRef, ReadWriteLock
from workbench.runtime.store.protocol import PLUGIN_NAME, Record
from workbench.runtime.store.wire import Operation

BOUND = 60.0  # the longest any wait of these tests lasts (a bound, never a pause)
SIZE = 1 << 16  # 512 KiB of float64


@pytest.fixture
def store(session):
    return store_for(session)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = BOUND) -> None:
    """Poll ``condition`` until it holds, at most ``timeout`` s (a bounded wait on a state)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.002)


def lock_waiters(session, oid: str) -> int:
    """Calls and copies waiting for the lock of any version of ``oid``, on every backend (0 where the
    lock does not count its waiters)."""

    def probe(dask_worker: Any) -> int:
        backend = dask_worker.plugins[PLUGIN_NAME]
        with backend.table.lock:
            locks = [e.lock for (o, _), e in backend.table.items() if o == oid]
        return sum(getattr(lock, "waiting", 0) for lock in locks)

    return sum(session.client.run(probe).values())


def held_copies(session, oid: str) -> list[tuple[int, float, float, float]]:
    """``(version, min, max, label)`` of every copy of ``oid`` the backends hold, read in place."""

    def probe(dask_worker: Any) -> list[tuple[int, float, float, float]]:
        backend = dask_worker.plugins[PLUGIN_NAME]
        with backend.table.lock:
            entries = [(v, e.obj) for (o, v), e in backend.table.items() if o == oid]
        return [(v, float(obj.data.min()), float(obj.data.max()), float(obj.label)) for v, obj in entries]

    return [copy for copies in session.client.run(probe).values() for copy in copies]


def one_version(state: tuple[float, float, float]) -> bool:
    """Whether a copy's (min, max, label) is of one version: all three equal."""
    return state[0] == state[1] == state[2]


def copy_during_write(session, proxy, transfer: Callable[[], Any], gate: Path) -> tuple[Any, bool]:
    """Run ``transfer`` while ``proxy.fill(2.0)`` waits between its halves; open the gate once the
    transfer finished or waits for the object's lock. Returns the transfer's result and the write's."""
    with ThreadPoolExecutor(2) as pool:
        writer = pool.submit(proxy.fill.value, 2.0, str(gate), BOUND)
        try:
            wait_for_file(str(gate) + ".started", BOUND)
            copying = pool.submit(transfer)
            wait_until(
                lambda: copying.done() or lock_waiters(session, proxy.oid) > 0, "the copy to end or wait for the lock"
            )
        finally:
            gate.touch()
        return copying.result(timeout=BOUND), writer.result(timeout=BOUND)


TRANSFERS = ["move", "replicate", "fetch", "local", "non_active", "new_version"]


@pytest.mark.parametrize("kind", TRANSFERS)
def test_a_copy_made_during_a_write_is_all_before_or_all_after_it(session, store, tmp_path, kind):
    proxy = store.make_persistent(Halves(SIZE, 1.0))
    (holder,) = proxy.locations()
    other = next(w for w in store.backends() if w != holder)
    transfers: dict[str, Callable[[], Any]] = {
        "move": lambda: proxy.move(other),
        "replicate": lambda: proxy.replicate(other),
        "fetch": lambda: (lambda obj: (float(obj.data.min()), float(obj.data.max()), float(obj.label)))(proxy.fetch()),
        "local": proxy.state.local,
        "non_active": lambda: session.gather(proxy.state.non_active()),
        "new_version": lambda: proxy.new_version().state.value(),
    }
    try:
        copied, wrote = copy_during_write(session, proxy, transfers[kind], tmp_path / "gate")
        assert wrote is True
        if kind in ("fetch", "local", "non_active", "new_version"):
            assert one_version(copied), f"the {kind} copy is torn: (min, max, label) = {copied}"
        copies = held_copies(session, proxy.oid)
        torn = [c for c in copies if not one_version(c[1:])]
        assert not torn, f"torn copies held after a {kind}: (version, min, max, label) = {torn}"
        current = [c for c in copies if c[0] == 0]
        assert current and all(c[1] == 2.0 for c in current), f"the write that returned True is lost: {copies}"
        if kind == "move":
            assert proxy.locations() == [other] and len(current) == 1
        if kind == "replicate":
            assert sorted(proxy.locations()) == sorted([holder, other]) and len(current) == 2
    finally:
        proxy.delete()


def test_copies_are_not_serialised_behind_a_reader(session, store, tmp_path):
    """A read-only call holding the object's shared lock does not hold up a fetch, a non-active call,
    a replica or a new version: the copies take the lock shared too."""
    proxy = store.make_persistent(Halves(SIZE, 3.0))
    other = next(w for w in store.backends() if w not in proxy.locations())
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(2) as pool:
        reader = pool.submit(proxy.hold.value, str(gate), BOUND)
        try:
            wait_for_file(str(gate) + ".started", BOUND)
            copies = pool.submit(
                lambda: [
                    float(proxy.fetch().label),
                    session.gather(proxy.state.non_active())[2],
                    proxy.new_version().state.value()[2],
                    proxy.replicate(other) and proxy.state.value()[2],
                ]
            )
            assert copies.result(timeout=BOUND) == [3.0] * 4
            assert not reader.done()  # every copy went while the reader was inside the object
        finally:
            gate.touch()
            assert reader.result(timeout=BOUND) is True
            proxy.delete()


def test_a_read_only_method_copies_its_own_object_while_a_writer_waits(session, store, tmp_path):
    """A copy joins the read-only methods holding the lock even while a writer waits: a method that
    fetches its own object would otherwise wait for the writer, which waits for the method (the
    fetch failed after the store's timeout, 60 s, as an unanswered backend)."""
    proxy = store.make_persistent(Halves(SIZE, 4.0))
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(2) as pool:
        reader = pool.submit(lambda: proxy.hold_then_fetch_itself(proxy.oid, str(gate), BOUND).result(BOUND))
        try:
            wait_for_file(str(gate) + ".started", BOUND)
            writer = pool.submit(proxy.fill.value, 5.0)
            wait_until(lambda: lock_waiters(session, proxy.oid) > 0, "the writer to wait for the reader")
        finally:
            gate.touch()
        try:
            assert reader.result(timeout=BOUND) == 4.0  # all before the write
            assert writer.result(timeout=BOUND) is True
            assert proxy.state.value() == (5.0, 5.0, 5.0)
        finally:
            proxy.delete()


def test_copies_waiting_for_a_writer_do_not_hold_up_other_objects(session, store, tmp_path):
    """Fetches that wait for a busy object's lock wait on threads of their own: a fetch of another
    object on the same backend, and a put there, still go at once (they queued behind the four I/O
    threads, all waiting, until the writer ended)."""
    busy = store.make_persistent(Halves(SIZE, 1.0))
    (holder,) = busy.locations()
    idle = store.make_persistent(Halves(SIZE, 6.0))
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(8) as pool:
        writer = pool.submit(busy.fill.value, 2.0, str(gate), BOUND)
        try:
            wait_for_file(str(gate) + ".started", BOUND)
            fetches = [pool.submit(busy.fetch) for _ in range(5)]
            wait_until(lambda: lock_waiters(session, busy.oid) >= 4, "the fetches to wait for the writer")
            if idle.locations() != [holder]:
                moved = pool.submit(idle.move, holder)  # a push from the other backend: a put on the holder
                moved.result(timeout=BOUND / 4)
            assert float(pool.submit(idle.fetch).result(timeout=BOUND / 4).label) == 6.0
            assert not writer.done()
        finally:
            gate.touch()
        try:
            assert writer.result(timeout=BOUND) is True
            assert all(
                one_version((float(o.data.min()), float(o.data.max()), float(o.label)))
                for o in (f.result(timeout=BOUND) for f in fetches)
            )
        finally:
            busy.delete()
            idle.delete()


def test_a_copy_joins_methods_holding_the_lock_but_not_other_copies_before_a_waiting_writer():
    """The lock's rule for copies: with a writer waiting, a copy joins a read-only method holding
    the lock (it may be that method's own copy), a method does not, and a copy that holds the lock
    alone does not let another in (a stream of copies never starves the writer)."""
    lock = ReadWriteLock()
    assert lock.acquire(False)  # a read-only method
    writing = threading.Thread(target=lambda: (lock.acquire(True, BOUND), lock.release(True)))
    writing.start()
    wait_until(lambda: lock.waiting == 1, "the writer to wait")
    assert not lock.acquire(False, timeout=0)  # a method waits for the writer
    assert lock.acquire(False, timeout=0, copy=True)  # a copy joins the method
    lock.release(False)  # the method ends; the copy still holds the lock
    assert not lock.acquire(False, timeout=0, copy=True)  # no copy joins a copy before the writer
    assert writing.is_alive()
    lock.release(False, copy=True)
    writing.join(BOUND)
    assert not writing.is_alive() and lock.acquire(True, timeout=0)
    lock.release(True)


# -- a writer that waits for the lock while a copy holds it (one backend, its messages stubbed) -----
def stub_backend(
    tmp_path: Path, address: str, workers: list[str]
) -> tuple[StoreBackend, list[tuple[str, dict[str, Any]]]]:
    """A backend at ``address`` on a stub worker, whose catalogue names ``workers`` as the holders
    (after a copy) and whose sends to other backends wait until a call waits for the object's lock
    (bounded); what it said to either."""
    worker = types.SimpleNamespace(
        address=address,
        handlers={},
        state=types.SimpleNamespace(nthreads=1),
        memory_manager=types.SimpleNamespace(memory_limit=None),
        log_event=lambda *args, **kwargs: None,
    )
    backend = StoreBackend(str(tmp_path), timeout=BOUND)
    backend.setup(worker)
    said: list[tuple[str, dict[str, Any]]] = []

    def catalogue(op: Operation, **kwargs: Any) -> Any:
        said.append((op.name, kwargs))
        if op == StoreCatalogue.op_records:
            (oid, version), *_ = kwargs["refs"]
            record = Record(oid, 0, list(workers), True, [], [], "Halves", "object", 0, {}, {}, None, 0.0)
            return [record.to_wire()]
        return None

    def send(address: str, op: Operation, **kwargs: Any) -> Any:
        said.append((op.name, {"address": address}))
        entry = next(iter(backend.table.values()), None)
        wait_until(lambda: entry is None or getattr(entry.lock, "waiting", 0) > 0, "a writer to wait")
        return 0

    backend.link.catalogue = catalogue  # type: ignore[method-assign]
    backend.link.backend = send  # type: ignore[method-assign]
    return backend, said


@pytest.mark.parametrize("move", [False, True])
def test_a_writer_that_waited_for_a_copy_does_not_write_a_dropped_or_replicated_object(tmp_path, move):
    """A push holds the object's shared lock until its copy has left; a writer queued meanwhile is
    refused after a replica (the replicas would differ) and sent to the new holder after a move (its
    write would be lost with the dropped source)."""
    here, there = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"
    backend, said = stub_backend(tmp_path, here, [there] if move else [here, there])
    backend.table.add("o" * 32, 0, Halves(16, 1.0))
    entry = backend.table[("o" * 32, 0)]
    errors: list[BaseException] = []
    sending = threading.Event()

    def write() -> None:
        sending.wait(BOUND)
        try:
            backend.invoke(ObjectRef("o" * 32, 0), "fill", True, (2.0,), {})
        except BaseException as error:  # noqa: BLE001 - the test looks at what it was
            errors.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    original_send = backend.link.backend

    def send_and_say(*args: Any, **kwargs: Any) -> Any:
        sending.set()
        return original_send(*args, **kwargs)

    backend.link.backend = send_and_say  # type: ignore[method-assign]
    kwargs = {"move": True} if move else {}
    try:
        backend_ops.op_push.handler(backend, "o" * 32, 0, there, **kwargs)
    finally:
        sending.set()
        writer.join(BOUND)
    assert not writer.is_alive()
    assert float(entry.obj.data.max()) == 1.0, "the writer wrote into the object after it was copied"
    if move:
        assert [type(e) for e in errors] == [NotHere]  # the caller asks the catalogue again: the new holder
        assert ("o" * 32, 0) not in backend.table
        assert (StoreCatalogue.op_remove_location.name, {"oid": "o" * 32, "version": 0, "worker": here}) in said
    else:
        assert [type(e) for e in errors] == [StoreError] and "replicas" in str(errors[0])
    backend.teardown(backend.worker)
