"""Another user connects to a rank's link port first (issue 35, item 2): the scenario, shared by
tests/test_two_users_channels.py (simulated nodes) and tests/test_namespaced_nodes.py (nodes as
Linux namespaces).

Rank 0 and rank 1 run on workers of two nodes, so their channel is a TCP link that rank 0 opens to
rank 1's listening port. Rank 0's worker is kept busy (its threads wait on a Dask ``Event``) until
the intruder, a process of another Unix user, has connected to rank 1's published port and claimed
to be rank 0 the way the old protocol let it (four bytes naming the rank). Then rank 0 starts. The
intruder plays rank 0 of the old protocol: on rank 1's "ready" it sends its own values, then asks
for rank 1's block. What it got, and how its connection ended, is its report (one JSON line).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Event
from test_two_users import Learner, _why_not

from workbench.runtime.channels import run_group

WAIT_S = 120.0  # bound of every wait of the scenario (a state reached, not a sleep)
GROUP_TIMEOUT_S = 30.0  # the group's own timeout: on the old code, genuine rank 0 waits this long, then fails
OURS, THEIRS = (1.0, 2.0), 666.0  # ranks 0 and 1's blocks, and the intruder's values

# The intruder, run as another user: ``python -c INTRUDER host port``. Plain Python (no workbench):
# the old link protocol is four bytes naming the rank, then channel messages (ready: channel, tag,
# slot; data: channel, tag, slot, bytes).
INTRUDER = r"""
import json, socket, struct, sys
READY, DATA = struct.Struct("<IqB"), struct.Struct("<IqBQ")
report = {"connected": False, "stolen": None, "ended": None}
def exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the rank")
        data += chunk
    return data
try:
    sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    sock.sendall((0).to_bytes(4, "little"))  # "I am rank 0"
    report["connected"] = True
    print("connected", flush=True)
    sock.settimeout(float(sys.argv[3]))
    if sys.argv[5] == "stalls":  # says nothing more: only holds the connection
        exactly(sock, 1 << 20)
    channel, tag, slot = READY.unpack(exactly(sock, READY.size))  # rank 1 is ready to take from "rank 0"
    if (channel, slot) != (0, 0):
        sock.sendall(bytes(100))  # not the old protocol: try a made-up answer anyway
        exactly(sock, 1 << 20)
    values = struct.pack("<4d", *[float(sys.argv[4])] * 4)
    sock.sendall(DATA.pack(0, tag, 0, len(values)) + values)  # rank 1 takes the intruder's values
    sock.sendall(READY.pack(0, tag, 0))  # and puts its own block here
    _, _, _, nbytes = DATA.unpack(exactly(sock, DATA.size))
    report["stolen"] = list(struct.unpack(f"<{nbytes // 8}d", exactly(sock, nbytes)))
    report["ended"] = "stole rank 1's block"
except Exception as error:
    report["ended"] = f"{type(error).__name__}: {error}"
