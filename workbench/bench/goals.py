"""Goals of a benchmark: what an issue asked for, what this run measured, against which threshold.

Every benchmark's report carries ``goals``, a list of the dicts :func:`goal` makes, all of one shape::

    {"goal": words, "measured": figure, "threshold": figure, "better": "higher" | "lower",
     "met": bool, "unit": "x" | "s" | ..., "peers": {name: figure}, "peer_unit": "s" | ...,
     "noise": relative spread seen in repeats or None, "bound": what bounds it here or None}

``peers`` are the figures compared side by side (for "RRO >= 2x faster than files": both times), so
``workbench bench all``'s page can draw them; ``noise`` lets ``workbench bench compare`` tell a
change from the spread between repeats; ``bound`` says, for a goal not met, which resource of this
machine bounds the figure (measured, e.g. the disk's read rate). Goals are printed beside the
figures and never asserted: these machines are noisy and differ.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

Better = Literal["higher", "lower"]


def goal(
    text: str,
    measured: float,
    threshold: float,
    *,
    better: Better = "higher",
    unit: str = "x",
    peers: Mapping[str, float] | None = None,
    peer_unit: str = "s",
    noise: float | None = None,
    bound: str | None = None,
) -> dict[str, Any]:
    """One goal: met when ``measured`` is at least (``better="higher"``) or at most (``"lower"``)
    ``threshold``. ``peers``: the figures the goal compares, by name; ``noise``: the relative spread
    of ``measured`` between repeats (:func:`ratio_noise`); ``bound``: why it is not met here."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    measured = float(measured)
    met = goal_met(measured, threshold, better)
    return {
        "goal": text,
        "measured": measured,
        "threshold": float(threshold),
        "better": better,
        "met": met,
        "unit": unit,
        "peers": {name: float(value) for name, value in (peers or {}).items()},
        "peer_unit": peer_unit,
        "noise": None if noise is None or math.isnan(noise) else float(noise),
        "bound": None if met else bound,
    }


def goal_met(measured: float, threshold: float, better: Better) -> bool:
    """Whether ``measured`` meets ``threshold`` (at least it, or at most it); a NaN never does."""
    if math.isnan(measured):
        return False
    return bool(measured >= threshold if better == "higher" else measured <= threshold)


def spread(samples: Iterable[float]) -> float:
    """The relative spread of repeated figures: half their range over their median (NaN, unknown, for
    fewer than two: one run says nothing of the noise)."""
    values = [float(v) for v in samples]
    if len(values) < 2:
        return float("nan")
    middle = statistics.median(values)
    return (max(values) - min(values)) / 2 / abs(middle) if middle else float("nan")


def ratio_noise(*sample_lists: Sequence[float]) -> float:
    """The relative spread of a ratio (or product) of medians: the spreads of its terms, added in quadrature."""
    return math.sqrt(sum(spread(samples) ** 2 for samples in sample_lists))


def describe(g: Mapping[str, Any]) -> str:
    """One goal as a line: its words, the figure, the threshold, met or not, and what bounds it."""
    sign = ">=" if g["better"] == "higher" else "<="
    unit = g.get("unit", "")
    noise = f" ±{g['noise'] * 100:.0f} %" if g.get("noise") and math.isfinite(g["noise"]) else ""
    verdict = "met" if g["met"] else "NOT met"
    figure = f"{g['measured']:.3g}{unit}{noise}"
    line = f"goal: {g['goal']}: measured {figure} (goal {sign} {g['threshold']:g}{unit}, {verdict})"
    if g.get("bound"):
        line += f"; bounded here by {g['bound']}"
    return line


def goal_lines(goals: Iterable[Mapping[str, Any]]) -> list[str]:
    """The goals as the text lines the benchmarks print last."""
    return [describe(g) for g in goals]
