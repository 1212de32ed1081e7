"""The task runtime (IN / INOUT / RRO in the files, dask and rro modes) and the paper's two applications."""

import time
from collections import Counter

import numpy as np
import pytest

import workbench
from workbench import datasets, kernels
from workbench.apps import kmeans as kmeans_app
from workbench.memory import shm
from workbench.runtime import rro, trace
from workbench.runtime.tasks import INOUT, MODES, RRO, TaskRuntime, task


@task(a=RRO, b=RRO, c=INOUT)
def multiply(a, b, c):
    kernels.multiply_accumulate(a, b, c)


@task(x=RRO)
def total(x, scale):
    return float(x.sum()) * scale


@task(c=INOUT)
def bad_inout(c):
    c += 1
    return "not allowed"


def _events(session, since, at_least: int):
    """Worker events since ``since``, once ``at_least`` of them have reached the scheduler (they travel
    through its batched stream): a bounded wait on a state, not a fixed sleep."""
    deadline = time.monotonic() + 30
    while True:
        events = trace.worker_events(session, since)
        if len(events) >= at_least or time.monotonic() > deadline:
            return Counter((e["action"], e["task"]) for e in events)
        time.sleep(0.05)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_gives_the_same_product(session, mode):
    rng = np.random.default_rng(3)
    a = [[rng.random((32, 32)) for _ in range(3)] for _ in range(3)]
    b = [[rng.random((32, 32)) for _ in range(3)] for _ in range(3)]
    with TaskRuntime(session, mode):
        af = [[session.client.scatter(x, hash=False) for x in row] for row in a]
        bf = [[session.client.scatter(x, hash=False) for x in row] for row in b]
        c = [[np.zeros((32, 32)) for _ in range(3)] for _ in range(3)]
        for i in range(3):
            for j in range(3):
                for k in range(3):
                    c[i][j] = multiply(af[i][k], bf[k][j], c[i][j])
        product = np.block(session.gather(c))
    np.testing.assert_allclose(product, np.block(a) @ np.block(b), rtol=1e-12)


def test_inout_is_a_renaming_the_old_version_stays(session):
    base = np.ones((8, 8))
    with TaskRuntime(session, "dask"):
        first = session.client.scatter(base, hash=False)
        second = multiply(np.eye(8), np.eye(8), first)  # c + I
        np.testing.assert_array_equal(session.gather(first), base)  # untouched
        np.testing.assert_array_equal(session.gather(second), base + np.eye(8))
        with pytest.raises(TypeError, match="INOUT parameters \\['c'\\] and returned a value"):
            session.gather(bad_inout(base))


def test_rro_publishes_once_per_node_and_hits_the_table(session):
    x = session.client.scatter(np.arange(100_000.0), hash=False)  # in the cluster, like a task result
    since = time.time()
    with TaskRuntime(session, "rro") as runtime:
        results = session.gather([total(x, s) for s in range(12)])  # submitted while publishing: spread
        results += session.gather([total(x, s) for s in range(12, 16)])  # published: no RRO dependency
        segments = [i for i in shm.list_segments() if i.name.startswith(runtime.segment_prefix)]
        assert len(segments) == 1  # one node, one copy
        assert set(segments[0].mapped_by) >= set(session.run(__import__("os").getpid).values())
    assert results == [np.arange(100_000.0).sum() * s for s in range(16)]
    events = _events(session, since, at_least=17)
    assert events[("shm-create", "rro-publish")] == 1  # one copy for the node
    assert events[("shm-attach", "rro")] == 1  # the other worker maps it, once
    assert events[("table-hit", "rro")] == 15  # every other task: a lookup in the table, no copy
    assert sum(events.values()) == 17
    assert not [i for i in shm.list_segments() if i.name.startswith(runtime.segment_prefix)]  # released
    assert set(session.run(rro.table_size).values()) == {0}


def test_a_client_array_is_shared_by_the_client_itself(session):
    x = np.arange(100_000.0)
    recorder = trace.Recorder()
    since = time.time()
    workers = session.workers()
    with TaskRuntime(session, "rro", recorder=recorder):
        assert session.gather([total.submit(x, 1.0, workers=[w]) for w in workers * 2]) == [x.sum()] * 4
    assert [r["action"] for r in recorder.records] == ["shm-create"]  # made here, not sent to a worker
    events = _events(session, since, at_least=4)
    assert events[("shm-attach", "rro")] == 2 and events[("table-hit", "rro")] == 2  # each worker maps it once


