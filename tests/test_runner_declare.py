"""An experiment is checked once, where it is declared (``runner.declare``), before any cluster
starts: a misspelt variant or parameter, a strategy whose needs the application does not meet,
a bad grid, size or repeat count. These tests start no cluster (``workbench.start`` is made to
fail, so one that tried would say so)."""

from __future__ import annotations

from collections import Counter

import pytest

import workbench
from workbench import cli
from workbench.apps import histogram, registry
from workbench.apps.registry import Application
from workbench.lab import runner
from workbench.lab.runner import Declared, declare
from workbench.runtime import strategies


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """Any start of a cluster in these tests fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a cluster was started: the experiment should have been refused before")

    monkeypatch.setattr(workbench, "start", refuse)


def _application(name: str, **changes) -> Application:
    """A histogram-like application named ``name`` (registered by the caller where it must be)."""
    fields = dict(
        name=name,
        description="test",
        dataset="histogram",
        prepare=histogram.prepare,
        work=histogram.WORK,
        strategies=["blocks", "split", "channels"],
        baseline="blocks",
        grids={"ci": {"blocks_per_worker": [1, 2]}},
        parameters=dict(histogram.APP.parameters),
    )
    return Application(**{**fields, **changes})


@pytest.fixture
def registered():
    """Register applications for one test; forget them after it."""
    names = []

    def add(application: Application) -> Application:
        names.append(application.name)
        return registry.register(application)

    yield add
    for name in names:
        registry.unregister(name)


def test_a_declared_experiment_is_checked_and_complete():
    declared = declare("histogram", ["split", "blocks", "split"], size="ci", repeats=2)
    assert isinstance(declared, Declared)
    assert declared.variants == ("split", "blocks") and declared.baseline == "blocks"  # the app's own baseline
    assert set(declared.calls) == {"split", "blocks"} and declared.repeats == 2
    assert declared.grid == {k: tuple(v) for k, v in histogram.APP.grids["ci"].items()}
    assert declared.points == [dict(zip(declared.grid, v)) for v in zip(*declared.grid.values())]
    named = declare("histogram", ["split", "fetch"])
    assert named.baseline == "split" and named.variants == ("split", "fetch")  # the first named
    added = declare("histogram", ["split"], baseline="fetch")
    assert added.variants == ("fetch", "split")  # the baseline runs first when not named


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        (dict(variants=["blocks", "splt"]), ValueError, "has no variant 'splt'"),
        (dict(baseline="fech"), ValueError, "has no variant 'fech'"),
        (dict(variants="blocks"), TypeError, "a list of variant names, got the string 'blocks'"),
        (dict(grid={"blocks_per_workr": [1]}), ValueError, "no parameter 'blocks_per_workr'.*'blocks_per_worker'"),
        (dict(grid={"blocks_per_worker": []}), ValueError, "must be a non-empty list"),
        (dict(grid={"blocks_per_worker": 2}), ValueError, "must be a non-empty list"),
        (dict(size="huge"), ValueError, "size must be one of"),
        (dict(repeats=0), ValueError, "repeats must be an integer of at least 1"),
        (dict(repeats=True), ValueError, "repeats must be an integer of at least 1"),
    ],
)
def test_a_mistake_in_an_experiment_fails_where_it_is_declared(arguments, error, words):
    with pytest.raises(error, match=words):
        declare("histogram", **arguments)


def test_an_unknown_application_or_size_without_a_grid_is_refused(registered):
    with pytest.raises(ValueError, match="no application 'histogramm'.*did you mean 'histogram'"):
        declare("histogramm")
    with pytest.raises(TypeError, match="an application name or a registry.Application"):
        declare(42)
    registered(_application("only-ci"))
    with pytest.raises(ValueError, match="'only-ci' has no grid for size 'full'.*give the grid"):
        declare("only-ci", size="full")
    assert declare("only-ci", size="full", grid={"blocks_per_worker": [4]}).grid == {"blocks_per_worker": (4,)}


def test_work_that_needs_ranks_is_refused_under_a_strategy_that_gives_none(registered):
    registered(_application("needs-ranks", needs=frozenset({"ranks"}), baseline="channels"))
    with pytest.raises(ValueError, match="variant 'blocks' of 'needs-ranks' cannot run: its work needs ranks") as e:
        declare("needs-ranks", ["channels", "blocks"])
    assert "the strategies that give it: ['channels', 'eager']" in str(e.value)
    assert declare("needs-ranks", ["channels"]).variants == ("channels",)
    with pytest.raises(ValueError, match="its work needs ranks"):
        declare("needs-ranks")  # every variant it lists, the one it cannot run among them


def test_a_strategy_that_needs_placed_blocks_is_refused_for_an_application_that_places_none(registered):
    registered(_application("no-blocks", gives=frozenset()))
    with pytest.raises(ValueError, match="strategy 'blocks' needs blocks \\(placed blocks.*does not give"):
        declare("no-blocks", ["blocks"])


def test_needs_and_gives_are_names_of_known_capabilities(registered):
    with pytest.raises(ValueError, match="'typo''s needs names unknown capabilities \\['rank'\\]"):
        registered(_application("typo", needs=frozenset({"rank"})))
    with pytest.raises(TypeError, match="is a set of capability names, got 'blocks'"):
        registered(_application("typo", gives="blocks"))

    class Greedy(strategies.Strategy):
        """Needs what nothing has."""

        name = "greedy"
        needs = frozenset({"a store"})

    with pytest.raises(ValueError, match="strategy 'greedy''s needs names unknown capabilities \\['a store'\\]"):
        strategies.register(Greedy())
    assert "greedy" not in strategies.names() and "typo" not in registry.names()


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--variants", "channels,splt"], "has no variant 'splt'"),
        (["--param", "blocks_per_workr=2"], "no parameter 'blocks_per_workr'"),
        (["--variants", "channels,blocks"], "its work needs ranks"),
    ],
)
def test_the_run_command_refuses_an_experiment_before_any_cluster_starts(
    arguments, words, registered, capsys, tmp_path
):
    registered(_application("needs-ranks", needs=frozenset({"ranks"}), baseline="channels"))
    assert cli.main(["run", "needs-ranks", *arguments, "--out", str(tmp_path / "out")]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_rounds_are_at_least_repeats_and_at_most_max_repeats_by_size_or_as_given():
    assert declare("histogram", size="ci", repeats=2).max_repeats == 2  # no round more at ci
    assert declare("histogram", size="lab", repeats=3, grid={"blocks_per_worker": [1]}).max_repeats == 8
    assert declare("histogram", size="ci", repeats=5).max_repeats == 5  # never below repeats
    assert declare("histogram", size="full", repeats=1, grid={"blocks_per_worker": [1]}).max_repeats == 1
    assert declare("histogram", repeats=3, max_repeats=3).max_repeats == 3  # a fixed count
    settled = declare("histogram", ["blocks", "split"], settle=[("split", "blocks", {"blocks_per_worker": 1})])
    assert settled.comparisons_at({"blocks_per_worker": 1}) == [("split", "blocks")]
    assert settled.comparisons_at({"blocks_per_worker": 2}) == []
    assert declare("histogram", ["blocks", "split", "fetch"]).comparisons_at({}) == [
        ("split", "blocks"),
        ("fetch", "blocks"),
    ]


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        (dict(repeats=3, max_repeats=2), ValueError, "max_repeats must be an integer of at least repeats \\(3\\)"),
        (dict(settle=[("split", "fech")]), ValueError, "needs two different variants of"),
        (dict(settle=[("split", "split")]), ValueError, "needs two different variants of"),
        (dict(settle=[("split", "blocks", {"blocks_per_worker": 999})]), ValueError, "at a point the grid does not"),
        (dict(settle="split"), TypeError, "settle is a list of \\(first, second\\) pairs"),
        (dict(settle=["split"]), TypeError, "each comparison to settle is"),
    ],
)
def test_a_bad_bound_or_comparison_to_settle_fails_where_it_is_declared(arguments, error, words):
    with pytest.raises(error, match=words):
        declare("histogram", ["blocks", "split"], **arguments)


class _Prepared:
    """What the runner asks of a prepared point, with nothing placed."""

    def locality(self):
        return {}

    def holders(self):
        return {}

    def restore(self, holders):
        pass


def _rounds(declared: Declared, times: dict[str, list[float]]) -> dict[str, int]:
    """Run every point of ``declared`` with each variant's times taken in turn from ``times`` (no
    cluster, no clock): the rounds the runner ran at each point."""
    feed = {name: iter(values) for name, values in times.items()}
    runs = runner._Runs(None, declared, trace=False, nodes={}, bar=runner._progress(1, False))
    runs.once = lambda name, prepared, params, trace: (
        {"variant": name, **params, "seconds": next(feed[name])},
        0,
        None,
    )
    runs.check = lambda answers, prepared, params: None
    for index, params in enumerate(declared.points):
        runs.point(_Prepared(), params, index)
    return runs.rounds


# A warm-up then 8 timed runs each: split 2x faster than blocks from the first run on; noise alone.
TWICE = {"blocks": [1.0] + [2.0, 2.2, 1.8] * 3, "split": [1.0] + [1.0, 1.1, 0.9] * 3}
NOISE = {"blocks": [1.0] + [1.0, 1.5, 0.7, 1.2] * 2, "split": [1.0] + [1.1, 0.8, 1.4, 0.9] * 2}


def test_the_runner_stops_when_the_comparison_is_decided_and_repeats_up_to_the_bound_when_not():
    one_point = {"blocks_per_worker": [1]}
    decided = declare("histogram", ["blocks", "split"], size="lab", grid=one_point, repeats=3)
    assert _rounds(decided, TWICE) == {'{"blocks_per_worker": 1}': 3}
    assert _rounds(decided, NOISE) == {'{"blocks_per_worker": 1}': 8}
    fixed = declare("histogram", ["blocks", "split"], size="lab", grid=one_point, repeats=3, max_repeats=3)
    assert _rounds(fixed, NOISE) == {'{"blocks_per_worker": 1}': 3}
    elsewhere = declare(
        "histogram",
        ["blocks", "split"],
        size="lab",
        grid=one_point,
        repeats=3,
        settle=[runner.Comparison("split", "blocks", {"blocks_per_worker": 1}), ("blocks", "split")],
    )
    assert _rounds(elsewhere, NOISE) == {'{"blocks_per_worker": 1}': 8}
    unclaimed = declare("histogram", ["blocks", "split"], size="lab", grid=one_point, repeats=3, settle=[])
    assert _rounds(unclaimed, NOISE) == {'{"blocks_per_worker": 1}': 3}  # nothing to settle: the minimum


def test_a_round_past_the_minimum_runs_only_the_variants_still_undecided():
    """Three variants, one comparison to settle (blocks vs split, noise alone): rounds 4 to 8 run
    those two, and the third, which nothing waits on, keeps its three runs."""
    declared = declare(
        "histogram",
        ["blocks", "split", "dask"],
        size="lab",
        grid={"blocks_per_worker": [1]},
        repeats=3,
        settle=[("blocks", "split")],
    )
    feed = {name: iter(values) for name, values in {**NOISE, "dask": [1.0] * 9}.items()}
    runs = runner._Runs(None, declared, trace=False, nodes={}, bar=runner._progress(1, False))
    runs.once = lambda name, prepared, params, trace: (
        {"variant": name, **params, "seconds": next(feed[name])},
        0,
        None,
    )
    runs.check = lambda answers, prepared, params: None
    runs.point(_Prepared(), {"blocks_per_worker": 1}, 0)
    ran = Counter(row["variant"] for row in runs.results)
    assert ran == {"blocks": 8, "split": 8, "dask": 3}
    assert runs.bar.total == 1 + 5 * 2  # the bar grew by the two variants of each extra round
