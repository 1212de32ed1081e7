"""A link between two ranks proves it belongs to the group (issue 35, item 2), without a cluster:
a connection with no secret, the wrong one, or a recorded answer is refused (closed), and the
genuine rank, connecting after it, still links; a rank that reaches something else at a published
address (another program took the port) says so."""

from __future__ import annotations

import selectors
import socket
import threading
import time
import types
from typing import Any, ClassVar

import pytest

from workbench.runtime.channels import transport
from workbench.runtime.channels.transport import (
    HANDSHAKE_SECONDS,
    Answer,
    Challenge,
    GroupAborted,
    GroupSecret,
    LinkRefused,
    RankGone,
    accept_links,
    connect_link,
)

GROUP = "gtest"
WAIT_S = 30.0  # bound of every wait (a state reached, not a sleep)


class Acceptor:
    """Rank 1 accepting rank 0's link on a thread: what :func:`accept_links` returned or raised."""

    def __init__(self, secret: GroupSecret, expected: set[int] | None = None, alive: Any = lambda: None):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.result: dict[int, socket.socket] | None = None
        self.error: BaseException | None = None
        self.ended_at = 0.0
        self.thread = threading.Thread(
            target=self._run, args=(secret, {0} if expected is None else expected, alive), daemon=True
        )
        self.thread.start()

    def _run(self, secret: GroupSecret, expected: set[int], alive: Any) -> None:
        try:
            self.result = accept_links(self.listener, 1, expected, GROUP, secret, time.monotonic() + WAIT_S, alive)
        except BaseException as error:  # noqa: BLE001 - the test reads it
            self.error = error
        self.ended_at = time.monotonic()

    def join(self) -> dict[int, socket.socket]:
        self.thread.join(WAIT_S + 5)
        assert not self.thread.is_alive()
        self.listener.close()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _closed_by_rank(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock`` (what it sent before, such as a challenge, is read past)."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def _genuine_pair(acceptor: Acceptor, secret: GroupSecret) -> None:
    """Rank 0 links to the acceptor with ``secret``, and a message goes both ways on the link."""
    mine = connect_link(acceptor.address, 0, 1, GROUP, secret, time.monotonic() + WAIT_S)
    theirs = acceptor.join()[0]
    mine.sendall(b"from rank 0")
    assert theirs.recv(64) == b"from rank 0"
    theirs.sendall(b"from rank 1")
    assert mine.recv(64) == b"from rank 1"
    mine.close()
    theirs.close()


def _stranger_answer(sock: socket.socket, answer: bytes) -> None:
    """Read the challenge a stranger gets, and send ``answer``."""
    sock.settimeout(WAIT_S)
    got = b""
    while len(got) < Challenge.FORMAT.size:
        got += sock.recv(Challenge.FORMAT.size - len(got))
    assert Challenge.unpack(got) is not None
    sock.sendall(answer)


def _replayed(secret: GroupSecret) -> bytes:
    """A genuine rank 0's answer to another connection's challenge, as a recording would hold it."""
    recorded_challenge, own = b"\x01" * 32, b"\x02" * 32
    return Answer(0, own, secret.mac(b"connect", GROUP, recorded_challenge, own, 0, 1)).pack()


@pytest.mark.parametrize(
    "stranger",
    ["old protocol (names the rank)", "no secret", "wrong secret", "replayed answer", "says nothing"],
)
def test_a_stranger_connecting_first_is_refused_and_the_genuine_rank_still_links(stranger):
    secret = GroupSecret()
    acceptor = Acceptor(secret)
    intruder = socket.create_connection(acceptor.address, timeout=WAIT_S)
    if stranger.startswith("old protocol"):
        intruder.sendall((0).to_bytes(4, "little") + bytes(64))  # "rank 0", then what it would send
    elif stranger == "no secret":
        _stranger_answer(intruder, Answer(0, bytes(32), bytes(32)).pack())
    elif stranger == "wrong secret":
        other = GroupSecret()
        _stranger_answer(
            intruder, Answer(0, bytes(32), other.mac(b"connect", GROUP, bytes(32), bytes(32), 0, 1)).pack()
        )
    elif stranger == "replayed answer":
        _stranger_answer(intruder, _replayed(secret))
    began = time.monotonic()
    _genuine_pair(acceptor, secret)
    assert acceptor.ended_at - began < HANDSHAKE_SECONDS, "the genuine rank waited for the stranger's handshake"
    assert _closed_by_rank(intruder)
    intruder.close()


def test_a_wrong_answer_is_closed_at_once_while_the_rank_keeps_waiting():
    secret = GroupSecret()
    acceptor = Acceptor(secret)
    intruder = socket.create_connection(acceptor.address, timeout=WAIT_S)
    _stranger_answer(intruder, Answer(0, bytes(32), bytes(32)).pack())
    assert _closed_by_rank(intruder)  # refused before any genuine rank came
    assert acceptor.thread.is_alive(), "the refused connection ended the rank's wait for rank 0"
    _genuine_pair(acceptor, secret)


def test_a_rank_that_reaches_something_else_at_the_published_address_says_so():
    # another program took the port: it sends no challenge, or one, then cannot prove it is the rank
    for behaviour in ("not a rank", "cannot prove"):
        server = socket.create_server(("127.0.0.1", 0))

        def serve(server: socket.socket = server, behaviour: str = behaviour) -> None:
            conn, _ = server.accept()
            if behaviour == "not a rank":
                conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + bytes(64))
            else:
                conn.sendall(Challenge(bytes(32)).pack())
                conn.recv(Answer.FORMAT.size)
                conn.sendall(bytes(32))
            try:
                conn.recv(1)  # until the rank closes
            except ConnectionResetError:
                pass
            conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with pytest.raises(LinkRefused, match="not a rank|did not prove it belongs to the group"):
            connect_link(server.getsockname(), 0, 1, GROUP, GroupSecret(), time.monotonic() + WAIT_S)
        thread.join(WAIT_S)
        server.close()


