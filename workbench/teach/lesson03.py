"""Checks of lesson 03 · SplIter: task counts and the cost of fragmentation."""

from __future__ import annotations

from typing import Any

from workbench.teach.answers import choice, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise


def task_growth(sweep: Any) -> dict[str, float]:
    """Tasks at the most blocks over tasks at the fewest, per variant (1 = follows the workers)."""
    tasks = sweep.moved()["tasks"].unstack("variant").sort_index()
    return {variant: float(tasks[variant].iloc[-1] / tasks[variant].iloc[0]) for variant in tasks.columns}


@exercise(
    "03.1",
    answers=("follows_workers", "follows_blocks"),
    hint="sweep.moved()['tasks'].unstack('variant') has one row per blocks-per-core value: which column "
    "stays about the same, which grows with the rows?",
)
def task_counts(follows_workers: Any, follows_blocks: Any, sweep: Any) -> tuple:
    """A variant whose task count stays put as blocks grow, and one whose count grows with them."""
    growth = task_growth(sweep)
    top = float(sweep.results["blocks_per_worker"].max() / sweep.results["blocks_per_worker"].min())
    flat = {v for v, g in growth.items() if g < 1.5}
    growing = {v for v, g in growth.items() if g >= top / 2}
    workers = choice(follows_workers, "follows_workers", growth)
    blocks = choice(follows_blocks, "follows_blocks", growth)
    if workers not in flat:
        return not_yet(f"{workers}'s tasks grew {fmt(growth[workers])}x over the sweep: it does not follow the workers")
    if blocks not in growing:
        return not_yet(
            f"{blocks}'s tasks grew {fmt(growth[blocks])}x while the blocks grew {fmt(top)}x: it does not follow them"
        )
    return passed(
        f"{workers} runs about the same tasks whatever the blocks ({fmt(growth[workers])}x); {blocks}'s grow "
        f"{fmt(growth[blocks])}x as the blocks grow {fmt(top)}x"
    )


def slowdown(experiment: Any) -> float:
    """Mean seconds of *blocks* over *split* at the most blocks per core."""
    means = experiment.moved()["seconds"]
    top = experiment.results["blocks_per_worker"].max()
    return float(means[(top, "blocks")] / means[(top, "split")])


@exercise(
    "03.2",
    answers=("slowdown_histogram", "slowdown_knn", "suffers_more"),
    hint="experiment.moved()['seconds'] is indexed by (blocks_per_worker, variant); divide blocks by split "
    "at the largest blocks_per_worker, for sweep (histogram) and for knn",
)
def fragmentation_cost(slowdown_histogram: Any, slowdown_knn: Any, suffers_more: Any, sweep: Any, knn: Any) -> tuple:
    """blocks/split at the most blocks per core for both applications, and which suffers more."""
    expected = {"histogram": slowdown(sweep), "knn": slowdown(knn)}
    for app, value in (("histogram", slowdown_histogram), ("knn", slowdown_knn)):
        got = number(value, f"slowdown_{app}")
        if not close(got, expected[app], 0.05):
            inverted = close(1 / got, expected[app], 0.05) if got else False
            return not_yet(
                f"slowdown_{app} is {fmt(got)}, but blocks / split at the most blocks per core is "
                f"{fmt(expected[app])}" + (" (you divided split by blocks)" if inverted else "")
            )
    worse = max(expected, key=expected.get)
    if choice(suffers_more, "suffers_more", expected) != worse:
        return not_yet(f"{worse} loses more ({fmt(expected[worse])}x against {fmt(min(expected.values()))}x)")
    return passed(
        f"blocks is {fmt(expected['histogram'])}x split for the histogram and {fmt(expected['knn'])}x for kNN; "
        f"{worse} suffers more"
    )
