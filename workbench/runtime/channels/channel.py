"""Array channels: a persistent buffer per rank, rendezvous put/take, and the collectives on them.

``ArrayChannel`` (ArrayChannels.jl's design, in Python): ``channel.buffer`` is this rank's
persistent array; ``put(dest)`` copies it into ``dest``'s buffer once ``dest`` is ready to take;
``take(src)`` waits until ``src`` has. Collectives are built on the same two steps, into the
receiver's scratch slots: ``reduce`` (a binomial tree, in place, two scratch buffers),
``allreduce``, ``broadcast``, ``scatter`` and ``gather`` (the two the paper described but never
shipped). ``EagerChannel`` has the same API and sends every message worker to worker through Dask
(an actor call: a new array, serialized, per message): the baseline.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.runtime.channels.transport import (
    DONE,
    FINISHED,
    GENERATION,
    MIN_SPIN_SECONDS,
    OWNER_SLEEPS,
    READY,
    SENDER_SLEEPS,
    SPIN_SECONDS,
    TAG,
    WAIT_CHANNEL,
    WAIT_SLOT,
    WAIT_TAG,
    WAIT_WORD,
    WAITING_FOR,
    ChannelError,
    ChannelMismatch,
    ChannelTimeout,
    Mailbox,
    RankGone,
    WaitCheck,
    pid_alive,
    wait_for,
)
from workbench.runtime.worker_state import worker_state

OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}

# What a message's tag and a rank's state word say: the operation, its root, its collective call.
PUT, EXCHANGE, REDUCE, BROADCAST, SCATTER, GATHER = 1, 2, 3, 4, 5, 6
OPERATIONS = {PUT: "put/take", EXCHANGE: "exchange", REDUCE: "reduce", BROADCAST: "broadcast", SCATTER: "scatter",
              GATHER: "gather"}  # fmt: skip
COLLECTIVE = {REDUCE, BROADCAST, SCATTER, GATHER}
EAGER_POLL_SECONDS = 0.1  # an eager wait's slices: between them it checks the group and the peer (a scheduler query)
EAGER_ASK_SECONDS = 1.0  # how long an eager wait's check waits for a peer's inbox to say what its rank waits for


def make_tag(operation: int, root: int = 0, call: int = 0) -> int:
    """A 63-bit word naming an operation: its code, its root, which collective call of the channel."""
    return (call << 24) | (root << 8) | operation


def describe(tag: int) -> str:
    """An operation's name from its tag (for errors)."""
    if tag == FINISHED:
        return "nothing (it returned from its rank function)"
    operation, root, call = tag & 0xFF, (tag >> 8) & 0xFFFF, tag >> 24
    name = OPERATIONS.get(operation, f"an unknown operation {operation}")
    return f"{name} (root {root}, collective call {call})" if operation in COLLECTIVE else name


def _op(op: Any, dtype: np.dtype) -> Any:
    """The ufunc of a reduction, checked to combine two ``dtype`` arrays into one of ``dtype`` in place."""
    if isinstance(op, str):
        if op not in OPS:
            raise ValueError(f"no reduction {op!r}: use one of {sorted(OPS)} or a numpy ufunc of two arguments")
        op = OPS[op]
    if not isinstance(op, np.ufunc) or op.nin != 2 or op.nout != 1:
        raise ValueError(
            f"a reduction is one of {sorted(OPS)} or a numpy ufunc of two arguments and one result, got {op!r}"
        )
    try:
        types = op.resolve_dtypes((dtype, dtype, None))
    except (TypeError, ValueError, np.exceptions.DTypePromotionError) as error:
        raise TypeError(f"reduction {op.__name__} does not apply to {dtype} buffers ({error})") from None
    if not np.can_cast(types[-1], dtype, "safe"):  # 'U3' + 'U3' is 'U6': truncated back into 'U3' otherwise
        raise TypeError(
            f"reduction {op.__name__} of two {dtype} buffers gives {types[-1]}, which does not fit back into the "
            f"{dtype} buffer without loss: use a channel of dtype {types[-1]}"
        )
    return op