def test_a_rank_of_an_aborted_group_stops_waiting_for_links():
    aborted = threading.Event()
    acceptor = Acceptor(GroupSecret(), alive=lambda: GroupAborted("aborted") if aborted.is_set() else None)
    aborted.set()
    with pytest.raises(GroupAborted, match="waiting for ranks \\[0\\] to connect"):
        acceptor.join()


def test_the_secret_does_not_show_in_its_repr_and_travels_in_a_pickle():
    import pickle

    secret = GroupSecret()
    assert "hidden" in repr(secret) and secret._key.hex() not in repr(secret)
    copy = pickle.loads(pickle.dumps(secret))
    assert copy.mac(b"r", GROUP, b"a", b"b", 0, 1) == secret.mac(b"r", GROUP, b"a", b"b", 0, 1)


# Rank 1 accepting in a process of its own with 64 file descriptors (a worker has 1024 or so: the
# same in small), the secret given as hex on the command line; it prints what accept_links did.
_ACCEPTOR_FEW_DESCRIPTORS = r"""
import resource, socket, sys, time
from workbench.runtime.channels.transport import GroupSecret, accept_links
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
try:
    linked = accept_links(listener, 1, {0}, sys.argv[2], GroupSecret(bytes.fromhex(sys.argv[1])), time.monotonic() + 60)
    print("linked", sorted(linked), flush=True)
except BaseException as error:
    print("raised", type(error).__name__, error, flush=True)
"""


def test_strangers_holding_connections_open_cannot_use_up_the_ranks_descriptors():
    # Another user opens connections to a rank's port and holds them, saying nothing: before, each
    # waited its HANDSHAKE_SECONDS in the rank's process, and past the process's descriptor limit the
    # rank's accept failed with EMFILE (the group failed on a bare OSError). The oldest handshake now
    # gives way, and the genuine rank, connecting after 200 of them, still links.
    import subprocess
    import sys

    secret = GroupSecret()
    child = subprocess.Popen(
        [sys.executable, "-c", _ACCEPTOR_FEW_DESCRIPTORS, secret._key.hex(), GROUP],
        stdout=subprocess.PIPE,
        text=True,
    )
    held = []
    try:
        assert child.stdout is not None
        address = ("127.0.0.1", int(child.stdout.readline()))
        for _ in range(200):
            sock = socket.create_connection(address, timeout=WAIT_S)
            held.append(sock)
            try:
                sock.recv(Challenge.FORMAT.size)  # challenged: the rank took it on
            except ConnectionResetError:  # the rank's process ended (before the fix: EMFILE)
                break
        try:
            connect_link(address, 0, 1, GROUP, secret, time.monotonic() + WAIT_S).close()
        except RankGone:  # no rank listens any more: what it printed says why
            pass
        outcome, _ = child.communicate(timeout=WAIT_S)
        assert outcome.strip() == "linked [0]"
    finally:
        child.kill()
        child.wait()
        for sock in held:
            sock.close()


