"""Checks of lesson 00 · Welcome: what one task costs."""

from __future__ import annotations

from typing import Any

from workbench.lab import sweep
from workbench.teach.answers import close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

KERNEL_VARIANT = "numba, 1 thread"


@exercise(
    "00.1",
    answers=("per_task_ms", "tasks_to_match_kernel"),
    hint="fit seconds = fixed + per_task x blocks through the median of each block count "
    "(sweep.per_task_cost(runs) returns both in seconds); the kernel's time is in kernel_times",
)
def per_task_cost(per_task_ms: Any, tasks_to_match_kernel: Any, runs: Any, kernel_times: Any) -> tuple:
    """Per-task cost in ms (within 20 % of the fit) and tasks whose overhead equals the kernel's time."""
    _, per_task_s = sweep.per_task_cost(runs)
    expected_ms = per_task_s * 1e3
    got_ms = number(per_task_ms, "per_task_ms")
    if not close(got_ms, expected_ms, 0.2):
        if close(got_ms * 1e3, expected_ms, 0.2):
            return not_yet(f"per_task_ms is {fmt(got_ms)}: that is seconds; the fit gives {fmt(expected_ms)} ms")
        return not_yet(
            f"per_task_ms is {fmt(got_ms)} ms, but the line through the medians of `runs` gives "
            f"{fmt(expected_ms)} ms per task (the slope, not the intercept and not seconds / blocks)"
        )
    kernel_s = float(kernel_times.set_index("variant").loc[KERNEL_VARIANT, "seconds"])
    got_tasks = number(tasks_to_match_kernel, "tasks_to_match_kernel")
    if expected_ms <= 0:
        return passed(
            f"the fit finds no cost per task on this run ({fmt(expected_ms)} ms: noise larger than the effect); "
            "run at size 'lab' or with more repeats to see it"
        )
    expected_tasks = kernel_s * 1e3 / expected_ms
    if not close(got_tasks, expected_tasks, 0.25):
        return not_yet(
            f"tasks_to_match_kernel is {fmt(got_tasks)}, but the one-thread kernel takes {fmt(kernel_s * 1e3)} ms, "
            f"which is {fmt(expected_tasks)} tasks of {fmt(expected_ms)} ms",
            "divide the kernel's time by the cost of one task (same units)",
        )
    return passed(
        f"each task costs about {fmt(expected_ms)} ms here, so {fmt(expected_tasks)} tasks cost as much as "
        f"the whole one-thread kernel ({fmt(kernel_s * 1e3)} ms)"
    )
