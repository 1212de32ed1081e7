"""``split`` and ``split-materialized``: SplIter partitions, the blocks one worker already holds,
one partition per worker; one task per partition, pinned to its worker (no block moves).

``split`` iterates the partition's blocks inside the task (the work's ``blocks`` function in one
call, or one call per block and a local merge); ``split-materialized`` concatenates each
partition once on its worker when the plan opens and reuses it for every map (the thesis's
extension for compute-bound codes and for work that reads the data again and again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.runtime import splitter
from workbench.runtime.session import PinnedCall
from workbench.runtime.strategies.base import BlockWork, Strategy, concatenate, register, rows_of, task_key
from workbench.runtime.strategies.blocks import DaskPlan


def on_partition(
    work: BlockWork, blocks: list[Any], aligned: list[list[Any]], args: Sequence[Any], ranges: list[tuple[int, int]]
) -> Any:
    """Task body: the work of a partition's blocks, all local to this worker."""
    return work.call_partition(blocks, aligned, args, ranges)


def materialize(
    blocks: list[Any], aligned: list[list[Any]], ranges: list[tuple[int, int]]
) -> tuple[Any, list[Any], list[tuple[int, int]]]:
    """Task body: a partition as one array (and its aligned arrays), kept on its worker."""
    return concatenate(blocks), [concatenate(a) for a in aligned], ranges


def on_materialized(
    work: BlockWork, partition: tuple[Any, list[Any], list[tuple[int, int]]], args: Sequence[Any]
) -> Any:
    """Task body: the work of one materialized partition, in one call."""
    data, aligned, ranges = partition
    return work.call(data, aligned, args, rows_of(ranges) if work.with_rows else None)


class SplitPlan(DaskPlan):
    """Partitions found at open (phase ``split``): one pinned task per partition per map."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        with self.recorder.phase("split"):
            self.partitions = splitter.split(self.session, placed, partitions_per_worker=1)

    def aligned_blocks(self, partition: splitter.Partition) -> list[list[Any]]:
        """The aligned arrays' blocks with this partition's indexes."""
        return [[a.block_futures[i] for i in partition.block_indexes] for a in self.aligned]

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per partition, pinned to its worker."""
        task_args = self.task_args(args)
        return self.session.submit_pinned(
            [
                PinnedCall(
                    on_partition,
                    (work, p.blocks, self.aligned_blocks(p), task_args, p.item_ranges),
                    p.worker,
                    task_key(work.name),
                )
                for p in self.partitions
            ]
        )


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
