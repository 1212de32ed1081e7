"""Strategies and declared applications: one block function and one merge give every variant."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from import_helpers import module_imports, with_package_inits

from workbench import apps, datasets
from workbench.lab.runner import run_experiment
from workbench.runtime import strategies, trace
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.strategies import BlockWork
from workbench.runtime.strategies.base import merge_here

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def example(session):
    """The recipes' strategy and application, registered for this module only."""
    import importlib

    # The strategy first (it registers "scattered"), then the application that lists every registered
    # strategy; reloaded, so the order holds whatever imported them before.
    importlib.reload(importlib.import_module("example_strategy"))
    example_app = importlib.reload(importlib.import_module("example_app"))
    yield example_app.APP
    apps.unregister(example_app.APP.name)
    strategies.unregister("scattered")


def test_a_new_application_gets_every_strategy(session, example):
    assert list(example.variants) == strategies.names()  # "scattered" included: registered before the app
    experiment = run_experiment(
        session, example.name, size="ci", repeats=1, progress=False
    )  # answers checked against blocks
    assert set(experiment.results["variant"]) == set(strategies.names())
    points = datasets.get("histogram", "ci").load("points")
    data = example.prepare(session, datasets.get("histogram", "ci"), {"blocks_per_worker": 3})
    try:
        sums, rows = example.variant("rro")(session, data, trace.Recorder())
    finally:
        data.release()
    assert rows == len(points)
    np.testing.assert_allclose(sums, points.sum(axis=0), rtol=1e-12)


def test_a_strategy_that_ignores_locality_moves_the_blocks(session, example):
    import example_app

    data = example.prepare(session, datasets.get("histogram", "ci"), {"blocks_per_worker": 3})

    def bytes_fetched(name: str) -> int:
        # The workers' own transfer logs, not the replica count afterwards: Dask's active memory
        # manager drops extra replicas every few seconds, so counting holders after the run races it.
        since = time.time()
        with strategies.get(name).open(session, data.blocks) as plan:
            plan.reduce(example_app.APP.work)
        return sum(t["total"] for log in trace.incoming_transfer_logs(session, since).values() for t in log)

    try:
        assert bytes_fetched("blocks") < data.blocks.nbytes / 100  # code went to the data: only partial results
        assert bytes_fetched("scattered") >= 0.9 * data.blocks.nbytes  # every block went to another worker
    finally:
        data.release()


def test_block_work_and_registries_refuse_bad_declarations(session):
    with pytest.raises(TypeError, match="BlockWork.block must be a function"):
        BlockWork(block=1, merge=sum)
    with pytest.raises(ValueError, match="fan_in must be None"):
        BlockWork(block=len, merge=sum, fan_in=1)
    with pytest.raises(ValueError, match="no strategy 'splt'.*did you mean 'split'"):
        strategies.get("splt")
    with pytest.raises(ValueError, match="no strategy 'blocs'"):
        apps.register(
            apps.Application(
                name="bad",
                description="test",
                dataset="histogram",
                prepare=lambda s, d, p: None,
                work=BlockWork(block=len, merge=sum),
                strategies=["blocs"],
                baseline="blocs",
                grids={},
                parameters={},
            )
        )
    with pytest.raises(ValueError, match="declares neither"):
        apps.register(
            apps.Application(
                name="bad",
                description="test",
                dataset="histogram",
                prepare=lambda s, d, p: None,
                strategies=["blocks"],
                baseline="blocks",
                grids={},
                parameters={},
            )
        )
    assert "bad" not in apps.names()


def test_merges_follow_the_fan_in():
    merges = []

    def merge(parts):
        merges.append(len(parts))
        return sum(parts)

    assert merge_here(BlockWork(block=len, merge=merge, fan_in=2), list(range(5))) == 10
    assert merges == [2, 2, 2, 2]  # (0+1), (2+3), 4 carried; then (1+5), 4 carried; then (6+4)
    merges.clear()
    assert merge_here(BlockWork(block=len, merge=merge), list(range(5))) == 10
    assert merges == [5]


def test_aligned_blocks_must_have_the_same_rows(session):
    import dask.array as da

    points = PlacedBlocks(session, da.ones((100, 2), chunks=(10, 2)))
    labels = PlacedBlocks(session, da.ones(100, chunks=20))
    try:
        with pytest.raises(ValueError, match="different row blocks"):
            strategies.get("blocks").open(session, points, aligned=[labels])
    finally:
        points.release()
        labels.release()


def test_plans_release_what_they_made(session):
    import dask.array as da

    placed = PlacedBlocks(session, da.arange(1000.0, chunks=100).reshape(1000, 1).rechunk((100, 1)))
    work = BlockWork(block=lambda b: float(b.sum()), merge=sum)
    try:
        with strategies.get("rechunk").open(session, placed) as plan:
            assert plan.reduce(work) == sum(range(1000))
            rechunked = plan.placed
            assert len(rechunked) == len(session.workers())
        assert rechunked.array is None and placed.array is not None  # the copy released, the blocks kept
        with strategies.get("split-materialized").open(session, placed) as plan:
            assert plan.reduce(work) == sum(range(1000))
        assert plan.materialized == []
    finally:
        placed.release()
    with pytest.raises(RuntimeError, match="released"):
        placed.view("x", lambda: 1, lambda v: None)


def _imports(path: Path, package: str) -> set[str]:
    """Every module of ``package`` that ``path`` imports when it runs (annotation-only imports left out)."""
    return {n for n in module_imports(path) if n == package or n.startswith(package + ".")}


def test_no_import_cycles_in_the_runtime_package():
    modules = {}
    for path in (ROOT / "workbench").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    # every import counts, function-local ones included, and so do the package __init__s an import runs
    graph = {
        m: {i for i in with_package_inits(m, _imports(p, "workbench"), set(modules)) if i in modules and i != m}
        for m, p in modules.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_the_cycle_test_follows_the_package_inits_an_import_runs():
    """``import a.b.c`` runs ``a.b``'s ``__init__`` first: the splitter's old lazy import of
    ``strategies.base`` ran the strategies package, which imports ``split``, which imports the splitter."""
    known = {"workbench", "workbench.runtime", "workbench.runtime.strategies", "workbench.runtime.strategies.base"}
    found = with_package_inits("workbench.runtime.splitter", {"workbench.runtime.strategies.base"}, known)
    assert found == {"workbench.runtime.strategies.base", "workbench.runtime.strategies"}  # not its own packages
    inside = with_package_inits("workbench.runtime.strategies.split", {"workbench.runtime.strategies.base"}, known)
    assert inside == {"workbench.runtime.strategies.base"}  # a package holding the module is already importing
