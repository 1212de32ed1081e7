"""The Dask seam's contracts, one per use of a Dask internal, run against the installed dask/distributed,
and the check that no module but the seam touches one.

Each contract test fails with "dask seam: <use> changed: ..." when Dask changes what the use relies on.
One in-process cluster (two workers of one thread, a scheduler serving HTTP on a Unix socket) serves them all.
"""

from __future__ import annotations

import asyncio
import functools
import io
import re
import socket
import time
import tokenize
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster, Scheduler, SpecCluster, get_worker, wait
from distributed.deploy.spec import ProcessInterface
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from workbench.runtime import dask_seam
from workbench.runtime.dask_seam import USES

ROOT = Path(__file__).resolve().parents[1]
SEAM = ROOT / "workbench" / "runtime" / "dask_seam.py"
CONTRACTS: set[str] = set()
WAIT_S = 30.0  # the longest bounded wait on a cluster's state


def contract(use: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A contract test of ``use`` (a name in USES): any failure becomes "dask seam: <use> changed: ..."."""
    assert use in {u.name for u in dask_seam.USES}, use
    CONTRACTS.add(use)

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def checked(*args: Any, **kwargs: Any) -> None:
            try:
                test(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 (an assertion or an attribute Dask no longer has)
                pytest.fail(f"dask seam: {use} changed: {type(error).__name__}: {error}", pytrace=True)

        return checked

    return decorate


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) until ``condition()`` holds; AssertionError naming ``what`` past WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {WAIT_S} s"
        time.sleep(0.01)  # a poll of a bounded wait


class UnixHTTPScheduler(dask_seam.SocketHTTPScheduler):
    """The seam's socket scheduler on a socket path the test chooses."""

    path = ""

    def bind_http(self) -> tuple[socket.socket, str]:
        """A listening Unix socket at ``path``."""
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listening.bind(self.path)
        listening.listen(16)
        listening.setblocking(False)
        return listening, self.path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    UnixHTTPScheduler.path = str(tmp_path_factory.mktemp("seam") / "http.sock")
    cls = dask_seam.local_cluster_with_scheduler(UnixHTTPScheduler)
    with cls(n_workers=2, threads_per_worker=1, processes=False, memory_limit="1GiB", dashboard_address=":0") as made:
        with Client(made) as client:
            made.test_client = client
            yield made


def workers(cluster: Any) -> list[str]:
    return sorted(dask_seam.scheduler_identity(cluster.test_client, WAIT_S)["workers"])


def on_scheduler(cluster: Any, function: Callable[..., Any], *args: Any) -> Any:
    return cluster.test_client.run_on_scheduler(lambda dask_scheduler: function(dask_scheduler, *args))


def on_worker(cluster: Any, address: str, function: Callable[..., Any], *args: Any) -> Any:
    return cluster.test_client.run(lambda dask_worker: function(dask_worker, *args), workers=[address])[address]


# -- the contracts -------------------------------------------------------------------------------------------------
@contract("machine memory")
def test_machine_memory():
    import psutil

    assert 0 < dask_seam.machine_memory() <= psutil.virtual_memory().total


@contract("memory limits")
def test_memory_limits_change_in_place(cluster):
    a, b = workers(cluster)
    before = on_worker(cluster, a, dask_seam.worker_memory_limit)
    assert before == 2**30, before
    try:
        on_worker(cluster, a, dask_seam.set_worker_memory_limit, 2**29)
        assert on_worker(cluster, a, dask_seam.worker_memory_limit) == 2**29
        on_scheduler(cluster, dask_seam.set_scheduler_memory_limits, 2**29)
        info = dask_seam.scheduler_identity(cluster.test_client, WAIT_S)["workers"]
        assert {w["memory_limit"] for w in info.values()} == {2**29}, info
        assert on_scheduler(cluster, lambda s: s.total_memory) == 2 * 2**29
    finally:
        on_worker(cluster, a, dask_seam.set_worker_memory_limit, before)
        on_scheduler(cluster, dask_seam.set_scheduler_memory_limits, before)


class Counter(SchedulerPlugin):
    name = "seam-counter"

    def __init__(self) -> None:
        self.graphs: list[tuple[int, int]] = []

    def update_graph(self, scheduler: Any, *, tasks: Any = (), **kwargs: Any) -> None:
        self.graphs.append(dask_seam.new_tasks_and_dependencies(scheduler, tasks))


@contract("task records")
def test_new_tasks_and_their_dependencies(cluster):
    client = cluster.test_client
    client.register_plugin(Counter(), name=Counter.name)
    try:
        x, y = client.submit(np.ones, 3, pure=False), client.submit(np.zeros, 3, pure=False)
        wait([x, y])
        on_scheduler(cluster, lambda s: dask_seam.scheduler_plugin(s, Counter.name).graphs.clear())
        total = client.submit(np.add, x, y)  # one new task, two dependencies already in memory
        assert total.result(timeout=WAIT_S).tolist() == [1.0, 1.0, 1.0]
        graphs = on_scheduler(cluster, lambda s: list(dask_seam.scheduler_plugin(s, Counter.name).graphs))
        assert graphs == [(1, 2)], graphs
    finally:
        client.unregister_scheduler_plugin(Counter.name)


class SpecWatch(SchedulerPlugin):
    name = "seam-spec-watch"

    def __init__(self) -> None:
        self.values: list[tuple[Any, list[Any]]] = []
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def update_graph(self, scheduler: Any, *, tasks: Any = (), **kwargs: Any) -> None:
        self.values += dask_seam.new_task_values(scheduler, tasks)


def _lookup(i: int, table: np.ndarray, scale: float = 1.0) -> float:
    return float(table[i]) * scale


def _lookup_second(items: list[np.ndarray], i: int, scale: float = 1.0) -> float:
    return float(items[1][i]) * scale


@contract("task specs")
def test_new_task_values(cluster):
    client = cluster.test_client
    client.register_plugin(SpecWatch(), name=SpecWatch.name)
    table = np.arange(2**16, dtype=np.float64)
    try:
        x = client.submit(np.ones, 3, pure=False)
        wait([x])
        plain = [client.submit(_lookup, i, table, pure=False) for i in range(3)]  # each task carries the table
        partial = client.submit(functools.partial(_lookup, table=table), 2, pure=False)
        nested = client.submit(_lookup_second, [x, table], 1, scale=2.0, pure=False)  # a future beside it
        referring = client.submit(np.add, x, x, pure=False)  # refers to x: carries no array of its own
        assert client.gather([*plain, partial, nested, referring])[:4] == [0.0, 1.0, 2.0, 2.0]
        seen = on_scheduler(cluster, lambda s: list(dask_seam.scheduler_plugin(s, SpecWatch.name).values))
    finally:
        client.unregister_scheduler_plugin(SpecWatch.name)
    by_key = dict(seen)
    for future in (*plain, partial, nested):
        arrays = [v for v in by_key[future.key] if isinstance(v, np.ndarray)]
        assert len(arrays) == 1 and arrays[0].nbytes == table.nbytes and arrays[0][5] == 5.0, (future.key, arrays)
    assert any(isinstance(v, float) and v == 2.0 for v in by_key[nested.key]), by_key[nested.key]
    assert not [v for v in by_key[referring.key] if isinstance(v, np.ndarray)], by_key[referring.key]
    assert [key for key, _ in seen].count(x.key) == 1  # new in its own graph, not in those that refer to it


@contract("task records")
def test_dependency_bytes(cluster):
    client = cluster.test_client
    x, y = client.submit(np.ones, 2**10, pure=False), client.submit(np.zeros, 2**11, pure=False)
    total = client.submit(np.concatenate, [x, y], pure=False)
    wait([total])
    assert on_scheduler(cluster, dask_seam.dependency_bytes, total.key) == (2**10 + 2**11) * 8
    assert on_scheduler(cluster, dask_seam.dependency_bytes, x.key) == 0
    assert on_scheduler(cluster, dask_seam.dependency_bytes, "no-such-key") == 0


@contract("replica removal")
def test_drop_replicas_never_a_last_copy(cluster):
    client = cluster.test_client
    a, b = workers(cluster)
    [block] = client.scatter([np.arange(10)], workers=[a], hash=False)
    client.replicate([block], workers=[a, b])
    until(lambda: set(client.who_has([block])[block.key]) == {a, b}, "replicating a block")
    on_scheduler(cluster, dask_seam.drop_replicas, {a: [block.key]}, f"seam-{uuid.uuid4().hex}")
    until(lambda: set(client.who_has([block])[block.key]) == {b}, "dropping a's copy")
    on_scheduler(cluster, dask_seam.drop_replicas, {b: [block.key]}, f"seam-{uuid.uuid4().hex}")
    assert set(client.who_has([block])[block.key]) == {b}  # the last copy stays
    assert block.result(timeout=WAIT_S).tolist() == list(range(10))


@contract("scheduler workers")
def test_worker_addresses(cluster):
    assert sorted(on_scheduler(cluster, dask_seam.worker_addresses)) == workers(cluster)


@contract("scheduler clients")
def test_knows_client(cluster):
    assert dask_seam.knows_client(cluster.scheduler, cluster.test_client.id)
    assert not dask_seam.knows_client(cluster.scheduler, f"nobody-{uuid.uuid4().hex}")


@contract("batched-stream counters")
def test_message_and_byte_counters(cluster):
    client = cluster.test_client
    a, b = workers(cluster)

    def counts() -> tuple[int, int]:
        sent = on_scheduler(cluster, dask_seam.scheduler_messages_sent)
        return sent, on_worker(cluster, a, dask_seam.worker_messages_sent)

    before = counts()
    sent_bytes = on_scheduler(cluster, dask_seam.scheduler_bytes_sent)
    assert client.submit(sum, list(range(100)), workers=[a], pure=False).result(timeout=WAIT_S) == 4950
    after = counts()
    assert after[0] > before[0] and after[1] > before[1], (before, after)
    assert on_scheduler(cluster, dask_seam.scheduler_bytes_sent) > sent_bytes


@contract("transfer log")
def test_incoming_transfers(cluster):
    client = cluster.test_client
    a, b = workers(cluster)
    since = time.time() - 1
    [block] = client.scatter([np.ones(2**17)], workers=[a], hash=False)
    assert client.submit(np.sum, block, workers=[b], pure=False).result(timeout=WAIT_S) == 2**17
    transfers = on_worker(cluster, b, dask_seam.incoming_transfers, since)
    assert any(t["who"] == a and t["total"] >= 2**20 and t["stop"] >= t["start"] >= since for t in transfers), transfers
    assert any(t["keys"].get(block.key, 0) >= 2**20 for t in transfers), transfers


@contract("outgoing transfer log")
def test_outgoing_transfers(cluster):
    client = cluster.test_client
    a, b = workers(cluster)
    since = time.time() - 1
    [block] = client.scatter([np.ones(2**17)], workers=[a], hash=False)
    assert client.submit(np.sum, block, workers=[b], pure=False).result(timeout=WAIT_S) == 2**17
    assert client.gather(block).sum() == 2**17  # to the client, from a or from b's copy
    sent = on_worker(cluster, a, dask_seam.outgoing_transfers, since)
    assert any(t["who"] == b and t["keys"].get(block.key, 0) >= 2**20 for t in sent), sent  # to the peer
    sent += on_worker(cluster, b, dask_seam.outgoing_transfers, since)
    assert any(t["who"] not in (a, b) and t["total"] >= 2**20 and t["stop"] >= t["start"] >= since for t in sent), sent


def _random(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(2**18)


@contract("spill counters")
def test_spill_counters():
    import dask

    memory = {"target": 0.5, "spill": False, "pause": False, "terminate": False}
    with dask.config.set({f"distributed.worker.memory.{k}": v for k, v in memory.items()}):
        with LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, memory_limit="8MiB", dashboard_address=None
        ) as made:
            with Client(made) as client:
                counters = lambda dask_worker: dask_seam.spill_counters(dask_worker)  # noqa: E731
                before = client.run(counters)
                # 8 MiB of random values (they do not compress) on a worker that holds 4
                blocks = client.map(_random, range(4), pure=False)
                wait(blocks)
                assert len(client.gather(client.map(len, blocks))) == 4  # every block read, some from disk
                [after] = client.run(counters).values()
    [before] = before.values()
    assert after["disk-write-bytes"] >= 2**21 and after["disk-write-count"] >= 1, after
    assert after["disk-read-count"] >= 1 and after["disk-write-seconds"] > 0, after
    assert before["disk-write-bytes"] == 0 and set(before) == set(after), before


@contract("restrictions and transitions")
def test_release_unrunnable(cluster):
    client = cluster.test_client
    nowhere = "tcp://127.0.0.1:9"  # no worker lives there: the task waits for ever
    future = client.submit(abs, -3, workers=[nowhere], allow_other_workers=False, pure=False)
    until(lambda: on_scheduler(cluster, lambda s: future.key in {ts.key for ts in s.unrunnable}), "no-worker")

    def stuck(key: str, allowed: set[str], live: set[str]) -> bool:
        return key == future.key and allowed == {nowhere} and not (allowed & live)

    assert on_scheduler(cluster, dask_seam.release_unrunnable, stuck) == [future.key]
    assert future.result(timeout=WAIT_S) == 3


def echo(**kwargs: Any) -> dict[str, Any]:
    return {"echo": kwargs}


@contract("scheduler handlers and plugins")
def test_scheduler_handlers_and_plugins(cluster):
    client = cluster.test_client
    name, handler = f"seam-plugin-{uuid.uuid4().hex[:6]}", f"seam_echo_{uuid.uuid4().hex[:6]}"
    client.register_plugin(Counter(), name=name)
    on_scheduler(cluster, dask_seam.add_scheduler_handler, handler, echo)
    assert on_scheduler(cluster, lambda s: type(dask_seam.scheduler_plugin(s, name)).__name__) == "Counter"
    scheduler_rpc, _, run = dask_seam.client_link(client)
    assert run(lambda: getattr(scheduler_rpc(), handler)(x=1)) == {"echo": {"x": 1}}
    removed = on_scheduler(cluster, lambda s: type(dask_seam.remove_scheduler_plugin(s, name, handler)).__name__)
    assert removed == "Counter"
    assert on_scheduler(cluster, dask_seam.scheduler_plugin, name) is None
    assert on_scheduler(cluster, lambda s: handler in s.handlers) is False
    worker_plugin = f"seam-worker-plugin-{uuid.uuid4().hex[:6]}"
    assert not on_scheduler(cluster, dask_seam.has_worker_plugin, worker_plugin)
    client.register_plugin(WorkerPlugin(), name=worker_plugin)
    try:
        assert on_scheduler(cluster, dask_seam.has_worker_plugin, worker_plugin)
    finally:
        client.unregister_worker_plugin(worker_plugin)


@contract("worker handlers, plugins and state")
def test_worker_handlers_plugins_and_state(cluster):
    client = cluster.test_client
    a, b = workers(cluster)
    name, handler = f"seam-worker-plugin-{uuid.uuid4().hex[:6]}", f"seam_echo_{uuid.uuid4().hex[:6]}"
    client.register_plugin(WorkerPlugin(), name=name)
    try:
        assert on_worker(cluster, a, lambda w: type(dask_seam.worker_plugin(w, name)).__name__) == "WorkerPlugin"
        assert on_worker(cluster, a, dask_seam.worker_plugin, "no-such-plugin") is None
    finally:
        client.unregister_worker_plugin(name)
    assert on_worker(cluster, a, dask_seam.worker_threads) == 1
    on_worker(cluster, a, dask_seam.add_worker_handler, handler, echo)
    _, rpc, run = dask_seam.client_link(client)
    assert run(lambda: getattr(rpc(a), handler)(y=2)) == {"echo": {"y": 2}}
    on_worker(cluster, a, dask_seam.remove_worker_handler, handler)
    assert on_worker(cluster, a, lambda w: handler in w.handlers) is False


async def reply_itself(comm: Any, serializers: Any = None) -> Any:
    await comm.write({"array": dask_seam.serialized(np.arange(4.0))}, serializers=serializers)
    return dask_seam.DONT_REPLY


@contract("handler replies")
def test_a_handler_that_writes_its_own_reply(cluster):
    client = cluster.test_client
    a, _ = workers(cluster)
    handler = f"seam_reply_{uuid.uuid4().hex[:6]}"
    on_worker(cluster, a, dask_seam.add_worker_handler, handler, reply_itself)
    try:
        _, rpc, run = dask_seam.client_link(client)
        reply = run(lambda: getattr(rpc(a), handler)())
        assert isinstance(reply["array"], np.ndarray) and reply["array"].tolist() == [0.0, 1.0, 2.0, 3.0], reply
    finally:
        on_worker(cluster, a, dask_seam.remove_worker_handler, handler)


def _identity_from_a_task() -> int:
    scheduler_rpc, _, run = dask_seam.worker_link(get_worker())
    return len(run(lambda: scheduler_rpc().identity(n_workers=-1))["workers"])


@contract("sync and rpc")
def test_sync_and_rpc(cluster):
    client = cluster.test_client
    assert len(dask_seam.scheduler_identity(client, WAIT_S)["workers"]) == 2
    assert client.submit(_identity_from_a_task, pure=False).result(timeout=WAIT_S) == 2

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert dask_seam.run_on_cluster_loop(cluster, answer, timeout=WAIT_S) == 42
    for address in workers(cluster):  # the rpc pool's connection arguments take the workers' own addresses
        assert dask_seam.address_problem(client.rpc.connection_args, address) is None


@contract("worker data")
def test_worker_value(cluster):
    client = cluster.test_client
    a, _ = workers(cluster)
    value = np.arange(5)
    [block] = client.scatter([value], workers=[a], hash=False)
    assert on_worker(cluster, a, lambda w: dask_seam.worker_value(w, block.key).tolist()) == value.tolist()


@contract("worker specs")
def test_new_workers_take_the_option_and_a_forgotten_worker_stays_gone(cluster):
    client = cluster.test_client
    names = dask_seam.worker_names(cluster)
    assert len(names) == 2, names
    old = cluster.new_spec["options"].get("memory_limit")
    dask_seam.set_new_worker_option(cluster, "memory_limit", 2**28)
    try:
        cluster.scale(3)
        client.wait_for_workers(3, timeout=WAIT_S)
        info = dask_seam.scheduler_identity(client, WAIT_S)["workers"]
        added = dask_seam.worker_names(cluster)[-1]
        assert added not in names and {w["name"]: w["memory_limit"] for w in info.values()}[added] == 2**28, info
        leaving = cluster.workers[added]
        dask_seam.run_on_cluster_loop(cluster, lambda: leaving.close(), timeout=WAIT_S)
        dask_seam.forget_worker(cluster, added)
        cluster.scale(2)
        until(lambda: len(workers(cluster)) == 2, "scaling back to two workers")
        assert dask_seam.worker_names(cluster) == names
    finally:
        dask_seam.set_new_worker_option(cluster, "memory_limit", old)


@contract("http server")
def test_http_on_a_unix_socket(cluster):
    assert isinstance(cluster.scheduler, UnixHTTPScheduler), type(cluster.scheduler).__mro__
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(WAIT_S)
        s.connect(UnixHTTPScheduler.path)
        s.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok"), answer[:200]


class RefusedJob(ProcessInterface):
    """A worker "job" whose submission fails, as an sbatch that Slurm refuses."""

    def __init__(self, scheduler: str, **kwargs: Any) -> None:
        super().__init__()

    async def start(self) -> None:
        raise RuntimeError("sbatch: error: refused")


@contract("scale errors")
def test_scale_errors_are_kept():
    cls = dask_seam.keeping_scale_errors(SpecCluster)
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0", "protocol": "inproc://"}}
    with cls(workers={}, scheduler=scheduler, worker={"cls": RefusedJob, "options": {}}) as made:
        made.scale(1)
        until(lambda: made.submit_error is not None, "the refused submission's error")
        assert "refused" in str(made.submit_error)
        until(lambda: len(made.workers) == 1, "the refused job listed")
        assert [job.status.name for job in made.workers.values()] == ["failed"]


@contract("spill buffer")
def test_spill_buffer(tmp_path):
    for compression in (False, True):
        buffer = dask_seam.spill_buffer(str(tmp_path / str(compression)), target=2**12, compression=compression)
        buffer["a"] = np.ones(2**12)  # above the target: spilled to disk
        buffer["b"] = np.zeros(4)
        assert "a" in buffer.slow and "b" in buffer.fast, (list(buffer.fast), list(buffer.slow))
        assert buffer["a"].sum() == 2**12


@contract("array meta")
def test_array_meta():
    import dask.array as da

    meta = dask_seam.array_meta(da.ones((4, 2), chunks=2, dtype=np.float32))
    assert isinstance(meta, np.ndarray) and meta.dtype == np.float32 and meta.size == 0


@contract("frames")
def test_ensure_memoryview_is_replaced_where_dask_uses_it():
    import sys

    import distributed.utils

    original = distributed.utils.ensure_memoryview
    calls = []

    def counting(obj: Any) -> memoryview:
        calls.append(1)
        return original(obj)

    try:
        dask_seam.replace_ensure_memoryview(counting)
        for name in dask_seam.ENSURE_MEMORYVIEW_USERS:
            assert sys.modules[name].ensure_memoryview is counting, name
        from distributed.protocol import dumps, loads
        from distributed.protocol.serialize import ToPickle

        frames = dumps({"x": ToPickle(np.arange(8.0).reshape(2, 4))})  # the array's buffer out of band
        assert calls, "Dask pickled an array's buffer without ensure_memoryview"
        assert loads(frames)["x"].tolist() == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    finally:
        dask_seam.replace_ensure_memoryview(original)


# -- the seam stays the one place ------------------------------------------------------------------------------------
def test_every_use_has_a_contract_test():
    assert CONTRACTS == {u.name for u in dask_seam.USES}


def code_lines(source: str) -> list[str]:
    """``source``'s lines with its strings and comments blanked out (code only)."""
    lines = [list(line) for line in source.splitlines()]
    skip = {tokenize.STRING, tokenize.COMMENT}
    skip |= {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skip:
            (row, col), (end_row, end_col) = token.start, token.end
            for r in range(row, end_row + 1):
                line = lines[r - 1]
                start, stop = (col if r == row else 0), (end_col if r == end_row else len(line))
                line[start:stop] = " " * (stop - start)
    return ["".join(line) for line in lines]


def uses_outside_the_seam(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "workbench").rglob("*.py")):
        if path.resolve() == SEAM.resolve():
            continue
        source = path.read_text()
        if not any(re.search(u.pattern, source) for u in USES):  # in neither its code nor its text
            continue
        for number, line in enumerate(code_lines(source), 1):
            found += [f"{path.relative_to(root)}:{number}: {u.name}" for u in USES if re.search(u.pattern, line)]
    return found


def test_no_module_but_the_seam_touches_a_dask_internal():
    found = uses_outside_the_seam(ROOT)
    assert not found, "use workbench.runtime.dask_seam instead:\n" + "\n".join(found)


def test_the_source_check_finds_a_use_in_code_only(tmp_path):
    package = tmp_path / "workbench"
    package.mkdir()
    (package / "m.py").write_text(
        '"""scheduler.tasks in a docstring."""\n'
        "x = 1  # dask_worker.data in a comment\n"
        "def f(dask_scheduler):\n    return dask_scheduler.tasks\n"
    )
    assert uses_outside_the_seam(tmp_path) == ["workbench/m.py:4: task records"]


def test_the_seam_imports_nothing_of_the_workbench():
    from import_helpers import module_imports

    assert not {n for n in module_imports(SEAM) if n.startswith("workbench")}
