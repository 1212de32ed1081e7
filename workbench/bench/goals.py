"""Goals of a benchmark: what an issue asked for, what this run measured, whether it was met.

Every benchmark's JSON carries ``goals``, a list of ``{"goal", "measured", "met"}``; they are
printed beside the figures and never asserted (these machines are noisy and differ).
"""

from __future__ import annotations

from typing import Any


def goal(text: str, measured: float, met: bool) -> dict[str, Any]:
    """One goal: its words, the figure measured, whether it was met."""
    return {"goal": text, "measured": float(measured), "met": bool(met)}


def goal_lines(goals: list[dict[str, Any]]) -> list[str]:
    """The goals as the text lines the benchmarks print last."""
    return [f"goal: {g['goal']}: measured {g['measured']:.3f} ({'met' if g['met'] else 'NOT met'})" for g in goals]
