"""SplIter with balance: the policy on plain inputs (chunks, the forecast, the steal choice, the learned
placement), then on a cluster: the same answers as ``split`` under every skew, steals (and their bytes)
in the trace, replicas read locally, a lost worker fails the run clearly and leaves nothing behind, the
slowed-worker context undoes itself, and the benchmark reports its goals."""

from __future__ import annotations

import ast
import gc
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import workbench
from workbench import datasets
from workbench.apps import skewed
from workbench.bench import balance
from workbench.bench.goals import goal
from workbench.bench.report import Report
from workbench.lab import imbalance
from workbench.lab.runner import run_experiment
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks, place_contiguous
from workbench.runtime.strategies import BlockWork, balance_policy
from workbench.runtime.strategies.balance import CHUNK_EVENTS, CHUNK_TOPIC, ChunkEvents, WorkerLost
from workbench.runtime.strategies.balance_policy import (
    Chunk,
    Forecast,
    Steal,
    Threads,
    choose_steal,
    cut,
    guided_cut,
    learned_queues,
    moved_bytes,
    replica_tails,
)
from workbench.runtime.trace import Recorder

BALANCED = ["split", "split-balanced", "split-balanced-replicas"]


@pytest.fixture(scope="module")
def session():
    """A cluster of this module's own: its runs cancel chunks mid-run, slow a worker and replicate
    blocks, and none of that may reach the tests that share the suite's cluster."""
    with workbench.start(n_workers=2, timeout=60) as s:
        yield s


@pytest.mark.parametrize("skew", [1, 4, 64])
def test_balanced_variants_give_splits_answer_under_every_skew(session, skew):
    experiment = run_experiment(
        session,
        "skewed-kmeans",
        [*BALANCED, "blocks", "rechunk"],
        size="ci",
        grid={"skew": [skew], "blocks_per_worker": [4], "repetitions": [2]},
        repeats=1,
        progress=False,
    )  # run_experiment raises if any variant's centres differ from split's
    assert set(experiment.results["variant"]) == {*BALANCED, "blocks", "rechunk"}


def test_block_costs_are_a_heavy_head_and_bad_skews_are_refused():
    costs = datasets.block_costs(16, 16)
    assert costs[0] == 16 and costs[-1] == 1 and (np.diff(costs) <= 0).all()
    assert (datasets.block_costs(5, 1) == 1).all()
    for bad in (0.5, float("nan"), True, "16", 1e9):
        with pytest.raises(ValueError, match="skew must be"):
            datasets.block_costs(4, bad)
    with pytest.raises(ValueError, match="n_blocks"):
        datasets.block_costs(0, 2)


def test_contiguous_placement_gives_each_worker_a_run_of_blocks(session):
    ds = datasets.get("kmeans", "ci")
    placed = PlacedBlocks(session, place_contiguous(session, ds.to_dask("points", 4096)))
    try:
        holders = placed.holders()
        runs = [h for i, h in enumerate(holders) if i == 0 or holders[i - 1] != h]
        assert len(runs) == len(session.workers())  # one contiguous run per worker
        np.testing.assert_array_equal(session.gather(placed.block_futures[3]), ds.load("points")[3 * 4096 : 4 * 4096])
    finally:
        placed.release()


def test_skew_makes_idle_workers_steal_and_replicas_make_steals_local(session):
    data = skewed.prepare(session, datasets.get("kmeans", "ci"), {"skew": 64, "blocks_per_worker": 8, "repetitions": 4})
    try:
        stolen = {}
        for name in ("split-balanced", "split-balanced-replicas"):
            recorder = Recorder()
            with strategies.get(name).open(session, data.blocks, recorder) as plan:
                skewed.solve(plan, data)
                made = list(plan.steals)
            events = [r for r in recorder.records if r["action"] == "steal"]
            assert events and len(events) == len(made), name  # every steal decision is in the trace
            stolen[name] = sum(s["bytes"] for s in made) / len(made)
            if name == "split-balanced":
                assert stolen[name] > 0  # the stolen chunks' blocks moved
                assert all(s["thief"] != s["victim"] for s in made)
            else:
                assert [r for r in recorder.records if r["action"] == "replicate" and r["bytes"] > 0]
        assert stolen["split-balanced-replicas"] < stolen["split-balanced"]  # steals read replicas instead
        # replicas dropped when the plan closed: one holder per block again (bounded wait)
        deadline = time.monotonic() + 30
        while max(len(h) for h in session.client.who_has(data.blocks.block_futures).values()) > 1:
            assert time.monotonic() < deadline, "replicas left after the plan closed"
            time.sleep(0.1)
    finally:
        data.release()


