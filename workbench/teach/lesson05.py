"""Checks of lesson 05 · Memory tiers: a cache smaller than the object, cold penalties, and dynamic
placement."""

from __future__ import annotations

from typing import Any

from workbench.lab import tier_experiments
from workbench.memory import tiers
from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

SMALL_CACHE, BIG_CACHE = 2**20, 8 * 2**20  # the exercise's two cache budgets, for a 4 MB array


def _cache(value: Any, name: str, budget: int) -> dict[str, int]:
    """The stats of the learner's cache: a tiers.DramCache of ``budget`` bytes that was used."""
    if not isinstance(value, tiers.DramCache):
        raise AnswerError(
            f"`{name}` should be the tiers.DramCache object you placed the array with, got {type(value).__name__}"
        )
    if value.budget != budget:
        raise AnswerError(f"`{name}` holds {value.budget} bytes; this exercise asks for a cache of {budget} bytes")
    return value.stats()


@exercise(
    "05.1",
    answers=("small_cache", "big_cache"),
    concept="a cache smaller than the array cannot hold it, so every read bypasses it; with room, the first read "
    "misses and the next hits",
    hint="tiers.place puts an array on the 'cached' tier; its cache argument takes a tiers.DramCache of a budget in "
    "bytes; reading the placed array's .array goes through the cache; a cache's stats() counts hits, misses and "
    "bypasses. A placed array's .cache can be given another DramCache",
)
def cache_budget(small_cache: Any, big_cache: Any) -> tuple:
    """A 1 MiB cache never hits a 4 MB array (it bypasses); an 8 MiB cache hits on the second read."""
    small, big = _cache(small_cache, "small_cache", SMALL_CACHE), _cache(big_cache, "big_cache", BIG_CACHE)
    if small["hits"] + small["misses"] + small["bypasses"] < 2:
        return not_yet(
            f"the 1 MiB cache served {small['hits'] + small['misses'] + small['bypasses']} read(s): read the array "
            "placed with it twice"
        )
    if small["hits"] or small["misses"]:
        return not_yet(
            f"the 1 MiB cache shows {small['hits']} hit(s) and {small['misses']} miss(es): was the array it served "
            "bigger than the cache (np.ones(500_000) is 4 MB)?"
        )
    if big["hits"] < 1:
        return not_yet(
            f"the 8 MiB cache shows {big['misses']} miss(es), {big['bypasses']} bypass(es) and no hit: give the placed "
            "array this cache, then read it twice"
        )
    return passed(
        f"1 MiB: {small['bypasses']} bypasses, no hit (the array is bigger than the whole cache); 8 MiB: "
        f"{big['misses']} miss then {big['hits']} hit"
    )


@exercise(
    "05.2",
    answers=("small", "cold_penalty_small", "cold_penalty_big"),
    concept="a cold read pays the device's bandwidth for every byte, a price per byte; small objects add a fixed "
    "price per call on top",
    hint="run tier_experiments.tier_variants as the hook does, for histogram1d with dram among the configurations "
    "and its objects argument set to small; tier_experiments.ratios_to_dram gives each configuration's time over "
    "dram (its vs_dram column), for your run and for the hook",
)
def cold_penalty(small: Any, cold_penalty_small: Any, cold_penalty_big: Any, hook: Any) -> tuple:
    """mapped-cold over dram with small objects (the learner's run) and big ones (the lesson's hook)."""
    if not hasattr(small, "runs") or not {"dram", "mapped-cold"} <= set(small.results["variant"]):
        return not_yet(
            "small should be the experiment that tier_variants returns, with dram and mapped-cold among its variants"
        )
    if getattr(small, "tier_setting", {}).get("objects", "small") != "small":
        return not_yet("small was run with big objects: pass objects='small' to tier_variants")
    expected = {
        "small": float(tier_experiments.ratios_to_dram(small).loc["mapped-cold", "vs_dram"]),
        "big": float(tier_experiments.ratios_to_dram(hook).loc["mapped-cold", "vs_dram"]),
    }
    for objects, value in (("small", cold_penalty_small), ("big", cold_penalty_big)):
        got = number(value, f"cold_penalty_{objects}")
        if not close(got, expected[objects], 0.05):
            ratios = tier_experiments.ratios_to_dram(small if objects == "small" else hook)["vs_dram"]
            warm = float(ratios.get("mapped", float("nan")))
            return not_yet(
                f"cold_penalty_{objects} is {fmt(got)}, which is not mapped-cold over dram in the experiment with "
                f"{objects} objects" + (" (that is the warm mapped tier)" if close(got, warm, 0.05) else ""),
                "read the vs_dram column of ratios_to_dram at the row of the cold configuration",
            )
    return passed(
        f"cold / dram: {fmt(expected['small'])}x with small objects, {fmt(expected['big'])}x with big ones; the "
        "device's bandwidth sets the penalty per byte, per-call costs weigh more with small objects"
    )


@exercise(
    "05.3",
    answers=("pair", "tiers_after_reads"),
    concept="with a DRAM budget for one object, dynamic placement keeps the object read most often in DRAM and "
    "leaves the other where it was",
    hint="as in the demonstration above: two ArrayBlock objects on one backend, store.rebalance with a budget in "
    "bytes that fits one of them, store.place first on mapped then dynamic, reads with apply.value; each proxy's "
    "tier() says where it is now",
)
def dynamic_placement(pair: Any, tiers_after_reads: Any) -> tuple:
    """Under dynamic placement, the object read three times is in DRAM, the one read twice is not."""
    proxies = isinstance(pair, (list, tuple)) and len(pair) == 2
    if not proxies or not all(callable(getattr(p, "tier", None)) for p in pair):
        return not_yet(f"pair should be the list of your two store objects (their proxies), got {pair!r:.80}")
    if not isinstance(tiers_after_reads, (list, tuple)) or len(tiers_after_reads) != 2:
        return not_yet(f"tiers_after_reads should be a list of the two objects' tiers, got {tiers_after_reads!r:.80}")
    first, second = tiers_after_reads
    if not all(isinstance(t, str) and t in tiers.TIERS for t in (first, second)):
        return not_yet(
            f"tiers_after_reads should hold two tier names from {list(tiers.TIERS)}, got {tiers_after_reads!r:.80}"
        )
    now = [p.tier() for p in pair]
    if list(tiers_after_reads) != now:
        return not_yet(f"tiers_after_reads is {list(tiers_after_reads)}, but the objects in pair say they are on {now}")
    if first == second == "mapped":
        return not_yet(
            "both objects are still on 'mapped': reads move only objects placed 'dynamic' (store.place(pair, "
            "'dynamic'), after placing them on mapped)"
        )
    if second == "dram" and first == "dram":
        return not_yet("both objects are in DRAM, but the budget should fit only one: set it before the reads")
    if first != "dram":
        return not_yet(
            f"the first object is on {first!r}: read the first object three times and the second twice, under a "
            "budget that fits one"
        )
    return passed(f"the object read three times is in DRAM, the other on {second!r}: reads decide the placement")
