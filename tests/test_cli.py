import json
import subprocess
import sys

from workbench.bench import kernels as bench_kernels


def _workbench(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=600, cwd=cwd
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
        "run",
        "knn",
        "--variants",
        "active,non-active,active-split",
        "--size",
        "ci",
        "--repeat",
        "2",
        "--param",
        "blocks_per_worker=4",
        "--json",
        "--out",
        str(tmp_path / "knn"),
        "--workers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == {"active", "non-active", "active-split"}
    assert document["baseline"] == "active"  # the first named: knn's own baseline (blocks) was not asked for


def test_run_tier_variants_json(tmp_path):
    result = _workbench(
        "run",
        "matadd",
        "--variants",
        "dram,mapped,non-active",
        "--size",
        "ci",
        "--repeat",
        "2",
        "--json",
        "--out",
        str(tmp_path / "matadd"),
        "--workers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == {"dram", "mapped", "non-active"}
    assert document["baseline"] == "dram"


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


def _bad_inputs(tmp_path):
    """(arguments, words the error must contain): each fails at once, before any cluster starts."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    not_an_experiment = tmp_path / "not-an-experiment"
    not_an_experiment.mkdir()
    (not_an_experiment / "results.json").write_text('{"something": "else"}')
    corrupt = tmp_path / "corrupt-store"
    corrupt.mkdir()
    (corrupt / "catalogue.sqlite").write_bytes(b"this is not an SQLite database" * 100)
    return [
        (["run", "histogram", "--workers", "0"], ["--workers must be at least 1"]),
        (["run", "histogram", "--repeat", "0"], ["--repeat must be at least 1"]),
        (["run", "histogram", "--out", str(a_file)], ["is a file", "name a directory"]),
        (["run", "histogram", "--param", "nosuch=1"], ["no parameter 'nosuch'", "blocks_per_worker"]),
        (["run", "histogram", "--param", "blocks_per_workers=1"], ["did you mean 'blocks_per_worker'"]),
        (["run", "histogram", "--param", "blocks_per_worker=abc"], ["--param blocks_per_worker", "integers", "'abc'"]),
        (["run", "histogram", "--param", "blocks_per_worker"], ["NAME=V1,V2"]),
        (["run", "histogram", "--variants", "blocks,nosuch"], ["no variant 'nosuch'"]),
        (["run", "histogrm"], ["no application 'histogrm'", "did you mean 'histogram'"]),
        (["bench", "tiers", "--apps", "histogram,kmeans"], ["no tier application 'histogram'", "histogram1d"]),
        (["bench", "tiers", "--variants", "dram,nvm"], ["no tier configuration 'nvm'", "mapped"]),
        (["bench", "channels", "--workers", "1"], ["--workers must be at least 2"]),
        (["report", str(tmp_path)], ["holds no results.json"]),
        (["report", str(not_an_experiment)], ["is not a workbench experiment", "metadata"]),
        (["shm", "list", "--dir", str(a_file)], ["is not a directory"]),
        (["store", "list", "--dir", str(corrupt)], ["not a workbench store catalogue"]),
    ]


def test_bad_input_fails_at_once_with_a_message_not_a_traceback(tmp_path):
    for arguments, words in _bad_inputs(tmp_path):
        result = _workbench(*arguments, cwd=tmp_path)
        assert result.returncode == 2, (arguments, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (arguments, result.stderr)
        for word in words:
            assert word.lower() in result.stderr.lower(), (arguments, word, result.stderr)
    assert not (tmp_path / "runs").exists(), "a run refused at once still made its results directory"
