"""The store's one typed wire: an operation is defined in one place (its handler, decorated), and
both ends' dispatch, its argument checks, its pool and its re-send rule come from that definition."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import workbench.runtime.store.backend_ops as backend_ops
from workbench.runtime.store import ArrayBlock, store_for, wire
from workbench.runtime.store.backend import StoreBackend
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.errors import BackendUnreachable
from workbench.runtime.store.tasks import LocalBackend
from workbench.runtime.store.wire import Pool, backend_op, catalogue_op

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "workbench" / "runtime" / "store"


# -- two operations defined here, and only here ---------------------------------------------------
@backend_op(resend=True)
def op_toy_held(backend: Any, oid: str, scale: int = 1) -> list[int]:
    """The versions of object ``oid`` this backend holds, each times ``scale``."""
    return [row["version"] * scale for row in backend.table.rows() if row["oid"] == oid]


@catalogue_op(resend=True)
def op_toy_holders(catalogue: Any, oid: str) -> list[str]:
    """The backends the catalogue knows to hold any version of ``oid``."""
    return sorted({w for (o, _), held_by in catalogue.locations.items() if o == oid for w in held_by})


def _knows_the_toys() -> bool:
    """On a worker: import this module (as its own tasks would be), so that its operations are known there."""
    importlib.import_module(__name__)
    return "toy_held" in wire.BACKEND


@pytest.fixture
def store(session):
    return store_for(session)


def test_a_new_operation_is_one_definition_called_end_to_end(session, store):
    """An operation defined in this file alone is sent through the client's link to a real backend and
    to the catalogue, dispatched there by name, its arguments checked at both ends."""
    assert all(session.client.run(_knows_the_toys).values())
    proxy = store.make_persistent(ArrayBlock(np.arange(4.0)))
    try:
        (holder,) = proxy.locations()
        assert list(store.link.catalogue(op_toy_holders, oid=proxy.oid)) == [holder]
        assert list(store.link.backend(holder, op_toy_held, oid=proxy.oid, scale=3)) == [0]
        proxy.new_version()  # version 1 on the same backend
        assert sorted(store.link.backend(holder, op_toy_held, oid=proxy.oid, scale=3)) == [0, 3]
        with pytest.raises(TypeError, match=r"'toy_held' takes scale: int, got str 'x'"):
            store.link.backend(holder, op_toy_held, oid=proxy.oid, scale="x")
    finally:
        proxy.delete()


def test_a_mistyped_backend_address_is_unreachable_saying_what_to_check(store):
    """On this TLS cluster a tcp:// (or scheme-less) address raised Dask's RuntimeError "encryption
    required", and a garbled one its ValueError: each is the store's BackendUnreachable, saying why."""
    expected = {
        "tcp://nohost:1": r"tcp://nohost:1 is a plain-TCP address, and this cluster talks TLS only",
        "garbled": r"'garbled' is not an address of a worker \(missing port number",
        "tls://": r"'tls://' is not an address of a worker",
        "://x": r"'://x' is not an address of a worker \(unknown address scheme",
    }
    for address, says in expected.items():
        with pytest.raises(BackendUnreachable, match=says + r".*as the scheduler lists them"):
            store.link.backend(address, backend_ops.op_null)


def test_an_operation_says_what_it_is():
    """The definition is the whole operation: its name, typed arguments, reply, pool and re-send rule."""
    assert op_toy_held.summary == "toy_held(oid: str, scale: int = ...) -> list[int]"
    assert (op_toy_held.pool, op_toy_held.resend) == (Pool.IO, True)
    assert backend_ops.op_get.pool is Pool.COPIES and backend_ops.op_get.resend
    assert backend_ops.op_call.pool is Pool.LOOP  # a coroutine, on the event loop
    assert not backend_ops.op_push.resend  # a second push would send a second copy
    assert StoreCatalogue.op_records.summary == "records(refs: list[tuple[str, int | None]]) -> list[dict[str, Any]]"


def test_a_list_argument_with_items_of_another_type_is_refused_where_sent():
    """Only the outer list was checked: refs=["ab"] reached the catalogue, which read it as oid "a" and
    version "b"."""
    records = StoreCatalogue.op_records
    with pytest.raises(TypeError, match=r"'records' takes refs: list\[tuple\[str, int \| None\]\], got list \['ab'\]"):
        wire.message(records, wire.End.CATALOGUE, {"refs": ["ab"]})
    assert wire.message(records, wire.End.CATALOGUE, {"refs": [("a", 1), ["b", None]]})  # tuples: msgpack's lists
    with pytest.raises(TypeError, match=r"takes oids: list\[str\], got list \['a', 1\]"):
        wire.message(StoreCatalogue.op_delete, wire.End.CATALOGUE, {"oids": ["a", 1]})


