import json
import subprocess
import sys

from workbench.bench import kernels as bench_kernels


def _workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=600
    )


def test_bench_kernels_json_reports_every_kernel_with_its_ratios():
    result = _workbench("bench", "kernels", "--quick", "--repeat", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    names = {row["kernel"] for row in report["kernels"]}
    assert names == {case.name for case in bench_kernels._cases()}
    for row in report["kernels"]:
        assert row["numba_s"] > 0 and row["numpy_s"] > 0 and row["first_call_s"] > 0
        assert row["ratio_numpy"] == row["numpy_s"] / row["numba_s"]
        assert row["fraction_of_stream"] > 0
    assert report["stream_GBps"]["all_threads"] > 0
    dd = next(r for r in report["kernels"] if r["kernel"] == "histogramdd")
    assert set(dd["goals"]) == {"ratio_numpy", "fraction_of_stream"}


def test_bench_table_names_goals():
    result = _workbench("bench", "kernels", "--quick", "--repeat", "1", "--only", "histogram1d")
    assert result.returncode == 0, result.stderr
    assert "histogram1d" in result.stdout and "goal histogram1d ratio_numpy >= 2" in result.stdout


def test_unknown_kernel_is_a_clear_error():
    result = _workbench("bench", "kernels", "--only", "histogram")
    assert result.returncode == 2
    assert "unknown kernels ['histogram']" in result.stderr and "histogramdd" in result.stderr


def test_datasets_and_machine_commands():
    listing = _workbench("datasets", "--size", "full")
    assert listing.returncode == 0 and "kmeans" in listing.stdout and "MB" in listing.stdout
    info = json.loads(_workbench("machine", "--json").stdout)
    assert info["logical_cores"] >= 1 and "numba" in info["packages"]


def test_run_store_variants_json(tmp_path):
    result = _workbench(
        "run", "knn", "--variants", "active,non-active,active-split", "--size", "ci", "--repeat", "2",
        "--param", "blocks_per_worker=4", "--json", "--out", str(tmp_path / "knn"), "--workers", "2",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == {"active", "non-active", "active-split"}
    assert document["baseline"] == "active"  # the first named: knn's own baseline (blocks) was not asked for


def test_store_list_reads_the_catalogue_without_a_cluster(tmp_path):
    import numpy as np

    import workbench
    from workbench.runtime.store import ArrayBlock, Store

    with workbench.start(n_workers=1, timeout=60) as session:
        store = Store(session, tmp_path)
        kept = store.make_persistent(ArrayBlock(np.zeros(1000)), alias="zeros")
        kept.flush()
        store.make_persistent(ArrayBlock(np.ones(10)), alias="ones")
        store.close()
    result = _workbench("store", "list", "--dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert sorted(a for o in listing["objects"] for a in o["aliases"]) == ["ones", "zeros"]
    text = _workbench("store", "list", "--dir", str(tmp_path)).stdout
    assert "zeros" in text and "memory only (lost when its cluster stopped)" in text
    missing = _workbench("store", "list", "--dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "holds no store catalogue" in missing.stderr
