"""The store's link without a cluster: its one timeout, its one "unreachable", its one retry rule, and
how it finds an object (its record, a disk copy read back where the catalogue says), against stand-ins
for the scheduler's and the workers' ``workbench_store`` handlers."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import pytest
from distributed.protocol.serialize import Serialize

import workbench.runtime.store.backend_ops as backend_ops
from workbench.runtime import dask_seam
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.errors import BackendUnreachable, NotHere, ObjectLost, StoreError, UnknownAlias
from workbench.runtime.store.link import Link
from workbench.runtime.store.model import ObjectRef
from workbench.runtime.store.protocol import LoadClaim, Record, Resolved, error_reply, result_reply

OID = "ab" * 16
SHORT = 0.05  # seconds: the timeout of a link whose waits must end in a test


class Handler:
    """A ``workbench_store`` handler stand-in: ``answer(action, **kwargs)`` gives the reply's result (or
    raises what the operation would send back; a coroutine function is awaited); every message is
    written down in ``said``."""

    def __init__(self, name: str, answer: Callable[..., Any], said: list[tuple[str, str, dict[str, Any]]]):
        self.name, self.answer, self.said = name, answer, said

    async def workbench_store(self, action: str, **kwargs: Any) -> Any:
        self.said.append((self.name, action, kwargs))
        try:
            result = self.answer(action, **kwargs)
            reply = result_reply(await result if asyncio.iscoroutine(result) else result)
        except Exception as error:  # sent back, as the real handlers do
            reply = error_reply(error)
        return {k: v.data if isinstance(v, Serialize) else v for k, v in reply.items()}  # as Dask delivers it


def fake_link(
    catalogue: Callable[..., Any],
    backends: dict[str, Callable[..., Any]] | None = None,
    timeout: float = 60.0,
    **link_kwargs: Any,
) -> tuple[Link, list[tuple[str, str, dict[str, Any]]]]:
    """A link whose scheduler answers with ``catalogue`` and whose backends with ``backends`` (by address;
    an address missing refuses the connection); what it sent, in order."""
    said: list[tuple[str, str, dict[str, Any]]] = []
    scheduler = Handler("scheduler", catalogue, said)

    def rpc(address: str) -> Any:
        if address not in (backends or {}):
            raise ConnectionRefusedError(f"nothing listens at {address}")
        return Handler(address, backends[address], said)

    return Link(lambda: scheduler, rpc, lambda function: asyncio.run(function()), timeout, **link_kwargs), said


def record(workers: list[str], disk_path: str | None = None) -> dict[str, Any]:
    """A ``records`` entry of object OID, version 0, held by ``workers``."""
    return Record(OID, 0, workers, True, [], [], "m.C", "object", 8, {"f": False}, {}, disk_path, 1.0).to_wire()


def test_a_link_needs_a_timeout_in_seconds():
    for bad in (0, -1.0, None, True, "60"):
        with pytest.raises(ValueError, match="timeout is seconds > 0"):
            Link(lambda: None, lambda address: None, lambda function: None, bad)  # type: ignore[arg-type]


def test_the_catalogue_answers_or_its_error_is_raised():
    def catalogue(action: str, **kwargs: Any) -> Any:
        if action == "alias":
            raise KeyError(f"no object has the alias {kwargs['alias']!r}")
        if action == "set_nbytes":
            raise ValueError("a size is bytes")
        return {"asked": action, **kwargs}

    link, said = fake_link(catalogue)
    assert link.catalogue(StoreCatalogue.op_turn, n=3) == {"asked": "turn", "n": 3}
    with pytest.raises(UnknownAlias, match="no object has the alias 'x'"):
        link.catalogue(StoreCatalogue.op_alias, alias="x")
    with pytest.raises(ValueError, match="a size is bytes"):
        link.catalogue(StoreCatalogue.op_set_nbytes, oid=OID, version=0, nbytes=-1)
    assert [action for _, action, _ in said] == ["turn", "alias", "set_nbytes"]


def test_a_backend_that_does_not_answer_is_unreachable_and_its_operations_errors_are_its_own():
    async def silent(action: str, **kwargs: Any) -> Any:
        await asyncio.Event().wait()  # never set: the link's timeout ends the wait

    backends = {"tcp://b": lambda action, **kwargs: [{"oid": OID}], "tcp://hung": silent}
    link, _ = fake_link(lambda action, **kwargs: None, backends, timeout=SHORT)
    assert link.backend("tcp://b", backend_ops.op_table) == [{"oid": OID}]
    with pytest.raises(
        BackendUnreachable, match=r"did not answer 'table' \(ConnectionRefusedError.*; it may be sent again"
    ):
        link.backend("tcp://gone", backend_ops.op_table)
    with pytest.raises(BackendUnreachable, match=r"tcp://hung did not answer 'null' \(TimeoutError: no answer within"):
        link.backend("tcp://hung", backend_ops.op_null)

    def refuses(action: str, **kwargs: Any) -> Any:
        raise OSError("the method's own file error")

    link, _ = fake_link(lambda action, **kwargs: None, {"tcp://b": refuses})
    with pytest.raises(OSError, match="the method's own file error") as raised:
        link.backend("tcp://b", backend_ops.op_call, call={})
    assert not isinstance(raised.value, BackendUnreachable)  # sent back by the backend: it did answer


def test_a_timeout_that_is_not_seconds_is_refused_naming_the_operation():
    link, said = fake_link(lambda action, **kwargs: None, {"tcp://b": lambda action, **kwargs: None})
    with pytest.raises(TypeError, match=r"a store backend's 'null' takes timeout: seconds > 0 or None, got str 'x'"):
        link.backend("tcp://b", backend_ops.op_null, timeout="x")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=rf"'null' takes timeout: seconds > 0 or None, got (float|int) {bad}"):
            link.backend("tcp://b", backend_ops.op_null, timeout=bad)
    assert said == []  # nothing was sent
    assert link.backend("tcp://b", backend_ops.op_null, timeout=1) is None


def test_a_reply_of_the_wrong_type_is_an_error_naming_the_operation():
    link, _ = fake_link(lambda action, **kwargs: "all", {"tcp://b": lambda action, **kwargs: 7})
    with pytest.raises(TypeError, match=r"the scheduler answered 'list' with str 'all', not list\[dict\[str, Any\]\]"):
        link.catalogue(StoreCatalogue.op_list)
    with pytest.raises(TypeError, match=r"backend tcp://b answered 'table' with int 7, not list\[dict\[str, Any\]\]"):
        link.backend("tcp://b", backend_ops.op_table)
    results, errors = link.backends_together(backend_ops.op_table, {"tcp://b": {}})
    assert results == {} and "answered 'table' with int 7" in str(errors["tcp://b"])


def test_an_address_a_cluster_cannot_connect_to_is_named_with_what_to_check():
    """What each end's connection arguments allow (Dask raised its own RuntimeError or TypeError)."""
    tls = {"ssl_context": ssl.create_default_context(), "require_encryption": True}
    assert dask_seam.address_problem(tls, "tls://10.0.0.1:4000") is None
    assert dask_seam.address_problem({}, "tcp://10.0.0.1:4000") is None
    assert dask_seam.address_problem({}, "inproc://10.0.0.1/1/2") is None
    assert "plain-TCP address, and this cluster talks TLS only" in dask_seam.address_problem(tls, "tcp://h:1")
    assert "TLS address, and this cluster talks plain TCP" in dask_seam.address_problem({}, "tls://nohost:1")
    assert "missing port number" in dask_seam.address_problem({}, "garbled")