def test_a_list_of_pairs_is_refused_where_sent_when_an_item_is_not_a_pair():
    """refs=[["x"]] passed the check (a list of lists) and failed at the catalogue with "not enough
    values to unpack"; each key is now typed as the pair (or triple) it is."""
    records = StoreCatalogue.op_records
    for refs in ([["x"]], [["x", 1, 2]], [[1, 2]], [["x", "1"]]):
        with pytest.raises(TypeError, match=r"'records' takes refs: list\[tuple\[str, int \| None\]\], got list"):
            wire.message(records, wire.End.CATALOGUE, {"refs": refs})
    with pytest.raises(TypeError, match=r"'drop_many' takes keys: list\[tuple\[str, int\]\], got list \[\['x'\]\]"):
        wire.message(backend_ops.op_drop_many, wire.End.BACKEND, {"keys": [["x"]]})
    with pytest.raises(TypeError, match=r"'unplace_many' takes placed: list\[tuple\[str, int, str\]\]"):
        wire.message(backend_ops.op_unplace_many, wire.End.BACKEND, {"placed": [["x", 0]], "tier": "dram"})
    assert wire.message(backend_ops.op_drop_many, wire.End.BACKEND, {"keys": [("x", 0), ["y", np.int64(1)]]})


def test_a_reply_of_another_type_than_the_operation_answers_is_refused_where_it_arrives():
    assert StoreCatalogue.op_records.answered([{"oid": "x"}], "the scheduler") == [{"oid": "x"}]
    assert backend_ops.op_null.answered(None, "backend tcp://b") is None
    assert backend_ops.op_get.answered(object, "backend tcp://b") is object  # Any: whatever the object is
    with pytest.raises(TypeError, match=r"backend tcp://b answered 'table' with int 7, not list\[dict\[str, Any\]\]"):
        backend_ops.op_table.answered(7, "backend tcp://b")
    with pytest.raises(TypeError, match=r"the scheduler answered 'backends' with list \[1\], not list\[str\]"):
        StoreCatalogue.op_backends.answered([1], "the scheduler")


def test_a_handler_that_cannot_be_an_operation_is_refused_where_it_is_written():
    with pytest.raises(TypeError, match="argument 'n' has no type annotation"):
        backend_op()(lambda backend, n: n)
    with pytest.raises(TypeError, match="on Pool.LOOP is a coroutine function"):

        @backend_op(pool=Pool.LOOP)
        def op_not_async(backend: Any) -> None:
            """Not a coroutine."""

    with pytest.raises(ValueError, match="has an operation 'table' already"):

        @backend_op()
        def op_table(backend: Any) -> None:
            """Another handler with a known operation's name."""

    assert wire.BACKEND.find("table") is backend_ops.op_table  # the known one stays


def test_the_operations_are_their_definitions_alone():
    """No hand-kept table: every ``op_*`` of the backend's operations and of the catalogue is an
    operation known to its end by its own name, and the old enums and dispatch tables are gone."""
    for name, value in vars(backend_ops).items():
        if name.startswith("op_"):
            assert wire.BACKEND.find(name.removeprefix("op_")) is value
    for name, value in vars(StoreCatalogue).items():
        if name.startswith("op_"):
            assert wire.CATALOGUE.find(name.removeprefix("op_")) is value
    gone = re.compile(r"BACKEND_HANDLERS|CATALOGUE_HANDLERS|handler_for|CatalogueOp|BackendOp|^COPIES = ", re.M)
    sources = [p for p in (ROOT / "workbench").rglob("*.py")]
    assert [str(p) for p in sources if gone.search(p.read_text())] == []
    # one sender of store messages, the link: no other module names the handler's action itself
    senders = [p.name for p in sources if "workbench_store(action=" in p.read_text()]
    assert senders == ["link.py"]


def test_task_bodies_use_the_backends_in_process_api_alone():
    """The task bodies reach their worker's backend through its in-process API (``invoke``,
    ``copy_of``, ``adopt``, ``place``, ``held``, ``writing`` ...), never its table or its placement."""
    for name in ("tasks.py", "local.py", "handles.py"):
        assert re.findall(r"\.(?:table|placing)\b", (STORE / name).read_text()) == [], name
    for name, member in vars(LocalBackend).items():  # and the backend offers that API, as the protocol types it
        if callable(member) and not name.startswith("_"):
            offered = inspect.signature(getattr(StoreBackend, name)).parameters
            assert list(inspect.signature(member).parameters) == [p for p in offered if p not in ("call", "once")]
    # and an active call's task is made in one place
    makers = [
        p.name for p in (ROOT / "workbench").rglob("*.py") if re.search(r"PinnedCall\(\s*run_active", p.read_text())
    ]
    assert makers == ["handles.py"]