def test_the_policy_imports_nothing_but_the_standard_library():
    tree = ast.parse(Path(balance_policy.__file__).read_text())
    imported = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and {name.split(".")[0] for name in imported} <= sys.stdlib_module_names  # no Dask, no runtime


def test_chunks_cover_each_partition_once():
    indexes = list(range(10, 17))
    chunks = cut("w", indexes, [100] * 20, chunks=3)
    assert [i for c in chunks for i in c.indexes] == indexes
    assert [c.nbytes for c in chunks] == [100 * len(c.indexes) for c in chunks]
    assert len(cut("w", indexes, [1] * 20, chunks=50)) == 7  # never more chunks than blocks
    assert [len(c.indexes) for c in guided_cut("w", range(8), [1] * 8)] == [
        2,
        2,
        1,
        1,
        1,
        1,
    ]  # the back in single blocks
    assert [i for c in guided_cut("w", indexes, [1] * 20) for i in c.indexes] == indexes
    assert all(c.home == "w" for c in guided_cut("w", indexes, [1] * 20))
    assert len(guided_cut("w", range(200), [1] * 200)) <= 16  # the task count still follows the workers
    assert guided_cut("w", [], []) == [] and cut("w", [], []) == []


def test_replicas_copy_the_back_half_of_each_partition_to_the_next_worker():
    homes = {"a": list(range(0, 8)), "b": list(range(8, 12)), "c": [12]}
    assert replica_tails(homes, [1] * 13) == {"b": [4, 5, 6, 7], "c": [10, 11], "a": [12]}
    chunk = Chunk([4, 5], 30, "a")
    assert moved_bytes(chunk, "b", [10] * 4 + [10, 20], {4: {"a", "b"}, 5: {"a"}}) == 20  # block 4 read locally
    assert moved_bytes(chunk, "a", [10] * 6, {4: {"a"}, 5: {"a"}}) == 0


def test_the_first_ones_of_a_queue_are_running_one_per_thread():
    queue = [Chunk([k], 1) for k in range(4)]
    one, four = Threads({"a": 1}), Threads({"w": 4, "zero": 0})
    assert one.running("a", queue) == queue[:1] and one.waiting("a", queue) == queue[1:]
    assert four.of("w") == 4 and four.waiting("w", queue) == [] and four.running("w", queue) == queue
    assert four.of("zero") == 1 and four.of("unknown") == 1  # never fewer than one


def _slow_block(block, delay):
    time.sleep(delay)
    return np.asarray([len(block)])


def _queues(*spec: tuple[str, int, int]) -> tuple[dict[str, list[Chunk]], dict[str, list[Chunk]]]:
    """(waiting, running) for workers given as (name, chunks in its queue, bytes per chunk), one thread
    each: blocks numbered 10 x the worker's position + the chunk's."""
    queues = {w: [Chunk([10 * n + k], nbytes, w) for k in range(count)] for n, (w, count, nbytes) in enumerate(spec)}
    return {w: q[1:] for w, q in queues.items()}, {w: q[:1] for w, q in queues.items()}


