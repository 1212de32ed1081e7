"""How bytes move between two ranks: shared memory on one node, a socket between nodes.

**Mailbox** (one node). Each rank owns, per channel, one shared-memory segment holding its
persistent buffers (slot 0, the channel's buffer, and two scratch slots for reductions) and a
control word pair per (sender, slot): ``ready`` (written by the owner when it is ready to take)
and ``done`` (written by the sender after copying). A put waits until the receiver is ready
(rendezvous), copies the sender's array straight into the receiver's slot (one copy, no
allocation), and bumps ``done``; a take bumps ``ready`` and waits for ``done``. The words are
64-bit and written by one side each; on x86 (total store order) the copy is visible before the
``done`` that follows it.

**Link** (two nodes). One TCP connection per pair of ranks. The receiver sends a small "ready"
message (channel, slot); the sender answers with the bytes, which the receiver reads straight
into its slot with ``recv_into`` (no intermediate buffer).

Every wait is bounded, and notices a peer that died (a dead pid on this node, a closed socket).
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Callable

import numpy as np

from workbench.memory import shm

SLOTS = 3  # the channel's buffer, and two scratch buffers
ALIGN = 4096
SPIN_SECONDS = 1e-3  # a wait spins this long first (a small message or a copy of MiBs arrives within it)
YIELD_SECONDS = 20e-3  # then yields the core between polls this long, then sleeps 50 us between them
_READY = struct.Struct("<IIB")  # channel, sequence, slot
_DATA = struct.Struct("<IIBQ")  # channel, sequence, slot, bytes


class ChannelError(RuntimeError):
    """A channel operation failed: a peer died, a wait timed out, ranks disagree on a channel."""


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
        control = _round_up(ranks * SLOTS * 2 * 8)
        slot = _round_up(max(nbytes, 1))
        total = control + SLOTS * slot
        self.segment = shm.create(name, total, np.uint8) if create else shm.attach(name, writable=True)
        if self.segment.nbytes != total:
            raise ChannelError(f"mailbox {name} has {self.segment.nbytes} bytes, expected {total}: ranks disagree")
        # the control words as a flat memoryview of int64: indexing it gives plain ints (fast to poll)
        self.control = memoryview(self.segment[: ranks * SLOTS * 2 * 8]).cast("q")
        self.slots = [
            self.segment[control + i * slot : control + i * slot + nbytes].view(dtype).reshape(shape)
            for i in range(SLOTS)
        ]
        self.raw = [memoryview(self.segment[control + i * slot : control + i * slot + nbytes]) for i in range(SLOTS)]

    @staticmethod
    def word(sender: int, slot: int) -> int:
        """Index of the ``ready`` word of (``sender``, ``slot``) in ``control``; ``done`` follows it."""
        return (sender * SLOTS + slot) * 2


def wait_for(done: Callable[[], bool], deadline: float, alive: Callable[[], str | None], what: str) -> float:
    """Poll ``done`` until true: spin for ``SPIN_SECONDS`` (a message on its way arrives within it),
    then yield the core between polls, then sleep between them; a dead peer (``alive`` says why)
    or the deadline raise ``ChannelError``. Returns the seconds waited."""
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
            if problem:
                raise ChannelError(f"{what}: {problem}")
            if time.monotonic() > deadline:
                raise ChannelError(f"{what}: no answer within the timeout (is the peer rank stuck?)")
            next_check = time.monotonic() + 0.05
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
    """A TCP connection to one peer rank on another node; data lands straight in the slot (``recv_into``)."""

    def __init__(self, sock: socket.socket, peer: int):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self.sock = sock
        self.peer = peer
        self.sequence = 0

    def _recv_exact(self, view: memoryview, deadline: float, what: str) -> None:
        got = 0
        while got < len(view):
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                n = self.sock.recv_into(view[got:], min(len(view) - got, 1 << 26))
            except TimeoutError:
                raise ChannelError(f"{what}: no answer from rank {self.peer} within the timeout") from None
            except OSError as error:
                raise ChannelError(
                    f"{what}: the connection to rank {self.peer} broke ({error}): it died or failed"
                ) from None
            if n == 0:
                raise ChannelError(f"{what}: rank {self.peer} closed its connection (it died or failed)")
            got += n

    def send_ready(self, channel: int, slot: int) -> None:
        """Tell the peer this rank is ready to take into ``slot`` of ``channel``."""
        self.sock.sendall(_READY.pack(channel, self.sequence & 0xFFFFFFFF, slot))

    def wait_ready(self, channel: int, slot: int, deadline: float, what: str) -> float:
        """Wait for the peer's ready for (``channel``, ``slot``); seconds waited."""
        start = time.perf_counter()
        header = bytearray(_READY.size)
        self._recv_exact(memoryview(header), deadline, what)
        got_channel, _, got_slot = _READY.unpack(header)
        if (got_channel, got_slot) != (channel, slot):
            raise ChannelError(
                f"{what}: rank {self.peer} is ready for channel {got_channel} slot {got_slot}, not channel {channel} "
                f"slot {slot}: the ranks call the channel operations in different orders"
            )
        return time.perf_counter() - start

    def send(self, channel: int, slot: int, array: np.ndarray) -> None:
        """The bytes of ``array`` (after the peer said it is ready)."""
        data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        self.sock.sendall(_DATA.pack(channel, self.sequence & 0xFFFFFFFF, slot, len(data)))
        if len(data):
            self.sock.sendall(data)

    def receive(self, channel: int, slot: int, out: np.ndarray, deadline: float, what: str) -> None:
        """Read the peer's bytes straight into ``out`` (the receiving slot)."""
        header = bytearray(_DATA.size)
        self._recv_exact(memoryview(header), deadline, what)
        got_channel, _, got_slot, nbytes = _DATA.unpack(header)
        if (got_channel, got_slot) != (channel, slot) or nbytes != out.nbytes:
            raise ChannelError(
                f"{what}: rank {self.peer} sent {nbytes} bytes for channel {got_channel} slot {got_slot}, expected "
                f"{out.nbytes} for channel {channel} slot {slot}"
            )
        if nbytes:
            self._recv_exact(memoryview(out.reshape(-1).view(np.uint8)), deadline, what)

    def close(self) -> None:
        """Close the connection."""
        try:
            self.sock.close()
        except OSError:
            pass
