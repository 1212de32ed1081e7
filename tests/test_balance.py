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
from workbench.runtime.strategies.balance import WorkerLost, cut
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


def _slow_block(block, delay):
    time.sleep(delay)
    return np.asarray([len(block)])


@pytest.mark.timeout(300)
def test_a_thief_takes_the_next_waiting_chunk_and_a_victim_keeps_its_last():
    from collections import deque
    from types import SimpleNamespace

    from workbench.runtime.strategies import balance as balancing

    chunks = {w: [balancing.Chunk([k + 10 * n], 100) for k in range(4)] for n, w in enumerate("abc")}
    plan = SimpleNamespace(replicas={}, sizes=[100] * 40, steals=[], recorder=Recorder())
    queues = {"a": deque(chunks["a"]), "b": deque(chunks["b"][:1]), "c": deque(chunks["c"][:3])}
    threads = balancing._Threads({"a": 1, "b": 1, "c": 1})
    assert threads.waiting("a", queues["a"]) == chunks["a"][1:]  # the first one is running
    thief, victim, chunk = balancing.BalancedPlan._steal(plan, queues, "b", threads)
    assert (thief, victim, chunk) == ("b", "a", chunks["a"][1])  # most bytes waiting; the one it runs next
    assert list(queues["a"]) == [chunks["a"][0], *chunks["a"][2:]] and list(queues["b"])[-1] is chunk
    assert plan.steals == [{"thief": "b", "victim": "a", "blocks": 1, "bytes": 100}]
    queues["a"] = deque(chunks["a"][:2])  # a: one waiting, c: two waiting
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads)[1:] == ("c", chunks["c"][1])
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads) is None  # each victim keeps its last
    plan.replicas = {22: {"b"}}  # a chunk the thief holds a replica of goes first, and moves no bytes
    queues["c"] = deque(chunks["c"])
    assert balancing.BalancedPlan._steal(plan, queues, "b", threads)[2] is chunks["c"][2]
    assert plan.steals[-1]["bytes"] == 0
    four = balancing._Threads({"w": 4})
    assert four.of("w") == 4 and four.waiting("w", deque(chunks["a"])) == []


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
    goals = balance.goals(tables)
    assert len(goals) == 9 and all({"goal", "measured", "met"} == set(g) for g in goals)
    report = {
        "size": "ci",
        "workers": 2,
        "repeats": 1,
        "skew": 16,
        "skewed_ceiling": balance.ceiling(datasets.block_costs(8, 16), 2),
        "goals": goals,
        "scenarios": {k: t.reset_index().to_dict("records") for k, t in tables.items()},
    }
    text = balance.format_report(report)
    assert "split-balanced-replicas" in text and text.count("goal:") == 9
    assert "more than 1.70x" in text  # costs 16 11 7 5 | 3 2 1 1: 39 on one worker, 23 a fair share


def test_the_ceiling_and_the_scaled_work_follow_the_block_costs():
    costs = datasets.block_costs(16, 16)  # 72 units on the first worker, 17 on the second
    assert balance.ceiling(costs, 2) == pytest.approx(72 / 44.5)
    assert balance.ceiling(datasets.block_costs(16, 1), 2) == 1.0
    assert balance._repeat(400, costs) == 400 and balance._repeat(400, datasets.block_costs(16, 64)) == 100
    assert balance._repeat(400, None) == 400
    assert balance._repeat(None, costs) is None