def test_before_costs_are_measured_a_thief_takes_the_next_chunk_of_the_most_bytes_waiting():
    waiting, running = _queues(("a", 4, 100), ("b", 1, 100), ("c", 3, 200))
    nothing = Forecast(sizes=[100] * 40)
    steal = choose_steal("b", waiting, running, nothing, "w", now=0.0)
    assert steal == Steal("c", waiting["c"][0])  # c: 400 bytes in 2 chunks, a: 300 in 3; the one c runs next
    assert steal.chunk is waiting["c"][0]
    waiting["c"] = waiting["c"][:1]  # c: one waiting; a: three
    assert choose_steal("b", waiting, running, nothing, "w", 0.0) == Steal("a", waiting["a"][0])
    replicas = {3: {"a", "b"}}  # b holds a copy of a's last chunk: that one first
    assert choose_steal("b", waiting, running, nothing, "w", 0.0, replicas) == Steal("a", waiting["a"][2])
    assert choose_steal("a", waiting, running, nothing, "w", 0.0) is None  # a's own chunks are not a victim's
    waiting["a"] = waiting["a"][:1]  # one waiting everywhere, nothing measured: no forecast, no steal
    assert choose_steal("b", waiting, running, nothing, "w", 0.0) is None
    assert [len(chunks) for chunks in waiting.values()] == [1, 0, 1]  # nothing was moved: the caller moves it


def test_a_victims_last_chunk_goes_only_when_the_thief_is_forecast_to_finish_it_sooner():
    waiting, running = _queues(("slow", 2, 100), ("fast", 1, 100))
    forecast = Forecast(sizes=[100] * 20)
    forecast.learn("w", running["slow"][0], "slow", cpu=0.1, wall=0.3)  # its core shared: 3x the CPU seconds
    forecast.learn("w", running["fast"][0], "fast", cpu=0.1, wall=0.1)
    forecast.started[id(running["slow"][0])] = 10.0
    running["fast"] = []  # the thief is idle
    assert choose_steal("fast", waiting, running, forecast, "w", now=10.0) == Steal("slow", waiting["slow"][0])
    assert choose_steal("fast", waiting, running, forecast, "other work", now=10.0) is None  # not measured

    even = Forecast(sizes=[100] * 20)
    waiting, running = _queues(("x", 2, 100), ("y", 1, 100))
    for chunk in (*running["x"], *waiting["x"], *running["y"]):
        even.learn("w", chunk, chunk.home, cpu=0.1, wall=0.1)
    even.started[id(running["x"][0])] = even.started[id(running["y"][0])] = 10.0
    assert choose_steal("y", waiting, running, even, "w", now=10.0) is None  # in step: taking it moves the wait
    even.started[id(running["x"][0])] = 10.05  # x lags by half a chunk and more: its last one goes
    steal = choose_steal("y", waiting, running, even, "w", now=10.06)
    assert steal == Steal("x", waiting["x"][0])
    back = {"x": [], "y": [steal.chunk]}  # stolen: waiting behind y's running chunk
    assert choose_steal("x", back, running, even, "w", now=10.06) is None  # and it never goes back


def test_a_chunk_a_thief_took_is_never_taken_again():
    waiting, running = _queues(("a", 4, 100), ("b", 1, 100), ("c", 1, 100))
    nothing = Forecast(sizes=[100] * 40)
    steal = choose_steal("b", waiting, running, nothing, "w", now=0.0)
    assert steal == Steal("a", waiting["a"][0])
    waiting["a"].remove(steal.chunk)  # the caller moves it and marks it stolen
    steal.chunk.stolen = True
    waiting["b"] = [steal.chunk]
    waiting["c"] = []
    # c is idle: a still has two chunks of its own to lose, b's stolen one stays with b
    assert choose_steal("c", waiting, running, nothing, "w", 0.0) == Steal("a", waiting["a"][0])
    waiting["a"] = []
    assert choose_steal("c", waiting, running, nothing, "w", 0.0) is None  # first map: b's is no one's to take
    measured = Forecast(sizes=[100] * 40)
    for chunk in [*running["a"], *running["b"], steal.chunk]:
        measured.learn("w", chunk, chunk.home, cpu=0.1, wall=0.1)
    measured.slowdown["b"] = 10.0  # b forecast to finish its stolen chunk long after c would
    running["c"] = []
    for chunk in running["b"]:
        measured.started[id(chunk)] = 0.0
    assert choose_steal("c", waiting, running, measured, "w", 0.0, learned=True) is None  # even forecast to win
    own = Chunk([30], 100, "b")  # a chunk of b's own before the stolen one: that one may go
    measured.learn("w", own, "b", cpu=0.1, wall=0.1)
    waiting["b"] = [own, steal.chunk]
    assert choose_steal("c", waiting, running, measured, "w", 0.0, learned=True) == Steal("b", own)


