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
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from workbench.units import ratio_text

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


def _unit(g: Mapping[str, Any]) -> str:
    """A goal's unit as written after its figure: a symbol joined (``29.5x``, ``0.88ms``, ``5%``), a
    word or words apart (``8.05 messages``, ``7 tasks + deps``, ``24 GB/s``)."""
    unit = (g.get("unit") or "").strip()
    apart = unit[:1].isalpha() and (len(unit) > 3 or " " in unit)
    return f" {unit}" if apart else unit


def figure_text(g: Mapping[str, Any]) -> str:
    """A goal's figure with its unit and noise: ``29.5x ±2 %`` (a ratio as :func:`workbench.units.ratio_text`
    writes it)."""
    noise = f" ±{g['noise'] * 100:.0f} %" if g.get("noise") and math.isfinite(g["noise"]) else ""
    if _unit(g) == "x":
        return ratio_text(g["measured"]) + noise
    return f"{g['measured']:.3g}{_unit(g)}{noise}"


def threshold_text(g: Mapping[str, Any], signs: tuple[str, str] = (">=", "<=")) -> str:
    """A goal's threshold with its direction: ``>= 20x`` (``signs``: for higher, for lower is better)."""
    t = g["threshold"]
    figure = f"{t:g}" if float(t).is_integer() else f"{t:.3g}"  # a derived threshold to the figure's digits
    return f"{signs[0] if g['better'] == 'higher' else signs[1]} {figure}{_unit(g)}"


def describe(g: Mapping[str, Any]) -> str:
    """One goal as a line: its words, the figure, the threshold, met or not, and what bounds it."""
    verdict = "met" if g["met"] else "NOT met"
    line = f"goal: {g['goal']}: measured {figure_text(g)} (goal {threshold_text(g)}, {verdict})"
    if g.get("bound"):
        line += f"; bounded here by {g['bound']}"
    return line


def goal_lines(goals: Iterable[Mapping[str, Any]]) -> list[str]:
    """The goals as the text lines the benchmarks print last."""
    return [describe(g) for g in goals]


# -- goals read back from a file (untrusted: hand-edited, cut short, crafted) -----------------------
REQUIRED = ("goal", "measured", "threshold", "better", "met")  # the fields every goal carries
MAX_TEXT = 4000  # characters of one text field of a results file (a goal's words, an error's last line)
MAX_NUMBER = 2.0**63  # the largest figure a results file may hold: well past any byte count or rate, and
# small enough that no sum, ratio or float() of figures raises (an integer of 400 digits does)
# What a text field may not hold: C0 and C1 controls (\r, \n, \x0b, \x0c, \x1c-\x1e, \x85 break lines
# for str.splitlines, \r for markdown-it; \x1b drives a terminal), the Unicode line and paragraph
# separators, and lone surrogates (which no UTF-8 file can hold).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def is_number(value: Any) -> bool:
    """A JSON number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_figure(value: Any) -> bool:
    """A JSON number that is finite and within ``MAX_NUMBER`` either way (never raises: an integer too
    large for a float is compared, not converted)."""
    if not is_number(value):
        return False
    return abs(value) <= MAX_NUMBER if isinstance(value, int) else math.isfinite(value) and abs(value) <= MAX_NUMBER


def text_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a text field of a results file (None: it is one): not a string,
    longer than ``MAX_TEXT``, or holding a character of :data:`CONTROL`."""
    if not isinstance(value, str):
        return "is not text"
    if len(value) > MAX_TEXT:
        return f"is longer than {MAX_TEXT} characters"
    found = CONTROL.search(value)
    if found:
        return f"holds the control character {found.group()!r} (a line break, a terminal code or a lone surrogate)"
    return None


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` as a results file may hold it (:func:`text_problem` finds nothing): terminal colour codes
    dropped, tabs as spaces, any other control character as U+FFFD, cut to ``limit`` characters."""
    text = CONTROL.sub("\ufffd", _ANSI.sub("", text).replace("\t", " "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _figure_or_none(value: Any) -> bool:
    # None: a figure that could not be had (NaN, which strict JSON writes as null); a float may be NaN
    # or infinite (a benchmark's own report says so); an integer must convert to a float
    return value is None or (is_number(value) and (isinstance(value, float) or abs(value) <= MAX_NUMBER))


def problem(g: Any) -> str | None:
    """What is wrong with one goal read back from a file or a benchmark's report (None: it has the one
    shape, with its types, its figures convertible to floats and its text free of control characters)."""
    if not isinstance(g, Mapping):
        return "is not a mapping"
    missing = [k for k in REQUIRED if k not in g]
    if missing:
        return f"lacks {', '.join(missing)}"
    peers = g.get("peers", {})
    checks = {
        "goal": isinstance(g["goal"], str),
        "measured": _figure_or_none(g["measured"]),
        "threshold": is_figure(g["threshold"]),
        "better": g["better"] in ("higher", "lower"),
        "met": isinstance(g["met"], bool),
        "unit": isinstance(g.get("unit", ""), str),
        "peers": isinstance(peers, Mapping)
        and all(isinstance(k, str) and _figure_or_none(v) for k, v in peers.items()),
        "peer_unit": isinstance(g.get("peer_unit", ""), str),
        "noise": g.get("noise") is None or (_figure_or_none(g["noise"]) and not g["noise"] < 0),
        "bound": g.get("bound") is None or isinstance(g["bound"], str),
    }
    wrong = [k for k, ok in checks.items() if not ok]
    if wrong:
        return f"has a {', '.join(wrong)} of the wrong type"
    texts = {"goal": g["goal"], "unit": g.get("unit", ""), "peer_unit": g.get("peer_unit", ""), "bound": g.get("bound")}
    texts.update({f"peer name {name[:40]!r}": name for name in peers})
    for field, text in texts.items():
        wrong_text = None if text is None else text_problem(text)
        if wrong_text:
            return f"has a {field} that {wrong_text}"
    return None
