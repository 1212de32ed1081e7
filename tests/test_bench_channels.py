"""``workbench bench channels`` on the test cluster at a small size: its parts and its goals."""

from __future__ import annotations

import io
import json
import math

import psutil
import pytest

from workbench.bench import channels as bench_channels
from workbench.bench.goals import goal as make_goal
from workbench.bench.progress import Progress
from workbench.bench.report import Report


@pytest.fixture(scope="module")
def run_output(session, monkeypatch_module):
    """The report of a small run, and what its progress printed."""
    monkeypatch_module.setitem(bench_channels.PAYLOADS, "ci", [8, 64 * 1024, 1 << 20])
    monkeypatch_module.setattr(bench_channels, "STEADY_MESSAGES", 2_000)
    monkeypatch_module.setattr(bench_channels, "iterations_for", lambda n: 200 if n < 1024 else 20)
    monkeypatch_module.setattr(bench_channels, "LOADED_REPEATS", 2)
    monkeypatch_module.setattr(bench_channels, "WAIT_SECONDS", 0.3)
    stream = io.StringIO()
    report = bench_channels.run(size="ci", session=session, two_nodes=False, mpi=True,
                                progress=Progress("channels", stream=stream))  # fmt: skip
    assert (
        Report.from_json(json.loads(json.dumps(report.to_json(), default=str))).rows == report.rows
    )  # the model, as bench all reads it back
    return report, stream.getvalue()


@pytest.fixture(scope="module")
def report(run_output):
    return run_output[0]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_pingpong_rows_for_every_variant(report):
    assert [r["nbytes"] for r in report.rows] == [8, 64 * 1024, 1 << 20]
    assert [r["nbytes"] for r in report.parts["eager"]] == [8, 64 * 1024, 1 << 20]
    for row in [*report.rows, *report.parts["eager"]]:
        assert row["round_trip_s"] > 0 and row["MBps"] > 0
    assert (
        "rows" in report.parts["mpi"]
        or "pip install" in report.parts["mpi"]["skipped"]
        or "mpiexec" in report.parts["mpi"]["skipped"]
    )


def test_a_channels_groups_scheduler_messages_do_not_follow_its_round_trips(report):
    rows = {r["nbytes"]: r for r in report.rows}
    assert rows[8]["round_trips"] == 220 and rows[1 << 20]["round_trips"] == 22  # timed + a tenth warm-up
    counted = [r["scheduler_messages"] for r in report.rows]
    assert min(counted) > 0  # the group's start and end: its tasks, through the scheduler
    assert max(counted) - min(counted) <= 4  # 10x the round trips, the same messages: they go rank to rank
    assert all(r["scheduler_messages"] > 0 for r in report.parts["eager"])
    grown = next(g for g in report.goals if g["goal"].startswith("channels: scheduler messages grow"))
    assert grown["better"] == "lower" and grown["threshold"] == bench_channels.MESSAGES_PER_THOUSAND
    assert set(grown["peers"]) == {"22 round trips", "220 round trips"} and grown["peer_unit"] == "messages"
    assert "scheduler-worker messages per ping-pong group" in bench_channels.format_report(report)


def test_the_message_goal_is_the_growth_per_thousand_round_trips_between_the_fewest_and_the_most():
    def row(nbytes, round_trips, messages):
        return {"nbytes": nbytes, "round_trips": round_trips, "scheduler_messages": messages}

    flat = bench_channels.message_goals([row(8, 5500, 42), row(1 << 24, 70, 42), row(1 << 20, 1100, 43)])
    assert len(flat) == 1 and flat[0]["measured"] == 0.0 and flat[0]["met"]
    assert flat[0]["peers"] == {"70 round trips": 42.0, "5500 round trips": 42.0}
    per_exchange = bench_channels.message_goals([row(8, 5500, 42 + 2 * 5430), row(1 << 24, 70, 42)])
    assert per_exchange[0]["measured"] == pytest.approx(2000.0) and not per_exchange[0]["met"]  # two per round trip
    assert bench_channels.message_goals([row(8, 70, 42), row(16, 70, 42)]) == []  # nothing to compare
    assert bench_channels.message_goals([{"nbytes": 8, "round_trip_s": 1e-5}]) == []  # not counted


def test_steady_state_and_kernels(report):
    steady = report.parts["steady_state"]
    assert len(steady["ranks"]) == 2 and steady["messages"] == 2_000
    assert {r["kernel"] for r in report.parts["kernels"]} == {"reduce", "transpose", "stencil"}
    for row in report.parts["kernels"]:
        assert row["channels_s_per_iteration"] > 0 and row["eager_s_per_iteration"] > 0


