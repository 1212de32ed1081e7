"""``workbench bench store`` at a tiny size, and the dataClay peer (run when installed, else its reason)."""

from __future__ import annotations

import json
import subprocess

import pytest

from workbench.bench import dataclay_peer
from workbench.bench import store as bench_store
from workbench.bench.report import Report


def test_store_benchmark_reports_every_path_and_ratios(session):
    report = bench_store.run(size="ci", repeats=2, calls=50, apps=("histogram",), dataclay=False, session=session)
    assert (
        Report.from_json(json.loads(json.dumps(report.to_json(), default=str))).rows == report.rows
    )  # the model, as bench all reads it back
    paths = [r["path"] for r in report.rows]
    assert paths[:4] == [
        "store: value (direct to the backend)",
        "store: future (task pinned to the backend)",
        "dask: client.submit (null task)",
        "dask: actor method",
    ]
    assert all(r["latency_ms"] > 0 for r in report.rows)
    assert {r["app"] for r in report.parts["applications"]} == {"histogram"}
    assert all(
        r["non_active_bytes_moved"] > r["active_bytes_moved"] for r in report.parts["applications"]
    )  # what moved
    text = bench_store.format_report(report)
    assert "dataClay: skipped" in text and "goal: store null call latency: measured" in text
    assert all(len(r["active_runs_s"]) == len(r["non_active_runs_s"]) == 2 for r in report.parts["applications"])
    goals = [g["goal"] for g in report.goals]  # no k-means asked for, no dataClay
    points = len(report.parts["applications"])
    assert goals[0] == "store null call latency" and len(goals) == 4 + 2 * points  # each point: gain, messages
    assert all(g.startswith("histogram active-split at ") for g in goals[1 : 1 + 2 * points])
    assert goals[1 + 2 * points].startswith("store fetch of 1 MiB under the object's lock")
    at_once = report.parts["moves_at_once"]
    assert at_once["nbytes"] == 2**20 * report.workers and at_once["MBps"] > 0 and "all 2 backends" in text
    paths = ("store: fetch (backend -> client)", "store: move (backend -> backend)", "dask: gather (worker -> client)")
    sizes = bench_store.TRANSFER_SIZES["ci"]
    assert {(r["path"], r["nbytes"]) for r in report.parts["copies"]} == {(p, n) for p in paths for n in sizes}
    assert all(r["MBps"] > 0 and r["best_MBps"] >= r["MBps"] for r in report.parts["copies"])
    assert set(report.parts["readers"]) == {"read_s", "two_reads_ratio", "fetch_alone_ms", "fetch_beside_read_ms"}
    assert "copies of an object" in text and "read-only calls together" in text and "msgs/worker" in text
    assert all(
        set(r["counts"]) == set(bench_store.VARIANTS) == set(r["variants"]) for r in report.parts["applications"]
    )
    with pytest.raises(ValueError, match="size must be one of"):
        bench_store.run(size="big", session=session)


def test_store_goals_compare_the_peers_side_by_side():
    calls = [{"path": "store: value (direct to the backend)", "latency_ms": 0.5}, {"path": "dask", "latency_ms": 2.0}]
    kmeans = {
        "app": "kmeans",
        "parameters": {"dims": 128},
        "active_s": 1.0,
        "non_active_s": 2.5,
        "ratio": 2.5,
        "active_runs_s": [0.9, 1.0, 1.1],
        "non_active_runs_s": [2.5, 2.5],
    }
    latency, k = bench_store.store_goals(calls, [kmeans, {**kmeans, "app": "matmul"}])  # no goal for matmul
    assert (
        latency["met"]
        and latency["better"] == "lower"
        and latency["peers"]
        == {
            "store: value (direct to the backend)": 0.5,
            "dask": 2.0,
        }
    )
    assert k["goal"].startswith("kmeans active at {'dims': 128}: >= 2x non-active")
    assert k["threshold"] == 2.0  # no rate measured: no bound
    assert (k["measured"], k["threshold"], k["met"]) == (2.5, 2.0, True)
    assert k["peers"] == {"active": 1.0, "non-active": 2.5} and abs(k["noise"] - 0.1) < 1e-12
    with_dataclay = bench_store.store_goals([*calls, {"path": "dataClay 4.3.1: active method", "latency_ms": 0.25}], [])
    assert with_dataclay[1]["measured"] == 2.0 and not with_dataclay[1]["met"]  # store 2x dataClay's latency


