"""The one report model every benchmark fills (``workbench.bench.report``): its JSON round trip, a
malformed or old report refused in one line naming the field, and the shared table formatter."""

from __future__ import annotations

import json
import math

import pytest

from workbench.bench import suite
from workbench.bench.goals import goal
from workbench.bench.report import VERSION, Column, Report, ReportError, of_record, setting, table, text


def _report() -> Report:
    return Report(
        "kernels",
        "ci",
        goals=[goal("numba faster", 3.0, 2.0, peers={"numba": 0.1, "numpy": 0.3}, noise=0.1), goal("none", 1.0, 2.0)],
        rows=[{"kernel": "histogram1d", "numba_s": 0.1}],
        parts={"stream_GBps": {"all_threads": 9.5}},
        counts={"numba_threads": 2},
        workers=2,
        repeats=3,
        machine={"cpu": "Some CPU"},
    )


def test_a_report_round_trips_through_its_json_and_the_strict_json_bench_all_writes():
    report = _report()
    data = report.to_json()
    assert data["version"] == VERSION and data["benchmark"] == "kernels" and data["counts"] == {"numba_threads": 2}
    assert Report.from_json(json.loads(json.dumps(data))) == report
    no_figure = Report("x", "ci", [goal("could not be had", math.nan, 1.0)])  # strict JSON writes NaN as null
    written = json.dumps(suite.strict_json(no_figure.to_json()), allow_nan=False)
    [read] = Report.from_json(json.loads(written)).goals
    assert math.isnan(read["measured"]) and read["met"] is False
    assert of_record({"report": data}) == report and of_record({"report": None}) is None
    assert report.met == 1


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.pop("version"), "version is missing: a report older than version 1"),
        (lambda d: d.update(version=2), "version is 2, not 1: another workbench's report"),
        (lambda d: d.pop("goals"), "goals is missing"),
        (lambda d: d.update(shape="new"), "shape is not a field of a report"),
        (lambda d: d.update(benchmark=None), "benchmark is missing (or null), not text"),
        (lambda d: d.update(size="ci\nlab"), "size holds the control character '\\n'"),
        (lambda d: d.update(workers=0), "workers is 0, not a count of at least 1"),
        (lambda d: d.update(rows={"kernel": "x"}), "rows is not a list"),
        (lambda d: d.update(rows=["x"]), "rows[0] is not a JSON object"),
        (lambda d: d.update(counts={"threads": "two"}), "counts['threads'] is 'two', not a number"),
        (lambda d: d["goals"][1].pop("threshold"), "goals[1] (goal 'none') lacks threshold"),
        (lambda d: d["goals"][0].update(better="sideways"), "goals[0] (goal 'numba faster') has a better of the wrong"),
        (lambda d: d.update(parts=[]), "parts is not a JSON object"),
    ],
)
def test_a_malformed_report_is_refused_in_one_line_naming_its_field(edit, says):
    data = _report().to_json()
    edit(data)
    with pytest.raises(ReportError) as refused:
        Report.from_json(data)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value), str(refused.value)
    assert isinstance(refused.value, ValueError)  # callers that catch ValueError for bad input keep working


def test_the_shared_formatter_aligns_titles_to_their_cells_and_shows_a_missing_figure_as_a_dash():
    columns = (
        Column("app", "app", "<10"),
        Column("ratio", "ratio", ">6.3f", "x"),
        Column("MB", lambda r: r["bytes"] / 1e6 if "bytes" in r else None, ">5.1f"),
    )
    lines = table(columns, [{"app": "kmeans", "ratio": 1.23456, "bytes": 2e6}, {"app": "knn", "ratio": 2.0}])
    assert lines == [
        "app" + " " * 10 + "ratio" + " " * 4 + "MB",  # each title as wide as its cells (the suffix included)
        "kmeans" + " " * 6 + "1.235x" + " " * 3 + "2.0",
        "knn" + " " * 9 + "2.000x" + " " * 5 + "-",
    ]
    report = _report()
    assert setting(report, "median of 3 runs") == "size ci, 2 workers, median of 3 runs"
    shown = text(["a line"], report).splitlines()
    assert shown[:3] == ["a line", "", "goals:"] and shown[3].startswith("goal: numba faster: measured 3x")


def test_a_last_column_of_free_text_leaves_no_trailing_space():
    columns = (Column("app", "app", "<10"), Column(" notes", "notes"))
    assert table(columns, [{"app": "knn", "notes": ""}, {"app": "kmeans", "notes": "same"}]) == [
        "app" + " " * 9 + "notes",
        "knn",
        "kmeans" + " " * 5 + "same",
    ]


def _gpu_parts() -> dict:
    """What ``bench gpu`` measures, made up (no device here): each figure and its peer."""
    from workbench.bench import gpu

    MiB = 2**20
    return {
        "device": {"name": "a GPU", "bytes": 80 * 2**30, "simulated": False},
        "bus": {"bytes": 256 * MiB, "pinned_to_device_gbs": 24.0, "pageable_to_device_gbs": 12.0, "to_host_gbs": 20.0},
        "floor": {"bytes": 3 * 2**30, "gbs": 3000.0},
        "histogram": {"gbs": 1800.0, "floor_gbs": 3000.0, "share_of_floor": 0.6, "exact": True},
        "kmeans": {"iterations": 20, "points_bytes": 64 * MiB, "resident_s_per_iteration": 0.001,
                   "copied_s_per_iteration": 0.012, "resident_bytes_to_device": 64 * MiB,
                   "copied_bytes_to_device": 20 * 64 * MiB, "speedup": 12.0, "same_centres": True},
        "store": {"tier": "gpu", "values_bytes": 64 * MiB, "active_s": 0.002, "non_active_s": 0.02,
                  "active_bytes_off_device": 0, "non_active_bytes_off_device": 64 * MiB, "speedup": 10.0,
                  "same_counts": True},
        "not_measured": gpu.NOT_MEASURED,
    }  # fmt: skip


def test_the_gpu_benchmarks_goals_read_its_report_and_its_table_puts_each_figure_beside_its_peer():
    from workbench.bench import gpu

    report = Report("gpu", "ci", parts=_gpu_parts())
    found = {g["goal"].split(" >=")[0]: g for g in gpu.goals(report)}
    assert found["host to device from pinned memory"]["measured"] == 2.0
    assert found["k-means with the points kept on the device"]["goal"].endswith("(size ci)")
    shown = gpu.format_report(Report("gpu", "ci", goals=list(found.values()), parts=report.parts)).splitlines()
    header = next(line for line in shown if line.startswith("measured "))
    assert header.split() == ["measured", "first", "second", "unit", "ratio", "notes"]
    pinned = next(line for line in shown if "pinned / pageable" in line)
    assert pinned.split()[-4:] == ["24.00", "12.00", "GB/s", "2.00x"]
    store = next(line for line in shown if line.startswith("store object on gpu"))
    assert "2.00 20.00 ms 10.00x 0 / 67108864 B off the device" in " ".join(store.split())
    assert "goals:" in shown and "not measured: dask-cuda spilling" in " ".join(shown)
