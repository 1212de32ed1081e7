"""SplIter partitions over a persisted Dask array, and the granularity variants of the applications."""

import dask.array as da
import numpy as np
import pytest

from workbench import datasets, kernels
from workbench.lab.runner import run_experiment
from workbench.runtime import splitter
from workbench.runtime.blocks import PlacedBlocks


def _where(block):
    from distributed import get_worker

    return get_worker().address


def _where_all(blocks):
    return _where(None)


@pytest.fixture(scope="module")
def points(session):
    ds = datasets.get("histogram", "ci", seed=7)
    placed = PlacedBlocks(session, ds.to_dask("points", 9_000))  # 23 blocks, the last one short
    yield ds, placed
    placed.release()


def test_partitions_cover_every_block_once_on_its_worker(session, points):
    ds, placed = points
    partitions = splitter.split(session, placed.array)
    assert len(partitions) == len(session.workers())  # one per worker: tasks follow the resources
    indexes = sorted(i for p in partitions for i in p.get_indexes())
    assert indexes == list(range(placed.array.numblocks[0]))
    who_has = session.client.who_has([f for p in partitions for f in p.blocks])
    for p in partitions:
        assert all(p.worker in who_has[f.key] for f in p.blocks)  # no block moves
    items = np.sort(np.concatenate([p.get_item_indexes() for p in partitions]))
    np.testing.assert_array_equal(items, np.arange(ds.spec("points").shape[0]))


def test_partition_tasks_run_where_their_blocks_are(session, points):
    _, placed = points
    partitions = splitter.split(session, placed.array, partitions_per_worker=3)
    assert all(len(p) >= 1 for p in partitions) and len(partitions) <= 3 * len(session.workers())
    ran_on = session.gather(splitter.run_partitions(session, partitions, _where_all))
    assert ran_on == [p.worker for p in partitions]


def test_three_ways_to_run_a_partition_agree(session, points):
    ds, placed = points
    bins, ranges = ds.params["bins"], ds.params["range"]
    partitions = splitter.split(session, placed.array)
    expected = kernels.histogramdd(ds.load("points"), bins, ranges)
    merged = session.gather(
        splitter.run_partitions(session, partitions, kernels.histogramdd, bins, ranges, merge=lambda parts: sum(parts))
    )
    materialized = session.gather(
        splitter.run_partitions(session, partitions, kernels.histogramdd, bins, ranges, materialize=True)
    )
    listed = session.gather(
        splitter.run_partitions(
            session, partitions, lambda blocks: sum(kernels.histogramdd(b, bins, ranges) for b in blocks)
        )
    )
    for result in (merged, materialized, listed):
        np.testing.assert_array_equal(sum(result), expected)
    with pytest.raises(ValueError, match="not both"):
        splitter.run_partitions(session, partitions, kernels.histogramdd, materialize=True, merge=sum)


def _row_total(block, rows, scale=1):
    assert len(block) == len(rows)  # the aligned block is the same rows
    return int(rows.sum()) * scale


def test_keywords_and_aligned_blocks_reach_the_function_in_every_form(session, points):
    """``run_partitions`` is the split strategies' path: its keywords bound to the function, the
    aligned array's blocks beside each block (per block, concatenated, or as lists)."""
    _, placed = points
    n = placed.shape[0]
    rows = PlacedBlocks(session, da.arange(n, chunks=(placed.chunks,)))
    try:
        partitions = splitter.split(session, placed)
        forms = {
            "merge": splitter.run_partitions(session, partitions, _row_total, merge=sum, with_arrays=[rows], scale=3),
            "materialize": splitter.run_partitions(
                session, partitions, _row_total, materialize=True, with_arrays=[rows], scale=3
            ),
            "lists": splitter.run_partitions(
                session,
                partitions,
                lambda blocks, row_blocks, scale: sum(_row_total(b, r, scale) for b, r in zip(blocks, row_blocks)),
                with_arrays=[rows],
                scale=3,
            ),
        }
        for form, futures in forms.items():
            assert sum(session.gather(futures)) == 3 * n * (n - 1) // 2, form
    finally:
        rows.release()


def test_repeated_calls_are_new_computations(session, points):
    _, placed = points
    partitions = splitter.split(session, placed.array)
    first = session.gather(splitter.run_partitions(session, partitions, lambda blocks, k: k, 1))
    second = session.gather(splitter.run_partitions(session, partitions, lambda blocks, k: k, 2))
    assert set(first) == {1} and set(second) == {2}