def test_once_placed_from_measures_only_a_last_chunk_goes_and_from_the_victim_finishing_latest():
    waiting, running = _queues(("x", 4, 100), ("t", 0, 100), ("z", 2, 100))
    forecast = Forecast(sizes=[100] * 40)
    for chunk in [c for queue in (*waiting.values(), *running.values()) for c in queue]:
        forecast.learn("w", chunk, chunk.home, cpu=0.1, wall=0.1)
    forecast.slowdown["z"] = 3.0  # z's one waiting chunk ends at 0.6 s, x's last at 0.4 s
    for chunk in (*running["x"], *running["z"]):
        forecast.started[id(chunk)] = 0.0
    assert choose_steal("t", waiting, running, forecast, "w", 0.0) == Steal("x", waiting["x"][0])  # first map: next
    learned = choose_steal("t", waiting, running, forecast, "w", 0.0, learned=True)
    assert learned == Steal("z", waiting["z"][-1])  # placed: a last chunk, where it would end latest
    del waiting["z"]
    assert choose_steal("t", waiting, running, forecast, "w", 0.0, learned=True) == Steal("x", waiting["x"][-1])
    forecast.slowdown["t"] = 10.0  # a thief forecast slower than the victim takes nothing
    assert choose_steal("t", waiting, running, forecast, "w", 0.0, learned=True) is None


def test_the_forecast_tells_a_costly_chunk_from_a_slowed_worker():
    slowed = Forecast(sizes=[100] * 4)
    running, waiting = Chunk([0], 100, "slow"), Chunk([1], 100, "slow")
    slowed.learn("w", running, "slow", cpu=0.1, wall=0.3)  # its core shared: 3x the CPU seconds
    slowed.learn("w", Chunk([2], 100, "fast"), "fast", cpu=0.1, wall=0.1)
    assert slowed.seconds("w", running, "slow") == pytest.approx(0.3)
    assert slowed.seconds("w", running, "fast") == pytest.approx(0.1)  # the cost travels, the slowdown does not
    assert slowed.seconds("w", waiting, "fast") == pytest.approx(0.1)  # not run yet: its partition's last cost
    assert slowed.seconds("other work", waiting, "fast") is None
    slowed.started[id(running)] = 10.0
    assert slowed.thief_wins("w", waiting, "fast", "slow", {"slow": [running], "fast": []}, moved=100, now=10.0)

    even = Forecast(sizes=[100] * 4)
    for block, home in ((0, "x"), (1, "x"), (2, "y"), (3, "y")):
        even.learn("w", Chunk([block], 100, home), home, cpu=0.1, wall=0.1)
    x_running, x_waiting, y_running = Chunk([0], 100, "x"), Chunk([1], 100, "x"), Chunk([2], 100, "y")
    running = {"x": [x_running], "y": [y_running]}
    even.started[id(x_running)] = even.started[id(y_running)] = 10.0
    assert not even.thief_wins("w", x_waiting, "y", "x", running, 100, now=10.0)  # in step: taking it moves the wait
    even.started[id(x_running)] = 10.05  # x lags by half a chunk and more: its last one goes
    assert even.thief_wins("w", x_waiting, "y", "x", running, 100, now=10.06)
    assert not even.thief_wins("w", x_waiting, "x", "y", running, 100, now=10.06)  # and it never goes back


