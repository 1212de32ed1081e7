"""Counts that predict scale (issue 36): tasks and dependencies follow the partitions, not the blocks.

Deterministic: these count what the scheduler was given, never time it.
"""

import time

import dask.array as da
import numpy as np
from dask.sizeof import sizeof

from workbench.runtime import counts, splitter
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.strategies import BlockWork


def _total(blocks):
    return float(sum(b.sum() for b in blocks))


def _add(partials):
    return sum(partials)


WORK = BlockWork(block=lambda b: float(b.sum()), blocks=_total, merge=_add)


def _same_objects(held, *blocks):
    return all(h is b for h, b in zip(held.blocks, blocks, strict=True))


def _placed(session, blocks_per_worker):
    workers = len(session.workers())
    rows = 64 * workers * blocks_per_worker
    return PlacedBlocks(session, da.ones((rows, 4), chunks=(64, 4)))


def _map_graph(session, partitions, held):
    """The graph of one map over held partitions: its tasks and dependencies."""
    counts.install(session)
    session.wait([*(held or []), *(b for p in partitions for b in p.blocks)])  # their graphs came before
    since = time.time()
    futures = splitter.map_partitions(session, partitions, WORK, (), held=held)
    session.wait(futures)
    (graph,) = counts.graphs_since(session, since)
    return graph, futures


def test_the_counter_counts_a_graphs_new_tasks_and_their_dependencies(session):
    counts.install(session)
    blocks = session.client.compute([da.ones(3) + i for i in range(5)])
    session.wait(blocks)
    since = time.time()
    total = session.client.submit(lambda *xs: sum(x.sum() for x in xs), *blocks, pure=False)
    session.wait(total)
    graphs = counts.graphs_since(session, since)
    assert [(g.tasks, g.dependencies) for g in graphs] == [(1, 5)]  # the futures it names are no new tasks
    assert counts.in_window(graphs, [(since, time.time())]) == (1, 5)
    assert counts.in_window(graphs, [(since - 10, since - 5)]) == (0, 0)
    assert counts.message_count(session) > 0


def test_a_map_over_held_partitions_has_one_dependency_per_partition_whatever_the_blocks(session):
    found = {}
    for blocks_per_worker in (1, 40):
        placed = _placed(session, blocks_per_worker)
        partitions = splitter.split(session, placed)
        held = splitter.hold_partitions(session, partitions)
        graph, futures = _map_graph(session, partitions, held)
        assert session.gather(futures) == [64.0 * 4 * len(p) for p in partitions]
        found[blocks_per_worker] = (graph.tasks, graph.dependencies)
        placed.release()
    workers = len(session.workers())
    assert found[1] == found[40] == (workers, workers)  # follows the partitions, not the blocks


def test_a_map_without_held_partitions_depends_on_every_block(session):
    """The count the fix removed: the test fails a count that grows with the blocks."""
    placed = _placed(session, 10)
    partitions = splitter.split(session, placed)
    graph, _ = _map_graph(session, partitions, None)
    assert (graph.tasks, graph.dependencies) == (len(partitions), len(placed))
    placed.release()


def test_held_blocks_are_the_workers_own_arrays_and_weigh_only_their_references(session):
    placed = _placed(session, 3)
    partitions = splitter.split(session, placed)
    held = splitter.hold_partitions(session, partitions)
    same = session.gather(
        [
            session.client.submit(
                _same_objects, h, *p.blocks, workers=[p.worker], allow_other_workers=False, pure=False
            )
            for h, p in zip(held, partitions)
        ]
    )
    assert same == [True] * len(partitions)  # no copy: the very objects Dask holds under the blocks' keys
    blocks = [np.ones((1000, 100)) for _ in range(3)]
    assert sizeof(splitter.hold(blocks, [], [(0, 1000)] * 3)) < 1000 < sum(b.nbytes for b in blocks)
    placed.release()


def test_split_tasks_and_dependencies_per_iteration_follow_the_workers(session):
    from workbench.bench import splitter as bench_splitter

    report = bench_splitter.run(size="ci", repeats=1, blocks_per_core=(1, 16), apps=("kmeans",), session=session)
    rows = {(r["blocks_per_core"], r["variant"]): r for r in report.rows}
    partitions = len(session.workers())
    for variant in ("split", "split-materialized", "rechunk"):
        per_iteration = {
            bpc: (rows[(bpc, variant)]["tasks_per_iteration"], rows[(bpc, variant)]["dependencies_per_iteration"])
            for bpc in (1, 16)
        }
        assert rows[(16, variant)]["iterations"] >= 2
        # one task per partition (its one dependency), one merge (a dependency per partition)
        assert per_iteration[1] == per_iteration[16] == (partitions + 1, 2 * partitions), variant
    assert rows[(16, "blocks")]["tasks_per_iteration"] > 16 * partitions  # tasks = blocks: the baseline
    count_goals = [g for g in report.goals if "per iteration" in g["goal"]]
    assert len(count_goals) == 2 and all(g["met"] and g["threshold"] == 3 * partitions + 1 for g in count_goals)
    assert {"messages_per_iteration", "bytes_moved_per_iteration"} <= set(rows[(16, "split")])
    assert "deps/it" in bench_splitter.format_report(report)


def test_a_counting_window_counts_the_work_inside_it_and_nothing_before(session):
    a, b = session.workers()[:2]
    block = session.client.submit(np.ones, 1000, workers=[a], pure=False)  # 8000 bytes on worker a
    session.wait(block)
    with counts.counting(session) as window:
        total = session.client.submit(lambda x: float(x.sum()), block, workers=[b], pure=False)
        assert session.gather(total) == 1000.0
    c = window.counts
    assert (c.tasks, c.dependencies) == (1, 1)  # the block came before the window: no task of it
    assert c.messages > 0
    assert 8000 <= c.bytes_moved < 8000 + 4096  # the block moved from a to b, once
    assert c.per(2)["tasks_per"] == 0.5