def test_each_simulated_node_builds_its_own_copy():
    x = np.arange(50_000.0)
    with workbench.start(nodes=["n1", "n1", "n2"], timeout=60) as session:
        with TaskRuntime(session, "rro") as runtime:
            assert session.gather([total(x, 1.0) for _ in range(9)]) == [x.sum()] * 9
            names = sorted(i.name for i in shm.list_segments() if i.name.startswith(runtime.segment_prefix))
            assert [n.rsplit("-", 1)[-1] for n in names] == ["n1", "n2"]
        assert not [i for i in shm.list_segments() if i.name.startswith(runtime.segment_prefix)]


def test_files_mode_reads_the_file_every_task(session):
    x = np.arange(10_000.0)
    since = time.time()
    with TaskRuntime(session, "files") as runtime:
        assert session.gather([total(x, 2.0) for _ in range(5)]) == [x.sum() * 2.0] * 5
        directory = runtime._files_dir
        assert len(list(directory.glob("*.npy"))) == 1  # one version, one file
    assert not directory.exists()  # removed with the runtime
    assert _events(session, since, at_least=5)[("file-read", "file-read")] == 5


def test_task_declaration_errors():
    with pytest.raises(TypeError, match="names parameters \\['y'\\]"):
        task(y=RRO)(lambda x: x)
    with pytest.raises(TypeError, match="must be IN, INOUT or RRO"):
        task(x="RRO")(lambda x: x)
    with pytest.raises(RuntimeError, match="inside 'with TaskRuntime"):
        total(np.zeros(3), 1.0)


def test_mode_must_be_known(session):
    with pytest.raises(ValueError, match="mode must be one of"):
        TaskRuntime(session, "mpi")


@pytest.mark.parametrize("app", ["kmeans", "matmul"])
def test_applications_agree_across_variants(session, app):
    from workbench.apps import registry

    application = registry.get(app)
    params = {k: v[0] for k, v in application.grids["ci"].items()}
    shape = {k: v for k, v in params.items() if k != "iterations"}
    dataset = datasets.get(application.dataset, "ci", **shape)
    data = application.prepare(session, dataset, params)
    try:
        answers = {mode: application.variant(mode)(session, data, trace.Recorder()) for mode in MODES}
    finally:
        data.release()
    for mode in MODES:
        assert application.same_answer(answers[mode], answers["files"]), mode
    if app == "matmul":
        expected = dataset.load("A") @ dataset.load("B")
        np.testing.assert_allclose(answers["rro"], expected, rtol=1e-12)
    else:
        points, centres = dataset.load("points"), dataset.load("centres")
        for _ in range(answers["rro"][1]):  # the same number of Lloyd steps on the whole array
            _, sums, counts = kernels.kmeans_partial(points, centres)
            centres = kernels.kmeans_update(sums, counts, centres)
        np.testing.assert_allclose(answers["rro"][0], centres, atol=1e-9)


def test_kmeans_stops_at_convergence(session):
    dataset = datasets.get("kmeans", "ci", points=4096, dims=2, centres=2, block=1024)
    data = kmeans_app.prepare(session, dataset, {"iterations": 100})
    try:
        centres, iterations = kmeans_app.APP.variant("dask")(session, data, trace.Recorder())
    finally:
        data.release()
    assert iterations < 100  # Lloyd converges long before
    assert centres.shape == (2, 2)


def test_reproductions_run_and_line_up_with_the_paper(session):
    from workbench.lab import reproduce

    before = {i.name for i in shm.list_segments()}
    t1 = reproduce.table1(session, "ci", repeats=2, sweeps=["dims"])  # lesson 02 runs both of ci's sweeps
    assert set(t1["sweep"]) == {"dims"} and set(t1["variant"]) == {"rro"}
    assert (t1["baseline"] == "files").all() and t1["p_value"].between(0, 1).all()
    assert t1.loc[(t1.sweep == "dims") & (t1.value == 64), "paper_ci_pct"].item() == "[-10.4%, -9.3%]"
    t2 = reproduce.table2(session, "ci", repeats=2)
    assert list(zip(t2["blocks"], t2["block_size"])) == [(2, 64), (4, 32)]
    assert {i.name for i in shm.list_segments()} <= before  # every run released its copies


