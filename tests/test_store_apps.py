"""The store variants of the applications: the same answers as plain Dask, and what moved."""

from __future__ import annotations

import pytest

from workbench.lab import store_experiments
from workbench.lab.runner import run_experiment


@pytest.mark.parametrize("app", ["histogram", "kmeans", "knn"])
def test_store_variants_agree_with_plain_dask(session, app):
    grid = {"kmeans": {"dims": [8], "iterations": [3]}}.get(app, {"blocks_per_worker": [4]})
    # The runner raises AssertionError when a variant's answer differs from the baseline's.
    experiment = run_experiment(
        session,
        app,
        store_experiments.VARIANTS[app],
        size="ci",
        grid=grid,
        repeats=1,
        progress=False,
        baseline="blocks",
    )
    moved = experiment.moved(experiment.points()[0])
    assert list(moved.index) == store_experiments.VARIANTS[app]
    assert moved.loc["non-active", "MB_moved"] > moved.loc["active", "MB_moved"]  # non-active copies its objects
    matrix = experiment.bytes_moved("non-active")
    assert matrix.values.sum() > 0


def test_knn_partitions_need_fewer_lookups_than_blocks(session):
    experiment = run_experiment(
        session,
        "knn",
        ["active", "active-split"],
        size="ci",
        grid={"blocks_per_worker": [4]},
        repeats=1,
        progress=False,
    )
    tasks = experiment.results.groupby("variant")["tasks"].mean()
    assert tasks["active-split"] < tasks["active"]  # one tree per worker instead of one per block


def test_weak_scaling_table_and_figure(session):
    from workbench.lab import granularity
    from workbench.viz.timing import scaling_figure

    table = granularity.weak_scaling(
        session,
        "histogram",
        "ci",
        workers=(1, 2),
        blocks_per_worker=1,
        repeats=1,
        variants=store_experiments.VARIANTS["histogram"],
    )
    assert len(session.workers()) == 2  # the cluster is restored
    assert sorted(table["workers"].unique()) == [1, 2]
    assert set(table["variant"]) == set(store_experiments.VARIANTS["histogram"])
    assert (table.loc[table["workers"] == 2, "points"] == 2 * table.loc[table["workers"] == 1, "points"].iloc[0]).all()
    assert (table.loc[table["workers"] == 1, "efficiency"] == 1.0).all()
    figure = scaling_figure(table)
    assert len(figure.renderers) == 2 * 3  # a line and its points per variant
