"""An SPMD group on a Dask cluster: one long-running rank per worker (or several), started by one call.

``run_group(session, fn, ...)`` submits one Dask task per rank, pinned to its worker; each task
leaves the worker's thread pool (``secede``) so that several ranks can share a worker, builds its
endpoints (a listening socket; shared-memory mailboxes as channels are made), publishes its
address on the scheduler (a Dask ``Variable``, and an ``Event`` to wait on) and reads everyone
else's (Dask starts the ranks and exchanges their addresses; the messages themselves never go
through Dask), connects to the ranks on other
nodes (each link proves it belongs to the group with a secret ``run_group`` made for it and handed
to the ranks as a task argument; a stranger's connection is refused), then runs ``fn(rank,
*args)``. Every wait is bounded; the first rank that fails fails the group with its rank number
and error, the others are cancelled, and every segment and socket of the group is removed on
every worker, whatever happened. A traced group's message events (put, take, wait) name the
channel and the path the bytes took: ``put halo via shm`` (a mailbox, one node), ``via socket``
(a link, two nodes) or ``via dask`` (an eager group).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import Event, Variable, get_client, get_worker, secede
from distributed.actor import Actor

from workbench.memory import shm
from workbench.runtime.channels.channel import (
    EAGER_POLL_SECONDS,
    ArrayChannel,
    EagerChannel,
    EagerWait,
    Inbox,
    InboxClosed,
    inbox_of,
)
from workbench.runtime.channels.transport import (
    CONSEQUENCES,
    FINISHED,
    POLL_SECONDS,
    ChannelError,
    ChannelMismatch,
    ChannelTimeout,
    GroupAborted,
    GroupSecret,
    Link,
    LinkRefused,
    Mailbox,
    RankGone,
    WaitCheck,
    abort,
    accept_links,
    connect_link,
    forget_abort,
    is_aborted,
    pid_alive,
    segment_name,
)
from workbench.runtime.channels.worker_logs import QUIET_RANK_FAILURES, QuietRankFailures
from workbench.runtime.failures import UNSHOWN, message, sendable
from workbench.runtime.session import Session, node_id
from workbench.runtime.trace import record

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: longer waits are a mistake (and overflow socket timeouts)
MAX_CHANNEL_BYTES = 1 << 40  # a channel's buffer: three of them per rank live in shared memory
KINDS = (ChannelMismatch, ChannelTimeout, RankGone, GroupAborted, LinkRefused)  # what a group's error can say it was
GRACE_SECONDS = 2.0  # after the first failure, how long the other ranks' errors are collected
ENDING_SECONDS = 10.0  # after a failure, how long run_group lets the other ranks end before it cleans up


class Rank:
    """What a rank function gets: its number, the group's size, and collective channel creation."""

    def __init__(
        self,
        group: str,
        rank: int,
        size: int,
        timeout: float,
        eager: bool,
        trace: bool,
        secret: GroupSecret | None = None,
    ):
        self.group, self.rank, self.size = group, rank, size
        self.secret = secret if secret is not None else GroupSecret()  # its links prove they hold it
        self.timeout, self.eager, self.trace = timeout, eager, trace
        self.node = node_id()
        self.pid = os.getpid()
        self.links: dict[int, Link] = {}
        self.peers: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.channels: list[Any] = []
        self.timings: dict[str, float] = {}  # seconds of the sections a rank function timed (``timed``)
        self.channels_described = 0  # channels whose description this rank published (its finished mark says so)
        self._mailboxes: list[Mailbox] = []
        self._attached: list[Mailbox] = []
        self._listener: socket.socket | None = None
        self.inbox: Inbox | None = None  # an eager rank's messages (an actor on its worker)
        self._inbox_future: Any = None  # keeps the inbox actor alive until close()
        self._peer_inboxes: dict[int, Actor] = {}
        try:
            self._dask_worker: Any = get_worker()  # kept: its link's sending thread checks aborts too
            self.worker = self._dask_worker.address
        except ValueError:
            self._dask_worker = None  # not a task on a worker: no abort mark can reach it
            self.worker = "client"

    # -- setup -------------------------------------------------------------------------------------
    def _exchange(self, key: str, value: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """Publish ``value`` and read every rank's (``what`` this step is, for errors). The wait for a
        rank stops within :data:`POLL_SECONDS` when that rank returned from its function without
        publishing, or the group was aborted; else at the timeout."""
        post(variable_name(self.group, key, self.rank), value)
        deadline = self.deadline()
        return [self._published(key, r, what, deadline) for r in range(self.size)]

    def _published(self, key: str, r: int, what: str, deadline: float) -> dict[str, Any]:
        name = variable_name(self.group, key, r)
        while True:
            value = posted(name, POLL_SECONDS)
            if value is not UNSET:
                return value
            problem = self.aborted_check()
            if problem is not None:
                raise problem.within(f"rank {self.rank} was waiting for rank {r} in {what}")
            if r != self.rank and self.has_finished(r):
                value = posted(name, 0)  # it may have published just before it returned
                if value is not UNSET:
                    return value
                raise RankGone(
                    f"rank {r} returned from its rank function while rank {self.rank} waits for it in {what}: "
                    "every rank must make the same channels in the same order and reach the same barriers"
                )
            if time.monotonic() > deadline:
                raise ChannelTimeout(
                    f"rank {self.rank}: rank {r} did not reach {what} within {self.timeout} s (is it stuck in its "
                    "own computation, or did it start?)"
                )

    def has_finished(self, peer: int) -> bool:
        """Whether rank ``peer``'s function has returned (asked of the scheduler: a round trip)."""
        return Event(variable_name(self.group, "finished", peer)).is_set()

    def finished(self) -> None:
        """Tell the other ranks this rank's function returned (a wait for it in a channel's or a
        barrier's exchange then stops at once); the mark holds how many channels this rank described,
        so that ``run_group`` knows which variables to delete. Best effort: a scheduler that is gone
        has no rank to tell. An eager rank's inbox closes first, so that a message sent once the mark
        is set fails as :class:`RankGone` rather than being filed where nobody takes it (a put on
        shared memory waits until :meth:`close` marks the mailboxes FINISHED or removes them)."""
        if self.inbox is not None:
            self.inbox.close()
        try:
            post(variable_name(self.group, "finished", self.rank), self.channels_described, min(self.timeout, 5.0))
        except Exception:  # noqa: BLE001 - the group is ending either way
            pass

    def connect(self) -> None:
        """Publish this rank's address, read the others', connect to the ranks on other nodes."""
        host = _host_of(self.worker)
        if self.eager:
            self._make_inbox()
        else:
            self._listener = socket.create_server((host, 0), backlog=max(8, self.size))
        port = self._listener.getsockname()[1] if self._listener else 0
        inbox = self._inbox_future.key if self.eager else ""
        self.peers = self._exchange(
            "address",
            {"node": self.node, "pid": self.pid, "host": host, "port": port, "worker": self.worker, "inbox": inbox},
            "connecting the group",
        )
        if self.eager:  # a proxy of every other rank's inbox: calls go straight to that rank's worker
            self._peer_inboxes = {
                r: Actor(Inbox, peer["worker"], peer["inbox"]) for r, peer in enumerate(self.peers) if r != self.rank
            }
            return
        remote = [r for r in range(self.size) if r != self.rank and self.peers[r]["node"] != self.node]
        deadline = self.deadline()
        for r in (r for r in remote if r > self.rank):  # connect up, accept from below; each link proves itself
            address = (self.peers[r]["host"], self.peers[r]["port"])
            sock = connect_link(address, self.rank, r, self.group, self.secret, deadline, self.aborted_check)
            self.links[r] = Link(sock, r, self.aborted_check)
        below = {r for r in remote if r < self.rank}
        if below:
            accepted = accept_links(
                self._listener, self.rank, below, self.group, self.secret, deadline, self.aborted_check
            )
            for peer, sock in accepted.items():
                self.links[peer] = Link(sock, peer, self.aborted_check)
        if self._listener is not None:  # every link is made: nobody else may connect
            self._listener.close()
            self._listener = None

    def _make_inbox(self) -> None:
        """Start this rank's inbox, a Dask actor pinned to this rank's worker (a task: its key is unique
        to the group and rank)."""
        if self.worker == "client":
            raise ChannelError("an eager rank runs on a Dask worker (its inbox is an actor there)")
        self._inbox_future = get_client().submit(
            Inbox,
            self.group,
            self.rank,
            actor=True,
            workers=[self.worker],
            allow_other_workers=False,
            key=f"{self.group}-inbox-r{self.rank}",
        )
        self._inbox_future.result(timeout=self.timeout)
        self.inbox = inbox_of(self.group, self.rank, self._dask_worker)

    def send_eager(self, dest: int, channel: int, slot: int, tag: int, array: np.ndarray) -> None:
        """Send ``array`` to rank ``dest``'s inbox (an actor call, worker to worker) and wait until it is
        filed there: one message in flight per pair, so they arrive in the order they were sent.

        A closed inbox (its rank returned) answers with :class:`InboxClosed`, said here as
        :class:`RankGone`. The wait is in slices, checking between them that the group was not aborted
        and that ``dest`` has not returned: a call made once the inbox actor is gone (its rank's task
        released) never answers (Dask logs the worker's ``KeyError`` and leaves the call's future unset)."""
        what = f"rank {self.rank} sent to rank {dest} on channel {channel}"
        deadline = self.deadline()
        try:
            delivered = self._peer_inboxes[dest].deliver(channel, self.rank, slot, tag, array)
            while not delivered.done():
                with contextlib.suppress(TimeoutError):
                    delivered.result(timeout=EAGER_POLL_SECONDS)
                    break
                problem = self.aborted_check()
                if problem is None and self.has_finished(dest):
                    problem = RankGone(f"rank {dest} returned from its rank function")
                if problem is not None:
                    raise problem.within(what)
                if time.monotonic() > deadline:
                    raise ChannelTimeout(f"{what}: not filed in its inbox within the timeout")
            delivered.result()
        except ChannelError:
            raise
        except Exception as error:  # noqa: BLE001 - a gone inbox or worker: said as a channel error
            problem = self.aborted_check()
            if problem is None and isinstance(error, InboxClosed):
                problem = RankGone(str(error))
            if problem is None and self.has_finished(dest):
                problem = RankGone(f"rank {dest} returned from its rank function")
            if problem is None:
                problem = RankGone(f"{type(error).__name__}: {error}")
            raise problem.within(what) from None

    def peer_wait(self, peer: int, seconds: float) -> EagerWait | None:
        """What eager rank ``peer`` waits for from this rank now, asked of its inbox (an actor call, at
        most ``seconds``); None when it waits for nothing from this rank, or did not answer in time (a
        peer that is gone is what the other checks of a wait see)."""
        try:
            return self._peer_inboxes[peer].waiting_for(self.rank).result(timeout=seconds)
        except Exception as error:  # noqa: BLE001 - no answer: nothing to conclude from it
            error.__traceback__ = None  # Dask's may sit in a reference cycle with this stack (see posted)
            return None

    def channel(self, name: str, shape: int | Sequence[int], dtype: Any = np.float64) -> ArrayChannel | EagerChannel:
        """A channel with a persistent buffer of ``shape`` and ``dtype`` on every rank. Collective: every
        rank makes the same channels in the same order; ranks that disagree on the shape or dtype get
        a ``ChannelMismatch`` before any byte moves."""
        shape, dtype = channel_layout(name, shape, dtype)
        index = len(self.channels)
        what = f"making channel {index} ({name!r}{': rank.barrier()' if name == 'barrier' else ''})"
        self.channels_described = index + 1
        described = self._exchange(f"channel{index}", {"name": name, "shape": list(shape), "dtype": repr(dtype)}, what)
        for r, other in enumerate(described):
            if (other["name"], tuple(other["shape"]), other["dtype"]) != (name, shape, repr(dtype)):
                raise ChannelMismatch(
                    f"channel {index}: rank {self.rank} made {name!r} {shape} {dtype!r}, rank {r} made "
                    f"{other['name']!r} {tuple(other['shape'])} {other['dtype']}: every rank must make the same "
                    "channels in the same order"
                )
        if self.eager:
            made: ArrayChannel | EagerChannel = EagerChannel(self, index, name, shape, dtype)
        else:
            box = Mailbox(segment_name(self.group, index, self.rank), self.size, shape, dtype, create=True)
            self._mailboxes.append(box)  # removed by close(), however the rank ends
            problem = self.aborted_check()  # aborted meanwhile: the group's clean-up may be over already
            if problem is not None:
                raise problem.within(f"rank {self.rank} in {what}")
            self._exchange(f"mailbox{index}", {"ready": True}, what)  # every mailbox exists before anyone attaches
            made = ArrayChannel(self, index, name, box)
        self.channels.append(made)
        return made

    def attach_mailbox(self, index: int, dest: int, shape: tuple[int, ...], dtype: np.dtype) -> Mailbox:
        """Rank ``dest``'s mailbox of channel ``index`` (same node), mapped here."""
        box = Mailbox(segment_name(self.group, index, dest), self.size, shape, dtype, create=False)
        self._attached.append(box)
        return box

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """``with rank.timed("iterations"):`` adds the block's seconds to ``rank.timings[name]`` (a kernel's
        loop apart from its set-up: making channels is a collective exchange through Dask)."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - begin

    def barrier(self) -> None:
        """Wait until every rank got here (an allreduce of one number on an internal channel)."""
        if not hasattr(self, "_barrier"):
            self._barrier = self.channel("barrier", 1, np.int64)
        self._barrier.buffer[0] = 1
        self._barrier.allreduce()

    # -- during the run --------------------------------------------------------------------------------
    def deadline(self) -> float:
        """When the current wait gives up."""
        return time.monotonic() + self.timeout

    def aborted_check(self) -> GroupAborted | None:
        """Why this rank must stop waiting (its group was aborted: another rank failed), or None."""
        if self._dask_worker is not None and is_aborted(self.group, self._dask_worker):
            return GroupAborted("the group was aborted (another rank failed)")
        return None

    def liveness(self, peer: int) -> WaitCheck:
        """A check of ``peer`` for waits: why it is gone (its process died, the group was aborted), or None."""
        info = self.peers[peer]

        def check() -> ChannelError | None:
            if info["node"] == self.node and not pid_alive(info["pid"]):
                return RankGone(f"rank {peer} (pid {info['pid']}) died")
            return self.aborted_check()

        return check

    def path(self, peer: int) -> str:
        """How messages to and from ``peer`` travel: ``socket`` (a link: the peer is on another node),
        ``shm`` (its mailbox: the same node) or ``dask`` (an eager group's actor calls)."""
        if self.eager:
            return "dask"
        return "socket" if peer in self.links else "shm"

    def event(self, action: str, start: float, nbytes: int, peer: int, waited: float, channel: str) -> None:
        """A message event for the trace (when the group traces): put or take, with the time waited.
        Its task says the channel and the path the bytes took (:meth:`path`): ``put halo via socket``."""
        if self.trace:
            via = self.path(peer)
            self.events.append(
                record(
                    action,
                    start,
                    time.time(),
                    worker=self.worker,
                    task=f"{action} {channel} via {via}",
                    nbytes=nbytes,
                    source=str(peer),
                    key=f"rank{self.rank}",
                    thread=self.rank,
                )
            )
            if waited > 1e-4:
                self.events.append(
                    record(
                        "wait",
                        start,
                        start + waited,
                        worker=self.worker,
                        task=f"wait {channel} via {via}",
                        nbytes=0,
                        source=str(peer),
                        key=f"rank{self.rank}",
                        thread=self.rank,
                    )
                )

    def close(self) -> None:
        """Close sockets, remove this rank's own segments, and let go of every mapping: the channels
        and this rank refer to each other, so the cycle is broken here rather than left to the
        garbage collector (which an idle worker may not run for a long time: a finished group's
        buffers stayed mapped)."""
        for link in self.links.values():
            link.close()
        self.links.clear()
        if self._listener is not None:
            self._listener.close()
        for box in self._mailboxes:
            box.control[box.state] = FINISHED  # a peer still waiting for this rank stops at once
            shm.delete(box.name)
        for channel in self.channels:
            channel.close()
        self.channels.clear()
        if self.inbox is not None:
            self.inbox.close()
            self.inbox = None
        self._peer_inboxes.clear()
        if self._inbox_future is not None:  # the actor goes when the scheduler forgets its task
            self._inbox_future.release()
            self._inbox_future = None
        self.__dict__.pop("_barrier", None)
        for box in self._mailboxes + self._attached:
            box.close()
        self._mailboxes.clear()
        self._attached.clear()


def channel_layout(name: Any, shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    """A channel's shape and dtype, checked: whole non-negative sizes (``()``: one value, a 0-d
    buffer), a fixed-size dtype with no sub-array, a buffer that fits in memory. Raises
    ``TypeError``/``ValueError`` saying what to give."""
    if not isinstance(name, str):
        raise TypeError(f"a channel's name is a string, got {type(name).__name__} {name!r}")
    empty = isinstance(shape, (tuple, list)) and len(shape) == 0  # () : a 0-d channel of one value
    dims = [shape] if np.ndim(shape) == 0 else list(np.asarray(shape, dtype=object).reshape(-1))
    if (not dims and not empty) or any(
        isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in dims
    ):
        raise ValueError(
            f"a channel's shape is a whole number or a tuple of them (() for one value), none negative; got {shape!r}"
        )
    out_shape = tuple(int(n) for n in dims)
    try:
        dtype = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{dtype!r} is not a numpy dtype ({error})") from None
    if dtype.hasobject:
        raise TypeError(f"a channel carries fixed-size values, not {dtype} (object pointers mean nothing elsewhere)")
    if dtype.subdtype is not None:
        raise TypeError(
            f"{dtype!r} holds a sub-array: put its dimensions {dtype.subdtype[1]} into the channel's shape and give "
            f"its element type {dtype.subdtype[0]}"
        )
    if dtype.itemsize == 0:
        raise TypeError(f"{dtype!r} has no bytes: give a sized type, such as 'S8' or 'V16'")
    nbytes = math.prod(out_shape) * dtype.itemsize
    if nbytes > MAX_CHANNEL_BYTES:
        raise ValueError(
            f"a channel of {out_shape} {dtype} needs {nbytes} bytes per buffer (three per rank): more than "
            f"{MAX_CHANNEL_BYTES} bytes; use a smaller buffer and send it in parts"
        )
    return out_shape, dtype


def _host_of(address: str) -> str:
    """The host part of a worker address (``tcp://10.0.0.5:4321`` -> ``10.0.0.5``), else localhost."""
    if "://" in address:
        return address.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    return "127.0.0.1"


def rank_main(
    group: str, rank: int, size: int, fn: Callable[..., Any], args: tuple[Any, ...], options: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """Task body of one rank: leave the thread pool, connect, run ``fn(rank, *args)``, clean up."""
    secede()  # a long-running rank must not hold a worker thread that another rank needs to start
    context = Rank(group, rank, size, options["timeout"], options["eager"], options["trace"], options["secret"])
    try:
        context.connect()
        result = sendable(fn, context, *args)
        sendable(_check_sendable, result, rank)  # pickling runs the result's own code too
        return result, context.events
    except BaseException as error:
        _clear_frames(error)  # the failed frames' locals hold views of the mailboxes: let them go now
        raise
    finally:
        context.finished()
        context.close()


def _clear_frames(error: BaseException) -> None:
    """Clear the locals of every finished frame in ``error``'s tracebacks (and its causes'): they hold
    views of the group's mailboxes, which would stay mapped for as long as the worker keeps the error
    (until the client forgets the task) and, in a reference cycle, until a garbage collection."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # frames still running are skipped
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


UNSET = object()  # what posted returns for a name under which nothing is published (yet)


def post(name: str, value: Any, timeout: float = 30.0) -> None:
    """Publish ``value`` under ``name`` on the scheduler for the other ranks: a Dask ``Variable``
    holds it, and an ``Event`` of the same name says it is there (see :func:`posted`)."""
    Variable(name).set(value, timeout=timeout)
    Event(name).set()


def posted(name: str, timeout: float) -> Any:
    """The value published under ``name``, waited for at most ``timeout`` seconds; :data:`UNSET` if
    there is none by then.

    The wait is on the ``Event``, whose timeout is an answer (False), not an error: a
    ``Variable.get`` that times out raises ``TimeoutError`` in the scheduler's handler, which Dask
    logs as an ERROR with its traceback, and a rank polls many times while its peers start (every
    eager run printed such tracebacks although its answers were right). No ``TimeoutError`` is
    made on this side either: Dask's keeps the raising frame in a reference cycle that held a rank's
    stack, and a finished group's segment with it, until a full garbage collection."""
    event = Event(name)
    if not (event.is_set() if timeout <= 0 else event.wait(timeout)):
        return UNSET
    return Variable(name).get(timeout=POLL_SECONDS)  # set before its event: answered at once


def unpost(name: str, client: Any) -> None:
    """Forget what was published under ``name`` (nothing happens for a name never published)."""
    Variable(name, client).delete()
    Event(name, client).clear()


def _check_sendable(result: Any, rank: int) -> None:
    """Raise a clear error for a result Dask could not send back (a lock, a socket, an open file)."""
    if result is None or isinstance(result, (bool, int, float, str, bytes, np.generic)):
        return  # the common results: always sendable
    if isinstance(result, np.ndarray) and not result.dtype.hasobject:
        return
    try:
        import cloudpickle

        cloudpickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        why = message(error) or UNSHOWN
        raise TypeError(
            f"rank {rank} returned a {type(result).__name__}, which cannot be sent back to the client ({why}): "
            "return arrays, numbers or other picklable values"
        ) from None


def remove_group_segments(group: str, aborted: bool = False, dask_worker: Any = None) -> list[str]:
    """``Client.run`` body, on a worker: remove every mailbox segment of ``group`` (a killed rank leaves
    its own). The abort mark of a failed group stays while its ranks may still be running (each mark
    is a few bytes); a finished group's is forgotten."""
    if not aborted:
        forget_abort(group, dask_worker)
    return shm.delete_prefix(f"ch-{group}-")


def _abort_group(session: Session, group: str) -> None:
    """Tell every worker that ``group`` failed: its ranks' waits stop at their next check."""
    try:
        session.run(abort, group)
    except Exception:  # a worker that is gone has no rank left to stop
        pass


@dataclass
class GroupResult:
    """What a group run returned: each rank's result, the message events, the seconds it took."""

    results: list[Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def run_group(
    session: Session,
    fn: Callable[..., Any],
    args: Sequence[tuple[Any, ...]] | None = None,
    ranks: int | None = None,
    workers: Sequence[str] | None = None,
    eager: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    trace: bool = False,
) -> GroupResult:
    """Run ``fn(rank, *args[r])`` as an SPMD group: rank ``r`` on ``workers[r]`` (default: round-robin
    over the cluster's workers, one rank each, or ``ranks`` of them). ``eager=True`` gives every rank
    :class:`EagerChannel` channels (the baseline). Raises ``ChannelError`` naming the first rank that
    failed; nothing of the group is left on any worker."""
    all_workers = session.workers()
    if not all_workers:
        raise ChannelError("the cluster has no workers right now (one may have just died and be restarting): rerun")
    if workers is None:
        count = ranks if ranks is not None else len(all_workers)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"ranks must be a positive whole number, got {ranks!r}")
        workers = [all_workers[r % len(all_workers)] for r in range(int(count))]
    if isinstance(workers, str):
        raise TypeError(f"workers is a list of worker addresses, got the string {workers!r}")
    workers = list(workers)
    if not workers:
        raise ValueError(f"workers is empty: give at least one of {all_workers} (a rank runs on each)")
    unknown = sorted(set(workers) - set(all_workers))
    if unknown:
        raise ValueError(f"no workers {unknown} in this cluster; it has {all_workers}")
    size = len(workers)
    if args is None:
        args = [()] * size
    if isinstance(args, (str, bytes)) or any(not isinstance(a, (tuple, list)) for a in args):
        raise TypeError(f"args is one tuple of arguments per rank, such as [(x,)] * {size}; got {args!r:.80}")
    args = [tuple(a) for a in args]
    if len(args) != size:
        raise ValueError(f"args has {len(args)} entries for {size} ranks: give one tuple per rank")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f}, got {timeout!r}")
    # a rank's channel failure is raised here, in full: its workers do not also log it (see worker_logs)
    session.own(QUIET_RANK_FAILURES, lambda: QuietRankFailures(session))
    group = f"g{uuid.uuid4().hex[:10]}"
    # the links' secret reaches the ranks as a task argument, through the scheduler (see transport)
    options = {"timeout": float(timeout), "eager": bool(eager), "trace": bool(trace), "secret": GroupSecret()}
    client = session.client
    start = time.perf_counter()
    futures = [
        client.submit(
            rank_main, group, r, size, fn, args[r], options, workers=[workers[r]], pure=False, key=f"rank{r}-{group}"
        )
        for r in range(size)
    ]
    failed = True
    try:
        results = _gather_ranks(session, futures, workers, timeout * 3 + 30, lambda: _abort_group(session, group))
        failed = False
    except Exception as error:
        if session.closed:
            raise ChannelError(
                "the session was closed while the group ran: its ranks stopped with their workers, and its "
                "mailboxes on this machine were removed"
            ) from error
        raise
    finally:
        if session.closed:  # no worker can be asked: remove what the group left on this machine
            shm.delete_prefix(f"ch-{group}-")
        else:
            if failed:  # the ranks still waiting stop within a poll, instead of at their timeout
                _abort_group(session, group)
                _let_ranks_end(session, futures, workers, ENDING_SECONDS)  # nothing of theirs made after the clean-up
            client.cancel(futures, force=True)
            session.run(remove_group_segments, group, failed)
            _forget_variables(session, group, size, options["eager"])
    seconds = time.perf_counter() - start
    return GroupResult([r for r, _ in results], [e for _, events in results for e in events], seconds)


def _let_ranks_end(session: Session, futures: list[Any], workers: list[str], seconds: float) -> None:
    """Wait (at most ``seconds``) until every rank's task has ended: an aborted group's ranks stop at
    their next wait's check. A rank busy in its own computation cannot be interrupted (a Python
    thread cannot be stopped): it fails at its next channel call, and makes nothing more. A rank whose
    worker left the cluster (its process died) is not waited for: its task, pinned to that worker,
    stays pending for good."""
    deadline = time.monotonic() + seconds
    delay = 0.001
    running = [r for r, f in enumerate(futures) if f.status == "pending"]
    next_check = time.monotonic()
    while running and time.monotonic() < deadline:
        if time.monotonic() >= next_check:  # a round trip to the scheduler: not at every poll
            with contextlib.suppress(Exception):  # no answer: every rank is waited for
                alive = set(session.workers())
                running = [r for r in running if workers[r] in alive]
            next_check = time.monotonic() + 0.25
        time.sleep(delay)  # a bounded poll of the ranks' states
        delay = min(delay * 2, 0.05)
        running = [r for r in running if futures[r].status == "pending"]


def _gather_ranks(
    session: Session, futures: list[Any], workers: list[str], timeout: float, on_failure: Callable[[], None]
) -> list[Any]:
    """Every rank's result. A rank that fails fails the group: ``on_failure`` (abort the others) is
    called at once, the other ranks' errors are collected for up to :data:`GRACE_SECONDS`, and the
    error raised names every rank that failed and shows the root cause (a rank's own error before
    the channel errors it caused elsewhere). So does a rank whose worker left the cluster (its
    process died: Dask would wait for the worker forever, since a rank is pinned to it); so does
    ``timeout``."""
    deadline = time.monotonic() + timeout
    results: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}
    pending = dict(enumerate(futures))
    delay, next_check = 0.001, time.monotonic() + 0.5
    grace_until: float | None = None
    while pending:
        finished = [r for r, f in pending.items() if f.status in ("finished", "error", "cancelled")]
        for r in finished:
            future = pending.pop(r)
            if future.status == "finished":
                results[r] = future.result()
                continue
            try:
                future.result(timeout=5)
            except Exception as error:  # the rank's own exception
                errors[r] = error
        if errors and grace_until is None:
            on_failure()
            grace_until = time.monotonic() + GRACE_SECONDS
        now = time.monotonic()
        if grace_until is not None and now > grace_until:
            break
        if finished:
            delay = 0.001
            continue
        if now > deadline:
            raise ChannelTimeout(f"ranks {sorted(pending)} did not finish within {timeout:.0f} s")
        if now > next_check:
            alive = set(session.workers())
            lost = [r for r in pending if workers[r] not in alive]
            if lost:
                raise RankGone(
                    f"rank {lost[0]}'s worker {workers[lost[0]]} left the cluster while the group ran (its process "
                    "died): the group failed"
                )
            next_check = now + 0.5
        time.sleep(delay)  # a bounded poll of the ranks' states
        delay = min(delay * 2, 0.05)
    if errors:
        raise group_error(errors, workers)
    return [results[r] for r in range(len(futures))]


def group_error(errors: dict[int, BaseException], workers: list[str]) -> ChannelError:
    """The group's error: the root cause first (a rank's own error; then what a rank found itself, such
    as a :class:`ChannelMismatch` or a timeout; last a :class:`RankGone` or :class:`GroupAborted`, a
    consequence of another rank's failure; among equals, the lowest rank), then which other ranks
    failed. Of the cause's kind when that is a ``ChannelError``, else a plain ``ChannelError``."""

    def rank_of(r: int) -> tuple[int, int]:
        error = errors[r]
        if not isinstance(error, ChannelError):
            return (0, r)  # the rank's own error
        return (2 if isinstance(error, CONSEQUENCES) else 1, r)  # a consequence, or what the rank found

    cause = min(errors, key=rank_of)
    error = errors[cause]
    others = sorted(r for r in errors if r != cause)
    also = f" (ranks {others} failed too, after it)" if others else ""
    kind = next((k for k in KINDS if isinstance(error, k)), ChannelError)
    out = kind(f"rank {cause} (on {workers[cause]}) failed: {type(error).__name__}: {error}{also}")
    out.__cause__ = error
    return out


def variable_name(group: str, key: str, rank: int) -> str:
    """The Dask variable in which ``rank`` of ``group`` publishes ``key`` (``address``, ``finished``,
    ``channel<i>`` and ``mailbox<i>``: channel ``i``'s description and its mailbox being ready)."""
    return f"{group}-{key}-r{rank}"


def _forget_variables(session: Session, group: str, size: int, eager: bool) -> None:
    """Delete the group's variables on the scheduler (Dask's ``Variable.delete``): every rank's address
    and finished mark, and every channel's description (and, unless ``eager``, its mailbox's). A
    rank's finished mark says how many channels it described; a rank that could not say (its process
    died) may have described one more than the others, so one more is deleted (deleting a variable
    that was never set does nothing)."""
    client = session.client
    described = []
    try:
        for r in range(size):
            name = variable_name(group, "finished", r)
            if Event(name, client).is_set():  # not set: the rank died before it could say
                described.append(int(Variable(name, client).get(timeout=POLL_SECONDS)))
        channels = max(described, default=0) + (1 if len(described) < size else 0)
        steps = ("channel",) if eager else ("channel", "mailbox")
        keys = ["address", "finished"] + [f"{step}{i}" for i in range(channels) for step in steps]
        for r in range(size):
            for key in keys:
                unpost(variable_name(group, key, r), client)
    except Exception:  # best effort: a variable left behind holds a few bytes on the scheduler
        pass
