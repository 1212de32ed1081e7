"""``workbench bench channels`` on the test cluster at a small size: its parts and its goals."""

from __future__ import annotations

import math

import pytest

from workbench.bench import channels as bench_channels


@pytest.fixture(scope="module")
def report(session, monkeypatch_module):
    monkeypatch_module.setitem(bench_channels.PAYLOADS, "ci", [8, 64 * 1024, 1 << 20])
    monkeypatch_module.setattr(bench_channels, "STEADY_MESSAGES", 2_000)
    monkeypatch_module.setattr(bench_channels, "iterations_for", lambda n: 200 if n < 1024 else 20)
    return bench_channels.run(size="ci", session=session, two_nodes=False, mpi=True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_pingpong_rows_for_every_variant(report):
    assert [r["nbytes"] for r in report["channels"]] == [8, 64 * 1024, 1 << 20]
    assert [r["nbytes"] for r in report["eager"]] == [8, 64 * 1024, 1 << 20]
    for row in report["channels"] + report["eager"]:
        assert row["round_trip_s"] > 0 and row["MBps"] > 0
    assert "rows" in report["mpi"] or "pip install" in report["mpi"]["skipped"] or "mpiexec" in report["mpi"]["skipped"]


def test_steady_state_and_kernels(report):
    steady = report["steady_state"]
    assert len(steady["ranks"]) == 2 and steady["messages"] == 2_000
    assert {r["kernel"] for r in report["kernels"]} == {"reduce", "transpose", "stencil"}
    for row in report["kernels"]:
        assert row["channels_s_per_iteration"] > 0 and row["eager_s_per_iteration"] > 0


def test_goals_are_listed_with_figures(report):
    goals = {g["goal"]: g for g in report["goals"]}
    assert any("round trip < 20 us" in g for g in goals)
    assert any("no allocation per message" in g for g in goals)
    for goal in goals.values():
        assert isinstance(goal["met"], bool) and math.isfinite(goal["measured"])
    text = bench_channels.format_report(report)
    assert "ping-pong" in text and "goal:" in text


def test_bad_sizes_are_refused(session):
    with pytest.raises(ValueError, match="size must be one of"):
        bench_channels.run(size="huge", session=session)
