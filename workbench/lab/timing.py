"""Wall-clock timing helpers for benchmarks and kernel comparisons (never used to assert in tests)."""

from __future__ import annotations

import time
from collections.abc import Callable


def time_once(fn: Callable[[], object]) -> float:
    """Seconds of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sample_seconds(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall time of each of ``repeats`` calls (the samples a comparison's interval needs)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return [time_once(fn) for _ in range(repeats)]