def lossless(name: str, data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``data`` in ``dtype``, refused unless every value arrives unchanged (one rule for arrays and
    lists: ``[[1, 2]]`` goes into an int16 channel, ``[[1.5, 2.7]]`` does not).

    A value check, not numpy's casting table: that calls int64 to float64 safe, which it is not
    beyond 2**53, and float64 to int16 unsafe, though 2.0 arrives as 2.
    """
    if np.can_cast(data.dtype, dtype, "equiv"):  # the same values, at most another byte order
        return np.asarray(data, dtype=dtype)
    numeric = "biufc"
    refused = TypeError(
        f"{name} is {data.dtype}, which does not convert to the channel's {dtype} without loss: convert it "
        f"first (data.astype({str(dtype)!r})) if that is what you mean"
    )
    if data.dtype.kind not in numeric or dtype.kind not in numeric:
        raise refused
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex to real, NaN or inf to integers: caught by the check below
        converted = data.astype(dtype)
        back = converted.astype(data.dtype)
    same = (back == data) | (np.isnan(data) & np.isnan(back) if data.dtype.kind in "fc" else False)
    if not np.all(same):
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        raise TypeError(
            f"{refused} (data{list(where)} = {data[where].item()!r} would arrive as {converted[where].item()!r})"
        ) from None
    return converted


class Collectives:
    """The patterns, on three primitives of a subclass: ``_send(dest, array, slot)`` (rendezvous into
    ``dest``'s slot), ``_post(src, slot)`` (this rank is ready to take from ``src``: does not wait)
    and ``_wait(src, slot)`` (until ``src`` has filled the slot)."""

    rank: Any  # the rank's context (group.Rank): its number, the group's size, its links and deadlines
    index: int
    slots: list[np.ndarray]
    calls = 0  # collective calls made on this channel (every rank counts the same)
    tag = 0  # the operation in progress: its messages carry it, a receiver checks it
    state = 0  # the same with the collective call counted (the state word peers read)
    closed = False  # the group ended: the buffers are gone

    def _check_open(self) -> None:
        """Refuse a channel whose group has ended (its buffers are gone)."""
        if self.closed:
            raise ChannelError(
                f"channel {getattr(self, 'name', self.index)!r} belongs to a group that has ended: use a channel "
                "only inside the rank function that made it"
            )

    def _enter(self, operation: int, root: int = 0) -> None:
        """Start an operation: its tag, and the state peers see (every rank must be in the same one)."""
        self._check_open()
        if operation in COLLECTIVE:
            self.calls += 1
            self.tag = make_tag(operation, root, self.calls)
        else:
            self.tag = make_tag(operation)
        self.state = make_tag(operation, root, self.calls)
        self._publish(self.state)

    def _attach_to_put(self, dest: int) -> Mailbox:
        """``dest``'s mailbox, attached for a first put to it; every mailbox exists before use, so one
        that is gone was removed by its rank, which returned."""
        try:
            return self._peer_mailbox(dest)
        except FileNotFoundError:
            raise RankGone(
                f"rank {self.rank.rank} put to rank {dest} on channel {self.name!r}: rank {dest} returned from its "
                "rank function (its mailbox is gone)"
            ) from None

    def _publish(self, state: int) -> None:
        """Show ``state`` to the peers (a channel with a state word)."""

    def _check_tag(self, src: int, got: int) -> None:
        """A message from ``src`` must carry the operation this rank is in."""
        if got != self.tag:
            raise ChannelMismatch(
                f"rank {self.rank.rank} took from rank {src} on channel {getattr(self, 'name', self.index)!r} in "
                f"{describe(self.tag)}, but rank {src} sent in {describe(got)}: every rank must call the same "
                "operations, with the same root, in the same order"
            )

    @property
    def buffer(self) -> np.ndarray:
        """This rank's persistent buffer (slot 0)."""
        self._check_open()
        return self.slots[0]

    def _send(self, dest: int, array: np.ndarray, slot: int) -> None:
        raise NotImplementedError

    def _post(self, src: int, slot: int) -> None:
        raise NotImplementedError

    def _wait(self, src: int, slot: int) -> None:
        raise NotImplementedError

    def _send_begin(self, dest: int, array: np.ndarray, slot: int) -> Callable[[], None]:
        """Start a send that a receive will overlap; returns the call that finishes it."""
        self._send(dest, array, slot)
        return _finished

    def _recv(self, src: int, slot: int) -> None:
        self._post(src, slot)
        self._wait(src, slot)

    def exchange(self, dest: int | None, src: int | None) -> np.ndarray:
        """Send this rank's buffer to ``dest`` while taking ``src``'s into scratch slot 1 (either may be
        None): the shift of a halo exchange or an all-to-all, with no deadlock however the ranks are
        ordered (the take is posted first, and a send to another node overlaps the receive). Returns
        slot 1."""
        dest = None if dest is None else self._peer(dest, "dest")
        src = None if src is None else self._peer(src, "src")
        self._enter(EXCHANGE)
        if src is not None:
            self._post(src, 1)
        finish = _finished if dest is None else self._send_begin(dest, self.buffer, 1)
        if src is not None:
            self._wait(src, 1)
        finish()
        return self.slots[1]

    def _peer(self, other: int, what: str) -> int:
        self._check_open()
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)) or not 0 <= other < self.rank.size:
            raise ValueError(f"{what} must be a rank from 0 to {self.rank.size - 1}, got {other!r}")
        if other == self.rank.rank:
            raise ValueError(f"{what} is this rank ({other}): a rank does not send to itself")
        return int(other)

    def put(self, dest: int) -> None:
        """Copy this rank's buffer into ``dest``'s buffer, as soon as ``dest`` is ready to take."""
        dest = self._peer(dest, "dest")
        self._enter(PUT)
        self._send(dest, self.buffer, 0)

    def take(self, src: int) -> np.ndarray:
        """Wait until ``src`` has put its buffer into this rank's buffer; returns the buffer."""
        src = self._peer(src, "src")
        self._enter(PUT)
        self._recv(src, 0)
        return self.buffer

    def reduce(self, op: Any = "sum", root: int = 0) -> np.ndarray | None:
        """Combine every rank's buffer with ``op`` into ``root``'s buffer, in rank order for every root.

        A binomial tree over ranks 0..n-1, in place: at step ``2**l`` a rank ``r`` that is a multiple of
        ``2**(l + 1)`` takes rank ``r + 2**l``'s buffer into a scratch slot and computes ``op(buffer,
        scratch, out=buffer)``. The pairing is fixed by the number of ranks alone: ``((b0 op b1) op (b2
        op b3))`` for 4 ranks, ``((b0 op b1) op b2)`` for 3. When ``root`` is not 0, rank 0 then sends the
        result to ``root`` (one more message). So ``op`` need not be commutative (MPI's rule for a
        non-commutative operation: rank order, whatever the root), and a float sum has the same bits
        for every root. Returns the result on ``root``, None elsewhere (other buffers hold partial
        results; rank 0's the whole result)."""
        ufunc = _op(op, self.buffer.dtype)
        n, me = self.rank.size, self.rank.rank
        root = self._root(root)
        self._enter(REDUCE, root)
        mask, level = 1, 0
        while mask < n:
            scratch = 1 + level % 2
            if me & mask:
                self._send(me - mask, self.buffer, scratch)
                break
            child = me + mask
            if child < n:
                self._recv(child, scratch)
                ufunc(self.buffer, self.slots[scratch], out=self.buffer)
            mask <<= 1
            level += 1
        if root == 0:
            return self.buffer if me == 0 else None
        if me == 0:
            self._send(root, self.buffer, 0)
        elif me == root:
            self._recv(0, 0)
            return self.buffer
        return None

    def broadcast(self, root: int = 0) -> np.ndarray:
        """``root``'s buffer into every rank's buffer (binomial tree); returns the buffer."""
        n, me = self.rank.size, self.rank.rank
        root = self._root(root)
        self._enter(BROADCAST, root)
        relative = (me - root) % n
        mask = 1
        while mask < n:  # receive from the parent first
            if relative & mask:
                self._recv((relative - mask + root) % n, 0)
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            if relative + mask < n:
                self._send((relative + mask + root) % n, self.buffer, 0)
            mask >>= 1
        return self.buffer

    def allreduce(self, op: Any = "sum") -> np.ndarray:
        """Every rank's buffer combined with ``op``, in every rank's buffer (reduce, then broadcast)."""
        self.reduce(op, 0)
        return self.broadcast(0)

    def scatter(self, root: int = 0, data: np.ndarray | None = None) -> np.ndarray:
        """``data[i]`` (given on ``root``: shape ``(ranks, *buffer.shape)``) into rank ``i``'s buffer."""
        root = self._root(root)
        if self.rank.rank == root:
            expected = (self.rank.size, *self.buffer.shape)
            if isinstance(data, (list, tuple)):  # Python numbers: numpy's dtype for them, then the same rule
                data = np.asarray(data)
            if not isinstance(data, np.ndarray) or data.shape != expected:
                got = f"{data.shape} {data.dtype}" if isinstance(data, np.ndarray) else type(data).__name__
                raise ValueError(f"scatter's root needs a numpy array of shape {expected}, got {got}")
            data = lossless("scatter's data", data, self.buffer.dtype)  # the channel's byte order too
        self._enter(SCATTER, root)
        if self.rank.rank == root:
            for dest in range(self.rank.size):
                if dest == root:
                    np.copyto(self.buffer, data[dest])
                else:
                    self._send(dest, data[dest], 0)
        else:
            self._recv(root, 0)
        return self.buffer

    def gather(self, root: int = 0) -> np.ndarray | None:
        """Every rank's buffer, stacked on ``root`` (shape ``(ranks, *buffer.shape)``); None elsewhere."""
        root = self._root(root)
        self._enter(GATHER, root)
        if self.rank.rank != root:
            self._send(root, self.buffer, 1)
            return None
        out = np.empty((self.rank.size, *self.buffer.shape), dtype=self.buffer.dtype)
        for src in range(self.rank.size):
            if src == root:
                out[src] = self.buffer
            else:
                self._recv(src, 1)
                out[src] = self.slots[1]
        return out

    def _root(self, root: int) -> int:
        self._check_open()
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.rank.size:
            raise ValueError(f"root must be a rank from 0 to {self.rank.size - 1}, got {root!r}")
        return int(root)


