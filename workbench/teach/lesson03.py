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
    concept="a SplIter partition is one task per worker over all the blocks it already holds; a plain blocked "
    "computation is one task per block",
    hint="sweep.moved() is indexed by blocks per worker and variant and has a tasks column (mean per run); put "
    "the variants side by side (unstack the variant level): which column stays about the same down the rows, "
    "which grows with them?",
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
        return not_yet(
            f"{workers}'s tasks grew {fmt(growth[workers])}x over the sweep: it does not follow the workers, whose "
            "number stayed the same",
            "compare each variant's tasks at the fewest and at the most blocks per worker",
        )
    if blocks not in growing:
        return not_yet(
            f"{blocks}'s tasks grew {fmt(growth[blocks])}x while the blocks grew {fmt(top)}x: it does not follow them",
            "a variant that follows the blocks runs about one task per block",
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
    concept="the cost of many small tasks is how many times longer the one-task-per-block run takes than the "
    "one-task-per-worker run on the same data, at the most blocks; an application whose every extra block also "
    "adds work of its own suffers more",
    hint="the moved() table of sweep (histogram) and of knn has the mean seconds per (blocks_per_worker, "
    "variant); take the largest blocks_per_worker in each experiment's results and compare the two variants there",
)
def fragmentation_cost(slowdown_histogram: Any, slowdown_knn: Any, suffers_more: Any, sweep: Any, knn: Any) -> tuple:
    """blocks/split at the most blocks per core for both applications, and which suffers more."""
    expected = {"histogram": slowdown(sweep), "knn": slowdown(knn)}
    answers = {
        "histogram": number(slowdown_histogram, "slowdown_histogram"),
        "knn": number(slowdown_knn, "slowdown_knn"),
    }
    for app, got in answers.items():
        if close(got, expected[app], 0.05):
            continue
        if got and close(1 / got, expected[app], 0.05):
            return not_yet(
                f"slowdown_{app} is {fmt(got)}: you divided split by blocks; the slowdown of blocks is its time over "
                "split's",
                "blocks in the numerator",
            )
        other = "knn" if app == "histogram" else "histogram"
        if close(got, expected[other], 0.05):
            return not_yet(
                f"slowdown_{app} is the {other} experiment's slowdown: the two are swapped",
                "sweep is the histogram, knn is kNN",
            )
        side = "high" if got > expected[app] else "low"
        return not_yet(
            f"slowdown_{app} is too {side}: it is more than 5 % away from the mean seconds of blocks over split at "
            "the most blocks per core",
            "mean seconds from the moved() table, at the largest blocks_per_worker",
        )
    worse = max(expected, key=expected.get)
    if choice(suffers_more, "suffers_more", expected) != worse:
        return not_yet(
            "your two slowdowns are right, but suffers_more names the application with the smaller one",
            "the application that suffers more is the one whose slowdown is larger",
        )
    return passed(
        f"blocks is {fmt(expected['histogram'])}x split for the histogram and {fmt(expected['knn'])}x for kNN; "
        f"{worse} suffers more"
    )