def test_learned_costs_place_blocks_and_cut_chunks_of_a_minimum_time():
    forecast = Forecast(sizes=[100] * 8)
    for block, cost in enumerate([0.4, 0.3, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05]):
        home = "x" if block < 4 else "y"
        forecast.learn("w", Chunk([block], 100, home), home, cpu=cost, wall=cost)
    homes = {"x": [0, 1, 2, 3], "y": [4, 5, 6, 7]}
    assert forecast.knows("w", list(range(8))) and not forecast.knows("w", [8])
    placed = forecast.assign("w", homes)
    assert placed == {"x": [(1, "x"), (2, "x"), (3, "x")], "y": [(4, "y"), (5, "y"), (6, "y"), (7, "y"), (0, "x")]}
    chunks = forecast.group("w", "y", placed["y"], min_seconds=0.1)
    assert [(c.indexes, c.home) for c in chunks] == [([4, 5], "y"), ([6, 7], "y"), ([0], "x")]
    even = Forecast(sizes=[100] * 8)
    for block in range(8):
        home = "x" if block < 4 else "y"
        even.learn("w", Chunk([block], 100, home), home, cpu=0.1 + 0.005 * (block == 0), wall=0.1)
    assert all(home == w for w, blocks in even.assign("w", homes).items() for _, home in blocks)  # noise: none move


def test_learned_queues_run_work_in_balance_as_one_chunk_per_thread_and_cut_imbalance_finer():
    forecast = Forecast(sizes=[100] * 8, cost={("w", i): 0.1 for i in range(8)})
    homes = {"x": [0, 1, 2, 3], "y": [4, 5, 6, 7]}
    queues, moves = learned_queues(forecast, "w", homes, Threads({"x": 1, "y": 1}))
    assert moves == [] and [[c.indexes for c in q] for q in queues.values()] == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    queues, _ = learned_queues(forecast, "w", homes, Threads({"x": 2, "y": 2}))
    assert [len(q) for q in queues.values()] == [2, 2]  # one chunk per thread
    forecast.cost.update({("w", i): 0.5 for i in homes["x"]})  # x's blocks made costly: blocks move
    queues, moves = learned_queues(forecast, "w", homes, Threads({"x": 1, "y": 1}))
    assert ("y", 0, "x") in moves  # x's blocks go to y (and y's cheap ones may go to x in their place)
    assert max(forecast.load("w", w, [i for c in q for i in c.indexes]) for w, q in queues.items()) < 1.5  # was 2.0
    assert sorted(i for q in queues.values() for c in q for i in c.indexes) == list(range(8))
    assert len(queues["x"]) >= 2 and any(c.home == "x" for c in queues["y"])  # cut for stealing to correct it


def test_work_in_balance_runs_one_chunk_per_worker_once_learned_and_imbalance_keeps_two(session):
    import dask.array as da

    placed = PlacedBlocks(session, place_contiguous(session, da.ones((80, 3), chunks=(10, 3))), "chunks test")
    work = BlockWork(block=lambda b: float(b.sum()), merge=sum)
    try:
        with strategies.get("split-balanced").open(session, placed) as plan:
            assert plan.reduce(work) == 240.0
            deadline = time.monotonic() + 30
            while not plan.forecast.knows(work.name, list(range(8))) and time.monotonic() < deadline:
                time.sleep(0.05)  # the chunks' seconds arrive as Dask events, after their results
            for i in range(8):  # as if each block took 0.1 s: in balance, above the minimum chunk time
                plan.forecast.cost[work.name, i] = 0.1
            plan.forecast.slowdown.clear()
            steals = len(plan.steals)
            queues = plan._learned_queues(work.name)
            assert sorted(len(q) for q in queues.values()) == [1, 1]
            assert len(plan.steals) == steals  # nothing placed away from home: one chunk per worker, as split
            slow = plan.partitions[0]
            for i in slow.block_indexes:
                plan.forecast.cost[work.name, i] = 0.5  # one worker's blocks made costly: blocks move
            queues = plan._learned_queues(work.name)
            assert any(home != w for w, q in queues.items() for c in q for home in [c.home])
            assert len(queues[slow.worker]) >= 2  # and the placed load is cut for stealing to correct it
            assert plan.reduce(work) == 240.0
    finally:
        placed.release()


