"""The kernels benchmark's plain-loop reference line (no timing is asserted: the bench prints ratios)."""

import json

import numpy as np

from workbench import kernels
from workbench.bench import kernels as bench_kernels
from workbench.bench.report import Report


def test_plain_loop_counts_like_numpy_where_the_arithmetic_bin_is_exact(rng):
    points = rng.random((10_000, 3))  # edges k/8 are exact in binary: v * 8 floors to the right bin
    assert np.array_equal(
        bench_kernels.plain_histogramdd(points, 8, [(0.0, 1.0)] * 3),
        kernels.histogramdd_reference(points, 8, [(0.0, 1.0)] * 3),
    )


def test_plain_loop_is_not_exact_near_edges_which_is_why_it_is_only_a_reference():
    edges = np.linspace(0.1, 0.8, 8)
    values = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    points = np.stack([values, np.full(values.size, 0.5)], axis=1)
    ranges = [(0.1, 0.8), (0.0, 1.0)]
    exact = kernels.histogramdd(points, 7, ranges)
    assert np.array_equal(exact, kernels.histogramdd_reference(points, 7, ranges))
    assert not np.array_equal(bench_kernels.plain_histogramdd(points, 7, ranges), exact)


def test_report_has_the_plain_loop_line_next_to_histogramdd():
    report = bench_kernels.run(size="ci", repeats=1, only=["histogramdd"])
    assert isinstance(report, Report) and Report.from_json(json.loads(json.dumps(report.to_json()))) == report
    (row,) = report.rows
    assert row["plain_loop_s"] > 0 and row["plain_loop_counts_equal_kernel"] is True
    assert row["plain_loop_ratio_numpy"] == row["numpy_s"] / row["plain_loop_s"]
    assert row["kernel_speed_vs_plain_loop"] == row["plain_loop_s"] / row["numba_s"]
    assert "_counts" not in row  # the report stays JSON-ready
    assert row["first_call_s"] > 0 and row["numba_s"] > 0  # compile or cache load timed apart from the runs
    text = bench_kernels.format_report(report)
    line = next(line for line in text.splitlines() if line.startswith("histogramdd plain"))
    assert "naive loop, no edge correction (same counts)" in line and "the kernel runs at" in line


def test_goals_are_one_list_in_the_goal_shape_and_met_agrees_with_the_threshold():
    from workbench.bench.goals import goal

    report = bench_kernels.run(size="ci", repeats=2, only=["histogram1d", "histogramdd"])
    goals = report.goals
    assert [g["goal"].split(":")[0] for g in goals] == ["histogramdd", "histogramdd", "histogram1d"]
    assert all("goals" not in row for row in report.rows)  # no per-row goal dicts any more
    for g in goals:
        assert set(g) == set(goal("x", 1, 1))
        assert g["met"] == (g["measured"] >= g["threshold"]) and g["better"] == "higher"
        assert len(g["peers"]) == 2 and all(v > 0 for v in g["peers"].values()) and g["noise"] is not None
    dd = next(r for r in report.rows if r["kernel"] == "histogramdd")
    assert goals[0]["peers"] == {"numba": dd["numba_s"], "numpy": dd["numpy_s"]}
    assert "goal: histogram1d: numba on all threads faster than numpy" in bench_kernels.format_report(report)


def test_an_unknown_size_names_the_sizes():
    import pytest

    with pytest.raises(ValueError, match=r"size must be one of \['ci', 'lab', 'full'\], got 'huge'"):
        bench_kernels.run(size="huge")
    assert bench_kernels.SCALES["full"].n(100) == 400 and bench_kernels.SCALES["full"].side(100) == 200  # 4x bytes
    assert bench_kernels.SCALES["ci"].side(1024) == 16  # what --quick was
