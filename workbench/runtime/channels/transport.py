"""How bytes move between two ranks: shared memory on one node, a socket between nodes.

**Mailbox** (one node). Each rank owns, per channel, one shared-memory segment holding its
persistent buffers (slot 0, the channel's buffer, and two scratch slots for reductions) and
control words: per (sender, slot) ``ready`` (written by the owner when it is ready to take),
``done`` (written by the sender after copying), ``tag`` (which operation the sender is in, written
before ``done``) and the two sleepers' words (below); one ``state`` word, the operation the owner
is in now, read by a peer that waits for it; and status words (used in channel 0's mailbox)
saying what the owner waits for, so that two ranks waiting on each other in different operations
see the deadlock. A put waits until the receiver is ready (rendezvous), copies the sender's array
straight into the receiver's slot (one copy, no allocation), and bumps ``done``; a take bumps
``ready`` and waits for ``done``. The words are 64-bit and written by one side each; on x86 (total
store order) the copy is visible before the ``done`` that follows it.

**Waits** spin first (a message on its way arrives within it), then sleep in the kernel on a
futex on the word they wait for, so a waiting rank gives its core to whatever else runs (a busy
class server, a learner's browser) and is woken when the peer posts, not at its next turn on a
core. The sleepers' words per (sender, slot) say that the sender, or the owner, sleeps; a poster
bumps its word, makes the store visible (a full fence), and calls ``FUTEX_WAKE`` only when the
sleeper's word is set: no system call when the peer is still spinning. How long a wait spins
adapts (``ArrayChannel``): up to ``SPIN_SECONDS`` while spins succeed (an idle machine: each rank
on its core, a round trip of microseconds, no wake-up to pay), down to ``MIN_SPIN_SECONDS`` while
they fail (the peer is not running: the cores are taken, or both ranks share one, where spinning
only delays the peer).

**Link** (two nodes). One TCP connection per pair of ranks, which proves it belongs to the group
before it is used (:func:`connect_link`, :func:`accept_links`): a rank's listening port is open to
every user of the machine and the network, so the rank that accepts sends a fresh random nonce
(:class:`Challenge`), the rank that connects answers with the rank it is and an HMAC-SHA256 of both
nonces under the group's secret (:class:`Answer`; the secret is made by ``run_group`` and reaches
the ranks as a task argument, through the scheduler), and the acceptor proves the same back
(:class:`Proof`). The secret never goes over the wire, a recorded answer does not fit another
nonce, and a connection that does not prove itself within :data:`HANDSHAKE_SECONDS` is closed
without taking the place of the rank it named: the acceptor keeps waiting for the real one (the
handshakes run side by side, so a stranger that stalls delays no one). The receiver sends a small "ready"
message (channel, slot, tag); the sender answers with the bytes, which the receiver reads
straight into its slot with ``recv_into`` (no intermediate buffer). A send that must overlap a
receive (an exchange: both ranks send at once, and a message bigger than the sockets' buffers
would block both) runs on the link's sending thread.

Every wait is bounded and notices a peer that died (a dead pid on this node, a closed socket), a
group that was aborted (another rank failed), and, on one node, a peer in another operation.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import hmac
import logging
import math
import os
import platform
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.memory import shm
from workbench.runtime.worker_state import worker_state

SLOTS = 3  # the channel's buffer, and two scratch buffers
ALIGN = 4096
SPIN_SECONDS = 1e-3  # a wait spins at most this long (a message on its way, a peer the interpreter paused)...
MIN_SPIN_SECONDS = 20e-6  # ...and at least this long once its spins keep failing (ArrayChannel._learn_spin)
WORDS = 5  # control words per (sender, slot): ready, done, tag, the sender sleeps, the owner sleeps
READY, DONE, TAG, SENDER_SLEEPS, OWNER_SLEEPS = range(WORDS)  # offsets from Mailbox.word(sender, slot)
# What the owner waits for now, in its channel 0 mailbox (peers read it to tell a deadlock): the peer
# plus one (0: not waiting), a generation (bumped by every change), the channel, the slot, the tag,
# and which word (READY in the peer's mailbox, or DONE in the owner's).
STATUS_WORDS = 6
WAITING_FOR, GENERATION, WAIT_CHANNEL, WAIT_SLOT, WAIT_TAG, WAIT_WORD = range(STATUS_WORDS)
FINISHED = -1  # the state word of a rank that returned from its rank function
POLL_SECONDS = 0.05  # how often a wait checks the peer, the group and the deadline
_READY = struct.Struct("<IqB")  # channel, tag, slot
_DATA = struct.Struct("<IqBQ")  # channel, tag, slot, bytes

_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}  # SYS_futex (asm/unistd.h)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not FUTEX_PRIVATE): the words are in a MAP_SHARED file mapping
_WAKE_ALL = 0x7FFFFFFF
_fence_lock = threading.Lock()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


@functools.cache
def _futex() -> Callable[..., int] | None:
    """libc's ``syscall`` set up for ``futex`` (loaded on first use), or None where there is none: then
    a wait sleeps 50 us between polls instead."""
    number = _FUTEX_SYSCALL.get(platform.machine())
    if number is None or not hasattr(ctypes, "CDLL"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    call.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                     ctypes.c_int]  # fmt: skip
    return functools.partial(call, number)  # ctypes releases the GIL for the call


def fence() -> None:
    """A full memory fence: an uncontended lock's acquire and release are atomic read-modify-writes
    (``lock``-prefixed on x86), which order every earlier store before every later load."""
    _fence_lock.acquire()
    _fence_lock.release()


class ChannelError(RuntimeError):
    """A channel operation failed. The subclasses say what happened; this class itself is raised for a
    misuse (a channel used after its group ended, a cluster with no workers) and by ``run_group`` when
    a rank failed with an error of its own (a bug, a bad argument: its message names it)."""

    def within(self, what: str) -> ChannelError:
        """The same kind of error, its message led by ``what`` the rank was doing when it happened."""
        return type(self)(f"{what}: {self}")


class ChannelMismatch(ChannelError):
    """This rank found that the ranks disagree: on a channel's name, shape or dtype, or on the operation,
    root or channel they are in. What the rank found itself: the cause of a group's failure."""


