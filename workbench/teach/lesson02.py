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


@exercise(
    "02.1",
    answers=("first_significant_dims",),
    hint="in table1, keep the rows of the 'dims' sweep whose ci_high_pct is below 0 (the whole interval "
    "faster); the smallest value among them, or None when there is none",
)
def first_significant(first_significant_dims: Any, table1: Any) -> tuple:
    """The smallest number of dimensions where rro beats files with the whole CI below 0 (or None)."""
    dims = table1[table1.sweep == "dims"]
    faster = sorted(float(v) for v in dims[dims.ci_high_pct < 0]["value"])
    expected = faster[0] if faster else None
    if first_significant_dims is None:
        if expected is None:
            return passed("right: at this size no dims makes rro significantly faster than files")
        return not_yet(f"None, but at {expected:g} dims the whole interval is below 0 (rro significantly faster)")
    got = number(first_significant_dims, "first_significant_dims")
    if expected is not None and got == expected:
        return passed(f"from {expected:g} dims on, rro is significantly faster than files (CI entirely below 0)")
    rows = dims.groupby("value")[["ci_low_pct", "ci_high_pct"]].max()  # the widest reading per dims value
    if got in rows.index:
        low, high = float(rows.loc[got, "ci_low_pct"]), float(rows.loc[got, "ci_high_pct"])
        if high >= 0:
            return not_yet(f"at {got:g} dims the interval [{low:.1f} %, {high:.1f} %] includes 0: not significant")
        return not_yet(f"{got:g} dims is significant, but so is {expected:g}, which is smaller")
    return not_yet(f"{got:g} is not one of the dims measured ({sorted(rows.index.tolist())})")


@exercise(
    "02.2",
    answers=("attached_sum",),
    hint="inside the function: return float(shm.attach(name).sum()); submit it with session.client.submit",
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
    got = number(result, "attached_sum(name)")
    if not np.isclose(got, data.sum()):
        return not_yet(f"attached_sum returned {got:.6g} on a worker, but the shared array sums to {data.sum():.6g}")
    return passed(f"on a worker, attached_sum found the segment by name and summed it: {got:.6g}")
