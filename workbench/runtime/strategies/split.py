"""``split`` and ``split-materialized``: SplIter partitions, the blocks one worker already holds,
one partition per worker; one task per partition, pinned to its worker (no block moves).

``split`` iterates the partition's blocks inside the task (the work's ``blocks`` function in one
call, or one call per block and a local merge); its first map holds each partition's blocks in one
object on its worker (no copy), so every map's task has one dependency, not one per block;
``split-materialized`` concatenates each
partition once on its worker when the plan opens and reuses it for every map (the thesis's
extension for compute-bound codes and for work that reads the data again and again).
"""

from __future__ import annotations

from typing import Any

from workbench.runtime import splitter
from workbench.runtime.session import PinnedCall
from workbench.runtime.splitter import map_partitions, materialize, on_materialized
from workbench.runtime.splitter import on_partition as on_partition  # the balance strategy's chunks run it
from workbench.runtime.strategies.base import BlockWork, Strategy, register, task_key
from workbench.runtime.strategies.blocks import DaskPlan


class SplitPlan(DaskPlan):
    """Partitions found at open (phase ``split``): one pinned task per partition per map."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        with self.recorder.phase("split"):
            self.partitions = splitter.split(self.session, placed, partitions_per_worker=1)
        self.held: list[Any] | None = None  # the partitions' held blocks, one future each (at the first map)

    def aligned_blocks(self, partition: splitter.Partition) -> list[list[Any]]:
        """The aligned arrays' blocks with this partition's indexes."""
        return [splitter.aligned(partition, a, self.session) for a in self.aligned]

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per partition, pinned to its worker, depending on its held blocks only (held at the
        first map, in phase ``split``: each block is a dependency once per plan, not once per map)."""
        if self.held is None:
            with self.recorder.phase("split"):
                self.held = splitter.hold_partitions(self.session, self.partitions, self.aligned_blocks)
        return map_partitions(self.session, self.partitions, work, self.task_args(args), held=self.held)

    def close(self) -> None:
        """Drop the held partitions (Dask frees them; the blocks stay)."""
        super().close()
        self.held = None


class SplitMaterializedPlan(SplitPlan):
    """Partitions concatenated on their workers at open, reused by every map."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        with self.recorder.phase("split"):
            self.materialized = self.session.submit_pinned(
                [
                    PinnedCall(
                        materialize,
                        (p.blocks, self.aligned_blocks(p), p.item_ranges),
                        p.worker,
                        task_key("materialize"),
                    )
                    for p in self.partitions
                ]
            )

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per materialized partition, pinned to its worker."""
        task_args = self.task_args(args)
        return self.session.submit_pinned(
            [
                PinnedCall(on_materialized, (work, m, task_args), p.worker, task_key(work.name))
                for m, p in zip(self.materialized, self.partitions)
            ]
        )

    def close(self) -> None:
        """Drop the materialized partitions (Dask frees them)."""
        super().close()
        self.materialized = []


class Split(Strategy):
    """SplIter: one task per partition of co-located blocks, iterating its blocks."""

    name = "split"
    description = "SplIter: one task per partition (a worker's blocks), iterating its blocks in place"
    plan = SplitPlan


class SplitMaterialized(Strategy):
    """SplIter with each partition concatenated once on its worker."""

    name = "split-materialized"
    description = "SplIter: each partition concatenated once on its worker, then one task per partition"
    plan = SplitMaterializedPlan


register(Split())
register(SplitMaterialized())
