"""The store's wire protocol: reply records, the error encoding, both ends' constants.

Clients and backends reach the catalogue (a scheduler plugin) and the backends (worker plugins)
through one Dask comm handler each, :data:`HANDLER`, sending ``action=<operation's name>`` and the
operation's arguments. The operations are defined once each, by their handlers
(:mod:`~workbench.runtime.store.wire`), so a call is followed by names::

    proxy.total.value()                              # handles.ActiveMethod.value
      -> link.call(locate, call)                     # link.Link.call (the proxy's store's link)
      -> link.backend(worker, backend_ops.op_call, ...)
      -> backend_ops.op_call -> StoreBackend.answer_call, on the worker

An active call (``backend_ops.op_call``) is a :class:`Call`: an id, the method and its arguments, and a
budget (seconds the method may take, waiting for the object's lock included). Its reply is a
:class:`CallAnswer`: the value, or "still running" (the caller asks again with the same call, which
the backend answers from its memory of that id: a re-sent call is never run twice).

Messages are msgpack: plain values, lists and dicts (Dask turns tuples into lists). The records
here are built from those at the receiving end (``from_wire``) and turned into them at the sending
end (``to_wire``), in this module only. Every reply is :func:`result_reply` or :func:`error_reply`;
:func:`unpack_reply` returns the result or raises the error, on either end.
"""

from __future__ import annotations

import array
import contextlib
import gc
import inspect
import math
import pickle
import uuid
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import cloudpickle

from workbench.runtime import failures
from workbench.runtime.dask_seam import serialized
from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.model import ObjectRef

PLUGIN_NAME = "workbench-store"  # the catalogue's name on the scheduler, the backends' on the workers
HANDLER = "workbench_store"  # the comm handler of both ends
ERROR_KEY = "__workbench_error__"  # a reply carrying an exception for the caller to raise
RESULT_KEY = "__workbench_result__"  # a reply carrying a result (a bare None means: no store handler there)
DELETED = 65535  # in a compact locations reply: the object was deleted
ACTIVE_KEY_MARK = "-active-"  # in the key of every active-call task (see call_task_name); the catalogue looks for it
CALL_SECONDS = 3600.0  # an active call's default budget: how long its method may take (lock wait included)
PLAIN = (type(None), bool, int, float, str)  # values msgpack carries as they are


def call_task_name(method: str, active: bool) -> str:
    """The task name of a call of ``method``: ``<method>-active`` (runs where the object is) or
    ``<method>-non-active`` (fetches a copy); its keys are ``trace.task_key`` of it."""
    return f"{method}-active" if active else f"{method}-non-active"


# -- replies --------------------------------------------------------------------------------------
async def answer(run: Callable[[], Any]) -> dict[str, Any]:
    """The reply of one operation, by the one error rule of both ends (catalogue and backends):
    what ``run()`` returns (awaited if it is awaitable) as :func:`result_reply`, and every
    ``Exception`` it raises, the unknown operation's included, as :func:`error_reply`, for the caller
    to raise (Dask would log each one as a crash of its server, and the caller would get no reason).
    A ``BaseException`` that is not an ``Exception`` (``CancelledError`` when the server closes,
    ``KeyboardInterrupt``) passes: it ends the handler, as Dask expects."""
    try:
        result = run()
        if inspect.isawaitable(result):
            result = await result
    except Exception as error:
        return error_reply(error)
    return result_reply(result)


def result_reply(result: Any) -> dict[str, Any]:
    """The reply carrying ``result`` (plain values as they are; others wrapped by the sender)."""
    return {RESULT_KEY: result}


def error_reply(error: Exception) -> dict[str, Any]:
    """The reply carrying ``error`` for the caller to raise (pickled, so its type travels: ``NotHere``,
    ``KeyError`` ...). An error that cannot be pickled travels as a ``StoreError`` with its text."""
    return {ERROR_KEY: serialized(_sendable_error(error))}


def _sendable_error(error: Exception) -> Exception:
    """``error`` if it can travel to the caller (pickled), else a ``StoreError`` with its text; one whose
    text cannot be made is named by an ``UnprintableError`` (the caller could not show it either)."""
    text = failures.message(error)
    if text is None:
        return failures.unprintable(error)
    try:
        pickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return StoreError(f"{type(error).__name__}: {text}")


def unpack_reply(reply: Any, where: str) -> Any:
    """The result a catalogue or backend reply carries, or the exception it carries raised.

    Dask answers a message for a handler that is not there with a bare None: ``where`` (the
    scheduler, a backend) has no store, because it was closed (taken off the cluster).
    """
    if isinstance(reply, dict) and ERROR_KEY in reply:
        raise reply[ERROR_KEY]
    if not isinstance(reply, dict) or RESULT_KEY not in reply:
        raise StoreError(
            f"{where} has no store: the store was closed (taken off the cluster by the Store that opened it). "
            "Open it again with Store(session, directory)"
        )
    return reply[RESULT_KEY]