def _finished() -> None:
    """A send that finished when it was started."""


def waiting_for_each_other(
    me: int, peer: int, tag: int, channel: str, their_tag: int, their_channel: str
) -> ChannelMismatch:
    """The error of two ranks that wait for each other in different operations (or channels, or
    slots): neither can go on (shared memory and eager channels say it alike)."""
    return ChannelMismatch(
        f"rank {me} waits for rank {peer} in {describe(tag)} on channel {channel!r}, while rank {peer} "
        f"waits for rank {me} in {describe(their_tag)} on channel {their_channel!r}: neither can go on. Every rank "
        "must call the same operations, with the same root, in the same order"
    )


class ArrayChannel(Collectives):
    """A channel whose buffers persist on every rank; same node: shared memory, else a socket."""

    def __init__(self, rank: Any, index: int, name: str, mailbox: Mailbox):
        self.rank, self.index, self.name = rank, index, name
        self.mailbox = mailbox
        self.slots = mailbox.slots
        self._peers: dict[int, Mailbox] = {}
        self._spin_budget = SPIN_SECONDS  # how long a wait spins before it sleeps (learned, see _learn_spin)

    def close(self) -> None:
        """End of the group: drop this channel's buffers and mailboxes (nothing keeps them mapped)."""
        self.closed = True
        self.slots = []
        self._peers.clear()
        self.mailbox.close()

    def _peer_mailbox(self, dest: int) -> Mailbox:
        if dest not in self._peers:
            self._peers[dest] = self.rank.attach_mailbox(self.index, dest, self.mailbox.shape, self.mailbox.dtype)
        return self._peers[dest]

    def _publish(self, state: int) -> None:
        self.mailbox.control[self.mailbox.state] = state

    def _status_box(self, rank: int) -> Mailbox:
        """Rank ``rank``'s channel 0 mailbox, where it says what it waits for (this rank's own, or a
        peer's on this node, attached once)."""
        first = self.rank.channels[0]
        return first.mailbox if rank == self.rank.rank else first._peer_mailbox(rank)

    def _waiting(self, peer: int, slot: int, word: int) -> None:
        """Say (in this rank's status words) that it waits for ``peer``'s ``word`` (``READY`` in the
        peer's mailbox, ``DONE`` in this one) of ``slot``, in the operation in progress; -1: no wait."""
        box = self._status_box(self.rank.rank)
        control, at = box.control, box.status
        control[at + WAITING_FOR] = 0
        if peer < 0:
            return
        control[at + GENERATION] += 1
        control[at + WAIT_CHANNEL] = self.index
        control[at + WAIT_SLOT] = slot
        control[at + WAIT_TAG] = self.tag
        control[at + WAIT_WORD] = word
        control[at + WAITING_FOR] = peer + 1  # last: a reader that sees it sees the words above (x86 order)

    def _deadlock(self, peer: int, slot: int) -> ChannelMismatch | None:
        """Why this rank and ``peer`` can never go on, or None: ``peer`` waits for this rank in another
        operation (or on another channel or slot) than this rank waits for it in, and its wait is not
        satisfied either; only each other could end the two waits. What sockets see at once (a ready
        or a message with the wrong tag), shared memory sees here."""
        me = self.rank.rank
        box = self._status_box(peer)
        control, at = box.control, box.status
        waiting, generation = control[at + WAITING_FOR], control[at + GENERATION]
        if waiting != me + 1:
            return None
        channel, their_slot = control[at + WAIT_CHANNEL], control[at + WAIT_SLOT]
        tag, word = control[at + WAIT_TAG], control[at + WAIT_WORD]
        if control[at + WAITING_FOR] != waiting or control[at + GENERATION] != generation:
            return None  # it moved on while being read
        if (channel, their_slot, tag) == (self.index, slot, self.tag) or not 0 <= channel < len(self.rank.channels):
            return None
        other = self.rank.channels[channel]
        if word == DONE:  # it waits for this rank's copy into its own mailbox
            theirs = other._peer_mailbox(peer)
            at_word = theirs.word(me, their_slot)
            satisfied = theirs.control[at_word + DONE] == theirs.control[at_word + READY]
        else:  # it waits for this rank to be ready to take from it
            mine = other.mailbox
            at_word = mine.word(peer, their_slot)
            satisfied = mine.control[at_word + READY] == mine.control[at_word + DONE] + 1
        if satisfied:
            return None
        return waiting_for_each_other(me, peer, self.tag, self.name, tag, other.name)

    def _watch(self, peer: int, slot: int) -> WaitCheck:
        """What a wait for ``peer`` (on this node) checks besides its own condition: the peer is alive
        and the group not aborted, the peer is not in another collective call of this channel, or
        finished (then the message waited for never comes), and the two are not waiting for each
        other in different operations."""
        alive = self.rank.liveness(peer)
        me = self.rank.rank

        def check() -> ChannelError | None:
            problem = alive()
            if problem is not None:
                return problem
            try:
                box = self._peer_mailbox(peer)
            except Exception:  # its segment was removed: the peer closed (every mailbox exists before use)
                return RankGone(f"rank {peer} returned from its rank function (its mailbox is gone)")
            theirs = box.control[box.state]
            if theirs == FINISHED:
                return RankGone(
                    f"rank {peer} returned from its rank function while rank {me} waits for it in {describe(self.tag)}"
                )
            if theirs >> 24 == self.calls and self.state & 0xFF in COLLECTIVE and theirs != self.state:
                return ChannelMismatch(
                    f"rank {me} is in {describe(self.state)}, rank {peer} in {describe(theirs)}: every rank must call "
                    "the same collectives, with the same root, in the same order"
                )
            try:
                return self._deadlock(peer, slot)
            except FileNotFoundError:  # a mailbox it would read is gone: the peer is ending (seen next check)
                return None

        return check

    def _spin(self, peer: int) -> float:
        """How long a wait for ``peer`` spins before it sleeps: not at all when the peer runs in this
        process (a spinning thread holds the GIL the peer needs to post), else the learned budget."""
        return 0.0 if self.rank.peers[peer]["pid"] == self.rank.pid else self._spin_budget

    def _learn_spin(self, spin: float, waited: float) -> None:
        """A spin that ended the wait doubles the budget (up to ``SPIN_SECONDS``); one that had to
        sleep halves it (down to ``MIN_SPIN_SECONDS``): spinning pays only while the peer runs."""
        if spin > 0:
            grown = waited < spin
            self._spin_budget = min(SPIN_SECONDS, spin * 2) if grown else max(MIN_SPIN_SECONDS, spin / 2)

    def _send(self, dest: int, array: np.ndarray, slot: int) -> None:
        self._send_begin(dest, array, slot, background=False)()

    def _send_begin(self, dest: int, array: np.ndarray, slot: int, background: bool = True) -> Callable[[], None]:
        rank = self.rank
        start = time.time() if rank.trace else 0.0
        link = rank.links.get(dest)
        waited = 0.0
        finish = _finished
        if link is not None:
            what = f"rank {rank.rank} put to rank {dest} on channel {self.name!r}"
            deadline = rank.deadline()
            waited = link.wait_ready(self.index, slot, self.tag, deadline, what, describe)
            if background:  # the peer sends to this rank meanwhile: a big message would block both
                finish = link.send_in_background(self.index, slot, self.tag, array, deadline, what)
            else:
                link.send(self.index, slot, self.tag, array, deadline, what)
        else:
            box = self._peers.get(dest) or self._attach_to_put(dest)
            control, ready = box.control, box.word(rank.rank, slot)
            done = ready + DONE
            if control[ready] != control[done] + 1:  # the receiver is not ready yet: wait (rendezvous)
                spin = self._spin(dest)
                self._waiting(dest, slot, READY)
                waited = wait_for(
                    lambda: control[ready] == control[done] + 1,
                    rank.deadline(),
                    self._watch(dest, slot),
                    f"rank {rank.rank} put to rank {dest} on channel {self.name!r}",
                    box.sleeper(ready, ready + SENDER_SLEEPS),
                    spin,
                )
                self._waiting(-1, 0, 0)
                self._learn_spin(spin, waited)
            elif control[box.state] == FINISHED:  # ready once, then returned (its take failed): nobody takes it
                raise RankGone(f"rank {rank.rank} put to rank {dest} on channel {self.name!r}: rank {dest} returned "
                               "from its rank function")  # fmt: skip
            if array is self.slots[0]:  # the buffer itself: bytes to bytes, no numpy call
                box.raw[slot][:] = self.mailbox.raw[0]
            else:
                np.copyto(box.slots[slot], array)
            control[ready + TAG] = self.tag
            control[done] += 1  # done: the copy and tag above are in place (x86 keeps stores in order)
            box.ring(done, ready + OWNER_SLEEPS)
        if rank.trace:
            rank.event("put", start, array.nbytes, dest, waited, self.name)
        return finish

    def _post(self, src: int, slot: int) -> None:
        link = self.rank.links.get(src)
        if link is not None:
            what = f"rank {self.rank.rank} took from rank {src} on channel {self.name!r}"
            link.send_ready(self.index, slot, self.tag, self.rank.deadline(), what)
        else:
            ready = self.mailbox.word(src, slot)
            self.mailbox.control[ready] += 1
            self.mailbox.ring(ready, ready + SENDER_SLEEPS)

    def _wait(self, src: int, slot: int) -> None:
        rank = self.rank
        start = time.time() if rank.trace else 0.0
        link = rank.links.get(src)
        waited = 0.0
        if link is not None:
            what = f"rank {rank.rank} took from rank {src} on channel {self.name!r}"
            link.receive(self.index, slot, self.tag, self.slots[slot], rank.deadline(), what, describe)
            waited = time.time() - start if rank.trace else 0.0
        else:
            control, ready = self.mailbox.control, self.mailbox.word(src, slot)
            done = ready + DONE
            if control[done] != control[ready]:
                spin = self._spin(src)
                self._waiting(src, slot, DONE)
                waited = wait_for(
                    lambda: control[done] == control[ready],
                    rank.deadline(),
                    self._watch(src, slot),
                    f"rank {rank.rank} took from rank {src} on channel {self.name!r}",
                    self.mailbox.sleeper(done, ready + OWNER_SLEEPS),
                    spin,
                )
                self._waiting(-1, 0, 0)
                self._learn_spin(spin, waited)
            if control[ready + TAG] != self.tag:
                self._check_tag(src, control[ready + TAG])
        if rank.trace:
            rank.event("take", start, self.slots[slot].nbytes, src, waited, self.name)


