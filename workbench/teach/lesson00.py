"""Checks of lesson 00 · Welcome: what one task costs."""

from __future__ import annotations

from typing import Any

from workbench.lab import sweep
from workbench.teach.answers import close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

KERNEL_VARIANT = "numba, 1 thread"
# No Dask task costs less than this (one scheduler message alone takes tens of microseconds): a
# slope below it is a line that does not rise, whatever rounding leaves of it.
LEAST_TASK_SECONDS = 1e-6
RERUN = (
    "run the sweep cell again with more repeats (repeats = 5 in the parameters cell), or when the machine is "
    "quieter, then answer from the new runs"
)


def meaningless_fit(fixed_s: float, per_task_s: float) -> str:
    """Why a fit ``seconds = fixed + per_task x blocks`` cannot describe tasks ('' when it can).

    A run cannot cost less than nothing, and a task cannot make a run faster: a negative fixed
    cost or a per-task cost of zero or less means the noise of the machine was larger than the
    effect, not that tasks are free.
    """
    if per_task_s < LEAST_TASK_SECONDS:
        return "the line through these runs does not rise with the blocks, so it finds no cost per task"
    if fixed_s < 0:
        return "the line through these runs starts below zero seconds (a negative fixed cost), which no run can have"
    return ""


@exercise(
    "00.1",
    answers=("per_task_ms", "tasks_to_match_kernel"),
    concept="every task pays the same fixed price whatever its block holds, so the time grows in a straight line "
    "with the number of tasks: the slope of that line is the price of one more task, and dividing the kernel's "
    "time by that price tells how many tasks cost as much as the kernel",
    hint="sweep.per_task_cost(runs) fits the line through the median of each block count and returns "
    "(fixed, per task), both in seconds; the one-thread kernel's seconds are in kernel_times, row "
    "'numba, 1 thread'",
)
def per_task_cost(per_task_ms: Any, tasks_to_match_kernel: Any, runs: Any, kernel_times: Any) -> tuple:
    """Per-task cost in ms (within 20 % of the fit) and tasks whose overhead equals the kernel's time.

    A fit that is physically meaningless (negative fixed cost, no cost per task) is refused: the
    learner is asked to measure again rather than to trust noise.
    """
    got_ms = number(per_task_ms, "per_task_ms")
    got_tasks = number(tasks_to_match_kernel, "tasks_to_match_kernel")
    fixed_s, per_task_s = sweep.per_task_cost(runs)
    why = meaningless_fit(fixed_s, per_task_s)
    if why:
        return not_yet(
            f"{why}: the noise of this machine was larger than the effect, so there is no answer to give "
            "from these runs",
            RERUN,
        )
    expected_ms = per_task_s * 1e3
    if not close(got_ms, expected_ms, 0.2):
        if close(got_ms * 1e3, expected_ms, 0.2):
            return not_yet(
                f"per_task_ms is {fmt(got_ms)}: that is seconds; the question asks for milliseconds",
                "the fit returns seconds: convert before you answer",
            )
        if close(got_ms, fixed_s * 1e3, 0.2) or close(got_ms, fixed_s, 0.2):
            return not_yet(
                "per_task_ms is the fixed cost of a run (where the line starts), not what each extra task adds",
                "use the second value of sweep.per_task_cost(runs), the slope",
            )
        medians = runs.groupby("blocks")["seconds"].median()
        per_block = [seconds / blocks * 1e3 for blocks, seconds in medians.items()]
        if any(close(got_ms, value, 0.05) for value in per_block):
            return not_yet(
                "per_task_ms divides a run's time by its blocks: that spreads the fixed cost and the kernel's work "
                "over the tasks; the price of one more task is how much the time rises from one block count to "
                "the next",
                "fit a straight line through the medians: sweep.per_task_cost(runs)",
            )
        side = "high" if got_ms > expected_ms else "low"
        return not_yet(
            f"per_task_ms is too {side}: it is more than 20 % away from the slope of the line through the "
            "medians of runs",
            "sweep.per_task_cost(runs) gives the slope in seconds",
        )
    kernel_s = float(kernel_times.set_index("variant").loc[KERNEL_VARIANT, "seconds"])
    expected_tasks = kernel_s / per_task_s
    if not close(got_tasks, expected_tasks, 0.25):
        others = kernel_times.set_index("variant")["seconds"].drop(KERNEL_VARIANT)
        for variant, seconds in others.items():
            if close(got_tasks, float(seconds) / per_task_s, 0.1):
                return not_yet(
                    f"tasks_to_match_kernel uses the time of {variant!r}; the question compares with the "
                    "one-thread numba kernel",
                    f"take the seconds of the row {KERNEL_VARIANT!r} of kernel_times",
                )
        if any(close(got_tasks, expected_tasks * factor, 0.25) for factor in (1e3, 1e-3, 1e6, 1e-6)):
            return not_yet(
                "tasks_to_match_kernel mixes units: the kernel's time and the cost of one task must be in the "
                "same unit before you divide",
                "kernel_times is in seconds, per_task_ms in milliseconds",
            )
        side = "many" if got_tasks > expected_tasks else "few"
        return not_yet(
            f"tasks_to_match_kernel is too {side}: it is more than 25 % away from the one-thread kernel's time "
            "divided by the cost of one task",
            "divide the kernel's time by the cost of one task (same units)",
        )
    return passed(
        f"each task costs about {fmt(expected_ms)} ms here, so {fmt(expected_tasks)} tasks cost as much as "
        f"the whole one-thread kernel ({fmt(kernel_s * 1e3)} ms)"
    )