# -- records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """The catalogue's record of one object version (``records`` replies), with the live workers
    holding it in memory (``workers``: empty when it is only on disk, or lost)."""

    oid: str
    version: int
    workers: list[str]
    current: bool
    lost_from: list[str]  # the backends it was lost with, when no live worker holds it
    aliases: list[str]
    class_label: str
    kind: str  # "object" or "collection"
    nbytes: int
    methods: dict[str, bool]
    meta: dict[str, Any]
    disk_path: str | None
    created: float

    def ref(self, like: ObjectRef | None = None) -> ObjectRef:
        """The reference of this version; alias and pinning from ``like`` when given."""
        if like is None:
            return ObjectRef(self.oid, self.version, (self.aliases or [None])[0], self.class_label)
        return ObjectRef(self.oid, self.version, like.alias, self.class_label, like.pinned)

    def to_wire(self) -> dict[str, Any]:
        """The record as a message part."""
        return dict(vars(self))

    def as_dict(self) -> dict[str, Any]:
        """The record as a dict of its fields (what ``Proxy.info()`` returns)."""
        return {**vars(self), "workers": list(self.workers), "aliases": list(self.aliases)}


@dataclass(frozen=True)
class Missing:
    """No record: the object (or the version asked for) is not in the catalogue, and why."""

    oid: str
    version: int | None
    reason: str  # "deleted"

    def to_wire(self) -> dict[str, Any]:
        """The answer as a message part."""
        return {"oid": self.oid, "version": self.version, "missing": self.reason}

    def error(self, ref: ObjectRef) -> StoreError:
        """The error for a caller that needs the object ``ref`` names."""
        return StoreError(f"{ref.label()} was {self.reason}: it is no longer in the store")


def record_from_wire(reply: Mapping[str, Any]) -> Record | Missing:
    """A ``records`` reply entry as its record (lists as lists: messages may carry them as tuples)."""
    if "missing" in reply:
        return Missing(reply["oid"], reply.get("version"), reply["missing"])
    return Record(
        oid=reply["oid"],
        version=int(reply["version"]),
        workers=list(reply["workers"]),
        current=bool(reply["current"]),
        lost_from=list(reply["lost_from"]),
        aliases=list(reply["aliases"]),
        class_label=reply["class_label"],
        kind=reply["kind"],
        nbytes=int(reply["nbytes"]),
        methods=dict(reply["methods"]),
        meta=dict(reply["meta"]),
        disk_path=reply["disk_path"],
        created=reply["created"],
    )


def found(record: Record | Missing, ref: ObjectRef) -> Record:
    """``record`` if the catalogue has it; the ``StoreError`` of the missing object ``ref`` if not."""
    if isinstance(record, Missing):
        raise record.error(ref)
    return record


@dataclass(frozen=True)
class Resolved:
    """An object found: its version now (``ref``) and every live backend holding it in memory
    (never empty: an object only on disk is read back first)."""

    ref: ObjectRef
    workers: list[str]


@dataclass(frozen=True)
class LoadClaim:
    """The catalogue's answer to ``claim_load``: the object is in memory on ``workers`` already, or
    ``load_on`` reads it back from ``disk_path``; neither: lost with ``lost_from``."""

    workers: list[str]
    load_on: str | None = None
    disk_path: str | None = None
    lost_from: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """The claim as a message part."""
        return {
            "workers": list(self.workers),
            "load_on": self.load_on,
            "disk_path": self.disk_path,
            "lost_from": list(self.lost_from),
        }

    @classmethod
    def from_wire(cls, reply: Mapping[str, Any]) -> LoadClaim:
        """The claim a ``claim_load`` reply carries."""
        return cls(
            list(reply.get("workers") or ()),
            reply.get("load_on"),
            reply.get("disk_path"),
            tuple(reply.get("lost_from") or ()),
        )


# -- active calls -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One active call of ``method`` on object ``oid`` (``backend_ops.op_call``), as the caller sends it and
    sends it again: the same ``call_id`` every time, so the backend runs it once.

    ``budget``: seconds the method may take on the backend, waiting for the object's lock included,
    counted from when the backend first gets the call (clocks of two hosts are never compared).
    Reaching the backend has its own budget, the link's timeout, per message.
    """

    call_id: str
    oid: str
    version: int
    pinned: bool
    method: str
    writes: bool
    args: Any  # a message part (as_message of the tuple)
    kwargs: Any
    budget: float

    @classmethod
    def new(cls, method: str, writes: bool, args: Any, kwargs: Any, budget: float = CALL_SECONDS) -> Call:
        """A call with a fresh id, for the object named later (:meth:`at`); ``budget`` checked."""
        return cls(uuid.uuid4().hex, "", 0, False, method, writes, args, kwargs, check_budget(budget))

    def at(self, ref: ObjectRef) -> Call:
        """This call (same id) addressed to the object version ``ref`` names."""
        return replace(self, oid=ref.oid, version=int(ref.version or 0), pinned=bool(ref.pinned))

    @property
    def ref(self) -> ObjectRef:
        """The object version this call is addressed to."""
        return ObjectRef(self.oid, self.version, pinned=self.pinned)

    def label(self) -> str:
        """The call as messages name it."""
        return f"call {self.call_id[:8]} of {self.method!r} ({'writes' if self.writes else 'read-only'})"

    def to_wire(self) -> dict[str, Any]:
        """The call as a message part."""
        return dict(vars(self))

    @classmethod
    def from_wire(cls, message: Mapping[str, Any]) -> Call:
        """The call a message carries, every field checked (a ``ValueError`` naming the wrong one)."""
        if not isinstance(message, Mapping):
            raise ValueError(f"a call is a mapping of its fields, got {type(message).__name__}")
        call_id = message.get("call_id")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= 64:
            raise ValueError(f"a call's id is a string of 1 to 64 characters, got {call_id!r}")
        for name, kind in (("oid", str), ("method", str), ("writes", bool), ("pinned", bool), ("version", int)):
            if not isinstance(message.get(name), kind):
                raise ValueError(f"a call's {name} should be {kind.__name__}, got {message.get(name)!r}")
        return cls(
            call_id,
            message["oid"],
            message["version"],
            message["pinned"],
            message["method"],
            message["writes"],
            message.get("args") or (),
            message.get("kwargs") or {},
            check_budget(message.get("budget")),
        )


