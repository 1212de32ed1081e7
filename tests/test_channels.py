"""Array channels: every pattern against numpy on 1, 2 and 3 ranks (odd sizes and dtypes), the eager
baseline with the same answers, the socket path between two simulated nodes, clear errors before
any byte moves, and a rank that dies mid-take failing the group with nothing left behind."""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import threading
import time
import types

import numpy as np
import pytest

import workbench
from workbench.memory import shm
from workbench.runtime.channels import (
    ChannelError,
    ChannelMismatch,
    ChannelTimeout,
    GroupAborted,
    RankGone,
    run_group,
)
from workbench.runtime.channels.group import group_error

DTYPES = ["float64", "float32", "int16", ">f8", "complex128"]


def _value(rank: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) % 7 + rank + 1).astype(dtype)


def patterns(rank, shape, dtype):
    """Every pattern once; returns what each rank saw."""
    channel = rank.channel("patterns", shape, dtype)
    mine = _value(rank.rank, shape, dtype)
    out = {}
    np.copyto(channel.buffer, mine)
    total = channel.reduce("sum", root=rank.size - 1)
    out["reduce"] = None if total is None else total.copy()
    np.copyto(channel.buffer, mine)
    out["allreduce_max"] = channel.allreduce("max").copy()
    np.copyto(channel.buffer, mine)
    out["broadcast"] = channel.broadcast(root=0).copy()
    data = np.stack([_value(r + 10, shape, dtype) for r in range(rank.size)]) if rank.rank == 0 else None
    out["scatter"] = channel.scatter(0, data).copy()
    np.copyto(channel.buffer, mine)
    gathered = channel.gather(root=rank.size // 2)
    out["gather"] = None if gathered is None else gathered.copy()
    if rank.size > 1:  # a ring shift with put/take, and with exchange
        np.copyto(channel.buffer, mine)
        right, left = (rank.rank + 1) % rank.size, (rank.rank - 1) % rank.size
        if rank.rank % 2 == 0:
            channel.put(right)
            channel.take(left)
        else:
            saved = channel.buffer.copy()
            channel.take(left)
            received = channel.buffer.copy()
            np.copyto(channel.buffer, saved)
            channel.put(right)
            np.copyto(channel.buffer, received)
        out["ring"] = channel.buffer.copy()
        np.copyto(channel.buffer, mine)
        out["exchange"] = channel.exchange(right, left).copy()
    return out


def _check(results, size, shape, dtype):
    values = [_value(r, shape, dtype) for r in range(size)]
    total = sum(values[1:], values[0].copy())
    for r, seen in enumerate(results):
        if r == size - 1:
            np.testing.assert_array_equal(seen["reduce"], total)
        else:
            assert seen["reduce"] is None
        np.testing.assert_array_equal(seen["allreduce_max"], np.maximum.reduce(values) if size > 1 else values[0])
        np.testing.assert_array_equal(seen["broadcast"], values[0])
        np.testing.assert_array_equal(seen["scatter"], _value(r + 10, shape, dtype))
        if r == size // 2:
            np.testing.assert_array_equal(seen["gather"], np.stack(values))
        if size > 1:
            np.testing.assert_array_equal(seen["ring"], values[(r - 1) % size])
            np.testing.assert_array_equal(seen["exchange"], values[(r - 1) % size])


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("eager", [False, True], ids=["channels", "eager"])
def test_every_pattern_matches_numpy(session, size, eager):
    for shape, dtype in [
        ((7,), DTYPES[size % len(DTYPES)]),
        ((3, 5), DTYPES[(size + 2) % len(DTYPES)]),
        ((0,), "float64"),
    ]:
        results = run_group(session, patterns, [(shape, dtype)] * size, ranks=size, eager=eager).results
        _check(results, size, shape, dtype)
    assert not [s for s in shm.list_segments() if s.name.startswith("ch-")]


def mismatched(rank):
    rank.channel("data", 10 + rank.rank, np.float64)  # rank 1 asks for 11 elements


def test_mismatched_channels_fail_before_any_byte_moves(session):
    with pytest.raises(ChannelError, match=r"rank \d.*channel 0.*every rank must make the same channels"):
        run_group(session, mismatched, ranks=2)
    assert not [s for s in shm.list_segments() if s.name.startswith("ch-")]


def misuse(rank, what):
    channel = rank.channel("c", 4, np.float64)
    if what == "self":
        channel.put(rank.rank)
    elif what == "range":
        channel.take(rank.size + 3)
    elif what == "op":
        channel.reduce("median")
    elif what == "scatter":
        channel.scatter(0, np.zeros((rank.size, 5)))


@pytest.mark.parametrize(
    "what, message",
    [
        ("self", "a rank does not send to itself"),
        ("range", "src must be a rank from 0 to 0"),
        ("op", "no reduction 'median'"),
        ("scatter", r"scatter's root needs a numpy array of shape \(1, 4\)"),
    ],
)
def test_misuse_is_a_clear_error(session, what, message):
    with pytest.raises(ChannelError, match=message):
        run_group(session, misuse, [(what,)], ranks=1)


def test_group_arguments_are_checked(session):
    with pytest.raises(ValueError, match="ranks must be a positive whole number"):
        run_group(session, patterns, ranks=0)
    with pytest.raises(ValueError, match="args has 1 entries for 2 ranks"):
        run_group(session, patterns, [((3,), "float64")], ranks=2)
    with pytest.raises(ValueError, match="no workers"):
        run_group(session, patterns, workers=["tcp://nowhere:1"])


def die_in_take(rank):
    channel = rank.channel("c", 1000, np.float64)
    if rank.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies with this rank
    channel.take(1)


@pytest.fixture(scope="module")
def two_nodes():
    with workbench.start(nodes=["nodeA", "nodeB"], timeout=60) as session:
        yield session


def test_the_socket_path_between_two_nodes(two_nodes):
    for size in (2, 3):
        results = run_group(two_nodes, patterns, [((6, 2), "float32")] * size, ranks=size).results
        _check(results, size, (6, 2), "float32")


@pytest.fixture(scope="module")
def one_node():
    with workbench.start(n_workers=2, timeout=60) as session:  # its own: a test kills one of its workers
        yield session


@pytest.mark.parametrize("path", ["shared memory", "socket"])
def test_a_rank_that_dies_mid_take_fails_the_group_and_leaves_nothing(one_node, two_nodes, path):
    session = one_node if path == "shared memory" else two_nodes
    session.client.wait_for_workers(2, timeout=60)
    variables = _group_variables(session)
    with pytest.raises(
        ChannelError, match=r"rank [01].*(died|closed its connection|left the cluster|it died or failed)"
    ):
        run_group(session, die_in_take, ranks=2, timeout=20)
    assert not [s for s in shm.list_segments() if s.name.startswith("ch-")]
    _assert_no_new_variables(session, variables)  # the dead rank could not say how many channels it made
    session.client.wait_for_workers(2, timeout=60)  # the nanny restarted the dead worker
    results = run_group(session, patterns, [((4,), "float64")] * 2, ranks=2).results  # the cluster still works
    _check(results, 2, (4,), "float64")


class _RankTask:
    """A stand-in for a rank's future: ``pending`` for ``reads`` reads of its status, then ``finished``;
    read more than ``most`` times, it fails the test (it was waited for)."""

    def __init__(self, reads: int, most: int = 20):
        self.reads, self.most, self.read = reads, most, 0

    @property
    def status(self) -> str:
        self.read += 1
        assert self.read <= self.most, "run_group waited for a rank whose worker left the cluster"
        return "pending" if self.read <= self.reads else "finished"


def test_a_failed_group_waits_for_its_ranks_to_end_but_not_for_a_rank_whose_worker_died():
    # A rank pinned to a worker that died stays pending for good: run_group's clean-up waited all of its
    # 10 s for it (every killed rank cost 10 s); a rank on a live worker is still waited for.
    from workbench.runtime.channels import group

    live, dead = _RankTask(reads=3), _RankTask(reads=10**9, most=1)
    cluster = types.SimpleNamespace(workers=lambda: ["tcp://live:1"])
    group._let_ranks_end(cluster, [live, dead], ["tcp://live:1", "tcp://dead:2"], 60.0)
    assert live.read > live.reads, "the rank on a live worker was not waited for"


@pytest.mark.parametrize("app", ["prk-reduce", "prk-transpose", "prk-stencil"])
def test_prk_through_channels_and_eager_verify(session, app):
    # The runner checks each answer with the PRK's own check and channels against eager.
    from workbench.lab.runner import run_experiment  # here: a worker that unpickles a rank function of
    # this module imports the module, and the runner's imports took it a second or two more

    experiment = run_experiment(session, app, ["channels", "eager"], size="ci", repeats=1, progress=False)
    assert set(experiment.results["variant"]) == {"channels", "eager"}
    frame = experiment.median_trace("channels")
    assert {"put", "take"} <= set(frame["action"])  # the message events are in the trace


# -- after an adversarial review ----------------------------------------------------------------
def big_exchange(rank, n):
    channel = rank.channel("halo", n, np.float64)
    channel.buffer[:] = rank.rank + 1
    got = channel.exchange((rank.rank + 1) % rank.size, (rank.rank - 1) % rank.size)
    return float(got[0]), float(got[-1])


def test_an_exchange_bigger_than_the_socket_buffers_does_not_deadlock(two_nodes):
    # Both ranks send 16 MiB at once: the send overlaps the receive (on the link's thread).
    results = run_group(two_nodes, big_exchange, [(2 * 2**20,)] * 2, ranks=2, timeout=60).results
    assert results == [(2.0, 2.0), (1.0, 1.0)]


def structured(rank):
    names = ("a", "b") if rank.rank == 0 else ("x", "y")  # the same bytes per item, other fields
    rank.channel("records", 4, np.dtype([(names[0], "<f4"), (names[1], "<f4")]))


def test_ranks_that_disagree_on_a_structured_dtype_fail(session):
    with pytest.raises(ChannelError, match="every rank must make the same channels"):
        run_group(session, structured, ranks=2)


def fail_or_wait(rank, message):
    channel = rank.channel("c", 8, np.float64)
    if rank.rank == 1:
        raise RuntimeError(message)
    channel.take(1)  # would wait for the rank that failed until its timeout


def _ranks_running(session) -> int:
    def count() -> int:
        import sys
        import traceback

        return sum(
            any(f.name == "rank_main" for f in traceback.extract_stack(frame))
            for frame in sys._current_frames().values()
        )

    return sum(session.run(count).values())


@pytest.mark.parametrize("path", ["shared memory", "socket", "eager"])
def test_a_failing_rank_is_the_reported_cause_and_stops_the_others(session, two_nodes, path):
    where = two_nodes if path == "socket" else session
    with pytest.raises(ChannelError, match=r"^rank 1 .*RuntimeError: THE REAL CAUSE") as caught:
        run_group(where, fail_or_wait, [("THE REAL CAUSE",)] * 2, ranks=2, eager=path == "eager", timeout=300)
    assert "ranks [0] failed too" in str(caught.value) or "failed too" not in str(caught.value)
    deadline = time.monotonic() + 60  # far below the ranks' 300 s timeout: the abort stopped rank 0
    while _ranks_running(where):
        assert time.monotonic() < deadline, "a rank of a failed group is still waiting"
        time.sleep(0.05)


def test_an_eager_group_leaves_no_queue_on_the_scheduler(session):
    run_group(session, patterns, [((3,), "float64")] * 2, ranks=2, eager=True)

    def queues(dask_scheduler=None):
        extension = dask_scheduler.extensions.get("queues")
        return [] if extension is None else [str(name) for name in extension.queues]

    assert not [q for q in session.client.run_on_scheduler(queues) if q.startswith("g")]


def mismatch(rank, case):
    channel = rank.channel("c", 4, np.float64)
    other = rank.channel("d", 4, np.float64)
    channel.buffer[:] = rank.rank + 1
    if case == "reduce-vs-gather":
        channel.reduce("sum", 0) if rank.rank == 0 else channel.gather(0)
    elif case == "roots-differ":
        channel.reduce("sum", root=rank.rank)
    elif case == "extra-allreduce":
        channel.allreduce()
        if rank.rank == 0:
            channel.allreduce()
    elif case == "put-vs-broadcast":
        channel.put(1) if rank.rank == 0 else channel.broadcast(0)
    elif case == "take-vs-reduce":
        channel.take(1) if rank.rank == 0 else channel.reduce()
    elif case == "allreduce-on-other-channels":
        channel.allreduce() if rank.rank == 0 else other.allreduce()
    elif case == "put-vs-exchange":
        channel.put(1) if rank.rank == 0 else channel.exchange(0, 0)


MISMATCHES = [
    "reduce-vs-gather",
    "roots-differ",
    "extra-allreduce",
    "put-vs-broadcast",
    "take-vs-reduce",
    "allreduce-on-other-channels",
    "put-vs-exchange",
]


@pytest.mark.parametrize(
    "case, eager",
    [(case, eager) for eager in (False, True) for case in MISMATCHES],
    ids=lambda value: {False: "shared-memory", True: "eager"}.get(value, value) if isinstance(value, bool) else value,
)
def test_ranks_in_different_operations_fail_clearly_before_the_timeout(session, case, eager):
    begin = time.monotonic()
    with pytest.raises(ChannelError, match="in the same order|returned from its rank function") as caught:
        run_group(session, mismatch, [(case,)] * 2, ranks=2, timeout=300, eager=eager)
    assert "within the timeout" not in str(caught.value)
    assert time.monotonic() - begin < 60, "found only long after the ranks stopped moving (the timeout is 300 s)"


@pytest.mark.parametrize(
    "case", ["reduce-vs-gather", "put-vs-broadcast", "take-vs-reduce", "allreduce-on-other-channels", "put-vs-exchange"]
)
def test_ranks_in_different_operations_fail_clearly_between_nodes(two_nodes, case):
    with pytest.raises(ChannelError, match="in the same order"):
        run_group(two_nodes, mismatch, [(case,)] * 2, ranks=2, timeout=300)


def make_channel(rank, shape, dtype):
    return rank.channel("c", shape, dtype).buffer.shape


@pytest.mark.parametrize(
    "shape, dtype, message",
    [
        ([[]], "f8", "whole number"),
        (-1, "f8", "none negative"),
        ((2, -3), "f8", "none negative"),
        (3.7, "f8", "whole number"),
        ((2**62,), "f8", "use a smaller buffer"),
        (4, "V0", "has no bytes"),
        (4, np.dtype(("f8", (2,))), "put its dimensions"),
        (4, "O", "fixed-size values"),
    ],
)
def test_bad_channel_shapes_and_dtypes_are_clear(session, shape, dtype, message):
    with pytest.raises(ChannelError, match=message):
        run_group(session, make_channel, [(shape, dtype)], ranks=1)
    assert not [s for s in shm.list_segments() if s.name.startswith("ch-")]


def reduce_with(rank, op, dtype):
    channel = rank.channel("c", 3, dtype)
    channel.buffer[:] = rank.rank + 2
    out = channel.reduce(op)
    return None if out is None else out.copy()


@pytest.mark.parametrize(
    "op, dtype, message",
    [(np.divmod, "f8", "one result"), (np.divide, "i8", "does not fit back"), (np.add, "M8[s]", "does not apply")],
)
def test_reductions_that_cannot_run_in_place_are_refused(session, op, dtype, message):
    with pytest.raises(ChannelError, match=message):
        run_group(session, reduce_with, [(op, dtype)] * 2, ranks=2)


def scatter_from_root(rank, data, dtype=np.float32):
    return rank.channel("c", 2, dtype).scatter(0, data if rank.rank == 0 else None).copy()


def test_scatter_takes_lists_and_arrays_whose_values_arrive_unchanged_and_refuses_lossy_ones(session):
    results = run_group(session, scatter_from_root, [([[1, 2], [3, 4]],)] * 2, ranks=2).results
    np.testing.assert_array_equal(results[1], np.array([3, 4], np.float32))
    big_endian = np.arange(4, dtype=">f4").reshape(2, 2)
    results = run_group(session, scatter_from_root, [(big_endian,)] * 2, ranks=2).results
    np.testing.assert_array_equal(results[1], [2.0, 3.0])
    results = run_group(session, scatter_from_root, [(np.ones((2, 2)),)] * 2, ranks=2).results  # 1.0 is exact
    np.testing.assert_array_equal(results[1], [1.0, 1.0])
    with pytest.raises(ChannelError, match=r"without loss.*0\.1 would arrive as 0\.10000000149"):
        run_group(session, scatter_from_root, [(np.full((2, 2), 0.1),)] * 2, ranks=2)


@pytest.mark.parametrize(
    "data",
    [
        [[1.5, 2.7], [3.2, 4.9]],  # a list truncated before: the same rule as an array now
        np.array([[1.5, 2.7], [3.2, 4.9]]),
        [[1, 2], [3, 70_000]],  # wraps in int16
        np.array([[2**53 + 1, 0], [0, 0]]),  # int64 beyond float64 (numpy's casting table calls it safe)
    ],
    ids=["list", "array", "overflow", "beyond-2**53"],
)
def test_scatter_refuses_lossy_lists_and_arrays_alike(session, data):
    dtype = np.float64 if isinstance(data, np.ndarray) and data.dtype.kind == "i" else np.int16
    with pytest.raises(ChannelError, match="without loss"):
        run_group(session, scatter_from_root, [(data, dtype)] * 2, ranks=2)


def test_scatter_of_whole_floats_into_an_integer_channel_arrives(session):
    results = run_group(session, scatter_from_root, [([[1.0, 2.0], [3.0, -4.0]], np.int16)] * 2, ranks=2).results
    np.testing.assert_array_equal(results[1], np.array([3, -4], np.int16))


def reduce_rank_order(rank, matrices, root):
    channel = rank.channel("m", matrices[0].shape, matrices[0].dtype)
    np.copyto(channel.buffer, matrices[rank.rank])
    out = channel.reduce(np.matmul, root=root)
    return None if out is None else out.copy()


@pytest.mark.parametrize("eager", [False, True], ids=["channels", "eager"])
def test_a_non_commutative_reduce_combines_in_rank_order_for_every_root(session, eager):
    rng = np.random.default_rng(5)
    for size in (3, 4):
        matrices = [rng.integers(-3, 4, (3, 3)) for _ in range(size)]
        expected = matrices[0]
        for m in matrices[1:]:
            expected = expected @ m
        for root in range(size):
            results = run_group(session, reduce_rank_order, [(matrices, root)] * size, ranks=size, eager=eager).results
            assert [r is not None for r in results] == [r == root for r in range(size)]
            np.testing.assert_array_equal(results[root], expected, err_msg=f"{size} ranks, root {root}")


def reduce_float32_sum(rank, values, root):
    channel = rank.channel("s", values.shape[1:], values.dtype)
    np.copyto(channel.buffer, values[rank.rank])
    out = channel.reduce("sum", root=root)
    return None if out is None else out.copy()


def test_a_float32_sum_has_the_same_bits_for_every_root_and_follows_the_documented_pairing(session):
    values = np.random.default_rng(7).standard_normal((3, 4096)).astype(np.float32) * 1e4
    pairing = (values[0] + values[1]) + values[2]  # ((b0 + b1) + b2) for 3 ranks, as reduce's docstring says
    for root in range(3):
        result = run_group(session, reduce_float32_sum, [(values, root)] * 3, ranks=3).results[root]
        assert result.tobytes() == pairing.tobytes(), f"root {root}"


def echo(rank, *args):
    return args


def unsendable(rank):
    return threading.Lock()


def test_more_group_arguments_are_checked(session):
    assert run_group(session, echo, ranks=np.int64(2)).results == [(), ()]
    with pytest.raises(ValueError, match="workers is empty"):
        run_group(session, echo, workers=[])
    with pytest.raises(TypeError, match="one tuple of arguments per rank"):
        run_group(session, echo, ["ab", "cd"], ranks=2)
    for timeout in (float("inf"), 1e12, float("nan"), 0):
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            run_group(session, echo, ranks=1, timeout=timeout)
    with pytest.raises(ChannelError, match="rank 0 .*cannot be sent back to the client"):
        run_group(session, unsendable, ranks=1)


def late_put(rank, seconds):
    """Rank 0 puts after ``seconds`` of other work; rank 1 waits in ``take`` and reports its CPU seconds."""
    channel = rank.channel("late", 8, np.uint8)
    rank.barrier()
    if rank.rank == 0:
        time.sleep(seconds)  # the slow peer's work
        channel.put(1)
        return None
    cpu, wall = time.thread_time(), time.perf_counter()
    channel.take(0)
    return time.thread_time() - cpu, time.perf_counter() - wall


def test_a_rank_waiting_for_a_slow_peer_sleeps_instead_of_using_its_core(session):
    cpu, wall = run_group(session, late_put, [(1.0,)] * 2, workers=session.workers()[:2]).results[1]
    assert wall >= 0.9
    assert cpu < 0.02 * wall, f"the waiting rank used {cpu:.3f} s of CPU in {wall:.3f} s"


def pingpong_asleep(rank, round_trips):
    """Every wait sleeps at once (no spin) and only a peer's wake-up ends it before the 30 s poll: a
    lost wake-up would show as a round trip of about 30 s."""
    from workbench.runtime.channels import transport

    channel = rank.channel("asleep", 8, np.uint8)
    channel._spin_budget = 0.0
    saved, transport.POLL_SECONDS = transport.POLL_SECONDS, 30.0
    try:
        rank.barrier()
        longest = 0.0
        for _ in range(round_trips):
            begin = time.perf_counter()
            if rank.rank == 0:
                channel.put(1)
                channel.take(1)
            else:
                channel.take(0)
                channel.put(0)
            longest = max(longest, time.perf_counter() - begin)
        return longest
    finally:
        transport.POLL_SECONDS = saved


def test_no_wake_up_is_lost_when_every_wait_sleeps(session):
    longest = run_group(session, pingpong_asleep, [(2000,)] * 2, workers=session.workers()[:2]).results
    assert max(longest) < 10.0, f"a round trip took {max(longest):.1f} s: a wake-up was lost"


# -- issue 25: a group ends whole --------------------------------------------------------------------
def _leftovers(dask_worker=None) -> dict[str, list[str]]:
    """What a worker still has of any group: rank threads, channel segments mapped or present."""
    import sys
    import traceback

    ranks = [
        str(ident)
        for ident, frame in sys._current_frames().items()
        if any(f.name == "rank_main" for f in traceback.extract_stack(frame))
    ]
    with open("/proc/self/maps") as maps:
        fields = (line.split(None, 5) for line in maps)
        mapped = sorted({f[5].strip() for f in fields if len(f) == 6 and f"/{shm.PREFIX}ch-" in f[5]})
    present = [s.name for s in shm.list_segments() if s.name.startswith("ch-")]
    return {"ranks": ranks, "mapped": mapped, "present": present}


def _group_leftovers(session, before: frozenset[str] = frozenset()) -> dict[str, dict[str, list[str]]]:
    """What the workers still have of any group, less the segments in ``before`` (present before the
    test began: another user's, or a killed run's, on a shared machine)."""
    found = {}
    for worker, left in session.run(_leftovers).items():
        left["present"] = [name for name in left["present"] if name not in before]
        if any(left.values()):
            found[worker] = left
    return found


@pytest.fixture(autouse=True)
def every_group_ends_whole(request):
    """After every test: no rank of a finished or failed group still runs, and no channel segment the
    test made is present or mapped in any worker of the clusters it used (bounded wait: a failed
    group's ranks stop at their next check)."""
    before = _channel_segments()
    yield
    for name in ("session", "one_node", "two_nodes"):
        if name not in request.fixturenames:
            continue
        cluster = request.getfixturevalue(name)
        cluster.client.wait_for_workers(2, timeout=60)  # a test may have killed a worker: its nanny restarts it
        deadline = time.monotonic() + 30
        while left := _group_leftovers(cluster, before):
            assert time.monotonic() < deadline, f"{name}: a group left {left}"
            time.sleep(0.05)


def big_channel(rank, nbytes):
    channel = rank.channel("big", nbytes, np.uint8)
    channel.buffer[:] = rank.rank + 1
    return int(channel.allreduce()[0])


def _channel_segments() -> frozenset[str]:
    return frozenset(s.name for s in shm.list_segments() if s.name.startswith("ch-"))


def test_a_finished_group_keeps_nothing_mapped_in_its_workers(session):
    before = _channel_segments()
    for _ in range(6):  # 6 groups x 2 ranks x 3 buffers of 32 MiB: 1.1 GiB if each stayed mapped
        results = run_group(session, big_channel, [(32 << 20,)] * 2, workers=session.workers()[:2]).results
        assert results == [3, 3]
        assert not _group_leftovers(session, before), "a finished group's mailboxes are still mapped (or present)"


def keeps_a_view_while_asking(rank):
    """A view of this rank's mailbox in this frame's locals while the rank asks Dask a question whose
    answer is "not yet" (Dask raises a TimeoutError inside: in a reference cycle, once)."""
    channel = rank.channel("v", 4096, np.float32)
    view = channel.buffer
    view[:] = 1
    assert not rank.has_finished(1 - rank.rank)  # the other rank cannot finish before the allreduce below
    channel.allreduce()
    return float(view[0])


def test_a_finished_group_keeps_nothing_mapped_where_the_garbage_collector_does_not_run(session):
    """Issue 35, item 11: a finished group's segment stayed mapped in a worker past the lifecycle
    fixture's bound. The holder: the TimeoutError of a Dask variable asked before it was set sat in
    a reference cycle (``distributed.utils.sync`` keeps it in a cell of the frame that raises it),
    whose traceback held the rank thread's frames, the rank function's with its views of the
    mailbox, until a full garbage collection. With the collector off on the workers, nothing but
    reference counting can let go of the mapping."""
    import gc

    before = _channel_segments()
    session.client.run(gc.disable)
    try:
        results = run_group(session, keeps_a_view_while_asking, ranks=2, workers=session.workers()[:2]).results
        assert results == [2.0, 2.0]
        deadline = time.monotonic() + 30
        while left := _group_leftovers(session, before):  # the group's clean-up ends on the workers
            assert time.monotonic() < deadline, f"a finished group is still mapped with no garbage collection: {left}"
            time.sleep(0.05)
    finally:
        session.client.run(gc.enable)


def test_a_channel_used_after_its_group_ended_says_so():
    from workbench.runtime.channels.channel import ArrayChannel, Collectives

    channel = ArrayChannel.__new__(ArrayChannel)
    Collectives.__init__(channel)
    channel.index, channel.name, channel.closed = 0, "c", True
    with pytest.raises(ChannelError, match="belongs to a group that has ended"):
        channel.put(1)


def returns_early(rank, call):
    if rank.rank == 1:
        return "returned"
    if call == "channel":
        rank.channel("c", 4, np.float64)
    else:
        rank.barrier()
    return "never"


@pytest.mark.parametrize("call", ["channel", "barrier"])
def test_a_rank_that_returns_before_the_others_make_a_channel_fails_them_at_once(session, call):
    begin = time.monotonic()
    with pytest.raises(ChannelError, match=r"rank 1 returned from its rank function while rank 0 waits for it"):
        run_group(session, returns_early, [(call,)] * 2, ranks=2, timeout=120)
    assert time.monotonic() - begin < 60, "rank 0 waited for the rank that had returned (the timeout is 120 s)"


def fails_before_a_channel(rank):
    rank.channel("first", 2, np.float64)
    if rank.rank == 1:
        raise RuntimeError("rank 1 fails before the second channel")
    rank.channel("second", 2, np.float64)  # rank 0 waits for rank 1's description of it


@pytest.mark.parametrize("eager", [False, True], ids=["shared-memory", "eager"])
def test_when_run_group_raises_no_rank_of_the_group_runs_and_nothing_of_it_is_left(session, eager):
    before = _channel_segments()
    with pytest.raises(ChannelError, match="rank 1 fails before the second channel"):
        run_group(session, fails_before_a_channel, ranks=2, timeout=300, eager=eager)
    assert not _group_leftovers(session, before), "a rank of the failed group still runs, or left a segment"


def string_sum(rank, dtype):
    channel = rank.channel("s", 2, dtype)
    channel.buffer[:] = ["ab", "x"] if rank.rank == 0 else ["cd", "yz"]
    return channel.allreduce("sum").copy()


@pytest.mark.parametrize("dtype", ["U3", "S2"])
def test_a_string_sum_that_would_truncate_is_refused(session, dtype):
    with pytest.raises(ChannelError, match="does not fit back into the .* buffer without loss"):
        run_group(session, string_sum, [(dtype,)] * 2, ranks=2)


@pytest.mark.parametrize("eager", [False, True], ids=["channels", "eager"])
def test_a_zero_dimensional_channel_carries_one_value_through_every_pattern(session, eager):
    for size in (1, 2, 3):
        results = run_group(session, patterns, [((), "float64")] * size, ranks=size, eager=eager).results
        _check(results, size, (), "float64")


def wait_forever(rank, marker_dir):
    channel = rank.channel("c", 4, np.float64)
    (marker_dir / f"r{rank.rank}").touch()  # the test closes the session once every rank waits
    channel.take(1 - rank.rank)  # both take: neither ever puts


def test_closing_the_session_while_a_group_runs_is_a_channel_error_and_leaves_nothing(tmp_path):
    session = workbench.start(n_workers=2, timeout=60)
    errors = []

    def run() -> None:
        try:
            run_group(session, wait_forever, [(tmp_path,)] * 2, ranks=2, timeout=300)
        except Exception as error:  # noqa: BLE001 - inspected below
            errors.append(error)

    runner = threading.Thread(target=run)
    try:
        runner.start()
        deadline = time.monotonic() + 60
        while not ((tmp_path / "r0").exists() and (tmp_path / "r1").exists()):
            assert time.monotonic() < deadline and runner.is_alive(), f"the ranks did not start: {errors}"
            time.sleep(0.05)
    finally:
        session.close()
    runner.join(timeout=120)
    assert not runner.is_alive(), "run_group did not return after the session closed"
    assert len(errors) == 1 and isinstance(errors[0], ChannelError), errors
    assert "the session was closed while the group ran" in str(errors[0])
    shm.clean()  # what a killed worker may have made after run_group's own clean-up: clean removes it
    assert not [s.name for s in shm.list_segments() if s.name.startswith("ch-")]


# -- issue 27: failures classified by their type, no write to Dask's private state ---------------------
KINDS = [ChannelError, ChannelMismatch, ChannelTimeout, RankGone, GroupAborted]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
def test_every_channel_error_kind_round_trips_through_pickle_with_its_message(kind):
    import cloudpickle

    error = kind("rank 0 took from rank 1 on channel 'c': rank 1 (pid 7) died")
    for dumps, loads in [(pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)]:
        back = loads(dumps(error))
        assert type(back) is kind and str(back) == str(error)
    led = error.within("making channel 0")
    assert type(led) is kind and str(led) == f"making channel 0: {error}"


def test_the_group_error_puts_a_rank_own_finding_before_the_consequences_whatever_their_words():
    workers = ["tcp://a:1", "tcp://b:2", "tcp://c:3"]
    # A mismatch whose text has a consequence's words ("died", "aborted") is still what the rank found.
    found = ChannelMismatch("channel 0: rank 2 made 'died' (3,), rank 0 made 'aborted' (4,)")
    error = group_error({0: GroupAborted("the group was aborted (another rank failed)"), 2: found}, workers)
    assert type(error) is ChannelMismatch and error.__cause__ is found
    assert str(error).startswith("rank 2 (on tcp://c:3) failed: ChannelMismatch: channel 0")
    assert "(ranks [0] failed too, after it)" in str(error)
    # A rank's own error comes first, and the group's error is then a plain ChannelError.
    error = group_error({0: RankGone("rank 1 (pid 7) died"), 1: ValueError("bad input")}, workers)
    assert type(error) is ChannelError and str(error).startswith("rank 1 (on tcp://b:2) failed: ValueError: bad input")
    # A timeout is what a rank found itself: before a consequence, even on a higher rank.
    gone = RankGone("rank 2 returned from its rank function")
    error = group_error({0: gone, 2: ChannelTimeout("no answer")}, workers)
    assert type(error) is ChannelTimeout and str(error).startswith("rank 2 ")
    # Among equals, the lowest rank.
    error = group_error({1: GroupAborted("aborted"), 2: RankGone("gone")}, workers)
    assert type(error) is GroupAborted and str(error).startswith("rank 1 ")


def computes_until_the_group_fails(rank, seconds):
    """Rank 1 stays in its own computation, never putting, until rank 0's timeout has failed the group
    (the abort reaches it; at most ``seconds``), then returns: rank 0's wait can only end at its timeout."""
    channel = rank.channel("c", 2, np.float64)
    if rank.rank == 1:
        deadline = time.monotonic() + seconds
        while rank.aborted_check() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll interval of a bounded wait on a state
        return None
    channel.take(1)


@pytest.mark.parametrize(
    "fn, args, timeout, kind, message",
    [
        (mismatched, (), 60, ChannelMismatch, "every rank must make the same channels"),
        (returns_early, ("channel",), 60, RankGone, "rank 1 returned from its rank function while rank 0 waits"),
        (computes_until_the_group_fails, (120.0,), 1, ChannelTimeout, "within"),  # in take, or (loaded) before
    ],
    ids=["mismatch", "rank-gone", "timeout"],
)
def test_a_rank_error_keeps_its_kind_across_dask(session, fn, args, timeout, kind, message):
    with pytest.raises(kind, match=message) as caught:
        run_group(session, fn, [args] * 2, ranks=2, timeout=timeout)
    assert isinstance(caught.value.__cause__, kind), "the rank's own error, sent back by Dask, lost its kind"


def _group_variables(session) -> set[str]:
    """The names of the Dask variables and events on the scheduler that look like a group's (``g<10 hex>-``)."""

    def names(dask_scheduler=None):
        variables = [f"variable {name}" for name in dask_scheduler.extensions["variables"].variables]
        return variables + [f"event {name}" for name in dask_scheduler.extensions["events"]._events]

    return {n for n in session.client.run_on_scheduler(names) if re.match(r"(variable|event) g[0-9a-f]{10}-", n)}


def _assert_no_new_variables(session, before: set[str]) -> None:
    deadline = time.monotonic() + 10  # Variable.delete is a message the scheduler handles soon after
    while left := _group_variables(session) - before:
        assert time.monotonic() < deadline, f"the group left variables on the scheduler: {sorted(left)}"
        time.sleep(0.05)


@pytest.mark.parametrize("case", ["finished", "eager", "failed", "mismatch", "barrier"])
def test_a_group_leaves_no_variable_on_the_scheduler(session, case):
    before = _group_variables(session)
    if case in ("finished", "eager"):
        run_group(session, patterns, [((3,), "float64")] * 2, ranks=2, eager=case == "eager")
    elif case == "barrier":
        run_group(session, late_put, [(0.0,)] * 2, ranks=2)  # two channels: the barrier's and its own
    else:
        with pytest.raises(ChannelError):
            run_group(session, fails_before_a_channel if case == "failed" else mismatched, ranks=2, timeout=60)
    _assert_no_new_variables(session, before)


def puts_to_a_rank_that_returned(rank):
    channel = rank.channel("c", 4, np.float64)
    if rank.rank == 0:
        return None  # its inbox closes with it
    deadline = time.monotonic() + 30
    while not rank.has_finished(0):  # a bounded wait on a state: rank 0 has returned
        assert time.monotonic() < deadline, "rank 0 did not return within 30 s"
        time.sleep(0.01)
    channel.put(0)


@pytest.mark.parametrize("eager", [False, True], ids=["shm", "eager"])
def test_a_put_to_a_rank_that_returned_fails_at_once(session, eager):
    """A put once rank 0 has returned must fail as RankGone at once: not be filed where nobody takes it
    (an eager rank's inbox closes before its finished mark is set), not fail as a bare
    FileNotFoundError (its mailbox is gone), and not wait for the timeout (an eager call made once the
    inbox actor is gone never answers: Dask logs the worker's KeyError)."""
    begin = time.monotonic()
    with pytest.raises(RankGone, match="rank 0 returned from its rank function"):
        run_group(session, puts_to_a_rank_that_returned, ranks=2, eager=eager, timeout=300)
    assert time.monotonic() - begin < 60, "found only long after rank 0 returned (the timeout is 300 s)"


@pytest.mark.parametrize("app", ["prk-stencil"])
def test_waiting_for_a_peer_logs_no_error_on_the_scheduler(session, app, caplog):
    # A rank polls for its peers' addresses while they start; a timed-out Variable.get was logged by
    # the scheduler as an ERROR with a traceback on every poll, though the answers were right.
    from workbench.lab.runner import run_experiment  # here, not at the top: see the test above

    with caplog.at_level(logging.ERROR, logger="distributed"):
        run_experiment(session, app, ["channels", "eager"], size="ci", repeats=1, progress=False)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