def test_messages_to_several_backends_go_together_and_fail_apart():
    link, said = fake_link(
        lambda action, **kwargs: None,
        {"tcp://a": lambda action, **kwargs: len(kwargs["keys"]), "tcp://b": lambda action, **kwargs: 1 / 0},
    )
    sent = {"tcp://a": [["a", 0], ["b", 0]], "tcp://b": [["c", 0]], "tcp://gone": [["d", 0]]}
    results, errors = link.backends_together(
        backend_ops.op_put_many, {address: {"keys": keys, "data": b"", "buffers": []} for address, keys in sent.items()}
    )
    assert results == {"tcp://a": 2}
    assert isinstance(errors["tcp://b"], ZeroDivisionError)
    assert isinstance(errors["tcp://gone"], BackendUnreachable)
    assert isinstance(errors["tcp://gone"].__cause__, ConnectionRefusedError)
    assert "it may have run there: look before sending it again" in str(errors["tcp://gone"])  # put_many: no re-send
    assert sorted(name for name, _, _ in said) == ["tcp://a", "tcp://b"]


def test_a_closed_link_sends_nothing():
    link, said = fake_link(lambda action, **kwargs: None, {"tcp://b": lambda action, **kwargs: None})
    link.close("this store was closed: open it again")
    for send in (lambda: link.catalogue(StoreCatalogue.op_list), lambda: link.backend("tcp://b", backend_ops.op_table)):
        with pytest.raises(StoreError, match="this store was closed"):
            send()
    assert said == []


