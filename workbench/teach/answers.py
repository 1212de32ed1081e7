"""Reading a learner's answer: numbers, names and comparisons with a tolerance, each refusing what
it cannot read with a sentence the learner can act on (:class:`AnswerError` becomes "not yet")."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


class AnswerError(ValueError):
    """The answer cannot be read as what the exercise asks for; the message says what was expected."""


def number(value: Any, name: str) -> float:
    """``value`` as a finite float, or AnswerError naming ``name``."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise AnswerError(f"`{name}` should be a number, got {value!r:.60}")
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        raise AnswerError(f"`{name}` should be a number, got {type(value).__name__} {value!r:.60}") from None
    if not math.isfinite(result):
        raise AnswerError(f"`{name}` should be a finite number, got {result}")
    return result


def choice(value: Any, name: str, options: Iterable[str]) -> str:
    """``value`` as one of ``options`` (case and spaces ignored), or AnswerError listing them."""
    options = list(options)
    text = str(value).strip().lower() if isinstance(value, str) else None
    for option in options:
        if text == option.lower():
            return option
    raise AnswerError(f"`{name}` should be one of {options}, got {value!r}")


def close(value: float, expected: float, relative: float) -> bool:
    """Whether ``value`` is within ``relative`` of ``expected`` (absolute near zero)."""
    return abs(value - expected) <= relative * max(abs(expected), 1e-12)


def fmt(value: float) -> str:
    """A figure for a message: three significant digits."""
    return f"{value:.3g}"
