"""``workbench bench all`` and ``workbench bench compare``: every benchmark in its own process, one
results file (goals, machine, versions), its page, a failed or stopped benchmark recorded while the
run goes on (its processes gone), and two runs compared goal by goal against their noise.

The results come from really running ``workbench bench all --only kernels --size ci`` (a few
seconds, once per module); where a test needs a second run that differs, it says how it changed
the real run's figures.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench import cli
from workbench.bench import suite
from workbench.bench.goals import describe
from workbench.bench.progress import duration
from workbench.memory import shm
from workbench.teach import site, site_pages

ROOT = Path(__file__).resolve().parents[1]


def bench_all(out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "workbench.cli", "bench", "all", "--out", str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def kernels_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``bench all --only kernels --size ci --json``, run for real: its directory and what it printed."""
    out = tmp_path_factory.mktemp("bench") / "run"
    done = bench_all(out, "--only", "kernels", "--size", "ci", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.fixture
def results(kernels_run) -> dict:
    return suite.load(kernels_run[0] / "results.json")


def test_bench_all_writes_every_goal_with_the_machine_and_the_versions(kernels_run, results):
    out, done = kernels_run
    assert json.loads(done.stdout) == results  # --json prints results.json
    expected = duration(cli.BENCHMARKS["kernels"].expected_s["ci"])
    assert f"bench all: 1 benchmark, expected about {expected}" in done.stderr  # said up front
    assert "bench kernels: kernels [" in done.stderr  # the benchmark's progress, passed through
    assert results["size"] == "ci" and results["workers"] is None and results["wall_s"] > 0
    machine = results["machine"]
    assert machine["cpu"] and machine["logical_cores"] >= 1 and machine["memory_total"] > 0
    assert "on " in machine["tier_directory"]  # "<dir> on ext4 (/dev/vda), ..."
    assert isinstance(machine["caches"], list)
    versions = results["versions"]
    assert versions["numpy"] and versions["bokeh"] and versions["locality-workbench"]
    if (ROOT / ".git").exists():
        assert len(versions["git"].removesuffix("+dirty")) == 40
    [kernels] = results["benchmarks"]
    assert kernels["name"] == "kernels" and kernels["mechanism"] == cli.BENCHMARKS["kernels"].mechanism
    assert kernels["size"] == "ci" and kernels["status"] == "ok" and kernels["error"] is None
    assert 0 < kernels["wall_s"] < results["wall_s"] + 1
    assert kernels["goals"] == kernels["report"]["goals"] and kernels["goals"]
    for goal in kernels["goals"]:
        assert {"goal", "measured", "threshold", "better", "met", "noise", "peers", "bound"} <= set(goal)
    page = (out / "results.html").read_text()
    assert "Bokeh" in page and "https://" not in page.split("<body>")[0]  # BokehJS inlined: offline


def test_the_table_has_a_row_per_benchmark_then_every_goal(results):
    lines = suite.table_lines(results)
    row = next(line for line in lines if line.startswith("kernels "))
    kernels = results["benchmarks"][0]
    met = sum(g["met"] for g in kernels["goals"])
    assert f"{met}/{len(kernels['goals'])}" in row and "numba kernels" in row and row.endswith("ok")
    for goal in kernels["goals"]:
        assert f"  {describe(goal)}" in lines


def test_a_run_compared_with_itself_is_within_noise(results):
    comparison = suite.compare(results, results)
    assert len(comparison["rows"]) == len(results["benchmarks"][0]["goals"])
    assert not comparison["only_a"] and not comparison["only_b"]
    for row in comparison["rows"]:
        assert row["change_pct"] == 0 and row["flip"] is None
        assert row["verdict"] == ("unchanged" if row["noise_pct"] is None else "within noise")


def test_compare_says_better_worse_within_noise_and_flips(results):
    """B is the real run with its figures changed by the test: the first goal 2x better, the second
    2x worse, the third by less than its noise; each file has a goal the other lacks."""
    before = copy.deepcopy(results)
    goals = before["benchmarks"][0]["goals"]
    assert len(goals) >= 3, "kernels at size ci reports at least three goals"
    for g in goals[:3]:
        g["noise"] = 0.1
    after = copy.deepcopy(before)
    changed = after["benchmarks"][0]["goals"]
    for g, factor in zip(changed, (2.0, 0.5, 1.05)):
        g["measured"] *= factor if g["better"] == "higher" else 1 / factor
        g["met"] = g["measured"] >= g["threshold"] if g["better"] == "higher" else g["measured"] <= g["threshold"]
    changed[1]["noise"] = None  # the largest noise of the two runs is still A's
    changed.append({**changed[0], "goal": "a goal only B has"})
    goals.append({**goals[0], "goal": "a goal only A has"})
    comparison = suite.compare(before, after)
    rows = {r["goal"]: r for r in comparison["rows"]}
    first, second, third = (rows[g["goal"]] for g in goals[:3])
    assert first["verdict"] == "better" and second["verdict"] == "worse" and third["verdict"] == "within noise"
    assert second["noise_pct"] == pytest.approx(10.0)
    assert abs(first["change_pct"]) in (pytest.approx(100.0), pytest.approx(50.0))
    for g, row in ((goals[0], first), (goals[1], second)):
        changed_goal = next(c for c in after["benchmarks"][0]["goals"] if c["goal"] == g["goal"])
        expected = None if g["met"] == changed_goal["met"] else ("met -> not met" if g["met"] else "not met -> met")
        assert row["flip"] == expected
    assert comparison["only_b"] == [{"benchmark": "kernels", "goal": "a goal only B has"}]
    assert comparison["only_a"] == [{"benchmark": "kernels", "goal": "a goal only A has"}]
    lines = suite.compare_lines(comparison)
    assert any(line.startswith(f"kernels: {goals[0]['goal']}: A ") and ": better" in line for line in lines)
    assert "only in B:" in lines


def test_bench_compare_command_and_its_errors(kernels_run, tmp_path, capsys):
    path = str(kernels_run[0] / "results.json")
    assert cli.main(["bench", "compare", path, path]) == 0
    printed = capsys.readouterr().out
    assert printed.count("within noise") + printed.count("unchanged") == len(suite.load(path)["benchmarks"][0]["goals"])
    report = tmp_path / "report.json"  # a benchmark's own report: JSON, but not a results file
    report.write_text(json.dumps(suite.load(path)["benchmarks"][0]["report"]))
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    for wrong, says in (
        (tmp_path / "missing.json", "no such file"),
        (report, "is not a results file"),
        (text, "is not JSON"),
    ):
        assert cli.main(["bench", "compare", path, str(wrong)]) == 2
        error = capsys.readouterr().err
        assert says in error and error.count("\n") == 1, error


def test_a_goal_of_another_shape_is_an_error_naming_the_benchmark(results, tmp_path):
    path = tmp_path / "results.json"
    for edit, says in (
        (lambda g: g.pop("threshold"), "lacks threshold"),
        (lambda g: g.update(measured="fast"), "measured of the wrong type"),
        (lambda g: g.update(goal=["a", "list"]), "goal of the wrong type"),
        (lambda g: g.update(better="sideways"), "better of the wrong type"),
        (lambda g: g.update(peers={"numba": "quick"}), "peers of the wrong type"),
    ):
        edited = copy.deepcopy(results)
        edit(edited["benchmarks"][0]["goals"][0])
        path.write_text(json.dumps(edited))
        with pytest.raises(ValueError, match=rf"benchmark kernels in .*results.json: goal .* {says}"):
            suite.load(path)


def test_a_results_file_is_untrusted_its_met_worked_out_again_and_a_stopped_run_said(results, tmp_path):
    path = tmp_path / "results.json"
    lying = copy.deepcopy(results)
    for g in lying["benchmarks"][0]["goals"]:
        g["met"] = not g["met"]  # hand-edited: the figures say otherwise
    lying["benchmarks"][0]["goals"][0]["noise"] = float("nan")
    path.write_text(json.dumps(lying))
    loaded = suite.load(path)
    no_figure = copy.deepcopy(results)
    no_figure["benchmarks"][0]["goals"][1]["measured"] = float("nan")  # a figure that could not be had
    suite._write_json(no_figure, tmp_path / "nan")  # strict JSON: null
    assert '"measured": null' in (tmp_path / "nan" / "results.json").read_text()
    read_back = suite.load(tmp_path / "nan" / "results.json")["benchmarks"][0]["goals"][1]
    assert math.isnan(read_back["measured"]) and read_back["met"] is False
    assert [g["met"] for g in loaded["benchmarks"][0]["goals"]] == [g["met"] for g in results["benchmarks"][0]["goals"]]
    assert loaded["benchmarks"][0]["goals"][0]["noise"] is None  # unknown, not a whisker across the axis
    for edit, says in (
        (lambda r: r.pop("machine"), "no machine"),
        (lambda r: r["benchmarks"][0].pop("goals"), "list of goals"),
        (lambda r: r["benchmarks"][0].update(status="fine"), "no status"),
        (lambda r: r.update(wall_s="long"), "wall_s is not a number"),
    ):
        edited = copy.deepcopy(results)
        edit(edited)
        path.write_text(json.dumps(edited))
        with pytest.raises(ValueError, match=says):
            suite.load(path)
    stopped = copy.deepcopy(results)
    stopped["wall_s"] = None  # what a run stopped before its end leaves
    path.write_text(json.dumps(stopped))
    assert not suite.finished(suite.load(path))
    assert "stopped before the end" in site_pages.bench_results_markdown(suite.load(path))


def test_a_figure_from_nothing_is_a_change_and_one_run_says_nothing_of_the_noise(results):
    before, after = copy.deepcopy(results), copy.deepcopy(results)
    a, b = before["benchmarks"][0]["goals"][0], after["benchmarks"][0]["goals"][0]
    a.update(measured=0.0, better="lower", noise=None)
    b.update(measured=5.0, better="lower", noise=None)
    row = suite.compare(before, after)["rows"][0]
    assert row["verdict"] == "worse, noise unknown" and row["change_pct"] == float("inf")
    assert "inf (from 0)" in suite.compare_lines({"rows": [row], "only_a": [], "only_b": []})[3]
    from workbench.bench.goals import goal, ratio_noise

    assert goal("one run each", 2.0, 1.0, noise=ratio_noise([1.0], [2.0]))["noise"] is None


def test_the_site_page_escapes_what_a_results_file_holds(results):
    hostile = copy.deepcopy(results)
    hostile["size"] = "<script>alert(1)</script>"
    hostile["benchmarks"][0]["goals"][0]["goal"] = "[click](javascript:alert(1)) *loud* `code`"
    text = site_pages.bench_results_markdown(hostile)
    assert "<script>" not in text and "](javascript:" not in text and "`code`" not in text
    assert "\\[click\\]" in text and "&lt;script&gt;" in text


def _recording_popen(monkeypatch) -> list[int]:
    """Make ``suite`` record the pid of each benchmark process it starts (the group's id too)."""
    pids: list[int] = []

    class Recording(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if "workbench.cli" in args[0]:  # not git's, which the results' versions ask
                pids.append(self.pid)

    monkeypatch.setattr(suite.subprocess, "Popen", Recording)
    return pids


@pytest.mark.timeout(180)
def test_a_benchmark_that_fails_or_runs_out_of_time_is_recorded_and_its_processes_are_gone(monkeypatch, tmp_path):
    """shm at size ci (a Dask cluster of worker processes) stopped after 6 s, then a benchmark that
    does not exist: both recorded, the run goes on, and nothing of the stopped one is left."""
    pids = _recording_popen(monkeypatch)
    planned = [
        suite.Planned("shm", "node-shared memory (RRO)", "ci", 10, True),
        suite.Planned("no-such", "x", "ci", 1, False),
    ]
    most: dict[int, int] = {}
    done = threading.Event()

    def watch() -> None:  # the stopped benchmark's process group had its workers while it ran
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            if pids:
                most[pids[0]] = max(most.get(pids[0], 0), len(suite.group_members(pids[0])))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = suite.run_all(planned, tmp_path, workers=2, limit=lambda p: 6.0)
    finally:
        done.set()
        watcher.join(timeout=30)
    stopped, missing = results["benchmarks"]
    if "it left segments " in stopped["error"]:  # complete ones, which shm clean keeps: removed here
        for name in stopped["error"].split("it left segments ")[1].split(" (")[0].split(", "):
            shm.delete(name)
    assert stopped["status"] == "timed out" and "time limit of 6 s" in stopped["error"], stopped["error"]
    assert 6 <= stopped["wall_s"] < 30 and stopped["goals"] == [] and stopped["report"] is None
    assert missing["status"] == "failed" and "invalid choice: 'no-such'" in missing["error"], missing["error"]
    assert suite.failed(results) == ["shm", "no-such"]
    assert most[pids[0]] >= 3, "the benchmark and its 2 workers ran in one process group"
    assert suite.group_members(pids[0]) == [] and suite.group_members(pids[1]) == []
    assert not [s.name for s in shm.list_segments() if s.state == "partial" and not s.owner_alive]  # cleaned
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results.html").is_file()


def test_the_site_page_shows_the_latest_results_of_this_machine(kernels_run, results, tmp_path):
    source = kernels_run[0] / "results.json"
    runs = tmp_path / "bench"
    for name, host, age_s in (("old", None, 100), ("new", None, 10), ("elsewhere", "another-host", 0)):
        (runs / name).mkdir(parents=True)
        data = json.loads(source.read_text())
        data["machine"]["hostname"] = host or data["machine"]["hostname"]
        (runs / name / "results.json").write_text(json.dumps(data))
        os.utime(runs / name / "results.json", (time.time() - age_s,) * 2)
    (runs / "broken").mkdir()
    (runs / "broken" / "results.json").write_text("{")
    (runs / "stopped").mkdir()  # the newest, but stopped before its end (or still running)
    (runs / "stopped" / "results.json").write_text(json.dumps({**json.loads(source.read_text()), "wall_s": None}))
    host = results["machine"]["hostname"]
    assert site.latest_bench_results(runs, host) == runs / "new" / "results.json"
    assert site.latest_bench_results(tmp_path / "nothing", host) is None

    page = tmp_path / "site"
    page.mkdir()
    (page / "bench-results.md").write_text((site.COURSE / "bench-results.md").read_text())
    site._bench_results_page(page, source)
    text = (page / "bench-results.md").read_text()
    assert site_pages.NO_BENCH_RESULTS.split(".")[0] not in text
    assert '<a href="bench/results.html">' in text and f"**{site_pages._cell(host)}**" in text
    for goal in results["benchmarks"][0]["goals"]:
        assert site_pages._cell(goal["goal"]) in text
    figures = (page / "_extra" / "bench" / "results.html").read_text()
    assert f'src="../_static/{site_pages.bokeh_js_name()}"' in figures and len(figures) < 500_000  # not inlined
