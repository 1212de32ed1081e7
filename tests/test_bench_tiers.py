"""``workbench bench tiers`` on the test cluster at a small size: its parts, its goals, same answers."""

from __future__ import annotations

import json
import math

import pytest

from workbench.bench import tiers as bench_tiers
from workbench.bench.report import Report
from workbench.lab import tier_experiments

VARIANTS = ["dram", "mapped", "mapped-cold", "disk", "non-active", "dynamic", "dask-spill", "memmap"]


@pytest.fixture(scope="module")
def report(session):
    return bench_tiers.run(
        size="ci", apps=["histogram1d", "kmeans"], variants=VARIANTS, session=session, mixed_budget=2 * 2**20
    )


def test_bandwidth_covers_every_tier_hot_and_cold(report):
    assert (
        Report.from_json(json.loads(json.dumps(report.to_json(), default=str))).rows == report.rows
    )  # the model, as bench all reads it back
    rows = {r["tier"]: r for r in report.parts["bandwidth"]["rows"]}
    assert list(rows) == ["dram", "mapped", "disk", "cached"]
    for tier, row in rows.items():
        assert row["read_hot_GBs"] > 0 and row["read_cold_GBs"] > 0 and row["write_GBs"] > 0
        if tier != "dram":
            assert row["cold_is_real"] or row["cold_note"], row  # made cold for real, or says why not
    assert rows["dram"]["read_hot_vs_dram"] == 1.0
    assert "on " in report.parts["medium"]


def test_every_configuration_ran_with_ratios_to_dram(report):
    apps = {(r["app"], r["variant"]) for r in report.rows}
    assert apps == {(a, v) for a in ("histogram1d", "kmeans") for v in VARIANTS}
    for row in report.rows:
        assert row["whole_s"] > 0 and math.isfinite(row["whole_vs_dram"])
        assert row["data_bytes"] >= 2 * report.counts["dram_budget_per_worker"]  # the big dataset: over the budget
    assert all(r["whole_vs_dram"] == 1.0 for r in report.rows if r["variant"] == "dram")


def test_result_modes_and_mixed_workload(report):
    modes = report.parts["results"]
    sizes = [m["object_bytes"] for m in modes["matadd"]]
    assert len(sizes) == len(bench_tiers.SIZES["ci"]["matadd"]) and sizes == sorted(sizes)
    for m in modes["matadd"]:
        assert set(m["seconds"]) == {"volatile", "returned", "store", "non-active"}
        assert (
            m["fetch_GBs"] > 0 and m["add_GBs"] > 0 and m["expected_ratio"] > 1
        )  # fetching both costs more than adding
    assert modes["fma"]["mapped_vs_dram"] > 0 and modes["fma"]["c_bytes"] == modes["fma"]["side"] ** 2 * 8
    mixed = report.parts["mixed"]["configurations"]
    assert set(mixed) == {"dram", "mapped", "cached", "dynamic"}
    assert len({c["checksum"] for c in mixed.values()}) == 1  # the same answers everywhere
    assert mixed["dynamic"]["in_dram"]["hot"] > 0  # the written objects were promoted


def test_goals_have_thresholds_peers_and_say_what_bounds_them(report):
    goals = {g["goal"]: g for g in report.goals}
    assert any("histogram in place on mapped" in g for g in goals)
    assert any("Dask spill-to-disk" in g for g in goals)
    assert any("volatile result >= 10x faster than non-active" in g for g in goals)
    assert any("in-place FMA" in g for g in goals)
    assert any("mixed workload" in g for g in goals)
    for text, goal in goals.items():
        assert math.isfinite(goal["measured"]) and goal["threshold"] > 0 and goal["peers"], text
        assert goal["met"] == (
            goal["measured"] >= goal["threshold"]
            if goal["better"] == "higher"
            else goal["measured"] <= goal["threshold"]
        )
        if goal["met"]:
            assert goal["bound"] is None
    spill = next(g for t, g in goals.items() if "Dask spill-to-disk" in t)
    if not spill["met"]:  # an unmet goal names the resource that bounds it, with figures measured here
        assert "GB/s" in spill["bound"] or "DRAM's time" in spill["bound"], spill["bound"]
    text = bench_tiers.format_report(report)
    assert "bandwidth" in text and "goal:" in text and "non-active/volatile" in text


