"""How the store's two ends reach its plugins: the one place that sends the store's messages.

A :class:`Link` asks the catalogue (the scheduler's ``workbench_store`` handler) and the backends
(each worker's, a direct message, no scheduler) from a thread: a client's
(:class:`~workbench.runtime.store.client.Store`, and the handles through it) or a backend's
(:class:`~workbench.runtime.store.backend.StoreBackend`). The two ends differ only in what a link is
made of (:meth:`Link.of_client`, :meth:`Link.of_worker`): how to reach the scheduler, how to open an
rpc to an address, how to run a coroutine from a thread (Dask internals, made by
:func:`~workbench.runtime.dask_seam.client_link` and :func:`~workbench.runtime.dask_seam.worker_link`).
The rest is one rule each, for both ends:

* one timeout: every message waits at most ``timeout`` seconds, the store's (its session's, which the
  ``Store`` hands its backends when it registers them);
* one "unreachable": a backend that does not answer in time, or whose connection fails, raises
  :class:`~workbench.runtime.store.errors.BackendUnreachable`;
* one retry (:meth:`Link.retrying`): an attempt that finds the object moved (``NotHere``) or its
  holder gone (``BackendUnreachable``) is made again, the catalogue asked afresh, until ``timeout``
  seconds have passed since the first;
* one way to call an active method (:meth:`Link.call`): the same :class:`~workbench.runtime.store.protocol.Call`
  (one id) sent until it is answered, so a re-sent call is answered from the backend's memory, never
  run twice; reaching the backend has the link's ``timeout`` per message, running the method has
  the call's own budget (a long method is "still running", not unreachable). The one retry loop of
  a call: the backend tries nothing again on its behalf;
* one way to find an object (:meth:`Link.resolve`): its record, and its disk copy read back on the
  one backend the catalogue chooses when no backend holds it in memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import workbench.runtime.store.backend_ops as backend_ops
from workbench.runtime.dask_seam import client_link, worker_link
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.errors import BackendUnreachable, NotHere, StoreError, UnknownAlias, object_lost
from workbench.runtime.store.model import ObjectRef
from workbench.runtime.store.protocol import (
    Call,
    CallAnswer,
    LoadClaim,
    Missing,
    Record,
    Resolved,
    found,
    locations_of,
    record_from_wire,
    unpack_reply,
)
from workbench.runtime.store.wire import End, Operation, message

T = TypeVar("T")
FIRST_PAUSE, LONGEST_PAUSE = 0.001, 0.1  # seconds between tries of retrying(): doubling from the first


def _seconds(op: Operation, timeout: object) -> float | None:
    """``timeout``, the seconds a message of ``op`` may wait, checked: None (the link's), or a number > 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"{op.end}'s {op.name!r} takes timeout: seconds > 0 or None, got {type(timeout).__name__} {timeout!r}"
        )
    if not timeout > 0:  # nan too
        raise ValueError(
            f"{op.end}'s {op.name!r} takes timeout: seconds > 0 or None, got {type(timeout).__name__} {timeout!r}"
        )
    return float(timeout)


