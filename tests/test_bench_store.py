"""``workbench bench store`` at a tiny size, and the dataClay peer (run when installed, else its reason)."""

from __future__ import annotations

import subprocess

from workbench.bench import dataclay_peer
from workbench.bench import store as bench_store


def test_store_benchmark_reports_every_path_and_ratios(session):
    report = bench_store.run(size="ci", repeats=1, calls=50, apps=("histogram",), dataclay=False, session=session)
    paths = [r["path"] for r in report["null_calls"]]
    assert paths[:4] == [
        "store: value (direct to the backend)",
        "store: future (task pinned to the backend)",
        "dask: client.submit (null task)",
        "dask: actor method",
    ]
    assert all(r["latency_ms"] > 0 for r in report["null_calls"])
    assert {r["app"] for r in report["applications"]} == {"histogram"}
    assert all(r["non_active_bytes_moved"] > r["active_bytes_moved"] for r in report["applications"])  # what moved
    text = bench_store.format_report(report)
    assert "dataClay: skipped" in text and "goal: store null call latency <= 1 ms" in text


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
    assert [r["objects"] for r in report["objects"]] == [10, 200]
    assert all(r["catalogued_after_restart"] == r["objects"] for r in report["objects"])  # reopened from SQLite
    assert report["blocks"][0]["blocks"] == 30 and report["blocks"][0]["persist_blocks_s"] > 0
    assert [g["goal"] for g in report["goals"]] == [".value() latency at 200 objects within 20 % of 10"]
    assert "persist_blocks s" in store_scale.format_report(report)
    assert len(store_scale_figure(report).renderers) == 2 * 4  # a line and its points per curve


def test_store_scale_refuses_counts_below_one():
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "bench", "store-scale", "--objects", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "--objects takes positive counts" in result.stderr
