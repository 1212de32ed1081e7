"""Traces on a real LocalCluster run, the experiment runner, and the run/report commands."""

import json
import subprocess
import sys
import time

import pandas as pd
import pytest

from workbench.apps import registry
from workbench.apps.registry import Application
from workbench.lab.runner import Experiment, declare, grid_points, run_declared, run_experiment
from workbench.runtime import strategies, trace
from workbench.runtime.strategies.blocks import DaskPlan
from workbench.viz.report import write_report

KNOWN_ACTIONS = {"compute", "transfer", "deserialize", "disk-read", "disk-write", "phase:fetch", "phase:compute"}


@pytest.fixture(scope="module")
def experiment(session):
    return run_experiment(
        session,
        "histogram",
        variants=["blocks", "fetch"],
        size="ci",
        grid={"blocks_per_worker": [1, 16]},
        repeats=2,
        progress=False,
    )


def test_runs_are_interleaved_and_warmups_apart(experiment):
    results = experiment.results
    assert len(results) == 2 * 2 * 2  # points x variants x repeats
    for _, point in results.groupby("blocks_per_worker", sort=False):
        assert list(point["variant"]) == ["blocks", "fetch", "blocks", "fetch"]  # A B A B
        assert list(point["repeat"]) == [0, 0, 1, 1]
    assert len(experiment.warmups) == 4 and not set(experiment.warmups["run_id"]) & set(results["run_id"])
    assert (results.loc[results.variant == "fetch", "phase_fetch_s"] > 0).all()
    assert experiment.metadata["machine"]["logical_cores"] >= 1 and experiment.metadata["size"] == "ci"


def test_trace_schema_on_a_real_cluster(experiment, session):
    workers = set(session.workers())
    many_blocks = experiment.results[
        (experiment.results.variant == "blocks") & (experiment.results.blocks_per_worker == 16)
    ]
    frame = experiment.traces[many_blocks.iloc[0]["run_id"]]
    assert list(frame.columns) == list(trace.FIELDS)
    assert set(frame["action"]) <= KNOWN_ACTIONS
    compute = frame[frame.action == "compute"]
    assert set(compute["worker"]) <= workers
    assert len(compute) == 2 * 16 + 1 == many_blocks.iloc[0]["tasks"]  # one task per block + the sum
    assert set(compute["task"]) == {"histogramdd", "sum_counts"}
    assert (frame["stop"] >= frame["start"]).all()
    assert set(frame["thread"]) == {0}  # one thread per worker, as indexes
    transfers = frame[frame.action == "transfer"]
    assert len(transfers) and (transfers["bytes"] > 0).all() and set(transfers["source"]) <= workers
    # the sum task fetched every partial (8**5 bins x 8 bytes) computed on the other worker
    sum_worker = compute.loc[compute.task == "sum_counts", "worker"].item()
    remote_partials = ((compute.task == "histogramdd") & (compute.worker != sum_worker)).sum()
    # at least those partials; on a busy machine Dask's work stealing may also run a block's task
    # away from its block, which then moves too (a transfer fetches several keys at once: no per-key size)
    assert remote_partials > 0 and transfers["bytes"].sum() >= remote_partials * 8**5 * 8
    moved = trace.bytes_moved(frame)
    assert moved.to_numpy().sum() == transfers["bytes"].sum() and list(moved.index) == list(moved.columns)
    assert set(trace.summary_by_action(frame).index) == set(frame["action"])


