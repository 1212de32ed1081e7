"""A backend's memory of the active calls it was sent (``backend_ops.op_call``), by call id.

A caller sends a :class:`~workbench.runtime.store.protocol.Call` again when it got no reply (the
connection failed after the backend ran it, or the reply was lost) and to ask whether a long method
has finished. Either way the call must not run twice: a writing method would be applied twice. So
each call id is remembered from its first arrival:

* while it runs, a re-send joins it (waits for its end, at most as long as the caller asked);
* once it has run, a re-send is answered with its outcome (value or error), kept for
  ``keep_seconds`` after it ended; a read-only call's value is forgotten once it was answered (a
  read may run again: that changes nothing, and its value may be large);
* after that only its id is kept (the last ``KEEP_IDS`` calls): a re-send is refused with an error
  that says it ran, never run again;
* a call that failed before its method started (the object is not here, its lock was not free in
  its budget) is forgotten at once: it did nothing, and the caller may send it where the object is.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.protocol import Call

KEEP_IDS = 65536  # ids of calls whose outcome was forgotten, kept so that a re-send is refused, not run


@dataclass(eq=False)
class CallRecord:
    """One call this backend was sent: its deadline (the backend's clock), and once it ended, its outcome."""

    call: Call
    deadline: float  # time.monotonic() by which the method must have started and should have ended
    applied: bool = False  # its method started (so it may have changed the object)
    ended: float | None = None  # time.monotonic() when it ended
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    waiters: list[Callable[[], None]] = field(default_factory=list)

    def started(self) -> None:
        """The method starts now (called by the backend just before it runs it)."""
        self.applied = True


class CallMemory:
    """The calls one backend was sent: running, answered, and ids only (see the module)."""

    def __init__(self, keep_seconds: float):
        self.keep_seconds = float(keep_seconds)
        self.lock = threading.Lock()
        self.records: OrderedDict[str, CallRecord] = OrderedDict()  # by id, in the order they arrived
        self.ran: OrderedDict[str, None] = OrderedDict()  # ids of writing calls that ran, outcome forgotten
        self.ended: deque[tuple[float, CallRecord]] = deque()  # ended calls, oldest first

    def begin(self, call: Call, start: Callable[[CallRecord], Any]) -> CallRecord:
        """The record of ``call``: the one of its first arrival (a re-send), or a new one handed to
        ``start`` (which runs it on a thread and ends it with :meth:`end`). A ``StoreError`` for a call
        that ran already and whose outcome was forgotten (it is never run again)."""
        with self.lock:
            self._forget_old()
            record = self.records.get(call.call_id)
            if record is not None:
                return record
            if call.call_id in self.ran:
                raise StoreError(
                    f"{call.label()} ran on this backend already, and its outcome was forgotten since (it is kept "
                    f"{self.keep_seconds:.0f} s): it is not run twice. Look at the object to see its effect"
                )
            record = self.records[call.call_id] = CallRecord(call, time.monotonic() + call.budget)
        try:
            start(record)
        except BaseException as error:  # the pool is shut down (the worker closes): nothing ran
            self.end(record, error=error)
        return record

    def end(self, record: CallRecord, value: Any = None, error: BaseException | None = None) -> None:
        """``record``'s call ended with ``value`` or ``error`` (called on its thread); its waiters woken.
        A call that failed before its method started is forgotten: it may be sent again."""
        with self.lock:
            record.value, record.error, record.ended = value, error, time.monotonic()
            if error is not None and not record.applied:
                self.records.pop(record.call.call_id, None)
            else:
                self.ended.append((record.ended, record))
            record.done.set()
            waiters, record.waiters = record.waiters, []
        for wake in waiters:
            wake()

    async def wait(self, record: CallRecord, seconds: float) -> bool:
        """Whether ``record``'s call has ended, waiting at most ``seconds`` on the event loop (not
        blocking it) for that."""
        if record.done.is_set() or seconds <= 0:
            return record.done.is_set()
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(ended.set)
            except RuntimeError:  # that loop closed meanwhile: nobody waits there any more
                pass

        with self.lock:
            if record.done.is_set():
                return True
            record.waiters.append(wake)
        try:
            await asyncio.wait_for(ended.wait(), seconds)
        except TimeoutError:
            pass
        finally:
            with self.lock:
                if wake in record.waiters:
                    record.waiters.remove(wake)
        return record.done.is_set()

    def outcome(self, record: CallRecord) -> Any:
        """The value of ``record``'s ended call, or its error raised. A read-only call's record is
        forgotten once answered (running it again changes nothing); a writing call's is kept."""
        if not record.call.writes:
            with self.lock:
                if self.records.get(record.call.call_id) is record:
                    del self.records[record.call.call_id]
        if record.error is not None:
            raise record.error
        return record.value

    def _forget_old(self) -> None:
        """Forget the outcomes of calls that ended over ``keep_seconds`` ago (their ids are kept); the
        caller holds :attr:`lock`."""
        now = time.monotonic()
        while self.ended and now - self.ended[0][0] > self.keep_seconds:
            _, record = self.ended.popleft()
            call_id = record.call.call_id
            if self.records.get(call_id) is record:
                del self.records[call_id]
            if record.call.writes:
                self.ran[call_id] = None
        while len(self.ran) > KEEP_IDS:
            self.ran.popitem(last=False)

    def __len__(self) -> int:
        with self.lock:
            return len(self.records)
