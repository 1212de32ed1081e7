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
