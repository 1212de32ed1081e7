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