def _dataclay_processes() -> int:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if "dataclay." in line or line.startswith("redis-server"))


def test_dataclay_peer_runs_when_installed_and_says_why_not_otherwise():
    before = _dataclay_processes()
    result = dataclay_peer.measure(calls=50)
    reason = dataclay_peer.unavailable_reason()
    if reason is not None:
        assert result == {"available": False, "reason": reason}
        assert "install" in reason
    else:
        assert result["available"], result.get("reason")
        assert result["version"] == "4.3.1" and result["latency_ms"] > 0
    assert _dataclay_processes() == before  # Redis, metadata service and backend all stopped


def test_store_scale_benchmark_reports_curves_goals_and_a_figure():
    from workbench.bench import store_scale
    from workbench.viz.timing import store_scale_figure

    report = store_scale.run("ci", objects=(10, 200), blocks=(30,), workers=1)  # a cluster of its own
    assert (
        Report.from_json(json.loads(json.dumps(report.to_json(), default=str))).goals == report.goals
    )  # the model, as bench all reads it back
    assert [r["objects"] for r in report.rows] == [10, 200]
    assert all(r["catalogued_after_restart"] == r["objects"] for r in report.rows)  # reopened from SQLite
    assert report.parts["blocks"][0]["blocks"] == 30 and report.parts["blocks"][0]["persist_blocks_s"] > 0
    (latency,) = report.goals  # the 10^4-block and 10^5-object goals did not run: left out
    assert latency["goal"] == ".value() latency at 200 objects within 20 % of 10 (ratio)"
    assert latency["peers"] == {f"{r['objects']} objects": r["value_latency_ms"] for r in report.rows}
    assert latency["met"] == (latency["measured"] <= latency["threshold"] == 1.2) and latency["better"] == "lower"
    assert "persist_blocks s" in store_scale.format_report(report)
    assert (
        len(store_scale_figure(report.rows, report.parts["blocks"]).renderers) == 2 * 4
    )  # a line and its points per curve


def test_store_scale_goals_at_the_counts_the_issue_names():
    from workbench.bench import store_scale

    top = {"objects": 100_000, "make_persistent_many_s": 6.0, "locations_s": 0.05, "restart_s": 1.0}
    goals = store_scale.scale_goals([top], [{"blocks": 10_000, "persist_blocks_s": 0.4}])
    assert [(g["goal"], g["measured"], g["met"]) for g in goals] == [
        ("persist_blocks of 10,000 blocks", 0.4, True),
        ("make_persistent_many of 10^5 objects", 6.0, False),
        ("locations of 10^5 objects", 50.0, True),
        ("restart with 10^5 catalogued objects", 1.0, True),
    ]
    with pytest.raises(ValueError, match="size must be one of"):
        store_scale.run("xl")


def test_store_scale_refuses_counts_below_one():
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "bench", "store-scale", "--objects", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "--objects takes positive counts" in result.stderr


