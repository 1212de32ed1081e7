"""A strategy written as docs/architecture.md's "adding a strategy" recipe says, as one file (tests run it).

``scattered``: one task per block, like ``blocks``, but each task pinned to the worker after the one
that holds its block: a strategy that ignores locality on purpose, so every block moves.
"""

from __future__ import annotations

from typing import Any

from workbench.runtime.session import PinnedCall
from workbench.runtime.strategies import BlockWork, Strategy, register
from workbench.runtime.strategies.base import task_key
from workbench.runtime.strategies.blocks import DaskPlan, on_block


class ScatteredPlan(DaskPlan):
    """One pinned task per block, each on a worker that does not hold it (the blocks travel there)."""

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        placed, workers = self.blocks(), sorted(self.session.workers())
        ranges, holders = placed.item_ranges(), placed.holders()
        elsewhere = [workers[(workers.index(h) + 1) % len(workers) if h in workers else 0] for h in holders]
        return self.session.submit_pinned(
            [
                PinnedCall(
                    on_block,
                    (work, block, [a.block_futures[i] for a in self.aligned], self.task_args(args), *ranges[i]),
                    elsewhere[i],
                    task_key(work.name),
                )
                for i, block in enumerate(placed.block_futures)
            ]
        )


class Scattered(Strategy):
    """One task per block on the worker after its block's holder: locality ignored on purpose."""

    name = "scattered"
    description = "one task per block on a worker that does not hold it (every block moves)"
    plan = ScatteredPlan


STRATEGY = register(Scattered())
