"""Memory-tier experiments (thesis ch. 6): the applications on each tier, and dynamic placement watched.

The application runs go through the experiment runner (answers checked against ``dram``, every
run traced); the data's size is set from the DRAM budget, so a "big" dataset is 2.5x the budget
per worker whatever the machine, and "big" objects are 10x the small ones (about the last-level
cache at the ``lab`` size). ``workbench bench tiers`` and lesson 05 both use these functions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from workbench import machine
from workbench.lab.runner import Experiment, default_max_repeats, run_experiment
from workbench.runtime import trace
from workbench.runtime.session import Session
from workbench.runtime.store import ArrayBlock, Store
from workbench.runtime.strategies import tiers as tier_strategies

MiB = 2**20
APPS = ("histogram1d", "kmeans", "matadd", "matmul")
FITS, OVER = 0.5, 2.5  # dataset bytes per worker, as multiples of the DRAM budget
# per size: the least DRAM budget per worker, and the most bytes of a small object (the last-level
# cache up to that; None: the cache whatever its size). "lab" caps it so that the big dataset of
# 2.5x a budget of 20 small objects per worker stays in a classroom machine's memory.
BUDGET = {"ci": 4 * MiB, "lab": 64 * MiB, "full": 512 * MiB}
SMALL_CAP = {"ci": 512 * 1024, "lab": 8 * MiB, "full": None}
TIER_EVENTS = ("place", "promote", "demote", "evict", "tier-read", "tier-write")
ITERATIONS = {"ci": 3, "lab": 10, "full": 10}  # k-means iterations of tier_variants, by size
# Lesson 05's k-means over the budget, by size: tier_variants' keywords where they differ from its
# defaults. At lab it runs what bench tiers runs there: small objects on a dataset 2.5x a 64 MiB budget
# (320 MB on 2 workers), 5 iterations; big objects need a budget of two of them (160 MiB: 800 MB of
# data), and 10 iterations of seven configurations over them took four fifths of the lesson (issue 46).
OVER_BUDGET: dict[str, dict[str, Any]] = {
    "ci": {},
    "lab": {"objects": "small", "budget": BUDGET["lab"], "iterations": 5},
    "full": {},
}


def small_object_bytes(size: str) -> int:
    """Bytes of a "small" object at ``size``: about the last-level cache (capped at ``ci`` and ``lab``)."""
    llc = machine.last_level_cache_bytes() or 32 * MiB
    cap = SMALL_CAP[size]
    return int(min(llc, cap) if cap and size != "ci" else cap or llc)


def budget_for(size: str) -> int:
    """The DRAM budget per worker at ``size``: two big objects (20 small ones) at least, so a dataset
    that fits the budget still holds a big object; ``ci`` keeps its few MiB."""
    if size == "ci":
        return BUDGET["ci"]
    return max(BUDGET[size], 20 * small_object_bytes(size))


def app_grid(app: str, data_bytes: int, object_bytes: int, iterations: int) -> dict[str, list[Any]]:
    """The runner grid that gives ``app`` about ``data_bytes`` of data in objects of ``object_bytes``."""
    if app == "histogram1d":
        block = max(1024, object_bytes // 8)
        return {"points": [max(block, data_bytes // 8 // block * block)], "block": [block]}
    if app == "kmeans":
        dims = 16
        block = max(64, object_bytes // (8 * dims))
        return {
            "points": [max(block, data_bytes // (8 * dims) // block * block)],
            "dims": [dims],
            "block": [block],
            "iterations": [iterations],
        }
    if app == "matadd":
        cols = 512
        block = max(8, object_bytes // (8 * cols))
        rows = max(block, data_bytes // 2 // (8 * cols) // block * block)
        return {"rows": [rows], "cols": [cols], "block": [block]}
    if app == "matmul":  # A's row blocks of block_size x side; side = blocks x block_size
        side = int(np.sqrt(max(1, data_bytes // 2 // 8)))
        block_size = max(16, min(side, object_bytes // (8 * max(1, side))))
        blocks = max(2, side // block_size)
        return {"blocks": [blocks], "block_size": [block_size]}
    raise ValueError(f"no tier grid for application {app!r}; the tier applications are {', '.join(APPS)}")


def tier_variants(
    session: Session,
    app: str,
    size: str = "ci",
    variants: list[str] | None = None,
    objects: str = "big",
    dataset: str = "big",
    repeats: int = 3,
    budget: int | None = None,
    settle: Sequence[tuple[Any, ...]] | None = None,
    iterations: int | None = None,
) -> Experiment:
    """``app`` in tier configurations (all by default) against ``dram``, with ``objects`` ("small" or
    "big") and a ``dataset`` that fits the DRAM budget ("small") or is 2.5x over it ("big"); k-means
    runs ``iterations`` (None: :data:`ITERATIONS` of the size). The rounds adapt (up to ``size``'s
    bound) until the comparisons of ``settle`` are decided (every configuration against ``dram`` when
    None; see :func:`workbench.lab.runner.declare`)."""
    if objects not in ("small", "big") or dataset not in ("small", "big"):
        raise ValueError(f"objects and dataset are 'small' or 'big', got {objects!r} and {dataset!r}")
    budget = budget or budget_for(size)
    workers = len(session.workers())
    object_bytes = small_object_bytes(size) * (1 if objects == "small" else 10)
    data_bytes = int((FITS if dataset == "small" else OVER) * budget * workers)
    grid = app_grid(app, data_bytes, object_bytes, iterations=iterations or ITERATIONS[size])
    variants = list(variants or tier_strategies.TIER_VARIANTS)
    previous = tier_strategies.settings().dram_budget
    tier_strategies.configure(dram_budget=budget)
    try:
        experiment = run_experiment(
            session,
            app,
            variants,
            size="ci",
            grid=grid,
            repeats=repeats,
            progress=False,
            baseline="dram",
            max_repeats=default_max_repeats(size, repeats),
            settle=settle,
        )
    finally:
        tier_strategies.configure(dram_budget=previous)
    experiment.tier_setting = {  # type: ignore[attr-defined]
        "budget": budget,
        "object_bytes": object_bytes,
        "data_bytes": data_bytes,
        "objects": objects,
        "dataset": dataset,
    }
    return experiment


def ratios_to_dram(experiment: Experiment) -> pd.DataFrame:
    """Median seconds per variant and its ratio to ``dram`` (same run), slowest last."""
    medians = experiment.runs().groupby("variant")["seconds"].median()
    table = pd.DataFrame({"median_s": medians, "vs_dram": medians / medians["dram"]})
    return table.sort_values("vs_dram")


def tier_events(session: Session, since: float, timeout: float = 30.0, expect: int = 1) -> pd.DataFrame:
    """The store's tier events (place, promote, demote, evict ...) since ``since``, with their reasons;
    waits (bounded) until at least ``expect`` have arrived (worker events arrive asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        events = [e for e in trace.worker_events(session, since) if e.get("action") in TIER_EVENTS]
        if len(events) >= expect or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    rows = [
        {
            "t_ms": 1e3 * (e["start"] - since),
            "worker": e["worker"],
            "action": e["action"],
            "what": e["task"].split(": ", 1)[0],
            "why": e["task"].split(": ", 1)[1] if ": " in e["task"] else "",
            "MB": e["bytes"] / 1e6,
        }
        for e in sorted(events, key=lambda e: e["start"])
    ]
    return pd.DataFrame(rows, columns=["t_ms", "worker", "action", "what", "why", "MB"])


def scale_in_place(data: np.ndarray, factor: float) -> None:
    """``data *= factor`` (what ``ArrayBlock.apply_in_place`` runs: a write to the object)."""
    data *= factor


def watch_dynamic(
    store: Store, objects: int = 4, nbytes: int = MiB, budget: int = 2 * MiB, steps: int = 3
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Dynamic placement watched: ``objects`` arrays of ``nbytes`` on one backend, placed ``dynamic``
    under a ``budget``; at each step object 0 is written, object 1 is read, and one other object
    is read once. Returns (the tier of each object after each step, the tier events with their
    reasons). Everything made is deleted, and the budget set back."""
    if objects < 2:
        raise ValueError(f"watch_dynamic needs at least 2 objects (one written, one re-read), got {objects}")
    since = time.time()
    holder = store.backends()[0]
    store.rebalance(budget=budget)
    made = [store.make_persistent(ArrayBlock(np.ones(max(1, nbytes // 8))), backend=holder) for _ in range(objects)]
    rows = []
    try:
        store.place(made, "mapped", reason="placed cold at first")
        store.place(made, "dynamic")
        rows.append({"step": 0, **{f"object {i}": p.tier() for i, p in enumerate(made)}})
        for step in range(1, steps + 1):
            made[0].apply_in_place.value(scale_in_place, 1.0)  # written every step
            made[1].apply.value(np.sum)  # read every step
            if step + 1 < objects:
                made[step + 1].apply.value(np.sum)  # read once
            rows.append({"step": step, **{f"object {i}": p.tier() for i, p in enumerate(made)}})
    finally:
        store.delete(made)
        store.rebalance(budget=256 * MiB)
    return pd.DataFrame(rows).set_index("step"), tier_events(store.session, since)
