"""How bytes move between two ranks: shared memory on one node, a socket between nodes.

**Mailbox** (one node). Each rank owns, per channel, one shared-memory segment holding its
persistent buffers (slot 0, the channel's buffer, and two scratch slots for reductions), three
control words per (sender, slot): ``ready`` (written by the owner when it is ready to take),
``done`` (written by the sender after copying) and ``tag`` (which operation the sender is in,
written before ``done``), and one ``state`` word: the operation the owner is in now, read by a
peer that waits for it. A put waits until the receiver is ready (rendezvous), copies the
sender's array straight into the receiver's slot (one copy, no allocation), and bumps ``done``; a
take bumps ``ready`` and waits for ``done``. The words are 64-bit and written by one side each;
on x86 (total store order) the copy is visible before the ``done`` that follows it.

**Link** (two nodes). One TCP connection per pair of ranks. The receiver sends a small "ready"
message (channel, slot, tag); the sender answers with the bytes, which the receiver reads
straight into its slot with ``recv_into`` (no intermediate buffer). A send that must overlap a
receive (an exchange: both ranks send at once, and a message bigger than the sockets' buffers
would block both) runs on the link's sending thread.

Every wait is bounded and notices a peer that died (a dead pid on this node, a closed socket), a
group that was aborted (another rank failed), and, on one node, a peer in another operation.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from workbench.memory import shm

SLOTS = 3  # the channel's buffer, and two scratch buffers
ALIGN = 4096
SPIN_SECONDS = 1e-3  # a wait spins this long first (a small message or a copy of MiBs arrives within it)
YIELD_SECONDS = 20e-3  # then yields the core between polls this long, then sleeps 50 us between them
WORDS = 3  # control words per (sender, slot): ready, done, tag
FINISHED = -1  # the state word of a rank that returned from its rank function
POLL_SECONDS = 0.05  # how often a wait checks the peer, the group and the deadline
_READY = struct.Struct("<IqB")  # channel, tag, slot
_DATA = struct.Struct("<IqBQ")  # channel, tag, slot, bytes

_aborted: set[str] = set()  # groups aborted in this process (another rank failed)


class ChannelError(RuntimeError):
    """A channel operation failed: a peer died, a wait timed out, ranks disagree on a channel."""


def abort(group: str) -> None:
    """Mark ``group`` aborted in this process: its ranks' waits raise ``ChannelError`` at their next
    check (within :data:`POLL_SECONDS`) instead of waiting for a rank that failed."""
    _aborted.add(group)


def forget_abort(group: str) -> None:
    """Forget that ``group`` was aborted (its ranks are gone)."""
    _aborted.discard(group)


def is_aborted(group: str) -> bool:
    """Whether ``group`` was aborted in this process."""
    return group in _aborted


def segment_name(group: str, channel: int, rank: int) -> str:
    """The shared-memory segment of ``rank``'s mailbox for ``channel`` of ``group``."""
    return f"ch-{group}-{channel}-r{rank}"


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Mailbox:
    """One rank's persistent buffers for one channel, and the control words its senders write."""

    def __init__(self, name: str, ranks: int, shape: tuple[int, ...], dtype: np.dtype, create: bool):
        self.name = name
        self.shape, self.dtype = shape, dtype
        nbytes = math.prod(shape) * dtype.itemsize
        words = ranks * SLOTS * WORDS + 1
        control = _round_up(words * 8)
        slot = _round_up(max(nbytes, 1))
        total = control + SLOTS * slot
        self.segment = shm.create(name, total, np.uint8) if create else shm.attach(name, writable=True)
        if self.segment.nbytes != total:
            raise ChannelError(f"mailbox {name} has {self.segment.nbytes} bytes, expected {total}: ranks disagree")
        # the control words as a flat memoryview of int64: indexing it gives plain ints (fast to poll)
        self.control = memoryview(self.segment[: words * 8]).cast("q")
        self.state = words - 1  # index of the owner's state word
        self.slots = [
            self.segment[control + i * slot : control + i * slot + nbytes].view(dtype).reshape(shape)
            for i in range(SLOTS)
        ]
        self.raw = [memoryview(self.segment[control + i * slot : control + i * slot + nbytes]) for i in range(SLOTS)]

    @staticmethod
    def word(sender: int, slot: int) -> int:
        """Index of the ``ready`` word of (``sender``, ``slot``) in ``control``; ``done`` and ``tag``
        follow it."""
        return (sender * SLOTS + slot) * WORDS


