"""What every benchmark's ``run()`` opens with: its size checked, and the cluster it measures on.

Seven benchmarks began alike: a size checked against their table of sizes, then ``session`` when
the caller gave one (a notebook's, a test's) or a local cluster of their own. Here once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from contextlib import AbstractContextManager

from workbench.runtime.session import Session, start


def checked_size(size: str, sizes: Iterable[str]) -> str:
    """``size`` when it is one of ``sizes`` (a benchmark's table of sizes, or their names); else a
    clear error naming them."""
    names = list(sizes)
    if size not in names:
        raise ValueError(f"size must be one of {names}, got {size!r}")
    return size


def bench_session(session: Session | None, workers: int | None, timeout: float) -> AbstractContextManager[Session]:
    """``session`` when given (left open: it is the caller's), else a local cluster of ``workers``
    processes (None: one per core) started for the benchmark, closed when the ``with`` ends
    (``timeout``: seconds its start and its calls may take)."""
    if session is not None:
        return contextlib.nullcontext(session)
    return start(n_workers=workers, timeout=timeout)