def test_an_active_kmeans_iteration_sends_a_fixed_number_of_messages_per_worker(session):
    """Counts, not times (issue 36): one active call per worker's partition keeps the messages per
    worker fixed as the blocks grow; one call per block does not, and its goal fails."""
    from workbench.lab.runner import run_experiment

    workers = len(session.workers())
    found = {}
    for blocks_per_worker in (1, 8):
        experiment = run_experiment(
            session,
            "kmeans",
            ["active", "active-split"],
            size="ci",
            grid={"blocks_per_worker": [blocks_per_worker], "iterations": [3]},
            repeats=1,
            progress=False,
            baseline="active",
        )
        for variant in ("active", "active-split"):
            found[(variant, blocks_per_worker)] = bench_store.counts_per_iteration(experiment.runs(variant), workers)
    split_1, split_8 = found[("active-split", 1)], found[("active-split", 8)]
    active_1, active_8 = found[("active", 1)], found[("active", 8)]
    for c in (split_1, split_8):  # a call per partition (one per worker) and the merge
        assert (c["tasks_per_iteration"], c["dependencies_per_iteration"]) == (workers + 1, workers)
        assert c["iterations"] >= 2 and c["messages_per_worker_per_iteration"] <= bench_store.MESSAGES_PER_WORKER
    assert split_8["store_messages_per_iteration"] == split_1["store_messages_per_iteration"]
    assert split_8["messages_per_iteration"] <= split_1["messages_per_iteration"] + workers  # not 8x
    assert active_8["tasks_per_iteration"] == 8 * workers + 1  # a call per block: the count that grows
    assert active_8["messages_per_worker_per_iteration"] > 4 * active_1["messages_per_worker_per_iteration"]
    row = {
        "app": "kmeans",
        "parameters": {"blocks_per_worker": 8},
        "active_s": 1.0,
        "non_active_s": 2.0,
        "ratio": 2.0,
        "active_runs_s": [1.0],
        "non_active_runs_s": [2.0],
        "counts": {"active": active_8, "active-split": split_8},
    }
    goals = {
        g["goal"].split(" at ")[0]: g for g in bench_store.store_goals([{"path": "store", "latency_ms": 0.5}], [row])
    }
    assert goals["kmeans active-split"]["met"] and goals["kmeans active-split"]["threshold"] == 10
    assert active_8["messages_per_worker_per_iteration"] > bench_store.MESSAGES_PER_WORKER  # printed, not a goal
    assert [g for g in goals if "messages" in goals[g]["goal"]] == ["kmeans active-split"]


def test_where_one_node_moves_the_bytes_fast_the_gain_goal_is_the_bound_it_measured():
    # non-active: 1.0 s, of which 400 MB at 2000 MB/s = 0.2 s moving: no variant gains more than 1.25x
    assert bench_store.move_bound(1.0, 400e6, 2000.0) == pytest.approx(1.25)
    assert bench_store.move_bound(1.0, 4000e6, 2000.0) is None  # moving is all of it: no bound below 2x
    assert bench_store.move_bound(1.0, 400e6, None) is None  # no rate measured
    row = {
        "app": "kmeans",
        "parameters": {"dims": 16},
        "variants": {
            "active": {"seconds": 0.85, "runs_s": [0.85, 0.85], "bytes_moved": 0},
            "non-active": {"seconds": 1.0, "runs_s": [1.0, 1.0], "bytes_moved": 400_000_000},
        },
    }
    near = bench_store.gain_goal(row, "active", 2000.0)
    assert near["threshold"] == 1.12 and near["met"] and near["bound"] is None  # met: no bound printed
    assert near["goal"] == bench_store.gain_goal(row, "active", 200.0)["goal"]  # no figure in the words
    slow = {**row, "variants": {**row["variants"], "active": {"seconds": 0.95, "runs_s": [0.95], "bytes_moved": 0}}}
    unmet = bench_store.gain_goal(slow, "active", 2000.0)
    assert not unmet["met"] and "1.25x" in unmet["bound"] and "2000 MB/s" in unmet["bound"]  # 1.05x < 90 % of 1.25x
    slow_link = bench_store.gain_goal(row, "active", 200.0)  # 2 s to move: the 2x goal stands, not met
    assert slow_link["threshold"] == 2.0 and not slow_link["met"]