print(json.dumps(report), flush=True)
"""


@contextlib.contextmanager
def other_user() -> Iterator[Learner]:
    """A Unix user made for the test (tests/test_two_users.py's :class:`Learner`), that can run this
    machine's Python; removed at the end, with everything it left. Skips where users cannot be made."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="lwb-channel-intruder-", dir="/tmp"))
    base.chmod(0o755)
    user = None
    try:
        user = Learner(base, "x")
        probe = user.run(sys.executable, "-c", "print(1)")
        if probe.returncode != 0:
            pytest.skip(f"another user cannot run this Python even in a mount namespace: {probe.stderr}")
        yield user
    finally:
        if user is not None:
            user.remove()
        shutil.rmtree(base, ignore_errors=True)


def hold(name: str, seconds: float) -> bool:
    """Task body: occupy a worker thread until event ``name`` is set (at most ``seconds``)."""
    return Event(name).wait(timeout=seconds)


def swap(rank: Any, values: tuple[float, float]) -> list[float]:
    """Rank 0 puts its block to rank 1 and takes rank 1's; rank 1 takes, then puts. What each took."""
    channel = rank.channel("block", 4, np.float64)
    channel.buffer[:] = values[rank.rank]
    if rank.rank == 0:
        channel.put(1)
        return channel.take(1).tolist()
    own = channel.buffer.copy()
    taken = channel.take(0).tolist()
    channel.buffer[:] = own
    channel.put(0)
    return taken


def run_intrusion(
    session: Any, intruder_command: Callable[..., list[str]], ranks_on: tuple[str, str], mode: str = "plays rank 0"
) -> dict[str, Any]:
    """The scenario on ``session``, rank 0 on worker ``ranks_on[0]`` and rank 1 on ``ranks_on[1]``
    (workers of two nodes); ``intruder_command(*argv)`` runs ``argv`` as the other user, who plays
    rank 0 of the old protocol (``mode`` "plays rank 0") or connects and then says nothing
    ("stalls"). Returns ``{"intruder": its report, "results": the group's results or None, "error":
    the group's error text or None, "seconds": from rank 0's start to the group's end}``."""
    client = session.client
    first, second = ranks_on
    threads = client.scheduler_info()["workers"][first]["nthreads"]
    name = f"hold-{uuid.uuid4().hex[:8]}"
    released = Event(name, client=client)
    holders = [client.submit(hold, name, WAIT_S, workers=[first], pure=False) for _ in range(threads)]

    def held() -> bool:
        for future in holders:
            if future.status != "pending":
                future.result()  # raises what the holder raised
                raise AssertionError(f"a holder of rank 0's worker ended: {future.status}")
        return _running_on(client, first) >= threads

    _until(held, "rank 0's worker threads are held")
    outcome: dict[str, Any] = {"results": None, "error": None}

    released_at: list[float] = []

    def group() -> None:
        try:
            outcome["results"] = run_group(session, swap, [(OURS,)] * 2, workers=[first, second],
                                           timeout=GROUP_TIMEOUT_S).results  # fmt: skip
        except Exception as error:  # noqa: BLE001 - reported to the test
            outcome["error"] = f"{type(error).__name__}: {error}"
        outcome["seconds"] = time.monotonic() - released_at[0] if released_at else None

    runner = threading.Thread(target=group, daemon=True)
    intruder: subprocess.Popen[str] | None = None
    try:
        runner.start()
        address = _published_address(client)
        command = intruder_command(sys.executable, "-c", INTRUDER, address["host"], str(address["port"]),
                                   str(WAIT_S), str(THEIRS), mode.split()[0])  # fmt: skip
        intruder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert intruder.stdout is not None
        line = intruder.stdout.readline()  # "connected", once its connection is in rank 1's queue
        assert line.strip() == "connected", f"the intruder did not connect: {line!r} {intruder.stderr.read()}"
    finally:
        released_at.append(time.monotonic())
        released.set()  # rank 0 starts now (or, on a failure above, the holders end)
    if intruder is not None:
        out, err = intruder.communicate(timeout=WAIT_S)
        assert intruder.returncode == 0, err
        outcome["intruder"] = json.loads(out.strip().splitlines()[-1])
    runner.join(timeout=GROUP_TIMEOUT_S * 3 + 60)
    assert not runner.is_alive(), "run_group did not return"
    client.gather(holders)
    return outcome


def _running_on(client: Any, worker: str) -> int:
    """How many tasks run on ``worker`` now."""
    counts = client.run(lambda dask_worker: len(dask_worker.state.executing), workers=[worker])
    return counts[worker]


def _published_address(client: Any) -> dict[str, Any]:
    """Rank 1's published address (host, port) of the group that is starting, read on the scheduler
    (its Dask ``Variable``: a ``get`` that times out would log an error there at every poll)."""

    def published(dask_scheduler: Any = None) -> list[Any]:
        variables = dask_scheduler.extensions["variables"].variables
        return [record["value"] for name, record in variables.items() if name.endswith("-address-r1")]

    found: list[Any] = []
    _until(lambda: bool(found.extend(client.run_on_scheduler(published)) or found), "rank 1 published its address")
    return found[0]


def _until(done: Callable[[], bool], what: str, seconds: float = WAIT_S) -> None:
    """A bounded wait for a state: poll ``done`` until it is true, failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"not reached within {seconds} s: {what}"
        time.sleep(0.05)


def check_refused(outcome: dict[str, Any]) -> None:
    """The intruder's connection was refused and read nothing, and the genuine ranks linked and
    swapped their blocks: the intruder's values reached no rank."""
    report = outcome["intruder"]
    assert report["connected"], report
    assert report["stolen"] is None, f"the intruder read rank 1's block: {report}"
    assert "closed by the rank" in report["ended"] or "reset by peer" in report["ended"], report
    assert outcome["error"] is None, f"the group failed: {outcome['error']}"
    assert outcome["results"] == [[OURS[1]] * 4, [OURS[0]] * 4], outcome["results"]