class ChannelTimeout(ChannelError):
    """A wait ran past the group's timeout (a peer stuck in its own computation, or never started)."""


class RankGone(ChannelError):
    """Another rank is gone: its process died, its connection closed or broke, its worker left the
    cluster, or it returned from its rank function while this rank waits for it. A consequence: the
    cause is what happened to that rank."""


class GroupAborted(ChannelError):
    """The group was aborted because another rank failed: a consequence of that rank's error."""


# The errors a rank raises when it only saw another rank fail (``run_group`` reports the cause first)
CONSEQUENCES = (RankGone, GroupAborted)

# What a wait calls between polls: why it must stop (the error to raise, not raised yet), or None
WaitCheck = Callable[[], ChannelError | None]


def abort(group: str, dask_worker: Any = None) -> None:
    """``Client.run`` body: mark ``group`` aborted on this worker (in its
    :class:`~workbench.runtime.worker_state.WorkerState`): its ranks' waits raise ``GroupAborted`` at
    their next check (within :data:`POLL_SECONDS`) instead of waiting for a rank that failed."""
    worker_state(dask_worker).aborted_groups.add(group)


def forget_abort(group: str, dask_worker: Any = None) -> None:
    """Forget that ``group`` was aborted on this worker (its ranks are gone)."""
    worker_state(dask_worker).aborted_groups.discard(group)