def test_tier_experiment_refuses_bad_settings(session):
    with pytest.raises(ValueError, match="'small' or 'big'"):
        tier_experiments.tier_variants(session, "histogram1d", objects="huge")
    with pytest.raises(ValueError, match="no tier grid for application 'knn'"):
        tier_experiments.app_grid("knn", 10**6, 10**5, 3)
    with pytest.raises(ValueError, match="size must be one of"):
        bench_tiers.run(size="tiny", session=session)


# -- the goals on crafted reports (no cluster: the logic alone) ------------------------------------
MiB = 2**20


def _crafted(times: dict[str, float], app: str = "kmeans", moves: float = 0.0, without: float = 1.0) -> Report:
    """A report with one application's rows at ``times`` (seconds per variant), its data 2.5x a
    64 MiB budget on 2 workers, and the bandwidth and machine figures the goals read."""
    rows = [
        {
            "app": app,
            "variant": variant,
            "dataset": "big",
            "object_bytes": 8 * MiB,
            "data_bytes": 320 * MiB,
            "workers": 2,
            "grid": {"iterations": 10},
            "whole_s": seconds,
            "method_s": seconds / 2,
            "samples_s": [seconds] * 3,
            "whole_vs_dram": seconds / times["dram"],
            "tier_moves_per_run": moves if variant == "dynamic" else 0.0,
            "tier_moved_bytes_per_run": moves * 8 * MiB if variant == "dynamic" else 0.0,
            "runs_without_tier_moves": without if variant == "dynamic" else 1.0,
        }
        for variant, seconds in times.items()
    ]
    disk = {"tier": "disk", "read_cold_GBs": 1.0, "cold_is_real": True, "cold_note": ""}
    return Report(
        "tiers",
        "ci",
        rows=rows,
        parts={"bandwidth": {"rows": [disk]}},
        counts={"dram_budget_per_worker": 64 * MiB},
        workers=2,
        machine={"memory_total": 16 * 2**30},
    )


def test_the_spill_goal_asks_for_90_percent_of_the_ceiling_where_the_page_cache_bounds_it():
    # spill / dram = 2.0: no placement can gain 3x; 90 % of 2.0 is the goal, and mapped's 1.9x meets it
    report = _crafted({"dram": 1.0, "mapped": 2.0 / 1.9, "dask-spill": 2.0})
    spill = bench_tiers.spill_goal(report)
    assert spill["threshold"] == 1.8 and spill["met"] and "within 10 % of the most any placement" in spill["goal"]
    report = _crafted({"dram": 1.0, "mapped": 1.25, "dask-spill": 2.0})  # 1.6x: short of 1.8x
    spill = bench_tiers.spill_goal(report)
    assert not spill["met"] and "no placement can beat it by more than 2.00x" in spill["bound"]
    assert "1.80x" in spill["bound"]
    report = _crafted({"dram": 1.0, "mapped": 2.5, "dask-spill": 6.0})  # ceiling 6x: the 3x goal itself
    spill = bench_tiers.spill_goal(report)
    assert spill["threshold"] == 3.0 and not spill["met"] and "mapped's own cost" in spill["bound"]


def test_dynamic_is_held_to_the_best_the_budget_allows_only_where_dram_holds_it_all_over_the_budget():
    # the budget holds 40 % of the data: at best 0.4 x 1.0 s + 0.6 x 1.5 s = 1.3 s, and 10 % over it is 1.43x
    report = _crafted({"dram": 1.0, "mapped": 1.5, "dynamic": 1.4})
    timing, moves = bench_tiers.dynamic_goals(report)
    assert timing["threshold"] == 1.43 and timing["met"] and timing["peers"]["budget's best"] == pytest.approx(1.3)
    report = _crafted({"dram": 1.0, "mapped": 1.5, "dynamic": 1.5}, moves=4.0, without=2 / 3)
    timing, moves = bench_tiers.dynamic_goals(report)
    assert not timing["met"] and "it holds 40% of the data" in timing["bound"] and "4.0 objects" in timing["bound"]
    assert not moves["met"] and moves["measured"] == pytest.approx(2 / 3) and moves["peers"]["objects moved"] == 4.0
    # mapped the best static placement: no budget bound, the 10 % goal as it is
    timing, moves = bench_tiers.dynamic_goals(_crafted({"dram": 1.0, "mapped": 0.9, "dynamic": 1.0}))
    assert timing["threshold"] == 1.1 and not timing["met"] and "the best static placement is mapped" in timing["bound"]
    assert "compute tasks took 1.11x mapped's, which are 50% of its run" in timing["bound"]
    assert moves["met"] and moves["measured"] == 1.0