def test_table1_reads_a_point_the_hook_measured_instead_of_running_it_again(monkeypatch):
    """Lesson 02's hook runs Table I's centre point (ci) with files, dask and rro: the table reads that
    point from it (only rro against files), and runs only the others; an experiment with fewer runs
    than asked, another baseline, or without a needed variant is not read."""
    import pandas as pd

    from workbench.lab import reproduce
    from workbench.lab.runner import Experiment

    centre = reproduce.TABLE1_SWEEPS["ci"]["centre"]
    rows = [
        {**centre, "variant": v, "repeat": r, "seconds": 1.0 + 0.1 * r + (0.5 if v == "files" else 0.0)}
        for r in range(3)
        for v in ("files", "dask", "rro")
    ]
    hook = Experiment("kmeans", "files", list(centre), pd.DataFrame(rows), pd.DataFrame())
    ran = []

    def run_experiment(session, app, variants, size, grid, repeats, progress):
        ran.append({k: v[0] for k, v in grid.items()})
        results = hook.results[hook.results["variant"].isin(variants)].assign(**{k: v[0] for k, v in grid.items()})
        return Experiment(app, "files", list(grid), results, hook.warmups)

    monkeypatch.setattr(reproduce, "run_experiment", run_experiment)
    table = reproduce.table1(None, "ci", repeats=3, reuse=[hook])
    assert centre not in ran and len(ran) == 2  # centres 2 and dims 8: the centre (centres 4, dims 64) was read
    assert set(table["variant"]) == {"rro"} and len(table) == 4
    assert not reproduce._reusable_points(hook, ("files", "rro"), 4)  # 3 runs each, 4 asked for
    assert not reproduce._reusable_points(hook, ("rro", "files"), 3)  # another baseline
    assert not reproduce._reusable_points(hook, ("files", "shm"), 3)  # a variant it did not run


def test_bench_shm_reports_every_way_it_can_run(session):
    from workbench.bench import shm as bench_shm

    report = bench_shm.run(
        size="ci",
        size_mb=4,
        tasks=2,
        session=session,
        only=["workbench-rro", "dask", "files", "multiprocessing.shared_memory"],
    )
    ways = {r["way"]: r for r in report.rows}
    assert set(ways) == {"workbench-rro", "dask", "files", "multiprocessing.shared_memory"}
    assert ways["workbench-rro"]["time_vs_workbench"] == 1.0
    assert all(r["tasks"] == 2 * len(session.workers()) for r in ways.values())
    assert set(report.parts["attach_seconds_by_size"]) == {"16MB", "64MB", "256MB"}
    assert "workbench-rro" in bench_shm.format_report(report)
    goals = {g["goal"].split(" (")[0]: g for g in report.goals}
    assert list(goals) == [
        "RRO faster than files",
        "RRO fastest of the shared-memory peers",
        "RRO within 10 % of the node's read floor, or the fastest way by at least 5 %",
        "RRO's peak extra memory about one copy of the array per node",
        "RRO moves no copy of the array between workers",
        "Table I at 64 dims: k-means with RRO faster than files, warm repeats",  # ci's point with the most dimensions
    ]
    files, fastest, _, memory, _, table1 = goals.values()
    assert set(table1["peers"]) == {"RRO", "files"} and table1["noise"] is not None  # 3 runs each
    assert files["peers"] == {"RRO": ways["workbench-rro"]["seconds"], "files": ways["files"]["seconds"]}
    assert files["measured"] == ways["files"]["seconds"] / ways["workbench-rro"]["seconds"]
    others = [r["seconds"] for name, r in ways.items() if name != "workbench-rro"]
    assert (
        set(fastest["peers"]) == {"RRO", "dask", "files", "multiprocessing.shared_memory"}
        and fastest["measured"] == min(others) / ways["workbench-rro"]["seconds"]
    )
    assert memory["better"] == "lower" and memory["measured"] == ways["workbench-rro"]["copies_per_node"]
    for g in goals.values():
        assert g["met"] == (
            g["measured"] >= g["threshold"] if g["better"] == "higher" else g["measured"] <= g["threshold"]
        )
    for g in (files, fastest, memory):
        assert g["noise"] is None  # one run per way: no repeats to take a spread from
    with pytest.raises(ValueError, match="unknown peers \\['redis'\\]"):
        bench_shm.run(size_mb=1, only=["redis"], session=session)
    with pytest.raises(ValueError, match="size must be one of \\['ci', 'lab', 'full'\\], got 'tiny'"):
        bench_shm.run(size="tiny", session=session)


def test_missing_peers_are_skipped_with_how_to_install(session, monkeypatch):
    from workbench.bench import shm as bench_shm

    monkeypatch.setitem(bench_shm.PEERS, "imaginary", (lambda *a: [], "no_such_module_xyz"))
    report = bench_shm.run(size_mb=1, tasks=1, session=session, only=["workbench-rro", "imaginary"], table1=False)
    assert "pip install no_such_module_xyz" in report.parts["skipped_ways"]["imaginary"]
    assert [g["goal"].split(" (")[0] for g in report.goals] == [  # the goals that need a peer are left out
        "RRO within 10 % of the node's read floor, or the fastest way by at least 5 %",
        "RRO's peak extra memory about one copy of the array per node",
        "RRO moves no copy of the array between workers",
    ]