def is_aborted(group: str, worker: Any = None) -> bool:
    """Whether ``group`` was aborted on ``worker`` (the Dask worker; by default the current task's). A
    rank passes its worker: it also checks from its link's sending thread, where Dask sets no worker."""
    return group in worker_state(worker).aborted_groups


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
        words = ranks * SLOTS * WORDS + STATUS_WORDS + 1
        control = _round_up(words * 8)
        slot = _round_up(max(nbytes, 1))
        total = control + SLOTS * slot
        self.segment = shm.create(name, total, np.uint8) if create else shm.attach(name, writable=True)
        if self.segment.nbytes != total:
            raise ChannelMismatch(f"mailbox {name} has {self.segment.nbytes} bytes, expected {total}: ranks disagree")
        # the control words as a flat memoryview of int64: indexing it gives plain ints (fast to poll)
        self.control = memoryview(self.segment[: words * 8]).cast("q")
        self.state = words - 1  # index of the owner's state word
        self.status = words - 1 - STATUS_WORDS  # index of the owner's first status word (what it waits for)
        self.slots = [
            self.segment[control + i * slot : control + i * slot + nbytes].view(dtype).reshape(shape)
            for i in range(SLOTS)
        ]
        self.raw = [memoryview(self.segment[control + i * slot : control + i * slot + nbytes]) for i in range(SLOTS)]
        self.address = self.segment.ctypes.data  # of control word 0: a futex's address

    def close(self) -> None:
        """Let go of the mapping: drop every view this object holds, so the segment is unmapped as
        soon as no array of the caller's views it (a finished group keeps no memory mapped)."""
        for view in (self.control, *self.raw):
            try:
                view.release()
            except BufferError:  # a view of it is still in use elsewhere: dropping ours is all we can do
                pass
        self.slots, self.raw = [], []
        self.control = memoryview(b"").cast("q")
        self.segment = None

    @staticmethod
    def word(sender: int, slot: int) -> int:
        """Index of the ``ready`` word of (``sender``, ``slot``) in ``control``; ``done``, ``tag`` and
        the two sleepers' words follow it (offsets ``DONE``, ``TAG``, ``SENDER_SLEEPS``, ``OWNER_SLEEPS``)."""
        return (sender * SLOTS + slot) * WORDS

    def ring(self, word: int, sleeper: int) -> None:
        """After the caller changed control word ``word``: wake the rank asleep on it, if
        ``sleeper`` (its sleeping word) says one is. The fence makes the change visible before the
        sleeper's word is read, so a sleeper that the read misses sees the change in the kernel."""
        fence()
        if self.control[sleeper]:
            futex = _futex()
            if futex is not None:
                futex(self.address + 8 * word, _FUTEX_WAKE, _WAKE_ALL, None, None, 0)

    def sleeper(self, word: int, sleeper: int) -> Callable[[Callable[[], bool], float], None]:
        """A wait's sleep on control word ``word`` (``sleep(done, seconds)``): marks ``sleeper``, then
        sleeps in the kernel until the word changes (the peer's ``ring``), ``seconds`` pass or a
        signal comes. Where there is no futex, a 50 us sleep."""
        futex = _futex()
        control, address = self.control, self.address + 8 * word

        def sleep(done: Callable[[], bool], seconds: float) -> None:
            if futex is None:
                time.sleep(5e-5)
                return
            control[sleeper] = 1
            try:
                value = control[word] & 0xFFFFFFFF  # the futex compares the word's low half (little-endian)
                if done():
                    return
                if value >= 1 << 31:
                    value -= 1 << 32  # as the C int the call takes
                whole = max(0.0, seconds)
                timeout = _Timespec(int(whole), int((whole % 1.0) * 1e9))
                futex(address, _FUTEX_WAIT, value, ctypes.byref(timeout), None, 0)  # returns at once if it changed
            finally:
                control[sleeper] = 0

        return sleep


def wait_for(
    done: Callable[[], bool],
    deadline: float,
    alive: WaitCheck,
    what: str,
    sleep: Callable[[Callable[[], bool], float], None] | None = None,
    spin: float = SPIN_SECONDS,
) -> float:
    """Wait until ``done()``: spin for ``spin`` seconds (a message on its way arrives within it), then
    ``sleep(done, seconds)`` (a mailbox's :meth:`Mailbox.sleeper`: in the kernel until the peer posts)
    between checks every ``POLL_SECONDS``. A peer that is gone or in another operation, an aborted
    group (``alive`` returns the error that says so) raise that error, the deadline ``ChannelTimeout``.
    Returns the seconds waited."""
    if done():
        return 0.0
    start = time.perf_counter()
    spin_until = start + spin
    polls = 0
    while not done():
        polls += 1
        if polls & 15:
            continue
        if time.perf_counter() < spin_until:
            continue
        next_check = time.monotonic() + POLL_SECONDS
        while not done():
            now = time.monotonic()
            if now >= next_check:
                problem = alive()
                if problem is not None and not done():  # a peer that answered and moved on is no problem
                    raise problem.within(what)
                if now > deadline and not done():
                    raise ChannelTimeout(
                        f"{what}: no answer within the timeout (is the peer rank stuck, or in a different operation?)"
                    )
                next_check = now + POLL_SECONDS
            if sleep is None:
                time.sleep(5e-5)
            else:
                sleep(done, min(next_check, deadline + POLL_SECONDS) - now)
        break
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


