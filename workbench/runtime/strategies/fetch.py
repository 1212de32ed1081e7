"""``fetch``: data goes to the code. The caller gathers every block and computes itself: no task
overhead, but every byte crosses to the client."""

from __future__ import annotations

import time
from typing import Any

from workbench.runtime.blocks import concatenate, rows_of
from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, register


class FetchPlan(Plan):
    """Gather the blocks (and aligned blocks) to the caller, compute there in one call."""

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One partial: every block gathered here and computed in one call."""
        placed = self.blocks()
        with self.recorder.phase("fetch"):
            start = time.time()
            blocks = self.session.gather(placed.block_futures)
            aligned = [self.session.gather(a.block_futures) for a in self.aligned]
            moved = sum(int(getattr(b, "nbytes", 0)) for group in (blocks, *aligned) for b in group)
            self.recorder.event("transfer", start, time.time(), task="gather-blocks", nbytes=moved, source="workers")
        with self.recorder.phase("compute"):
            start = time.time()
            values = [a.value if isinstance(a, Broadcast) else a for a in args]
            rows = rows_of(placed.item_ranges()) if work.with_rows else None
            result = work.call(concatenate(blocks), [concatenate(a) for a in aligned], values, rows)
            self.recorder.event("compute", start, time.time(), task=work.name, nbytes=int(getattr(result, "nbytes", 0)))
        return [result]


class Fetch(Strategy):
    """Every block gathered to the caller, the work done there in one call."""

    name = "fetch"
    description = "gather every block to the caller and compute there (no tasks; every byte moves)"
    plan = FetchPlan


register(Fetch())