class _FloodBatch(selectors.DefaultSelector):
    """The selector :func:`accept_links` makes, which, once ``armed``, reports the batch a flood makes:
    it waits (bounded) until the listener (a new connection) and a pending handshake (its answer's
    first byte) are both readable, and reports the listener first. The kernel may order them either
    way; this order is the one in which the oldest handshake gives way before its event is read."""

    made: ClassVar[list[_FloodBatch]] = []

    def __init__(self) -> None:
        super().__init__()
        self.listener: object = None
        self.armed, self.waiting, self.past_batch = threading.Event(), threading.Event(), threading.Event()
        self.made.append(self)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        if self.listener is None:
            self.listener = fileobj  # accept_links registers its listener first
        return super().register(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.waiting.is_set():  # the loop came back for more after the flood's batch
            self.past_batch.set()
        if not self.armed.is_set():
            return super().select(timeout)
        self.armed.clear()
        self.waiting.set()
        deadline = time.monotonic() + WAIT_S
        while True:
            events = super().select(0.01)  # level-triggered: what is ready stays ready until read
            kinds = {key.fileobj is self.listener for key, _ in events}
            if kinds == {True, False} or time.monotonic() > deadline:
                return sorted(events, key=lambda event: event[0].fileobj is not self.listener)


def test_a_flood_that_drops_a_handshake_in_the_batch_that_reported_it_only_delays_the_rank(monkeypatch):
    # Issue 47, item 1: with MAX_PENDING handshakes under way, a new connection makes the oldest give
    # way; when that handshake's own answer came in the same select() batch, the loop read it back from
    # the handshakes under way and failed the rank with a bare KeyError (9 of 9 floods, on main).
    monkeypatch.setattr(transport, "selectors", types.SimpleNamespace(DefaultSelector=_FloodBatch, EVENT_READ=1))
    _FloodBatch.made.clear()
    secret = GroupSecret()
    acceptor = Acceptor(secret)
    strangers = []
    try:
        for _ in range(transport.MAX_PENDING):  # each challenged: the rank holds MAX_PENDING handshakes
            stranger = socket.create_connection(acceptor.address, timeout=WAIT_S)
            strangers.append(stranger)
            assert len(_recv_exactly(stranger, Challenge.FORMAT.size)) == Challenge.FORMAT.size
        (selector,) = _FloodBatch.made
        selector.armed.set()
        assert selector.waiting.wait(WAIT_S), "the rank did not come back to select"
        strangers.append(socket.create_connection(acceptor.address, timeout=WAIT_S))  # one more: the oldest gives way
        strangers[0].sendall(b"\x00")  # ...while its answer begins
        deadline = time.monotonic() + WAIT_S
        while not selector.past_batch.is_set() and acceptor.thread.is_alive():
            assert time.monotonic() < deadline, "the rank neither went on nor ended"
            selector.past_batch.wait(0.05)  # a poll of a bounded wait on a state
        if not acceptor.thread.is_alive():
            acceptor.join()  # raises what ended the rank's wait (before the fix: KeyError)
        assert _closed_by_rank(strangers[0]), "the oldest handshake did not give way"
        _genuine_pair(acceptor, secret)
    finally:
        for stranger in strangers:
            stranger.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock`` (fewer only if it closes)."""
    sock.settimeout(WAIT_S)
    got = b""
    while len(got) < n and (chunk := sock.recv(n - len(got))):
        got += chunk
    return got