@dataclass(frozen=True)
class EagerWait:
    """What an eager rank waits for (its :class:`Inbox` answers a peer that asks, ``Inbox.waiting_for``):
    a message from rank ``src`` into ``slot`` of channel ``channel`` in operation ``tag``, the next
    after the ``taken`` ones it took from there before; and, in an answer, whether that message was
    filed already (the wait ends, or has just ended: a count, so a message taken a moment ago counts
    too, not only one still in the queue)."""

    src: int
    channel: int
    slot: int
    tag: int
    taken: int
    satisfied: bool = False


class Inbox:
    """One rank's eager messages: a Dask actor on the rank's own worker (``client.submit(Inbox, ...,
    actor=True)``). A peer sends with an actor call, ``inbox.deliver(...)``, which Dask sends straight
    to this worker (the scheduler is not on the path); the rank takes the messages from the same
    object in its own process (:func:`inbox_of`: the worker's
    :class:`~workbench.runtime.worker_state.WorkerState` keeps it), without another copy.

    Why an actor: it is Dask's public API for calling into one chosen worker directly, worker to
    worker, with Dask's own serialization of the arguments (a numpy array travels as frames and
    arrives as a new array). A ``distributed.Queue`` or ``Variable`` sends every message through the
    scheduler (two hops and a scheduler round trip per message), so it measured the scheduler, not
    the transport; ``Client.scatter`` adds a scheduler update per message too.
    """

    def __init__(self, group: str, rank: int):
        self.group, self.rank = group, rank
        self._queues: dict[tuple[int, int, int], queue.SimpleQueue[tuple[int, np.ndarray]]] = {}
        self._lock = threading.Lock()
        self._closed: str | None = None  # why, once closed
        self.waiting: EagerWait | None = None  # what the rank waits for now (set by its thread)
        self.filed: dict[tuple[int, int, int], int] = {}  # messages filed per queue, ever (the event loop counts)
        self.taken: dict[tuple[int, int, int], int] = {}  # messages the rank took per queue, ever (its thread counts)
        self._state = worker_state()  # made as an actor: a task on the rank's worker
        self._state.inboxes[(group, rank)] = self

    def messages(self, channel: int, src: int, slot: int) -> queue.SimpleQueue[tuple[int, np.ndarray]]:
        """The messages from rank ``src`` for ``slot`` of channel ``channel``, in the order they were sent.
        Raises :class:`InboxClosed` once the inbox closed: nobody would take a message filed now."""
        with self._lock:
            if self._closed is not None:
                raise InboxClosed(f"rank {self.rank} {self._closed} (its inbox is closed)")
            return self._queues.setdefault((channel, src, slot), queue.SimpleQueue())

    async def deliver(self, channel: int, src: int, slot: int, tag: int, array: np.ndarray) -> None:
        """Called by rank ``src`` through the actor (a coroutine: it runs on the worker's event loop,
        without a hop to the actor thread); files the message for the rank to take."""
        messages = self.messages(channel, src, slot)
        key = (channel, src, slot)
        self.filed[key] = self.filed.get(key, 0) + 1  # first: a peer asking meanwhile sees the wait satisfied
        messages.put((tag, array))

    async def waiting_for(self, rank: int) -> EagerWait | None:
        """Called by rank ``rank`` through the actor: what this inbox's rank waits for from ``rank``
        now (None: nothing from it), with whether the message is filed already."""
        wait = self.waiting
        if wait is None or wait.src != rank:
            return None
        filed = self.filed.get((wait.channel, wait.src, wait.slot), 0)
        return dataclasses.replace(wait, satisfied=filed > wait.taken)

    def close(self, why: str = "returned from its rank function") -> None:
        """The rank ended (or its worker closes: ``why`` says which, for the errors of later messages):
        refuse new messages and forget those filed."""
        self._state.inboxes.pop((self.group, self.rank), None)
        with self._lock:
            self._closed = why
            self._queues.clear()