def test_resolve_reads_a_disk_copy_back_on_the_backend_the_catalogue_chooses():
    def catalogue(action: str, **kwargs: Any) -> Any:
        if action == "records":
            return [record([], disk_path="/s/objects/x.pkl")]
        assert action == "claim_load"
        return LoadClaim([], load_on="tcp://b", disk_path="/s/objects/x.pkl").to_wire()

    link, said = fake_link(catalogue, {"tcp://b": lambda action, **kwargs: 8})
    assert link.resolve([ObjectRef(OID)]) == [Resolved(ObjectRef(OID, 0, None, "m.C"), ["tcp://b"])]
    assert [(name, action) for name, action, _ in said] == [
        ("scheduler", "records"),
        ("scheduler", "claim_load"),
        ("tcp://b", "load"),
    ]
    assert said[1][2]["worker"] is None  # a client asks for no backend of its own
    assert said[2][2] == {"oid": OID, "version": 0, "disk_path": "/s/objects/x.pkl"}


def test_a_backend_chosen_to_read_a_disk_copy_reads_it_itself():
    loaded = []
    link, said = fake_link(
        lambda action, **kwargs: (
            [record([], disk_path="/s/objects/x.pkl")]
            if action == "records"
            else LoadClaim([], load_on=kwargs["worker"], disk_path="/s/objects/x.pkl").to_wire()
        ),
        here="tcp://me",
        load_here=lambda *args: loaded.append(args),
    )
    (resolved,) = link.resolve([ObjectRef(OID)])
    assert resolved.workers == ["tcp://me"] and loaded == [(OID, 0, "/s/objects/x.pkl")]
    assert [name for name, _, _ in said] == ["scheduler", "scheduler"]  # no message to itself


def test_an_object_held_nowhere_without_a_disk_copy_is_lost_and_a_deleted_one_is_missing():
    link, _ = fake_link(
        lambda action, **kwargs: (
            [record([])] if action == "records" else LoadClaim([], lost_from=("tcp://gone",)).to_wire()
        )
    )
    with pytest.raises(ObjectLost, match="held only in memory by backend tcp://gone"):
        link.resolve([ObjectRef(OID, alias="x")])
    link, _ = fake_link(lambda action, **kwargs: [{"oid": OID, "version": None, "missing": "deleted"}])
    with pytest.raises(StoreError, match="was deleted"):
        link.resolve([ObjectRef(OID)])


def test_retrying_asks_again_while_the_object_moves_until_the_timeout():
    link, _ = fake_link(lambda action, **kwargs: None, timeout=SHORT)
    answers = iter([NotHere("evicted"), BackendUnreachable("left"), "found"])
    agains = []

    def attempt(again: bool) -> str:
        agains.append(again)
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert link.retrying(attempt) == "found"
    assert agains == [False, True, True]  # asked afresh after each failed try
    tries = []

    def never_here(again: bool) -> None:
        tries.append(again)
        raise NotHere("object abc v0 is not on backend tcp://x")

    with pytest.raises(NotHere, match="not on backend"):
        link.retrying(never_here)
    assert len(tries) >= 2

    def broken(again: bool) -> None:
        raise ValueError("not a move")

    with pytest.raises(ValueError, match="not a move"):  # only a move (or a holder gone) is tried again
        link.retrying(broken)