class Link:
    """One end's way to the store's plugins: the catalogue, the backends, and the rules above.

    scheduler: the scheduler's rpc, asked anew for each message (a client's may be replaced).
    rpc: an rpc to a worker's address.
    run: runs a coroutine function to its end from a thread that is not the event loop's.
    timeout: the longest wait of each message, in seconds.
    here: the address of the backend this link belongs to (None for a client's).
    load_here: ``(oid, version, disk_path)`` reads a disk copy into that backend, in this thread
        (the catalogue may choose it to read an object back).
    """

    def __init__(
        self,
        scheduler: Callable[[], Any],
        rpc: Callable[[str], Any],
        run: Callable[[Callable[[], Awaitable[Any]]], Any],
        timeout: float,
        here: str | None = None,
        load_here: Callable[..., Any] | None = None,
    ):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"the store's timeout is seconds > 0, got {timeout!r}")
        self._scheduler, self._rpc, self._run = scheduler, rpc, run
        self.timeout = float(timeout)
        self.here, self._load_here = here, load_here
        self._closed: str | None = None  # why this link no longer sends (its Store was closed)

    @classmethod
    def of_client(cls, client: Any, timeout: float) -> Link:
        """The link of a ``distributed.Client`` (its scheduler connection, its rpc pool, ``client.sync``)."""
        return cls(*client_link(client), timeout)

    @classmethod
    def of_worker(cls, worker: Any, timeout: float, load_here: Callable[..., Any]) -> Link:
        """The link of a backend on ``worker``, used from the worker's threads (never its event loop)."""
        return cls(*worker_link(worker), timeout, here=worker.address, load_here=load_here)

    def close(self, why: str) -> None:
        """Send nothing from now on: every message raises a ``StoreError`` saying ``why``."""
        self._closed = why

    def _check_open(self) -> None:
        if self._closed is not None:
            raise StoreError(self._closed)

    # -- the catalogue -------------------------------------------------------------------------------
    async def catalogue_async(self, op: Operation, **kwargs: Any) -> Any:
        """One catalogue operation (a method of the catalogue decorated with ``catalogue_op``, such as
        ``StoreCatalogue.op_records``) from the event loop (a ``Client.run`` body): its result, or its
        error raised (``UnknownAlias`` for an alias the catalogue does not know). Its arguments are
        checked before it is sent (a ``TypeError`` naming a wrong one)."""
        self._check_open()
        arguments = message(op, End.CATALOGUE, kwargs)
        reply = await asyncio.wait_for(self._scheduler().workbench_store(action=op.name, **arguments), self.timeout)
        try:
            return op.answered(unpack_reply(reply, "the scheduler"), "the scheduler")
        except KeyError as error:
            if op is StoreCatalogue.op_alias:
                raise UnknownAlias(error.args[0] if error.args else str(error)) from None
            raise

    def catalogue(self, op: Operation, **kwargs: Any) -> Any:
        """One catalogue operation from a thread: its result, or its error raised."""
        return self._run(lambda: self.catalogue_async(op, **kwargs))

    def records(self, refs: Sequence[ObjectRef]) -> list[Record | Missing]:
        """The catalogue's record of each object (current version unless pinned) with its live
        locations, or why it is missing; one message for all."""
        replies = self.catalogue(
            StoreCatalogue.op_records, refs=[[r.oid, r.version if r.pinned else None] for r in refs]
        )
        return [record_from_wire(reply) for reply in replies]

    def record(self, ref: ObjectRef) -> Record | Missing:
        """:meth:`records` of one object."""
        (record,) = self.records([ref])
        return record

    def locations(self, refs: Sequence[ObjectRef]) -> list[list[str]]:
        """Every backend holding each object in memory, from one catalogue message (pinned versions
        are looked up as such; an object only on disk, or deleted, is held nowhere: [])."""
        if any(r.pinned for r in refs):
            return [r.workers if isinstance(r, Record) else [] for r in self.records(refs)]
        reply = self.catalogue(StoreCatalogue.op_locations, oids="\n".join(r.oid for r in refs))
        return locations_of(reply, len(refs))

    # -- the backends --------------------------------------------------------------------------------
    async def _backend_reply(self, address: str, op: Operation, timeout: float | None, kwargs: Any) -> Any:
        """The raw reply of backend ``address`` to ``op``, waited on at most ``timeout`` (default: the link's)."""
        return await asyncio.wait_for(
            self._rpc(address).workbench_store(action=op.name, **kwargs), timeout or self.timeout
        )

    def _unreachable(self, address: str, op: Operation, error: BaseException) -> BackendUnreachable:
        """The one error for a backend that did not answer ``op`` (timed out, or its connection failed),
        saying whether ``op`` may be sent again (its definition's ``resend``)."""
        again = "it may be sent again" if op.resend else "it may have run there: look before sending it again"
        why = str(error) or "no answer within the timeout"  # asyncio's TimeoutError says nothing
        return BackendUnreachable(
            f"backend {address} did not answer {op.name!r} ({type(error).__name__}: {why}); {again}"
        )

    def backend(self, address: str, op: Operation, timeout: float | None = None, **kwargs: Any) -> Any:
        """One operation (a function decorated with ``backend_op``, such as ``backend_ops.op_get``) on
        the backend at ``address``, its arguments checked before it is sent, waiting at most ``timeout``
        seconds (default: the link's; a ``TypeError`` or ``ValueError`` for one that is not seconds > 0),
        its reply checked against the operation's reply type. Errors of the operation itself (a method's
        exception) are raised as they are; a backend that does not answer raises ``BackendUnreachable``."""
        self._check_open()
        arguments = message(op, End.BACKEND, kwargs)
        timeout = _seconds(op, timeout)
        try:
            reply = self._run(lambda: self._backend_reply(address, op, timeout, arguments))
        except (TimeoutError, OSError) as error:
            raise self._unreachable(address, op, error) from error
        return op.answered(unpack_reply(reply, f"backend {address}"), f"backend {address}")

    def backends_together(
        self, op: Operation, messages: Mapping[str, Mapping[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, BaseException]]:
        """``op`` sent to every backend of ``messages`` (address -> the operation's arguments), all in
        flight at once: the results by address, and the errors by address (``BackendUnreachable``
        for a backend that did not answer)."""
        self._check_open()
        checked = {address: message(op, End.BACKEND, kwargs) for address, kwargs in messages.items()}

        async def ask_all() -> list[Any]:
            asks = (self._backend_reply(address, op, None, kwargs) for address, kwargs in checked.items())
            return await asyncio.gather(*asks, return_exceptions=True)

        results: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        for address, reply in zip(messages, self._run(ask_all)):
            if isinstance(reply, (TimeoutError, OSError)):
                errors[address] = self._unreachable(address, op, reply)
                errors[address].__cause__ = reply
                continue
            try:
                if isinstance(reply, BaseException):
                    raise reply
                results[address] = op.answered(unpack_reply(reply, f"backend {address}"), f"backend {address}")
            except Exception as error:
                errors[address] = error
        return results, errors

    # -- finding objects -----------------------------------------------------------------------------
    def resolve(self, refs: Sequence[ObjectRef]) -> list[Resolved]:
        """Each object's version now and every live backend holding it; objects only on disk are read
        back first (a ``StoreError`` for a deleted one, ``ObjectLost`` for a lost one)."""
        out = []
        for ref, record in zip(refs, self.records(refs)):
            record = found(record, ref)
            ref = record.ref(like=ref)
            out.append(Resolved(ref, record.workers or self.reload(ref, record)))
        return out

    def reload(self, ref: ObjectRef, record: Record) -> list[str]:
        """Bring an object that is only on disk back into memory, on the one backend the catalogue
        chooses for it (every caller meanwhile gets the same one; a backend asking may be chosen, and
        reads it in this thread); the backends holding it then. ``ObjectLost`` if it has no disk copy."""
        claim = LoadClaim.from_wire(
            self.catalogue(StoreCatalogue.op_claim_load, oid=ref.oid, version=ref.version, worker=self.here)
        )
        if claim.load_on is not None:
            if claim.load_on == self.here and self._load_here is not None:
                self._load_here(ref.oid, ref.version, claim.disk_path)
            else:
                self.backend(
                    claim.load_on, backend_ops.op_load, oid=ref.oid, version=ref.version, disk_path=claim.disk_path
                )
            return [claim.load_on]
        if claim.workers:
            return list(claim.workers)
        raise object_lost(ref.label(), record.class_label, list(claim.lost_from or record.lost_from))

    def retrying(self, attempt: Callable[[bool], T]) -> T:
        """``attempt(again)``'s result, tried again while the object moves under it: the backend asked
        no longer holds it (``NotHere``: evicted to disk, dropped, moved) or left (``BackendUnreachable``).
        ``again`` is True after a failed try: the attempt asks the catalogue afresh. Gives up, raising
        the last error, once :attr:`timeout` seconds have passed since the first try."""
        deadline = time.monotonic() + self.timeout
        pause, again = FIRST_PAUSE, False
        while True:
            try:
                return attempt(again)
            except (NotHere, BackendUnreachable):
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause, again = min(LONGEST_PAUSE, pause * 2), True

    def call(self, locate: Callable[[bool], tuple[ObjectRef, str]], call: Call) -> Any:
        """The value of the active call ``call``, sent to the backend ``locate(again)`` names (the
        object's version and its holder; ``again``: ask the catalogue afresh), by one loop:

        * each message waits for the backend's answer at most the link's :attr:`timeout`, plus the
          time the backend is asked to hold its answer while the method runs (half the timeout);
        * "still running": the same call is sent again (the backend answers from its memory of the
          call's id), until the call's ``budget`` has passed: then a ``TimeoutError`` saying the
          method still runs there;
        * ``NotHere`` (the backend answered that it does not hold the object: the call did not run
          there) or ``BackendUnreachable`` (no answer: it may have run, and answers from memory when
          reached again): the same call again, the catalogue asked afresh, until :attr:`timeout`
          seconds have passed without an answer; then that error is raised.
        """
        self._check_open()
        started = time.monotonic()
        run_until, reach_until = started + call.budget, started + self.timeout
        pause, again = FIRST_PAUSE, False
        target: tuple[ObjectRef, str] | None = None
        while True:
            try:
                if target is None:
                    target = locate(again)
                ref, address = target
                hold = max(0.0, min(self.timeout / 2, run_until - time.monotonic()))
                reply = self.backend(
                    address, backend_ops.op_call, timeout=self.timeout + hold, call=call.at(ref).to_wire(), wait=hold
                )
                answer = CallAnswer.from_wire(reply, call)
                if answer.done:
                    return answer.value
                if time.monotonic() >= run_until:
                    raise TimeoutError(
                        f"{call.label()} on {ref.label()} ran past its budget of {call.budget:g} s: it still runs on "
                        f"backend {address} (its value will not be waited for). Give long methods a larger budget "
                        "(Store(..., call_timeout=seconds))"
                    )
                reach_until = time.monotonic() + self.timeout  # it answered: reaching it again starts afresh
                pause = FIRST_PAUSE
                continue
            except (NotHere, BackendUnreachable) as error:
                if time.monotonic() + pause > reach_until:
                    if isinstance(error, BackendUnreachable) and call.writes:
                        raise BackendUnreachable(
                            f"{error}; the writing {call.label()} may have run there before the connection failed"
                        ) from error
                    raise
            target, again = None, True
            time.sleep(pause)
            pause = min(LONGEST_PAUSE, pause * 2)
