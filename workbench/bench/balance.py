"""``workbench bench balance``: SplIter partitions that rebalance, against ``split``, ``blocks`` and
``rechunk``, on balanced data, skewed per-block costs and a slowed worker (issue 17's goals).

The skewed k-means (:mod:`workbench.apps.skewed`): blocks in contiguous runs per worker, each
block's work multiplied by its cost factor; ``slowed`` shares one worker's core with busy processes.
Ratios are ``split`` / variant (above 1: faster than split); bytes moved include the replicas made.
"""

from __future__ import annotations

import contextlib
from typing import Any

import datasets
from workbench import machine
from workbench.bench.goals import goal, goal_lines
from workbench.lab import imbalance
from workbench.runtime.session import Session, start

SKEW = {"ci": 16, "lab": 64, "full": 64}
BLOCKS_PER_WORKER = 8
# Repetitions of the k-means step per unit of cost: at ci the blocks are small, so more of them make a
# cost-1 block last a few milliseconds, enough for balance (not task overhead) to decide the time. The
# skewed scenario's costs add up to more units: its repetitions are scaled (see _repeat).
REPEAT = {"ci": 400, "lab": None, "full": None}


def run(size: str = "ci", repeats: int = 3, workers: int | None = 2, session: Session | None = None) -> dict[str, Any]:
    """Every scenario with every variant; the goals of issue 17 next to the figures."""
    with contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=300) as session:
        n_workers = len(session.workers())
        costs = datasets.block_costs(n_workers * BLOCKS_PER_WORKER, SKEW[size])
        experiments = {
            name: imbalance.scenario(
                session,
                name,
                size,
                skew=SKEW[size],
                repeats=repeats,
                blocks_per_worker=BLOCKS_PER_WORKER,
                repeat=_repeat(REPEAT[size], costs if name == "skewed" else None),
            )
            for name in ("balanced", "skewed", "slowed")
        }
    tables = {name: imbalance.table(e) for name, e in experiments.items()}
    return {
        "benchmark": "balance",
        "size": size,
        "repeats": repeats,
        "workers": n_workers,
        "skew": SKEW[size],
        "skewed_ceiling": ceiling(costs, n_workers),
        "scenarios": {name: t.reset_index().to_dict("records") for name, t in tables.items()},
        "goals": goals(tables),
        "machine": machine.describe(),
    }


def _repeat(repeat: int | None, costs: Any) -> int | None:
    """Repetitions per unit of cost: the skewed scenario's scaled by 16 / skew, so its costliest block
    lasts as long as at skew 16 and its cheapest ones still take milliseconds (not task overhead)."""
    if repeat is None or costs is None:
        return repeat
    return max(1, round(repeat * 16 / float(costs.max())))


def ceiling(costs: Any, workers: int) -> float:
    """The most any balancing can gain over ``split`` on these block costs (contiguous runs per worker):
    the costliest worker's share over a perfect share, overheads and transfers aside."""
    runs = [costs[k * len(costs) // workers : (k + 1) * len(costs) // workers].sum() for k in range(workers)]
    return float(max(runs) / (costs.sum() / workers))


def goals(tables: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 17's goals from the scenario tables (indexed by variant)."""
    found = []
    balanced = tables["balanced"]
    slower = balanced.loc["split-balanced", "mean_s"] / balanced.loc["split", "mean_s"] - 1
    found.append(goal("balanced data: split-balanced at most 5 % slower than split", slower, slower <= 0.05))
    for name in ("skewed", "slowed"):
        t = tables[name]
        gain = t.loc["split-balanced", "split / variant"]
        found.append(goal(f"{name}: split / split-balanced >= 1.5", gain, gain >= 1.5))
        for other in ("blocks", "rechunk"):
            ratio = t.loc[other, "mean_s"] / t.loc["split-balanced", "mean_s"]
            found.append(goal(f"{name}: {other} / split-balanced > 1", ratio, ratio > 1))
        fewer = t.loc["rechunk", "MB_moved_with_replicas"] / max(
            t.loc["split-balanced", "MB_moved_with_replicas"], 1e-9
        )
        found.append(goal(f"{name}: rechunk moves more bytes than split-balanced (ratio)", fewer, fewer > 1))
    return found


def format_report(report: dict[str, Any]) -> str:
    """The scenario tables and the goals, as the command prints them."""
    lines = [
        f"size {report['size']}, {report['workers']} workers, mean of {report['repeats']} runs, skew {report['skew']} "
        f"(skewed: no balancing can beat split by more than {report['skewed_ceiling']:.2f}x)"
    ]
    for name, rows in report["scenarios"].items():
        lines += [
            "",
            f"{name}:",
            f"{'variant':<24} {'seconds':>8} {'split/var':>9} {'tasks':>6} {'MB moved':>9} "
            f"{'steals':>6} {'MB stolen':>9} {'MB repl.':>8}",
        ]
        for r in rows:
            lines.append(
                f"{r['variant']:<24} {r['mean_s']:>8.3f} {r['split / variant']:>9.2f} {r['tasks']:>6.0f} "
                f"{r['MB_moved_with_replicas']:>9.3f} {r['steals']:>6} {r['MB_stolen']:>9.3f} "
                f"{r['MB_replicated']:>8.3f}"
            )
    lines.append("")
    return "\n".join(lines + goal_lines(report["goals"]))
