"""``blocks``: code goes to the data. One task per block, on the worker that holds it, and merge
tasks. Tasks = blocks, so small blocks cost scheduling; this is every comparison's baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, register, task_key


def on_block(work: BlockWork, block: Any, aligned: Sequence[Any], args: Sequence[Any], start: int, stop: int) -> Any:
    """Task body: the work of one block, on the worker holding it."""
    return work.call(block, aligned, args, np.arange(start, stop, dtype=np.int64) if work.with_rows else None)


class DaskPlan(Plan):
    """A plan whose tasks are plain Dask tasks: broadcast arguments are scattered to every worker
    once per plan (one copy per worker, not one per task message)."""

    _scattered: dict[int, Any]

    def task_args(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """``args`` with each :class:`Broadcast` value replaced by its scattered future."""
        if not hasattr(self, "_scattered"):
            self._scattered = {}
        converted = []
        for arg in args:
            if isinstance(arg, Broadcast):
                if id(arg) not in self._scattered:
                    self._scattered[id(arg)] = (arg, self.session.client.scatter(arg.value, broadcast=True, hash=False))
                arg = self._scattered[id(arg)][1]
            converted.append(arg)
        return tuple(converted)

    def close(self) -> None:
        """Forget the scattered broadcasts (Dask frees them)."""
        self._scattered = {}

    def map_over(
        self, placed: PlacedBlocks, aligned: Sequence[PlacedBlocks], work: BlockWork, args: Sequence[Any]
    ) -> list[Any]:
        """One task per block of ``placed`` (its aligned blocks beside it): ``client.map``, one graph."""
        n = len(placed)
        ranges = placed.item_ranges() if work.with_rows else [(0, 0)] * n
        return self.session.client.map(
            on_block,
            [work] * n,
            placed.block_futures,
            [[a.block_futures[i] for a in aligned] for i in range(n)],
            [tuple(self.task_args(args))] * n,
            [a for a, _ in ranges],
            [b for _, b in ranges],
            pure=False,
            key=[task_key(work.name) for _ in range(n)],
        )

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per placed block, on the worker holding it."""
        return self.map_over(self.blocks(), self.aligned, work, args)


class Blocks(Strategy):
    """One task per block where it lives, then merge tasks (tasks = blocks)."""

    name = "blocks"
    description = "one task per block, on the worker holding it; then merge tasks"
    plan = DaskPlan


register(Blocks())