def test_experiment_queries_on_a_real_run(experiment, session):
    point = {"blocks_per_worker": 16}
    runs = experiment.runs("blocks", point).sort_values("seconds", kind="stable")
    run_id = experiment.median_run("blocks", point)
    assert run_id == runs.iloc[len(runs) // 2]["run_id"]
    frame = experiment.median_trace("blocks", point)
    assert frame is experiment.trace_of(run_id)
    moved = experiment.bytes_moved("blocks", point)
    median = runs.set_index("run_id").loc[run_id]
    assert moved.to_numpy().sum() == median["bytes_transferred"] > 0  # the partials that crossed to the sum task
    assert set(moved.index) <= set(session.workers()) | {trace.CLIENT}
    summary = experiment.summary(point).set_index("variant")
    assert summary.loc["blocks", "tasks"] == 2 * 16 + 1 and summary.loc["blocks", "runs"] == 2
    table = experiment.moved()
    assert table.loc[(16, "blocks"), "tasks"] == 2 * 16 + 1 and table.loc[(16, "fetch"), "MB_moved"] > 0
    assert len(experiment.locality_at(point)) == 2 * 16 and set(experiment.locality_at(point).values()) <= set(
        session.workers()
    )
    assert len(experiment.stats()) == 2  # fetch against blocks at each point


def test_perfetto_export_is_chrome_trace_json(experiment, tmp_path):
    frame = next(iter(experiment.traces.values()))
    records_path, perfetto_path = trace.write(frame, tmp_path / "run")
    document = json.loads(perfetto_path.read_text())
    complete = [e for e in document["traceEvents"] if e["ph"] == "X"]
    names = [e for e in document["traceEvents"] if e["ph"] == "M"]
    assert len(complete) == len(frame) and len(names) == frame["worker"].nunique()
    assert all(e["ts"] >= 0 and e["dur"] >= 0 and e["pid"] >= 1 for e in complete)
    pd.testing.assert_frame_equal(trace.read(records_path), frame, check_dtype=False)


def _emit_event() -> int:
    start = time.time()
    trace.emit("shm-attach", start, start + 0.001, task="probe", nbytes=123)
    return 1


def test_worker_events_join_the_trace(session):
    since = time.time()
    assert session.client.submit(_emit_event, pure=False).result(timeout=30) == 1
    deadline = time.time() + 10
    while not (events := trace.worker_events(session, since)) and time.time() < deadline:
        time.sleep(0.1)
    assert events and events[0]["action"] == "shm-attach" and events[0]["bytes"] == 123
    assert events[0]["worker"] in session.workers()
    trace.emit("shm-attach", 0.0, 1.0)  # outside a worker: silently nothing


def test_save_load_and_offline_report(experiment, tmp_path):
    out = experiment.save(tmp_path / "exp")
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "warmups.csv", "stats.csv", "traces"}
    loaded = Experiment.load(out)
    assert len(loaded.traces) == len(experiment.traces) == len(experiment.results)
    pd.testing.assert_frame_equal(loaded.stats(), experiment.stats(), check_dtype=False)
    html = write_report(loaded, tmp_path / "report.html").read_text()
    assert "cdn.bokeh.org" not in html and '<script src="http' not in html  # opens offline
    assert "Each variant against the baseline" in html and "time ratio variant / baseline (95% CI)" in html


def test_runner_refuses_bad_requests(session):
    refused = r"has no variant 'blcks' \(did you mean 'blocks'\?\); it has \['blocks', 'fetch', 'rechunk'"
    with pytest.raises(ValueError, match=refused):
        run_experiment(session, "histogram", variants=["blcks"])
    with pytest.raises(ValueError, match="did you mean 'histogram'"):
        run_experiment(session, "histogramm")
    with pytest.raises(FileNotFoundError, match="holds no results.json"):
        Experiment.load("/nonexistent")
    assert grid_points({"a": [1, 2], "b": [3]}) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]


def test_the_run_path_calls_the_declared_variants_without_checking_them_again(session, monkeypatch):
    declared = declare("histogram", ["blocks", "split"], grid={"blocks_per_worker": [1]}, repeats=1)

    def checked_again(self, name):
        raise AssertionError(f"variant {name!r} checked again after the experiment was declared")

    monkeypatch.setattr(registry.Application, "variant", checked_again)
    experiment = run_declared(session, declared, trace=False, progress=False)
    assert list(experiment.results["variant"]) == ["blocks", "split"]
    assert experiment.metadata["variants"] == ["blocks", "split"] and experiment.metadata["repeats"] == 1


class _DropsABlock(strategies.Strategy):
    """A strategy with a bug: the last block's result is lost."""

    name = "drops-a-block"
    description = "one task per block, but the last block's result is lost"

    class plan(DaskPlan):  # noqa: N801
        def map(self, work, *args):
            return super().map(work, *args)[:-1]