def test_defined_results_for_odd_inputs(session):
    unpersisted = da.arange(100, chunks=10).reshape(50, 2).rechunk((10, 2))
    partitions = splitter.split(session, unpersisted)  # persisted for you
    assert sorted(i for p in partitions for i in p.get_indexes()) == list(range(5))
    assert splitter.split(session, da.zeros((0, 3), chunks=(5, 3))) == []
    single = session.client.persist(da.ones((10, 2), chunks=(10, 2)))
    many = splitter.split(session, single, partitions_per_worker=8)  # more partitions than blocks
    assert len(many) == 1 and many[0].get_indexes() == [0]


@pytest.mark.parametrize("shape,chunks", [((12, 3, 4), (5, 3, 4)), ((9, 2, 3, 2), (2, 2, 3, 2))])
def test_arrays_of_any_dimension_split_by_rows(session, shape, chunks):
    """3-D and 4-D arrays cut along rows split like 2-D ones (their keys nest deeper)."""
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    partitions = splitter.split(session, da.from_array(x, chunks=chunks))
    assert sorted(i for p in partitions for i in p.get_indexes()) == list(range(-(-shape[0] // chunks[0])))
    for p in partitions:
        got = session.gather(splitter.run_partitions(session, [p], lambda block: block, materialize=True))[0]
        np.testing.assert_array_equal(got, x[p.get_item_indexes()])


def test_unknown_row_counts_are_measured_where_the_blocks_are(session):
    """``y[y > 0.5]`` has NaN chunks: the partitions' item ranges are the real rows, never garbage."""
    values = np.random.default_rng(3).random(1_000)
    y = da.from_array(values, chunks=100)
    selected = y[y > 0.5]
    assert np.isnan(selected.chunks[0][0])
    partitions = splitter.split(session, selected)
    expected = values[values > 0.5]
    items = np.sort(np.concatenate([p.get_item_indexes() for p in partitions]))
    np.testing.assert_array_equal(items, np.arange(expected.size))
    for p in partitions:
        assert all(0 <= a <= b <= expected.size for a, b in p.item_ranges)
        got = session.gather(splitter.run_partitions(session, [p], lambda block: block, materialize=True))[0]
        np.testing.assert_array_equal(got, expected[p.get_item_indexes()])


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda s: splitter.split(s, np.zeros((4, 2))), TypeError, "split takes PlacedBlocks, a dask.array.Array"),
        (lambda s: splitter.split(s, da.zeros((4, 4), chunks=(2, 2))), ValueError, "make every other axis one block"),
        (
            lambda s: splitter.split(s, da.zeros((4, 2), chunks=2), partitions_per_worker=0),
            ValueError,
            "positive integer",
        ),
    ],
)
def test_bad_input_says_what_to_do(session, call, error, words):
    with pytest.raises(error, match=words):
        call(session)


def test_labels_align_with_points_by_block_index(session):
    ds = datasets.get("csvm", "ci")
    points = session.client.persist(ds.to_dask("points"))
    labels = session.client.persist(ds.to_dask("labels"))
    splitter.check_same_blocks(points, labels)
    all_labels = ds.load("labels")
    for partition in splitter.split(session, points):
        got = np.concatenate(session.gather(splitter.aligned(partition, labels, session)))
        np.testing.assert_array_equal(got, all_labels[partition.get_item_indexes()])
    with pytest.raises(ValueError, match="different row blocks"):
        splitter.check_same_blocks(points, ds.to_dask("labels", 333))


@pytest.mark.parametrize("app", ["histogram", "kmeans", "csvm", "knn"])
def test_granularity_variants_give_the_same_answer(session, app):
    from workbench.apps import registry

    grid = {k: v[-1:] for k, v in registry.get(app).grids["ci"].items()}
    experiment = run_experiment(
        session,
        app,
        variants=["blocks", "rechunk", "split", "split-materialized"],
        size="ci",
        grid=grid,
        repeats=2,
        progress=False,
    )  # the runner checks every variant's answer against the baseline's before timing
    assert experiment.baseline == "blocks"
    split_runs = experiment.results[experiment.results.variant == "split"]
    assert (split_runs["tasks"] < experiment.results[experiment.results.variant == "blocks"]["tasks"].min()).all()
    assert "phase_split_s" in experiment.results


