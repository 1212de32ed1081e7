"""Checks of lesson 02 · Shared memory: when RRO pays, and attaching a shared array in a task."""

from __future__ import annotations

import os
import secrets
from typing import Any

import numpy as np

from workbench.memory import shm
from workbench.runtime.failures import sendable
from workbench.teach.answers import number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

TASK_TIMEOUT = 60.0  # seconds for the learner's task on a worker


def smallest_significant_dims(table1: Any) -> float | None:
    """The smallest dims of the 'dims' sweep where rro beats files with the whole CI below 0, or None."""
    dims = table1[table1.sweep == "dims"]
    faster = sorted(float(v) for v in dims[dims.ci_high_pct < 0]["value"])
    return faster[0] if faster else None


@exercise(
    "02.1",
    answers=("first_significant_dims",),
    concept="a difference is significant only when its whole confidence interval lies on one side of zero; "
    "faster means below zero, so the interval's upper end must be below zero too",
    hint="table1 has one row per sweep and value; keep the rows of the 'dims' sweep and read their "
    "ci_low_pct and ci_high_pct columns. Answer None when no row qualifies",
)
def first_significant(first_significant_dims: Any, table1: Any) -> tuple:
    """The smallest number of dimensions where rro beats files with the whole CI below 0 (or None)."""
    dims = table1[table1.sweep == "dims"]
    expected = smallest_significant_dims(table1)
    rows = dims.groupby("value")[["ci_low_pct", "ci_high_pct"]].max()  # one row per dims value
    if first_significant_dims is None:
        if expected is None:
            return passed("right: at this size and on this run no dims makes rro significantly faster than files")
        return not_yet(
            "None, but at least one dims row has its whole interval below 0: rro is significantly faster there",
            "look at ci_high_pct, the upper end of each interval",
        )
    got = number(first_significant_dims, "first_significant_dims")
    if expected is not None and got == expected:
        return passed(f"from {expected:g} dims on, rro is significantly faster than files (CI entirely below 0)")
    if got not in rows.index:
        return not_yet(
            f"{got:g} is not one of the dims measured ({', '.join(f'{v:g}' for v in rows.index)}): answer with a "
            "value of the 'dims' sweep",
            "the value column of the rows where sweep is 'dims'",
        )
    low, high = float(rows.loc[got, "ci_low_pct"]), float(rows.loc[got, "ci_high_pct"])
    if low > 0:
        return not_yet(
            f"at {got:g} dims the whole interval [{low:.1f} %, {high:.1f} %] is above 0: there rro is significantly "
            "slower than files, not faster",
            "a negative percentage means rro took less time than files",
        )
    if high >= 0:
        return not_yet(
            f"at {got:g} dims the interval [{low:.1f} %, {high:.1f} %] includes 0: not significant"
            + (" (its lower end is below 0, but so must be its upper end)" if low < 0 else ""),
            "look at ci_high_pct, the upper end of each interval",
        )
    return not_yet(
        f"{got:g} dims is significant, but a smaller number of dims is significant too",
        "the smallest dims whose whole interval is below 0",
    )


@exercise(
    "02.2",
    answers=("attached_sum",),
    concept="a worker can find a node-shared array by its name and read it in place, without a copy, and send "
    "back only a small result",
    hint="inside your function, shm.attach(name) maps the segment by its name and returns a read-only numpy "
    "array; return one float. To try it yourself: shm.share, session.client.submit(...).result(), "
    "shm.list_segments(), shm.delete",
)
def attach_in_a_task(attached_sum: Any, session: Any) -> tuple:
    """Run the learner's ``attached_sum(name)`` on a worker over a segment the check shares."""
    if not callable(attached_sum):
        return not_yet(f"attached_sum should be a function of one segment name, got {type(attached_sum).__name__}")
    name = f"teach-02-2-{os.getpid()}-{secrets.token_hex(4)}"  # a fresh name: never an existing segment
    data = np.random.default_rng(2).random(10_000)
    shared = shm.share(name, data)
    try:
        result = session.client.submit(sendable, attached_sum, name, pure=False).result(timeout=TASK_TIMEOUT)
    finally:
        del shared
        shm.delete(name)
    if result is None:
        return not_yet("attached_sum returned None: it should return the sum of the shared array")
    if isinstance(result, np.ndarray) and result.size > 1:
        return not_yet(
            f"attached_sum returned an array of {result.size:,} values, so the whole array travelled back to the "
            "notebook: reduce it on the worker and return one number",
            "numpy arrays have a method that adds their values",
        )
    got = number(result, "attached_sum(name)")
    if not np.isclose(got, data.sum()):
        return not_yet(
            f"attached_sum returned {got:.6g} on a worker, which is not what the shared array sums to: is it "
            "attaching the segment it is given by name, and summing all of it?",
            "shm.attach(name) gives the array the check shared under that name",
        )
    return passed(f"on a worker, attached_sum found the segment by name and summed it: {got:.6g}")