def test_restore_puts_each_block_back_where_it_was_and_drops_the_copies(session):
    import dask.array as da

    from workbench.runtime.blocks import _drop_replicas

    placed = PlacedBlocks(session, place_contiguous(session, da.ones((40, 3), chunks=(10, 3))), "restore test")
    before = placed.holders()
    client = session.client
    first, last = placed.block_futures[0], placed.block_futures[-1]
    client.replicate([first, last], n=2)  # copies everywhere, as steals and fetches leave them
    client.run_on_scheduler(_drop_replicas, {before[-1]: [last.key]})  # and the original dropped, as Dask may
    assert set(client.who_has([last])[last.key]) == {before[0]}
    assert placed.restore(before) == 3  # an extra copy of block 0; the last block missing at home, extra elsewhere
    assert [sorted(client.who_has([f])[f.key]) for f in placed.block_futures] == [[h] for h in before]
    assert placed.restore(before) == 0
    with pytest.raises(ValueError, match="one per block"):
        placed.restore(before[:1])
    placed.release()


def test_a_worker_lost_while_balancing_fails_clearly_and_leaves_nothing(tmp_path):
    own = workbench.start(n_workers=2)
    try:
        ds = datasets.get("kmeans", "ci")
        placed = PlacedBlocks(own, place_contiguous(own, ds.to_dask("points", 2048)))
        victim = sorted(own.workers())[1]
        pid = own.run(os.getpid)[victim]
        work = BlockWork(block=_slow_block, merge=lambda parts: np.sum(parts, axis=0))
        killer = threading.Timer(0.8, os.kill, (pid, signal.SIGKILL))
        killer.start()
        start = time.monotonic()

        def balanced_run() -> None:  # its plan goes with its frame
            with strategies.get("split-balanced").open(own, placed) as plan:
                plan.reduce(work, 0.1)

        with pytest.raises((WorkerLost, Exception)) as raised:
            balanced_run()
        killer.cancel()
        assert time.monotonic() - start < 120
        assert isinstance(raised.value, WorkerLost) or "KilledWorker" in type(raised.value).__name__, raised.value
        if isinstance(raised.value, WorkerLost):
            assert victim in str(raised.value) and "rerun" in str(raised.value)
        raised.value.__traceback__ = None  # the traceback holds the run's frames (and their futures)
        del raised
        placed.release()
        # nothing of the run is held: the client keeps no future, the cluster still answers
        deadline = time.monotonic() + 30
        gc.collect()  # the failed run's frames and traceback form cycles: collected, they free their futures
        while own.client.futures:
            assert time.monotonic() < deadline, f"futures left: {list(own.client.futures)[:5]}"
            time.sleep(0.1)
        assert own.client.submit(sum, [1, 2]).result(timeout=60) == 3
    finally:
        own.close()


def test_slowed_worker_pins_burns_and_undoes_everything():
    own = workbench.start(n_workers=2)
    try:
        pids = own.run(os.getpid)
        before = {a: os.sched_getaffinity(p) for a, p in pids.items()}
        children_before = {p.pid for p in psutil.Process().children(recursive=True)}
        with imbalance.slowed_worker(own, burners=1) as slowed:
            assert slowed == sorted(pids)[0]
            assert os.sched_getaffinity(pids[slowed]) != before[slowed] or len(os.sched_getaffinity(0)) == 1
            burners = [p for p in psutil.Process().children() if p.pid not in children_before]
            assert len(burners) == 1 and burners[0].cpu_affinity() == sorted(os.sched_getaffinity(pids[slowed]))
        assert {a: os.sched_getaffinity(p) for a, p in pids.items()} == before
        assert {p.pid for p in psutil.Process().children(recursive=True)} - children_before == set()
        with pytest.raises(ValueError, match="burners must be"):
            with imbalance.slowed_worker(own, burners=0):
                pass
        with pytest.raises(ValueError, match="no worker"):
            with imbalance.slowed_worker(own, worker="tcp://nowhere:1"):
                pass
    finally:
        own.close()


