"""Checks of lesson 05 · Memory tiers: a cache smaller than the object, cold penalties, and dynamic
placement."""

from __future__ import annotations

from typing import Any

from workbench.lab import tier_experiments
from workbench.memory import tiers
from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise


def _stats(value: Any, name: str) -> dict[str, int]:
    if not isinstance(value, dict) or not {"hits", "misses", "bypasses"} <= set(value):
        raise AnswerError(f"`{name}` should be the dict that cache.stats() returns, got {value!r:.80}")
    return value


@exercise(
    "05.1",
    answers=("small_cache_stats", "big_cache_stats"),
    hint="tiers.place(name, np.ones(500_000), 'cached', cache=tiers.DramCache(2**20)); read .array twice; "
    "cache.stats(); then the same with a DramCache(8 * 2**20)",
)
def cache_budget(small_cache_stats: Any, big_cache_stats: Any) -> tuple:
    """A 1 MB cache never hits a 4 MB array (it bypasses); an 8 MB cache hits on the second read."""
    small, big = _stats(small_cache_stats, "small_cache_stats"), _stats(big_cache_stats, "big_cache_stats")
    if small["hits"] or small["bypasses"] < 2:
        return not_yet(
            f"the 1 MB cache shows {small['hits']} hits and {small['bypasses']} bypasses; two reads of a 4 MB "
            "array should bypass it twice",
            "place the 4 MB array (np.ones(500_000)) with cache=tiers.DramCache(2**20) and read .array twice",
        )
    if big["hits"] < 1:
        return not_yet(
            f"the 8 MB cache shows {big['misses']} misses and no hit: read the array twice after giving it the "
            "bigger cache (probe.cache = tiers.DramCache(8 * 2**20))"
        )
    return passed(
        f"1 MB: {small['bypasses']} bypasses, no hit (the array is bigger than the whole cache); 8 MB: "
        f"{big['misses']} miss then {big['hits']} hit"
    )


@exercise(
    "05.2",
    answers=("small", "cold_penalty_small", "cold_penalty_big"),
    hint="small = tier_experiments.tier_variants(session, 'histogram1d', size, ['dram', 'mapped', "
    "'mapped-cold'], objects='small', repeats=repeats); the penalty is the vs_dram of mapped-cold in "
    "ratios_to_dram(small) and ratios_to_dram(hook)",
)
def cold_penalty(small: Any, cold_penalty_small: Any, cold_penalty_big: Any, hook: Any) -> tuple:
    """mapped-cold over dram with small objects (the learner's run) and big ones (the lesson's hook)."""
    if not hasattr(small, "runs") or "mapped-cold" not in set(small.results["variant"]):
        return not_yet("small should be the experiment that tier_variants returns, with mapped-cold among its variants")
    expected = {
        "small": float(tier_experiments.ratios_to_dram(small).loc["mapped-cold", "vs_dram"]),
        "big": float(tier_experiments.ratios_to_dram(hook).loc["mapped-cold", "vs_dram"]),
    }
    for objects, value in (("small", cold_penalty_small), ("big", cold_penalty_big)):
        got = number(value, f"cold_penalty_{objects}")
        if not close(got, expected[objects], 0.05):
            return not_yet(
                f"cold_penalty_{objects} is {fmt(got)}, but mapped-cold / dram is {fmt(expected[objects])} with "
                f"{objects} objects",
                "read the vs_dram column of ratios_to_dram at the row 'mapped-cold'",
            )
    return passed(
        f"cold / dram: {fmt(expected['small'])}x with small objects, {fmt(expected['big'])}x with big ones; the "
        "device's bandwidth sets the penalty per byte, per-call costs weigh more with small objects"
    )


@exercise(
    "05.3",
    answers=("tiers_after_reads",),
    hint="with a budget for one object, the object read more often is promoted to DRAM: "
    "tiers_after_reads = [p.tier() for p in pair] after the reads",
)
def dynamic_placement(tiers_after_reads: Any) -> tuple:
    """Under dynamic placement, the object read three times is in DRAM, the one read twice is not."""
    if not isinstance(tiers_after_reads, (list, tuple)) or len(tiers_after_reads) != 2:
        return not_yet(f"tiers_after_reads should be a list of the two objects' tiers, got {tiers_after_reads!r:.80}")
    first, second = tiers_after_reads
    if not all(isinstance(t, str) and t in tiers.TIERS for t in (first, second)):
        return not_yet(
            f"tiers_after_reads should hold two tier names from {list(tiers.TIERS)}, got {tiers_after_reads!r:.80}"
        )
    if first != "dram":
        return not_yet(f"the object read three times is on {first!r}: it should have been promoted to 'dram'")
    if second == "dram":
        return not_yet("both objects are in DRAM, but the budget fits only one: rebalance(budget=1_000_000) first")
    return passed(f"the object read three times is in DRAM, the other on {second!r}: reads decide the placement")