def test_a_variant_with_another_answer_is_caught(session):
    from workbench.apps import histogram

    released = []

    def prepare(session, dataset, params):
        data = histogram.prepare(session, dataset, {"blocks_per_worker": 2})
        original = data.release
        data.release = lambda: (released.append(True), original())
        return data

    strategies.register(_DropsABlock())
    registry.register(
        Application(
            name="disagree",
            description="test",
            dataset="histogram",
            prepare=prepare,
            work=histogram.WORK,
            strategies=["blocks", "drops-a-block"],
            baseline="blocks",
            grids={"ci": {"n": [1]}},
            same_answer=histogram.APP.same_answer,
            parameters={"n": "a parameter nothing reads"},
        )
    )
    try:
        with pytest.raises(
            AssertionError, match="variant 'drops-a-block' gives a different answer from the baseline 'blocks'"
        ):
            run_experiment(session, "disagree", progress=False)
    finally:
        registry.unregister("disagree")
        strategies.unregister("drops-a-block")
    assert released  # what was placed is released even when the run fails


def test_an_application_must_declare_the_parameters_its_grids_use():
    from workbench.apps import histogram

    with pytest.raises(ValueError, match="has no parameter 'n'"):
        registry.register(
            Application(
                name="undeclared",
                description="test",
                dataset="histogram",
                prepare=lambda s, d, p: None,
                work=histogram.WORK,
                strategies=["blocks"],
                baseline="blocks",
                grids={"ci": {"n": [1]}},
                parameters={},
            )
        )
    with pytest.raises(ValueError, match="no parameter 'blocks_per_workers'.*did you mean 'blocks_per_worker'"):
        run_experiment(None, "histogram", grid={"blocks_per_workers": [1]}, progress=False)


def test_cli_run_writes_results_traces_and_prints_the_table(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "run",
            "histogram",
            "--variants",
            "blocks,fetch",
            "--size",
            "ci",
            "--repeat",
            "2",
            "--param",
            "blocks_per_worker=2",
            "--workers",
            "2",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["stats"] and document["stats"][0]["variant"] == "fetch"
    assert "fetch vs blocks" in result.stderr and "time ratio (95% CI)" in result.stderr
    assert len(list((out / "traces").glob("*.perfetto.json"))) == 4
    report = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "report", str(out)], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0 and (out / "report.html").exists()
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "report", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "holds no results.json" in bad.stderr


def test_experiment_panel_runs_and_scales(session):
    import workbench
    from workbench.viz.panels import ExperimentPanel

    panel = ExperimentPanel(session, "ci")
    assert panel.workers.disabled is False and panel.variants.value[:2] == ("blocks", "fetch")
    panel.variants.value = ("blocks", "fetch")
    panel.knobs["blocks_per_worker"].value = 2
    experiment = panel.run()
    assert len(panel.figures.children) == 5 and "done" in panel.status.value and "fetch" in panel.table.value
    assert set(experiment.results["blocks_per_worker"]) == {2}
    with workbench.start(n_workers=1, timeout=60) as small:
        small_panel = ExperimentPanel(small, "ci")
        small_panel.workers.value = 2
        small_panel.variants.value = ("blocks",)
        small_panel.run()
        assert len(small.workers()) == 2 and small_panel.table.value == ""


def test_panel_knobs_follow_the_application(session):
    from workbench.viz.panels import ExperimentPanel

    panel = ExperimentPanel(session, "ci", app="kmeans")
    assert set(panel.knobs) == {"points", "dims", "centres", "iterations"}
    assert panel.variants.value[:3] == ("files", "dask", "rro")
    panel.knobs["points"].value = 65_536
    panel.knobs["dims"].value = 8
    panel.knobs["iterations"].value = 3
    panel.variants.value = ("files", "rro")
    experiment = panel.run()
    assert set(experiment.results["variant"]) == {"files", "rro"} and "rro" in panel.table.value
    panel.app.value = "matmul"
    assert set(panel.knobs) == {"blocks", "block_size"} and len(panel.knob_box.children) == 2
