"""The questions every caller asks of an Experiment, on one built by hand (no cluster)."""

import pandas as pd
import pytest

from workbench.lab.runner import Experiment, point_key
from workbench.runtime import trace


def _record(worker: str, action: str, nbytes: int = 0, source: str = "") -> dict:
    """One trace record (see :mod:`workbench.runtime.trace`)."""
    return {
        "worker": worker,
        "thread": 0,
        "task": "t",
        "key": "k",
        "action": action,
        "start": 0.0,
        "stop": 1.0,
        "bytes": nbytes,
        "source": source,
        "node": "n",
    }


def _experiment(traced: bool = True) -> Experiment:
    """Two variants x two points x three runs; run i of a variant moved i x 100 bytes from a to b."""
    rows, traces = [], {}
    for bpw in (1, 8):
        for repeat, seconds in enumerate((0.3, 0.1, 0.2)):  # median: the 0.2 s run (repeat 2)
            for variant, scale in (("blocks", 1.0), ("fetch", 2.0)):
                run_id = f"run-{len(rows):04d}"
                nbytes = (repeat + 1) * 100 * (1 if variant == "blocks" else 10)
                row = {"run_id": run_id, "variant": variant, "blocks_per_worker": bpw, "seconds": seconds * scale}
                row["repeat"] = repeat
                if variant == "fetch":
                    row["phase_fetch_s"] = seconds
                if traced:
                    row |= {"tasks": 2 * bpw + 1 if variant == "blocks" else 0, "bytes_transferred": nbytes}
                    records = [_record("a", "compute"), _record("b", "compute"), _record("b", "transfer", nbytes, "a")]
                    traces[run_id] = trace.normalise(records)
                rows.append(row)
    locality = {point_key({"blocks_per_worker": b}): {f"({i}, 0)": "ab"[i % 2] for i in range(2 * b)} for b in (1, 8)}
    return Experiment(
        app="histogram",
        baseline="blocks",
        parameters=["blocks_per_worker"],
        results=pd.DataFrame(rows),
        warmups=pd.DataFrame(),
        traces=traces,
        locality=locality,
        metadata={"app": "histogram", "variants": ["blocks", "fetch"]},
    )


def test_points_runs_and_stats():
    experiment = _experiment()
    assert experiment.points() == [{"blocks_per_worker": 1}, {"blocks_per_worker": 8}]
    assert len(experiment.runs("fetch", {"blocks_per_worker": 8})) == 3
    assert experiment.compared
    table = experiment.stats()
    assert list(table["variant"]) == ["fetch", "fetch"] and (table["time_variant_s"] > table["time_baseline_s"]).all()
    with pytest.raises(ValueError, match="no variant 'fech'"):
        experiment.runs("fech")
    with pytest.raises(ValueError, match="no parameter 'blocks'"):
        experiment.runs(point={"blocks": 1})


def test_summary_means_runs_tasks_and_mb():
    experiment = _experiment()
    summary = experiment.summary()
    assert list(summary.columns) == ["blocks_per_worker", "variant", "mean_s", "runs", "tasks", "MB_moved"]
    blocks_8 = summary[(summary.variant == "blocks") & (summary.blocks_per_worker == 8)].iloc[0]
    assert blocks_8["mean_s"] == pytest.approx(0.2) and blocks_8["runs"] == 3 and blocks_8["tasks"] == 17
    assert blocks_8["MB_moved"] == pytest.approx(200 / 1e6)
    at_one = experiment.summary({"blocks_per_worker": 1}, phases=True)
    assert set(at_one["blocks_per_worker"]) == {1} and len(at_one) == 2
    assert at_one.set_index("variant").loc["fetch", "phase_fetch_s"] == pytest.approx(0.2)
    untraced = _experiment(traced=False).summary()
    assert "tasks" not in untraced and "MB_moved" not in untraced and (untraced["runs"] == 3).all()


def test_median_run_and_its_trace():
    experiment = _experiment()
    run_id = experiment.median_run("fetch", {"blocks_per_worker": 8})
    row = experiment.results.set_index("run_id").loc[run_id]
    assert (row["variant"], row["blocks_per_worker"], row["repeat"]) == ("fetch", 8, 2)
    assert experiment.median_trace("fetch", {"blocks_per_worker": 8}) is experiment.trace_of(run_id)
    # over every point (six runs): the upper middle one of the sorted times
    assert experiment.results.set_index("run_id").loc[experiment.median_run("blocks"), "seconds"] == 0.2
    with pytest.raises(ValueError, match="no run of 'blocks' at"):
        experiment.median_run("blocks", {"blocks_per_worker": 2})
    with pytest.raises(KeyError, match="no trace of run 'run-9999'"):
        experiment.trace_of("run-9999")


def test_bytes_moved_of_the_median_run_and_of_several_variants():
    experiment = _experiment()
    point = {"blocks_per_worker": 1}
    blocks = experiment.bytes_moved("blocks", point)
    assert list(blocks.index) == list(blocks.columns) == ["a", "b"]
    assert blocks.loc["a", "b"] == 300 and blocks.to_numpy().sum() == 300  # the median run moved 3 x 100 bytes
    both = experiment.bytes_moved(["blocks", "fetch"], point)
    assert both.loc["a", "b"] == 300 + 3000
    with pytest.raises(ValueError, match="empty list"):
        experiment.bytes_moved([], point)


def test_moved_per_variant():
    experiment = _experiment()
    moved = experiment.moved()
    assert moved.index.names == ["blocks_per_worker", "variant"]
    assert list(moved.columns) == ["seconds", "tasks", "MB_moved"]
    assert moved.loc[(8, "fetch"), "seconds"] == pytest.approx(0.4) and moved.loc[(8, "fetch"), "tasks"] == 0
    at_one = experiment.moved({"blocks_per_worker": 1})
    assert list(at_one.index) == ["blocks", "fetch"] and at_one.loc["blocks", "MB_moved"] == pytest.approx(0.0002)
    assert list(_experiment(traced=False).moved().columns) == ["seconds"]


def test_locality_at_a_point():
    experiment = _experiment()
    assert len(experiment.locality_at({"blocks_per_worker": 8})) == 16
    assert experiment.locality_at() == experiment.locality_at({"blocks_per_worker": 8})  # the last point run
    with pytest.raises(KeyError, match="no block locality recorded at"):
        experiment.locality_at({"blocks_per_worker": 3})


def test_queries_survive_save_and_load(tmp_path):
    experiment = _experiment()
    loaded = Experiment.load(experiment.save(tmp_path / "exp"))
    point = {"blocks_per_worker": 8}
    assert loaded.median_run("fetch", point) == experiment.median_run("fetch", point)
    pd.testing.assert_frame_equal(loaded.bytes_moved("fetch", point), experiment.bytes_moved("fetch", point))
    assert loaded.locality_at(point) == experiment.locality_at(point)
    pd.testing.assert_frame_equal(loaded.moved(), experiment.moved())