@pytest.mark.timeout(600)
def test_balance_benchmark_reports_every_scenario_and_the_goals(session):
    experiments = {
        name: imbalance.scenario(session, name, "ci", skew=16, repeats=2, blocks_per_worker=4, repeat=20)
        for name in ("balanced", "skewed")
    }
    tables = {name: imbalance.table(e) for name, e in experiments.items()}
    for t in tables.values():
        assert set(t.index) == set(imbalance.VARIANTS)
        assert {"mean_s", "split / variant", "MB_moved_with_replicas", "steals"} <= set(t.columns)
    samples = {name: balance.seconds_by_variant(e) for name, e in experiments.items()}
    assert all(len(runs) == 2 for runs in samples["skewed"].values())  # the timed runs, warm-ups apart
    tables["slowed"] = tables["skewed"]  # the slowed scenario has its own test above: its table has the same shape
    ceilings = {"skewed": balance.ceiling(datasets.block_costs(16, 16), 2)}  # 72 units on one worker, 44.5 fair
    assert len(balance.goals(tables, ceilings, samples)) == 9  # no blocks given: no count goal
    goals = balance.goals(tables, ceilings, samples, blocks=8)
    assert len(goals) == 10 and all(set(goal("x", 1.0, 1.0)) == set(g) for g in goals)
    counted = goals[9]  # 4 blocks per worker, 3 iterations: each run's counts over its maps
    assert counted["goal"].startswith("split-balanced's tasks + dependencies per iteration at most 5 per block + 1")
    assert counted["threshold"] == 41 and counted["better"] == "lower" and set(counted["peers"]) == set(tables)
    assert counted["met"], counted  # a chunk moves at most once: on any machine
    for t in tables.values():
        assert (t[["tasks_per_iteration", "dependencies_per_iteration", "messages_per_iteration"]] > 0).all().all()
    # the skewed goal is capped by its ceiling (1.62x: 90 % of it is below 1.5x), the slowed one is not
    assert goals[1]["goal"] == "skewed: split / split-balanced >= 1.46 (90% of its ceiling 1.62x)"
    assert goals[1]["threshold"] == 1.46 and set(goals[1]["peers"]) == {"split", "split-balanced"}
    assert goals[1]["noise"] is not None and goals[5]["noise"] is None  # slowed: no samples given for it
    assert "slowed: split / split-balanced >= 1.50" == goals[5]["goal"]
    assert goals[0]["better"] == "lower" and goals[0]["threshold"] == 1.05
    assert goals[4]["peer_unit"] == "MB" and set(goals[4]["peers"]) == {"rechunk", "split-balanced"}
    # not met (rechunk merges blocks that sit together here), it says so with the bytes measured
    moved = goals[4]["peers"]
    assert goals[4]["met"] or f"moved {moved['rechunk']:.3f} MB between workers" in goals[4]["bound"]
    rows = balance.scenario_rows(tables)
    report = Report(
        "balance", "ci", goals, rows, {"skewed_ceilings": ceilings}, counts={"blocks": 8}, workers=2, repeats=1
    )
    text = balance.format_report(report)
    assert "split-balanced-replicas" in text and text.count("goal:") == 10
    assert "more than 1.62x (skewed)" in text and "tasks/it" in text and "3 per run, 8 blocks" in text


def test_the_count_goal_takes_the_worst_scenario_and_fails_a_count_that_outgrows_the_blocks():
    import pandas as pd

    def counted(tasks, deps):
        return pd.DataFrame(
            {"tasks_per_iteration": [tasks, 3.0], "dependencies_per_iteration": [deps, 9.0]},
            index=["split-balanced", "split"],
        )

    tables = {"balanced": counted(10.0, 20.0), "skewed-16": counted(14.0, 30.0)}
    met = balance.count_goal(tables, blocks=16)
    assert met["measured"] == 44.0 and met["threshold"] == 81 and met["met"]
    assert met["peers"] == {"balanced": 30.0, "skewed-16": 44.0} and met["peer_unit"] == "per iteration"
    tables["slowed"] = counted(40.0, 50.0)  # chunks that bounce between thieves: above 5 per block + 1
    assert not balance.count_goal(tables, blocks=16)["met"]
    assert balance.count_goal({"balanced": counted(1.0, 1.0).drop(columns="tasks_per_iteration")}, 16) is None


