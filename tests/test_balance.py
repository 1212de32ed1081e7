"""SplIter with balance: the same answers as ``split`` under every skew, steals (and their bytes) in the
trace, replicas read locally, a lost worker fails the run clearly and leaves nothing behind, the
slowed-worker context undoes itself, and the benchmark reports its goals."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

import datasets
import workbench
from workbench.apps import skewed
from workbench.bench import balance
from workbench.lab import imbalance
from workbench.lab.runner import run_experiment
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks, place_contiguous
from workbench.runtime.strategies import BlockWork
from workbench.runtime.strategies.balance import Chunk, Forecast, WorkerLost, cut, guided_cut
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


def test_chunks_cover_each_partition_once():
    from workbench.runtime.splitter import Partition

    partition = Partition(worker="w", blocks=list(range(7)), block_indexes=list(range(10, 17)), item_ranges=[])
    chunks = cut(partition, [100] * 20, chunks=3)
    assert [i for c in chunks for i in c.indexes] == list(range(10, 17))
    assert [c.nbytes for c in chunks] == [100 * len(c.indexes) for c in chunks]
    assert len(cut(partition, [1] * 20, chunks=50)) == 7  # never more chunks than blocks
    eight = Partition(worker="w", blocks=list(range(8)), block_indexes=list(range(8)), item_ranges=[])
    assert [len(c.indexes) for c in guided_cut(eight, [1] * 8)] == [2, 2, 1, 1, 1, 1]  # the back in single blocks
    assert [i for c in guided_cut(partition, [1] * 20) for i in c.indexes] == list(range(10, 17))
    assert all(c.home == "w" for c in guided_cut(partition, [1] * 20))
    many = Partition(worker="w", blocks=list(range(200)), block_indexes=list(range(200)), item_ranges=[])
    assert len(guided_cut(many, [1] * 200)) <= 16  # the task count still follows the workers


def _slow_block(block, delay):
    time.sleep(delay)
    return np.asarray([len(block)])


@pytest.mark.timeout(300)
def test_a_thief_takes_the_next_waiting_chunk_and_a_victim_keeps_its_last():
    from collections import deque
    from types import SimpleNamespace

    from workbench.runtime.strategies import balance as balancing

    chunks = {w: [balancing.Chunk([k + 10 * n], 100) for k in range(4)] for n, w in enumerate("abc")}
    plan = SimpleNamespace(replicas={}, sizes=[100] * 40, steals=[], recorder=Recorder(), forecast=Forecast())
    plan._moved = lambda chunk, thief: balancing.BalancedPlan._moved(plan, chunk, thief)
    plan._record_steal = lambda *a, **k: balancing.BalancedPlan._record_steal(plan, *a, **k)
    plan._last_worth_taking = lambda *a, **k: balancing.BalancedPlan._last_worth_taking(plan, *a, **k)
    queues = {"a": deque(chunks["a"]), "b": deque(chunks["b"][:1]), "c": deque(chunks["c"][:3])}
    threads = balancing._Threads({"a": 1, "b": 1, "c": 1})
    assert threads.waiting("a", queues["a"]) == chunks["a"][1:]  # the first one is running
    thief, victim, chunk = balancing.BalancedPlan._steal(plan, queues, "b", threads)
    assert (thief, victim, chunk) == ("b", "a", chunks["a"][1])  # most bytes waiting; the one it runs next
    assert list(queues["a"]) == [chunks["a"][0], *chunks["a"][2:]] and list(queues["b"])[-1] is chunk
    assert plan.steals == [{"thief": "b", "victim": "a", "blocks": 1, "bytes": 100}]
    queues["a"] = deque(chunks["a"][:2])  # a: one waiting, c: two waiting
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads)[1:] == ("c", chunks["c"][1])
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads) is None  # nothing measured: each keeps its last
    plan.replicas = {22: {"b"}}  # a chunk the thief holds a replica of goes first, and moves no bytes
    queues["c"] = deque(chunks["c"])
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads)[2] is chunks["c"][2]
    assert plan.steals[-1]["bytes"] == 0
    four = balancing._Threads({"w": 4})
    assert four.of("w") == 4 and four.waiting("w", deque(chunks["a"])) == []


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
    from types import SimpleNamespace

    forecast = Forecast(sizes=[100] * 8)
    for block, cost in enumerate([0.4, 0.3, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05]):
        home = "x" if block < 4 else "y"
        forecast.learn("w", Chunk([block], 100, home), home, cpu=cost, wall=cost)
    partitions = [
        SimpleNamespace(worker="x", block_indexes=[0, 1, 2, 3]),
        SimpleNamespace(worker="y", block_indexes=[4, 5, 6, 7]),
    ]
    assert forecast.knows("w", list(range(8))) and not forecast.knows("w", [8])
    placed = forecast.assign("w", partitions)
    assert placed == {"x": [(1, "x"), (2, "x"), (3, "x")], "y": [(4, "y"), (5, "y"), (6, "y"), (7, "y"), (0, "x")]}
    chunks = forecast.group("w", "y", placed["y"], min_seconds=0.1)
    assert [(c.indexes, c.home) for c in chunks] == [([4, 5], "y"), ([6, 7], "y"), ([0], "x")]
    even = Forecast(sizes=[100] * 8)
    for block in range(8):
        home = "x" if block < 4 else "y"
        even.learn("w", Chunk([block], 100, home), home, cpu=0.1 + 0.005 * (block == 0), wall=0.1)
    assert all(
        home == w for w, blocks in even.assign("w", partitions).items() for _, home in blocks
    )  # noise: none move


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
    tables = {
        name: imbalance.table(
            imbalance.scenario(session, name, "ci", skew=16, repeats=2, blocks_per_worker=4, repeat=20)
        )
        for name in ("balanced", "skewed")
    }
    for t in tables.values():
        assert set(t.index) == set(imbalance.VARIANTS)
        assert {"mean_s", "split / variant", "MB_moved_with_replicas", "steals"} <= set(t.columns)
    tables["slowed"] = tables["skewed"]  # the slowed scenario has its own test above: its table has the same shape
    ceilings = {"skewed": balance.ceiling(datasets.block_costs(16, 16), 2)}  # 72 units on one worker, 44.5 fair
    goals = balance.goals(tables, ceilings)
    assert len(goals) == 9 and all({"goal", "measured", "met"} == set(g) for g in goals)
    # the skewed goal is capped by its ceiling (1.62x: 90 % of it is below 1.5x), the slowed one is not
    assert goals[1]["goal"] == "skewed: split / split-balanced >= 1.46 (90% of its ceiling 1.62x)"
    assert "slowed: split / split-balanced >= 1.50" == goals[5]["goal"]
    report = {
        "size": "ci",
        "workers": 2,
        "repeats": 1,
        "skewed_ceilings": ceilings,
        "goals": goals,
        "scenarios": {k: t.reset_index().to_dict("records") for k, t in tables.items()},
    }
    text = balance.format_report(report)
    assert "split-balanced-replicas" in text and text.count("goal:") == 9
    assert "more than 1.62x (skewed)" in text


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