def check_budget(budget: object) -> float:
    """``budget`` as seconds (finite, > 0); a ``ValueError`` saying what to pass otherwise."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not (0 < budget < math.inf):
        raise ValueError(f"a call's budget is a finite number of seconds > 0, got {budget!r}")
    return float(budget)


@dataclass(frozen=True)
class CallAnswer:
    """A backend's answer to a :class:`Call`: its method's value (``done``), or still running (ask again)."""

    call_id: str
    done: bool
    value: Any = None

    def to_wire(self) -> dict[str, Any]:
        """The answer as a message part (a value that is not plain travels serialised: numpy as frames)."""
        value = self.value if isinstance(self.value, PLAIN) else serialized(self.value)
        return {"call_id": self.call_id, "done": self.done, "value": value}

    @classmethod
    def from_wire(cls, reply: Any, call: Call) -> CallAnswer:
        """The answer a reply to ``call`` carries; a ``StoreError`` if it answers another call."""
        if not isinstance(reply, Mapping) or reply.get("call_id") != call.call_id:
            raise StoreError(f"the backend answered {call.label()} with a reply to another call")
        return cls(call.call_id, bool(reply["done"]), reply.get("value"))


# -- the compact locations reply --------------------------------------------------------------------
@contextlib.contextmanager
def without_gc() -> Iterator[None]:
    """Python's cycle collector paused while a loop builds 10^4..10^5 small objects that form no
    cycles: each full collection would walk the whole heap (every catalogued object), which made
    bulk operations grow faster than linearly with the store's size."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def encode_locations(held_by: Iterable[Collection[str] | None], live: Container[str]) -> dict[str, Any]:
    """The ``locations`` reply for the objects whose locations are ``held_by`` (None: a deleted object;
    only those in ``live`` count) in a compact form: the workers named once, and per object the
    index + 1 of its first live holder as a uint16 array (0: held nowhere, :data:`DELETED`:
    deleted), ``more`` listing the objects held by several. 10^5 objects travel in a few hundred kB."""
    names: dict[str, int] = {}
    first = array.array("H")
    append = first.append
    more: dict[int, list[int]] = {}
    with without_gc():
        for i, held in enumerate(held_by):
            if held is None:
                append(DELETED)
                continue
            if len(held) == 1:  # the common case, without sorting
                (worker,) = held
                append(names.setdefault(worker, len(names)) + 1 if worker in live else 0)
                continue
            alive = sorted(w for w in held if w in live)
            if not alive:
                append(0)
                continue
            indexes = [names.setdefault(w, len(names)) for w in alive]
            append(indexes[0] + 1)
            if len(indexes) > 1:
                more[i] = indexes
    return {"workers": list(names), "first": first.tobytes(), "more": more}


def locations_of(reply: Mapping[str, Any], count: int) -> list[list[str]]:
    """Every live holder of each object, from the catalogue's compact ``locations`` reply (deleted: [])."""
    first = array.array("H")
    first.frombytes(reply["first"])
    if len(first) != count:
        raise StoreError(f"the catalogue located {len(first)} objects of {count} asked for")
    workers = list(reply["workers"])
    more = {int(i): [workers[j] for j in v] for i, v in dict(reply.get("more") or {}).items()}
    with without_gc():
        out = [[workers[f - 1]] if 0 < f < DELETED else [] for f in first]
    for i, held_by in more.items():
        out[i] = held_by
    return out