# -- a link proves it belongs to the group -----------------------------------------------------------
HANDSHAKE_SECONDS = 10.0  # how long an accepted connection has to prove itself before it is closed
# Handshakes under way at once on one listener: past it, the oldest gives way to the newest (a rank
# answers its challenge at once), so a stranger holding connections open cannot use up the worker's
# file descriptors (the rank's accept then failed with EMFILE: the group failed on a bare OSError)
MAX_PENDING = 64
NONCE_BYTES = 32
_MAC_BYTES = 32  # HMAC-SHA256
_LINK_MAGIC = b"LWBLINK1"  # the protocol and its version, first on every connection
log = logging.getLogger("workbench.channels")


class LinkRefused(ChannelError):
    """A connection between two ranks did not prove that it belongs to the group (what listens at a
    rank's published address, or what connected to it, does not hold the group's secret)."""


class GroupSecret:
    """A group's link secret: 32 random bytes, made by ``run_group`` for one group and handed to its
    ranks as an argument of their tasks (through the scheduler, as protected as the cluster's own
    connections are). Its repr hides the bytes, so a dashboard, a log or a traceback that shows a
    task's arguments does not show it."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None):
        self._key = secrets.token_bytes(32) if key is None else bytes(key)

    def __repr__(self) -> str:
        return "GroupSecret(<hidden>)"

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (GroupSecret, (self._key,))

    def mac(self, role: bytes, group: str, first: bytes, second: bytes, sender: int, receiver: int) -> bytes:
        """HMAC-SHA256 over what one side of a handshake proves: its ``role`` (so that one side's
        proof never passes for the other's), the group, both nonces (``first`` the acceptor's: fresh
        per connection, so a recorded answer fails), and who proves it to whom."""
        name = group.encode()
        layout = f"<8sH{len(name)}s{NONCE_BYTES}s{NONCE_BYTES}sII"  # every field fixed or length-led: unambiguous
        message = struct.pack(layout, role, len(name), name, first, second, sender, receiver)
        return hmac.new(self._key, message, hashlib.sha256).digest()


@dataclass(frozen=True)
class Challenge:
    """Acceptor to connector, the first bytes on a link: the protocol, and a fresh random nonce."""

    nonce: bytes
    FORMAT: ClassVar[struct.Struct] = struct.Struct(f"<8s{NONCE_BYTES}s")

    def pack(self) -> bytes:
        """The bytes sent."""
        return self.FORMAT.pack(_LINK_MAGIC, self.nonce)

    @classmethod
    def unpack(cls, data: bytes) -> Challenge | None:
        """The challenge in ``data``, or None when it is not one (not a rank of this protocol)."""
        magic, nonce = cls.FORMAT.unpack(data)
        return cls(nonce) if magic == _LINK_MAGIC else None


@dataclass(frozen=True)
class Answer:
    """Connector to acceptor: the rank it is, a nonce of its own, and its MAC over both nonces."""

    rank: int
    nonce: bytes
    mac: bytes
    FORMAT: ClassVar[struct.Struct] = struct.Struct(f"<I{NONCE_BYTES}s{_MAC_BYTES}s")

    def pack(self) -> bytes:
        """The bytes sent."""
        return self.FORMAT.pack(self.rank, self.nonce, self.mac)

    @classmethod
    def unpack(cls, data: bytes) -> Answer:
        """The answer in ``data`` (exactly ``FORMAT.size`` bytes; whether it proves anything is checked apart)."""
        return cls(*cls.FORMAT.unpack(data))


@dataclass(frozen=True)
class Proof:
    """Acceptor to connector, once the answer checked out: the acceptor's MAC over both nonces (the
    connector then knows it reached the rank it meant to, not a program that took its port)."""

    mac: bytes
    FORMAT: ClassVar[struct.Struct] = struct.Struct(f"<{_MAC_BYTES}s")

    def pack(self) -> bytes:
        """The bytes sent."""
        return self.FORMAT.pack(self.mac)

    @classmethod
    def unpack(cls, data: bytes) -> Proof:
        """The proof in ``data`` (exactly ``FORMAT.size`` bytes)."""
        return cls(*cls.FORMAT.unpack(data))


_CONNECT, _ACCEPT = b"connect", b"accept"  # the two roles a MAC is made for


def _recv_until(sock: socket.socket, n: int, deadline: float, alive: WaitCheck, what: str) -> bytes:
    """Exactly ``n`` bytes from ``sock``, in :data:`POLL_SECONDS` slices (checking ``alive`` between
    them) until ``deadline``."""
    data = bytearray()
    while len(data) < n:
        sock.settimeout(max(0.001, min(POLL_SECONDS, deadline - time.monotonic())))
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            problem = alive()
            if problem is not None:
                raise problem.within(what) from None
            if time.monotonic() >= deadline:
                raise ChannelTimeout(f"{what}: no answer within the timeout") from None
            continue
        except OSError as error:
            raise RankGone(f"{what}: the connection broke ({error})") from None
        if not chunk:
            raise LinkRefused(f"{what}: the other end closed the connection during the handshake")
        data += chunk
    return bytes(data)


def connect_link(
    address: tuple[str, int],
    me: int,
    peer: int,
    group: str,
    secret: GroupSecret,
    deadline: float,
    alive: WaitCheck = lambda: None,
) -> socket.socket:
    """A connection from rank ``me`` to rank ``peer`` at ``address`` (its published listening
    socket), after both proved they hold ``secret``: read the acceptor's :class:`Challenge`, send an
    :class:`Answer`, check its :class:`Proof`. Raises :class:`LinkRefused` when what listens there
    cannot prove it is ``peer`` (another program took the port), ``ChannelTimeout`` at ``deadline``."""
    what = f"rank {me} connecting to rank {peer} at {address[0]}:{address[1]}"
    try:
        sock = socket.create_connection(address, timeout=max(0.001, deadline - time.monotonic()))
    except TimeoutError:
        raise ChannelTimeout(f"{what}: no connection within the timeout") from None
    except OSError as error:
        raise RankGone(f"{what}: {error} (did rank {peer} fail?)") from None
    try:
        challenge = Challenge.unpack(_recv_until(sock, Challenge.FORMAT.size, deadline, alive, what))
        if challenge is None:
            raise LinkRefused(f"{what}: what listens there is not a rank (another program took its port?)")
        nonce = secrets.token_bytes(NONCE_BYTES)
        mac = secret.mac(_CONNECT, group, challenge.nonce, nonce, me, peer)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(Answer(me, nonce, mac).pack())
        proof = Proof.unpack(_recv_until(sock, Proof.FORMAT.size, deadline, alive, what))
        if not hmac.compare_digest(proof.mac, secret.mac(_ACCEPT, group, challenge.nonce, nonce, peer, me)):
            raise LinkRefused(f"{what}: what listens there did not prove it belongs to the group")
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Pending:
    """An accepted connection that has not proved itself yet: the nonce it was sent, what it answered
    so far, and when it must have answered."""

    sock: socket.socket
    peer: str
    nonce: bytes
    until: float
    got: bytearray


def accept_links(
    listener: socket.socket,
    me: int,
    expected: set[int],
    group: str,
    secret: GroupSecret,
    deadline: float,
    alive: WaitCheck = lambda: None,
) -> dict[int, socket.socket]:
    """The connections of the ranks in ``expected`` to rank ``me``'s ``listener``, each proved: an
    accepted connection gets a :class:`Challenge`, must answer as one of ``expected`` with the MAC
    under ``secret`` (an :class:`Answer`) and then gets this rank's :class:`Proof`. A connection that
    answers wrong, names a rank not expected (or one already linked), closes, or does not answer
    within :data:`HANDSHAKE_SECONDS` is closed and logged, and this rank goes on waiting for the
    rank it did not become. Handshakes run side by side (a selector), so one that stalls delays no
    other; past :data:`MAX_PENDING` of them (or with no file descriptor left) the oldest is closed, so
    connections held open by a stranger cannot use up the worker's descriptors. Raises what
    ``alive`` says (an aborted group), ``ChannelTimeout`` at ``deadline``."""
    handshakes = _Handshakes(listener, me, expected, group, secret)
    try:
        while handshakes.missing():
            now = time.monotonic()
            handshakes.drop_expired(now)
            _check_still_waiting(me, handshakes.missing(), now, deadline, alive)
            handshakes.serve(max(0.001, min(POLL_SECONDS, deadline - now)), deadline)
    except BaseException:
        handshakes.close_links()
        raise
    finally:
        handshakes.close()
    return handshakes.linked


def _check_still_waiting(me: int, missing: list[int], now: float, deadline: float, alive: WaitCheck) -> None:
    """Raise what ``alive`` says (an aborted group), or ``ChannelTimeout`` past ``deadline``, while rank
    ``me`` waits for the ranks ``missing`` to connect."""
    problem = alive()
    if problem is not None:
        raise problem.within(f"rank {me} waiting for ranks {missing} to connect")
    if now >= deadline:
        raise ChannelTimeout(f"rank {me}: ranks {missing} on other nodes did not connect in time")


class _Handshakes:
    """What :func:`accept_links` has under way on one listener: a selector over the listener and the
    accepted connections that have not proved themselves yet (``pending``), and the links proved
    (``linked``, rank -> socket)."""

    def __init__(self, listener: socket.socket, me: int, expected: set[int], group: str, secret: GroupSecret):
        self.listener, self.me, self.expected, self.group, self.secret = listener, me, expected, group, secret
        self.linked: dict[int, socket.socket] = {}
        self.pending: dict[socket.socket, _Pending] = {}
        self.selector = selectors.DefaultSelector()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)  # first: before any handshake's socket

    def missing(self) -> list[int]:
        """The expected ranks not linked yet."""
        return sorted(self.expected - set(self.linked))

    def drop(self, entry: _Pending, why: str) -> None:
        """Close a handshake that did not prove itself, and log ``why``."""
        self.selector.unregister(entry.sock)
        del self.pending[entry.sock]
        entry.sock.close()
        log.warning("rank %d of group %s refused a connection from %s: %s", self.me, self.group, entry.peer, why)

    def drop_expired(self, now: float) -> None:
        """Close the handshakes whose :data:`HANDSHAKE_SECONDS` ran out by ``now``."""
        for entry in [e for e in self.pending.values() if e.until <= now]:
            self.drop(entry, f"no answer within {HANDSHAKE_SECONDS} s")

    def serve(self, seconds: float, deadline: float) -> None:
        """Wait at most ``seconds`` for the listener or a handshake, and handle every event of the batch."""
        for key, _ in self.selector.select(seconds):
            if key.fileobj is self.listener:
                self.accept()
                continue
            entry = self.pending.get(key.fileobj)  # type: ignore[call-overload]
            if entry is not None:  # None: dropped earlier in this batch (the oldest gave way), nothing to read
                self.read(entry, deadline)

    def accept(self) -> None:
        """Take on a new connection (:func:`_challenge_new`). Past :data:`MAX_PENDING` handshakes, or
        with no file descriptor left, the oldest gives way; with none to give way, wait a poll."""
        if len(self.pending) >= MAX_PENDING:
            self.drop(next(iter(self.pending.values())), f"{MAX_PENDING} handshakes under way: the oldest gave way")
        if _challenge_new(self.listener, self.selector, self.pending):
            return
        if self.pending:  # no descriptor left for it now
            self.drop(next(iter(self.pending.values())), "out of file descriptors: the oldest handshake gave way")
        else:  # the worker's descriptors are taken elsewhere: try again after a while
            time.sleep(POLL_SECONDS)

    def read(self, entry: _Pending, deadline: float) -> None:
        """Read what ``entry`` sent of its :class:`Answer`; once whole, judge it (:meth:`judge`)."""
        try:
            chunk = entry.sock.recv(Answer.FORMAT.size - len(entry.got))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self.drop(entry, f"the connection broke ({error})")
            return
        if not chunk:
            self.drop(entry, "it closed the connection without proving it belongs to the group")
            return
        entry.got += chunk
        if len(entry.got) == Answer.FORMAT.size:
            self.judge(entry, Answer.unpack(bytes(entry.got)), deadline)

    def judge(self, entry: _Pending, answer: Answer, deadline: float) -> None:
        """Link ``entry`` as the rank its ``answer`` names if the answer proves it holds the secret and
        that rank is one expected and not linked yet (:meth:`prove`); else drop it."""
        right = self.secret.mac(_CONNECT, self.group, entry.nonce, answer.nonce, answer.rank, self.me)
        if not hmac.compare_digest(answer.mac, right):
            self.drop(entry, f"its answer (naming rank {answer.rank}) does not prove it holds the group's secret")
        elif answer.rank not in self.expected or answer.rank in self.linked:
            self.drop(entry, f"rank {answer.rank} is not a rank that connects to rank {self.me} now")
        else:
            self.prove(entry, answer, deadline)

    def prove(self, entry: _Pending, answer: Answer, deadline: float) -> None:
        """Send ``entry`` this rank's :class:`Proof` (a blocking send, bounded by ``deadline``) and keep
        it as the link of ``answer.rank``. Raises ``RankGone`` when the connection broke."""
        self.selector.unregister(entry.sock)
        del self.pending[entry.sock]
        entry.sock.setblocking(True)
        entry.sock.settimeout(max(0.001, deadline - time.monotonic()))
        proof = Proof(self.secret.mac(_ACCEPT, self.group, entry.nonce, answer.nonce, self.me, answer.rank))
        try:
            entry.sock.sendall(proof.pack())
        except OSError as error:
            entry.sock.close()
            raise RankGone(f"rank {self.me}: rank {answer.rank}'s connection broke ({error})") from None
        self.linked[answer.rank] = entry.sock

    def close_links(self) -> None:
        """Close the links proved so far (the wait failed: none of them is handed out)."""
        for sock in self.linked.values():
            sock.close()

    def close(self) -> None:
        """Close the handshakes still under way and the selector."""
        for entry in self.pending.values():
            entry.sock.close()
        self.selector.close()


def _challenge_new(
    listener: socket.socket, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending]
) -> bool:
    """Accept what connected to ``listener``, send it a fresh :class:`Challenge`, and watch it for its
    answer. False when the accept failed for want of a file descriptor (or memory): the connection
    waits in the listener's queue; True otherwise (nothing to accept, or a connection that broke
    before or during the challenge is nothing to wait for)."""
    try:
        sock, address = listener.accept()
    except (BlockingIOError, InterruptedError):
        return True
    except OSError as error:  # EMFILE, ENFILE, ENOBUFS, ENOMEM; or one Linux passes on from the connection
        return error.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
    nonce = secrets.token_bytes(NONCE_BYTES)
    try:
        sock.settimeout(POLL_SECONDS)  # a few dozen bytes into a new connection's empty send buffer
        sock.sendall(Challenge(nonce).pack())
    except OSError:
        sock.close()
        return True
    sock.setblocking(False)
    peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
    pending[sock] = _Pending(sock, peer, nonce, time.monotonic() + HANDSHAKE_SECONDS, bytearray())
    selector.register(sock, selectors.EVENT_READ)
    return True


class Link:
    """A TCP connection to one peer rank on another node; data lands straight in the slot (``recv_into``).

    Two socket objects on one connection: ``sock`` receives, ``out`` (a duplicate) sends, each with
    its own timeout, so that a send on the link's thread overlaps a receive on the rank's thread.
    ``alive`` returns the error that says why a wait must stop early (the group was aborted), or None.
    """

    def __init__(self, sock: socket.socket, peer: int, alive: WaitCheck = lambda: None):
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
                if problem is not None:
                    raise problem.within(what) from None
                if time.monotonic() >= deadline:
                    raise ChannelTimeout(
                        f"{what}: no answer from rank {self.peer} within the timeout (is it stuck, or in a "
                        "different operation?)"
                    ) from None
                continue
            except OSError as error:
                raise RankGone(
                    f"{what}: the connection to rank {self.peer} broke ({error}): it died or failed"
                ) from None
            if n == 0:
                raise RankGone(f"{what}: rank {self.peer} closed its connection (it died or failed)")
            got += n

    def _send_all(self, data: bytes | memoryview, deadline: float, what: str) -> None:
        self.out.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            self.out.sendall(data)
        except TimeoutError:
            raise ChannelTimeout(f"{what}: rank {self.peer} took nothing within the timeout (is it stuck?)") from None
        except OSError as error:
            raise RankGone(f"{what}: the connection to rank {self.peer} broke ({error}): it died or failed") from None

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
            raise ChannelMismatch(
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
            raise ChannelMismatch(
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