def test_bench_splitter_reports_ratios_to_split(session):
    import json

    from workbench.bench import splitter as bench_splitter
    from workbench.bench.report import Report

    report = bench_splitter.run(size="ci", repeats=2, blocks_per_core=(1, 4), apps=("histogram",), session=session)
    assert (
        Report.from_json(json.loads(json.dumps(report.to_json(), default=str))).rows == report.rows
    )  # the model, as bench all reads it back
    rows = {(r["blocks_per_core"], r["variant"]): r for r in report.rows}
    assert set(rows) == {(b, v) for b in (1, 4) for v in bench_splitter.VARIANTS}
    assert rows[(4, "split")]["ratio_to_split"] == 1.0 and rows[(4, "split")]["partition_building_s"] > 0
    assert rows[(4, "blocks")]["tasks"] > rows[(4, "split")]["tasks"]
    (at_one,) = report.goals  # the goals at 48 and 200 blocks per core were not run: left out
    assert at_one["goal"].startswith("histogram at 1 block/core: split at most 5 % slower than blocks")
    assert at_one["peers"] == {"split": rows[(1, "split")]["seconds"], "blocks": rows[(1, "blocks")]["seconds"]}
    assert at_one["measured"] == rows[(1, "split")]["seconds"] / rows[(1, "blocks")]["seconds"]
    assert at_one["met"] == (at_one["measured"] <= at_one["threshold"] == 1.05) and at_one["noise"] is not None
    assert len(rows[(1, "split")]["runs_s"]) == 2
    assert "blocks/core" in bench_splitter.format_report(report)
    with pytest.raises(ValueError, match="size must be one of"):
        bench_splitter.run(size="medium", session=session)


def test_knn_finds_the_true_neighbours(session):
    from sklearn.neighbors import NearestNeighbors

    from workbench.apps import knn
    from workbench.runtime.trace import Recorder

    ds = datasets.get("knn", "ci")
    data = knn.prepare(session, ds, {"blocks_per_worker": 4})
    try:
        found = knn.APP.variant("split")(session, data, Recorder())
    finally:
        data.release()
    expected = (
        NearestNeighbors(n_neighbors=ds.params["neighbours"]).fit(ds.load("points")).kneighbors(ds.load("queries"))[1]
    )
    np.testing.assert_array_equal(found, expected)


def test_csvm_cascade_is_accurate(session):
    from workbench.apps import csvm
    from workbench.runtime.trace import Recorder

    data = csvm.prepare(session, datasets.get("csvm", "ci"), {"blocks_per_worker": 4})
    try:
        accuracy = csvm.APP.variant("split")(session, data, Recorder())
    finally:
        data.release()
    assert 0.8 < accuracy <= 1.0  # two overlapping boxes: most, not all, points are separable


def test_aligned_arrays_must_match_and_be_persisted(session, points):
    _, placed = points
    partitions = splitter.split(session, placed.array)
    with pytest.raises(ValueError, match="different row blocks"):
        splitter.run_partitions(session, partitions, np.sum, with_arrays=[da.zeros(placed.array.shape[0], chunks=1000)])
    same_blocks = da.zeros(placed.array.shape[0], chunks=placed.array.chunks[0])
    with pytest.raises(ValueError, match="is not persisted"):
        splitter.aligned(partitions[0], same_blocks, session)


def test_weak_scaling_and_knn_fit_sweep(session):
    from workbench.lab import granularity

    scaling = granularity.weak_scaling(
        session, "histogram", "ci", workers=(1, 2), blocks_per_worker=2, repeats=2, variants=["blocks", "split"]
    )
    assert set(scaling["workers"]) == {1, 2} and len(session.workers()) == 2  # restored
    assert (scaling.loc[scaling.workers == 1, "efficiency"] == 1.0).all()
    assert list(scaling.loc[scaling.workers == 2, "points"].unique()) == [
        2 * scaling.loc[scaling.workers == 1, "points"].iloc[0]
    ]
    sweep = granularity.knn_fit_sweep(session, "ci", fit_points=(4_000, 8_000), blocks_per_worker=2, repeats=2)
    assert set(sweep["points"]) == {4_000, 8_000} and (sweep["blocks_per_second"] > 0).all()