def test_goals_are_listed_with_figures(report):
    goals = {g["goal"]: g for g in report.goals}
    assert any("round trip <= 20 us" in g for g in goals)
    assert any("no allocation per message" in g for g in goals)
    for goal in goals.values():
        assert isinstance(goal["met"], bool) and math.isfinite(goal["measured"])
    text = bench_channels.format_report(report)
    assert "ping-pong" in text and "goal:" in text


def test_the_loaded_ping_pong_has_its_rows_goals_and_leaves_no_load_behind(report):
    loaded = report.parts["loaded"]
    assert loaded["processes"] == bench_channels.LOAD_PROCESSES and loaded["repeats"] == 2
    assert [r["nbytes"] for r in loaded["channels"]] == [8, 64 * 1024, 1 << 20]
    for row in loaded["channels"]:
        assert len(row["runs_round_trip_s"]) == 2 and row["round_trip_s"] == sorted(row["runs_round_trip_s"])[1]
    goals = [g["goal"] for g in report.goals]
    assert any(g.startswith("loaded (2 CPU-bound processes) small-message (8 B) round trip <= 100 us") for g in goals)
    if "rows" in loaded["mpi"]:
        assert any("no worse than mpi4py's under the same load" in g for g in goals)
    assert "channels, loaded" in bench_channels.format_report(report)
    spinners = [p for p in psutil.Process().children(recursive=True) if "while True: pass" in " ".join(p.cmdline())]
    assert not spinners


def test_the_cpu_share_of_a_waiting_rank_is_measured_for_channels_and_mpi(report):
    waiting = report.parts["wait_cpu_share"]
    assert 0 <= waiting["channels"] < 1.5
    if "rows" in report.parts["mpi"]:
        assert 0 <= waiting["mpi"] < 1.5
    assert any("leaves its core to others" in g["goal"] for g in report.goals)
    assert "uses" in bench_channels.format_report(report)


def test_every_goal_has_one_shape_with_its_peers_and_the_loaded_ones_their_noise(report):
    shape = set(make_goal("x", 1.0, 1.0))
    assert all(set(g) == shape for g in report.goals)
    goals = {g["goal"]: g for g in report.goals}
    small = next(g for text, g in goals.items() if text.startswith("small-message"))
    assert small["better"] == "lower" and small["threshold"] == 20.0 and small["unit"] == " us"
    assert small["peers"]["channels"] == small["measured"] and small["peer_unit"] == "us"
    loaded = next(g for text, g in goals.items() if text.startswith("loaded (2"))
    assert loaded["noise"] is not None and loaded["noise"] >= 0  # two runs per loaded payload
    if "rows" in report.parts["mpi"]:
        bandwidth = next(g for text, g in goals.items() if text.startswith("channels >= mpi4py"))
        assert set(bandwidth["peers"]) == {"channels", "mpi4py"} and bandwidth["peer_unit"] == "MB/s"
    assert [r["nbytes"] for r in report.parts["copy"]] == [1 << 20] and report.parts["copy"][0]["MBps"] > 0
    lines = bench_channels.format_report(report).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("payload") and "channels" in line)
    assert header.endswith("copy MB/s")  # the copy's rate beside the ping-pong's, at 1 MiB (measured) and 8 B (not)
    assert next(line for line in lines if line.startswith(f"{1 << 20:>10} ")).endswith(
        f"{report.parts['copy'][0]['MBps']:>10.0f}"
    )
    assert next(line for line in lines if line.startswith(f"{8:>10} ")).endswith(f"{'-':>10}")


def test_progress_shows_a_phase_per_part_and_a_step_per_payload(run_output):
    _, printed = run_output
    assert "bench channels: ping-pong, channels: 3 steps" in printed
    assert "[####################] 3/3 1 MiB" in printed
    assert "PRK kernels, channels and eager: 3 steps" in printed


def test_a_bandwidth_goal_near_the_copy_cap_is_bounded_by_it_and_one_far_from_it_is_not():
    bound = bench_channels.copy_bound(900.0, 2000.0)  # 90 % of the 1000 MB/s a round trip can move
    assert bound is not None and "2000 MB/s measured here" in bound and "90%" in bound
    assert bench_channels.copy_bound(100.0, 2000.0) is None
    assert bench_channels.copy_bound(900.0, None) is None


def test_the_load_is_stopped_when_the_measurement_fails():
    with pytest.raises(RuntimeError, match="measurement failed"):
        with bench_channels.cpu_load(2) as spinners:
            assert all(p.poll() is None for p in spinners)
            raise RuntimeError("measurement failed")
    assert all(p.poll() is not None for p in spinners)


def test_bad_sizes_are_refused(session):
    with pytest.raises(ValueError, match="size must be one of"):
        bench_channels.run(size="huge", session=session)