class InboxClosed(RuntimeError):
    """A message reached a closed inbox: its rank returned, or its worker is closing (the sender says
    it as :class:`RankGone`)."""


def inbox_of(group: str, rank: int, worker: Any = None) -> Inbox:
    """The inbox actor of ``rank`` in ``group``, made on ``worker`` (by default the current task's: the
    rank reads its messages there)."""
    return worker_state(worker).inboxes[(group, rank)]


class EagerChannel(Collectives):
    """The same API, every message a new array sent worker to worker by Dask (an actor call into the
    receiving rank's :class:`Inbox`): the eager baseline, what sending arrays between long-running
    Dask tasks costs (serialization, a new array per message, a copy into the buffer)."""

    def __init__(self, rank: Any, index: int, name: str, shape: tuple[int, ...], dtype: np.dtype):
        self.rank, self.index, self.name = rank, index, name
        self.slots = [np.zeros(shape, dtype) for _ in range(3)]

    def close(self) -> None:
        """End of the group: drop this channel's buffers."""
        self.closed = True
        self.slots = []

    def _send(self, dest: int, array: np.ndarray, slot: int) -> None:
        start = time.time()
        self.rank.send_eager(dest, self.index, slot, self.tag, array)
        self.rank.event("put", start, array.nbytes, dest, 0.0, self.name)

    def _post(self, src: int, slot: int) -> None:
        """Nothing to do: an eager message is sent whenever the sender likes."""

    def _wait(self, src: int, slot: int) -> None:
        start = time.time()
        what = f"rank {self.rank.rank} took from rank {src} on channel {self.name!r} in {describe(self.tag)}"
        try:
            messages = self.rank.inbox.messages(self.index, src, slot)
        except InboxClosed as error:  # this rank's own inbox: its worker is closing
            raise ChannelError(f"{what}: {error}") from None
        deadline = self.rank.deadline()
        inbox = self.rank.inbox
        key = (self.index, src, slot)
        inbox.waiting = EagerWait(src, self.index, slot, self.tag, inbox.taken.get(key, 0))  # for a peer that asks
        try:
            while True:  # in slices, so that a peer that returned, an aborted group or a deadlock ends it early
                try:
                    tag, value = messages.get(timeout=EAGER_POLL_SECONDS)
                    break
                except queue.Empty:
                    pass
                problem = self.rank.aborted_check()
                if problem is None and self.rank.has_finished(src):
                    try:  # what it sent before it returned is here already (a send returns once delivered)
                        tag, value = messages.get_nowait()
                        break
                    except queue.Empty:
                        problem = RankGone(f"rank {src} returned from its rank function")
                if problem is None:
                    problem = self._deadlock(src, slot, messages)
                if problem is not None:
                    raise problem.within(what)
                if time.monotonic() > deadline:
                    raise ChannelTimeout(f"{what}: nothing within the timeout")
            inbox.taken[key] = inbox.taken.get(key, 0) + 1
        finally:
            inbox.waiting = None
        self._check_tag(src, tag)
        np.copyto(self.slots[slot], value)
        self.rank.event("take", start, value.nbytes, src, time.time() - start, self.name)

    def _deadlock(
        self, src: int, slot: int, messages: queue.SimpleQueue[tuple[int, np.ndarray]]
    ) -> ChannelMismatch | None:
        """Why this rank and ``src`` can never go on, or None: ``src`` waits for a message from this
        rank in another operation (or channel, or slot) than this rank waits for from it, neither
        message is filed, and neither rank can send while it waits (an eager send returns once its
        message is filed, so nothing of either is on its way). What shared memory sees in its status
        words (``ArrayChannel._deadlock``), asked here of ``src``'s inbox (an actor call per check)."""
        theirs = self.rank.peer_wait(src, EAGER_ASK_SECONDS)
        if (
            theirs is None
            or theirs.satisfied
            or (theirs.channel, theirs.slot, theirs.tag) == (self.index, slot, self.tag)
        ):
            return None
        if not messages.empty():  # it came meanwhile (sent before the peer began its wait)
            return None
        channels = self.rank.channels
        other = channels[theirs.channel].name if 0 <= theirs.channel < len(channels) else f"#{theirs.channel}"
        return waiting_for_each_other(self.rank.rank, src, self.tag, self.name, theirs.tag, other)


__all__ = ["ArrayChannel", "ChannelError", "EagerChannel", "Inbox", "inbox_of", "pid_alive"]
