"""The "adding a strategy" recipe of docs/architecture.md, as one file (exercised by the tests).

``scattered``: one task per block, like ``blocks``, but each task pinned to the next worker in
turn whatever holds its block: a strategy that ignores locality, so half the blocks move.
"""

from __future__ import annotations

from typing import Any

from workbench.runtime.session import PinnedCall
from workbench.runtime.strategies import BlockWork, Strategy, register
from workbench.runtime.strategies.base import task_key
from workbench.runtime.strategies.blocks import DaskPlan, on_block


class ScatteredPlan(DaskPlan):
    """One pinned task per block, on workers in turn (the blocks travel to them)."""

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        placed, workers = self.blocks(), sorted(self.session.workers())
        ranges = placed.item_ranges()
        return self.session.submit_pinned(
            [
                PinnedCall(
                    on_block,
                    (work, block, [a.block_futures[i] for a in self.aligned], self.task_args(args), *ranges[i]),
                    workers[(i + 1) % len(workers)],
                    task_key(work.name),
                )
                for i, block in enumerate(placed.block_futures)
            ]
        )


class Scattered(Strategy):
    """One task per block on the next worker in turn, ignoring where the block lives."""

    name = "scattered"
    description = "one task per block on workers in turn, ignoring where each block lives (blocks move)"
    plan = ScatteredPlan


STRATEGY = register(Scattered())