def wait_for(done: Callable[[], bool], deadline: float, alive: Callable[[], str | None], what: str) -> float:
    """Poll ``done`` until true: spin for ``SPIN_SECONDS`` (a message on its way arrives within it),
    then yield the core between polls, then sleep between them; a peer that is gone or in another
    operation, an aborted group (``alive`` says why) or the deadline raise ``ChannelError``.
    Returns the seconds waited."""
    if done():
        return 0.0
    start = time.perf_counter()
    spin_until = start + SPIN_SECONDS
    yield_until = start + YIELD_SECONDS
    next_check = time.monotonic() + 0.05
    polls = 0
    while not done():
        polls += 1
        if polls & 63:
            continue
        now = time.perf_counter()
        if now < spin_until:
            continue
        if time.monotonic() >= next_check:
            problem = alive()
            if problem and not done():  # a peer that answered and moved on is no problem
                raise ChannelError(f"{what}: {problem}")
            if time.monotonic() > deadline and not done():
                raise ChannelError(
                    f"{what}: no answer within the timeout (is the peer rank stuck, or in a different operation?)"
                )
            next_check = time.monotonic() + POLL_SECONDS
        time.sleep(0 if now < yield_until else 5e-5)
    return time.perf_counter() - start


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` (on this node) still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Link:
    """A TCP connection to one peer rank on another node; data lands straight in the slot (``recv_into``).

    Two socket objects on one connection: ``sock`` receives, ``out`` (a duplicate) sends, each with
    its own timeout, so that a send on the link's thread overlaps a receive on the rank's thread.
    ``alive`` says why a wait must stop early (the group was aborted), or None.
    """

    def __init__(self, sock: socket.socket, peer: int, alive: Callable[[], str | None] = lambda: None):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(POLL_SECONDS)  # always a timeout: both objects poll the (non-blocking) descriptor
        self.sock = sock
        self.out = sock.dup()
        self.out.settimeout(POLL_SECONDS)
        self.peer = peer
        self.alive = alive
        self._sender: ThreadPoolExecutor | None = None

    def _recv_exact(self, view: memoryview, deadline: float, what: str) -> None:
        got = 0
        while got < len(view):
            self.sock.settimeout(max(0.001, min(POLL_SECONDS, deadline - time.monotonic())))
            try:
                n = self.sock.recv_into(view[got:], min(len(view) - got, 1 << 26))
            except TimeoutError:
                problem = self.alive()
                if problem:
                    raise ChannelError(f"{what}: {problem}") from None
                if time.monotonic() >= deadline:
                    raise ChannelError(
                        f"{what}: no answer from rank {self.peer} within the timeout (is it stuck, or in a "
                        "different operation?)"
                    ) from None
                continue
            except OSError as error:
                raise ChannelError(
                    f"{what}: the connection to rank {self.peer} broke ({error}): it died or failed"
                ) from None
            if n == 0:
                raise ChannelError(f"{what}: rank {self.peer} closed its connection (it died or failed)")
            got += n

    def _send_all(self, data: bytes | memoryview, deadline: float, what: str) -> None:
        self.out.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            self.out.sendall(data)
        except TimeoutError:
            raise ChannelError(f"{what}: rank {self.peer} took nothing within the timeout (is it stuck?)") from None
        except OSError as error:
            raise ChannelError(
                f"{what}: the connection to rank {self.peer} broke ({error}): it died or failed"
            ) from None

    def send_ready(self, channel: int, slot: int, tag: int, deadline: float, what: str) -> None:
        """Tell the peer this rank is ready to take into ``slot`` of ``channel`` in operation ``tag``."""
        self._send_all(_READY.pack(channel, tag, slot), deadline, what)

    def wait_ready(
        self, channel: int, slot: int, tag: int, deadline: float, what: str, describe: Callable[[int], str]
    ) -> float:
        """Wait for the peer's ready for (``channel``, ``slot``) in operation ``tag``; seconds waited.
        ``describe`` names an operation from its tag (for the error when the ranks disagree)."""
        start = time.perf_counter()
        header = bytearray(_READY.size)
        self._recv_exact(memoryview(header), deadline, what)
        got_channel, got_tag, got_slot = _READY.unpack(header)
        if (got_channel, got_slot, got_tag) != (channel, slot, tag):
            raise ChannelError(
                f"{what}: rank {self.peer} is ready to take in {describe(got_tag)} (channel {got_channel}, slot "
                f"{got_slot}), this rank sends in {describe(tag)} (channel {channel}, slot {slot}): every rank must "
                "call the same operations, with the same root, in the same order"
            )
        return time.perf_counter() - start

    def send(self, channel: int, slot: int, tag: int, array: np.ndarray, deadline: float, what: str) -> None:
        """The bytes of ``array`` (after the peer said it is ready)."""
        data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        self._send_all(_DATA.pack(channel, tag, slot, len(data)), deadline, what)
        if len(data):
            self._send_all(data, deadline, what)

    def send_in_background(
        self, channel: int, slot: int, tag: int, array: np.ndarray, deadline: float, what: str
    ) -> Callable[[], None]:
        """:meth:`send` on the link's sending thread; returns the call that waits for it to finish
        (and raises its error)."""
        if self._sender is None:
            self._sender = ThreadPoolExecutor(1, thread_name_prefix=f"channel-link-{self.peer}")
        future = self._sender.submit(self.send, channel, slot, tag, array, deadline, what)

        def finish() -> None:
            future.result(timeout=max(0.0, deadline - time.monotonic()) + 5.0)

        return finish

    def receive(
        self,
        channel: int,
        slot: int,
        tag: int,
        out: np.ndarray,
        deadline: float,
        what: str,
        describe: Callable[[int], str],
    ) -> None:
        """Read the peer's bytes straight into ``out`` (the receiving slot)."""
        header = bytearray(_DATA.size)
        self._recv_exact(memoryview(header), deadline, what)
        got_channel, got_tag, got_slot, nbytes = _DATA.unpack(header)
        if (got_channel, got_slot) != (channel, slot) or nbytes != out.nbytes or got_tag != tag:
            raise ChannelError(
                f"{what}: rank {self.peer} sent {nbytes} bytes in {describe(got_tag)} (channel {got_channel}, slot "
                f"{got_slot}), this rank expected {out.nbytes} in {describe(tag)} (channel {channel}, slot {slot}): "
                "every rank must call the same operations, with the same root, in the same order"
            )
        if nbytes:
            self._recv_exact(memoryview(out.reshape(-1).view(np.uint8)), deadline, what)

    def close(self) -> None:
        """Close the connection (a send still on the link's thread fails at once)."""
        for sock in (self.sock, self.out):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a send or receive in progress on another thread
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        if self._sender is not None:
            self._sender.shutdown(wait=False)