def test_a_block_costs_the_same_work_however_the_rows_are_cut():
    costs = datasets.block_costs(8, 16)  # 16 11 7 5 3 2 1 1
    rows = 10
    assert skewed.repetitions(np.arange(0, 10), costs, rows, 4) == 16 * 4  # one original block
    assert skewed.repetitions(np.arange(70, 80), costs, rows, 4) == 4
    merged = skewed.repetitions(np.arange(0, 40), costs, rows, 4)  # four blocks in one (rechunk)
    assert merged * 4 == (16 + 11 + 7 + 5) * 4  # calls on 4x the rows: the four blocks' work together
    assert skewed.repetitions(np.arange(0), costs, rows, 4) == 1


def test_the_ceiling_and_the_scaled_work_follow_the_block_costs():
    costs = datasets.block_costs(16, 16)  # 72 units on the first worker, 17 on the second
    assert balance.ceiling(costs, 2) == pytest.approx(72 / 44.5)
    assert balance.ceiling(datasets.block_costs(16, 1), 2) == 1.0
    assert balance._repeat(800, costs) == 400 and balance._repeat(800, datasets.block_costs(16, 64)) == 100
    assert balance._repeat(800, None) == 800
    assert balance._repeat(None, costs) is None


def test_two_plans_share_the_sessions_one_chunk_subscription_and_each_learns_its_own_seconds(session):
    import dask.array as da

    placed = PlacedBlocks(session, place_contiguous(session, da.ones((40, 3), chunks=(10, 3))), "events test")
    work = BlockWork(block=lambda b: float(b.sum()), merge=sum)
    try:
        with (
            strategies.get("split-balanced").open(session, placed) as first,
            strategies.get("split-balanced").open(session, placed) as second,
        ):
            events = session.owned()[CHUNK_EVENTS]
            assert isinstance(events, ChunkEvents) and not events.closed
            assert set(events.listeners) == {first.id, second.id}
            assert first.reduce(work) == second.reduce(work) == 120.0
            deadline = time.monotonic() + 30
            while not all(p.forecast.knows(work.name, list(range(4))) for p in (first, second)):
                assert time.monotonic() < deadline, "a plan did not get its chunks' seconds"
                time.sleep(0.05)  # the chunks' seconds arrive as Dask events, after their results
        assert events.listeners == {} and session.owned()[CHUNK_EVENTS] is events  # the session keeps it
    finally:
        placed.release()


class _Client:
    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def subscribe_topic(self, topic, handler):
        self.calls.append(("subscribe", topic))

    def unsubscribe_topic(self, topic):
        self.calls.append(("unsubscribe", topic))


def test_chunk_events_subscribe_on_enter_unsubscribe_on_exit_and_route_by_plan_id():
    client = _Client()
    heard = []
    with ChunkEvents(client) as events:
        events.listeners["plan1"] = heard.append
        events.dispatch((0.0, {"tag": "plan1:3", "cpu": 1.0}))
        events.dispatch((0.0, {"tag": "plan2:3", "cpu": 1.0}))  # another plan's: nobody here
        events.dispatch((0.0, "not a chunk message"))
    assert heard == [{"tag": "plan1:3", "cpu": 1.0}]
    assert client.calls == [("subscribe", CHUNK_TOPIC), ("unsubscribe", CHUNK_TOPIC)]
    assert events.closed and events.listeners == {}


def test_closing_the_session_ends_its_chunk_subscription():
    with workbench.start(n_workers=1, timeout=60) as own:
        events = own.own(CHUNK_EVENTS, lambda: ChunkEvents(own.client))
        assert not events.closed and own.own(CHUNK_EVENTS, lambda: ChunkEvents(own.client)) is events  # one
    assert events.closed and events.listeners == {}  # exited (unsubscribed) with the session
