"""SplIter: iterate a blocked, distributed array as partitions of blocks that live together.

The block size of a dataset sets its number of tasks, and a fragmented dataset buries the
scheduler. ``split`` groups the blocks that one worker already holds into a few partitions (by
default one per worker), so the number of tasks follows the compute resources, not the block
size, and no block moves. A store collection (:class:`~workbench.runtime.store.BlockCollection`)
is split the same way, from the store's location query instead of Dask's ``who_has``.
``map_partitions`` runs block work (a :class:`~workbench.runtime.strategies.BlockWork`) as one
task per partition on its worker, with the partition's block futures as real dependencies; the
task iterates the blocks (with a local merge) or concatenates them locally first (the thesis's
extension for compute-bound codes). The ``split`` strategies and ``run_partitions`` (a function
and a merge, as block work) both run through it.

Work that maps the same partitions again and again (k-means' iterations) holds them first:
:func:`hold_partitions` runs one pinned task per partition that keeps references to its blocks
(the worker's own arrays, no copy: :class:`HeldBlocks`), and ``map_partitions(held=...)`` gives
each iteration's task that one future as its only block dependency. The scheduler then handles
one dependency per partition per iteration instead of one per block (issue 36: 3,200 per
k-means iteration at 200 blocks per core on 16 workers).

Barceló-Cuerda, *Bridging the Gap Between Object Stores and HPC*, ch. 5.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from distributed import Future, futures_of

from workbench.runtime.blocks import (
    PlacedBlocks,
    block_futures,
    concatenate,
    holders_of,
    persist_row_blocks,
    row_offsets,
    rows_of,
)
from workbench.runtime.session import PinnedCall, Session
from workbench.runtime.trace import task_key
from workbench.runtime.work import BlockWork


@dataclass
class Partition:
    """Blocks of one array that one worker holds: the blocks, their indexes and item ranges.

    ``blocks`` are Dask futures for a Dask array, store proxies for a store collection.
    """

    worker: str
    blocks: list[Any]
    block_indexes: list[int]  # global block index along the first axis
    item_ranges: list[tuple[int, int]] = field(repr=False)  # global [start, stop) rows of each block
    source: Any = field(default=None, repr=False)  # the persisted array: keeps its blocks alive
    # inside the task, the blocks as arrays (store blocks); None: Dask gives the task arrays already
    read: Callable[[list[Any]], list[Any]] | None = field(default=None, repr=False)

    def get_indexes(self) -> list[int]:
        """Global indexes of this partition's blocks (to align another array's blocks, e.g. labels)."""
        return list(self.block_indexes)

    def get_item_indexes(self) -> np.ndarray:
        """Global indexes of this partition's items (rows), in the order the blocks are iterated."""
        return rows_of(self.item_ranges)

    def __len__(self) -> int:
        return len(self.blocks)


def _is_collection(x: Any) -> bool:
    """A store collection: blocks that say where they live and how a task reads them (``read_here``);
    SplIter asks the collection, so it needs no import of the store."""
    return hasattr(type(x), "read_here") and hasattr(x, "holders")


def _row_chunks(x: Any) -> tuple[Any, ...]:
    return tuple(x.chunks) if _is_collection(x) or isinstance(x, PlacedBlocks) else tuple(x.chunks[0])


def split(session: Session, x: Any, partitions_per_worker: int = 1) -> list[Partition]:
    """Partitions of ``x``'s row blocks, grouped by the worker holding them, ``partitions_per_worker`` each.

    ``x`` is :class:`~workbench.runtime.blocks.PlacedBlocks`, a Dask array (persisted, and waited
    for, if it is not already; cut along the first axis only, any number of dimensions; unknown row
    counts, as after ``y[y > 0.5]``, are measured where the blocks are) or a store
    :class:`~workbench.runtime.store.BlockCollection`. A worker holding fewer blocks than
    ``partitions_per_worker`` gets one partition per block; no rows, no partitions.
    """
    _check_partitions_per_worker(partitions_per_worker)
    if _is_collection(x):
        return _group(x, x.blocks, x.holders(), x.chunks, partitions_per_worker)
    if isinstance(x, PlacedBlocks):
        if not x.row_blocked:
            raise ValueError(
                f"split takes row blocks (cut along the first axis only); these are {x.array.numblocks} blocks"
            )
        return _group(x, x.block_futures, x.holders(), x.chunks, partitions_per_worker) if sum(x.chunks) else []
    if not isinstance(x, da.Array):
        raise TypeError(
            f"split takes PlacedBlocks, a dask.array.Array or a store BlockCollection, got {type(x).__name__}"
        )
    x, blocks, chunks = persist_row_blocks(session, x, "split")
    if sum(chunks) == 0:
        return []
    return _group(x, blocks, holders_of(session, blocks), chunks, partitions_per_worker)


def _check_partitions_per_worker(partitions_per_worker: Any) -> None:
    if (
        isinstance(partitions_per_worker, bool)
        or not isinstance(partitions_per_worker, (int, np.integer))
        or partitions_per_worker < 1
    ):
        raise ValueError(f"partitions_per_worker must be a positive integer, got {partitions_per_worker!r}")


def _group(
    x: Any, blocks: list[Any], holders: list[str | None], chunks: Sequence[int], partitions_per_worker: int
) -> list[Partition]:
    """Blocks grouped by holder into ``partitions_per_worker`` partitions per worker, in block order."""
    offsets = row_offsets(chunks)
    by_worker: dict[str, list[int]] = {}
    for index, holder in enumerate(holders):
        if holder is None:
            raise RuntimeError(f"block {index} of the array is on no worker (lost?): persist the array again")
        by_worker.setdefault(holder, []).append(index)
    partitions = []
    for worker, indexes in sorted(by_worker.items()):
        for group in np.array_split(np.asarray(indexes), min(partitions_per_worker, len(indexes))):
            partitions.append(
                Partition(
                    worker=worker,
                    blocks=[blocks[i] for i in group],
                    block_indexes=[int(i) for i in group],
                    item_ranges=[(int(offsets[i]), int(offsets[i + 1])) for i in group],
                    source=x,
                    read=x.read_here if _is_collection(x) else None,
                )
            )
    partitions.sort(key=lambda p: p.block_indexes[0])
    return partitions


def on_partition(
    work: BlockWork,
    blocks: list[Any],
    aligned: list[list[Any]],
    args: Sequence[Any],
    ranges: list[tuple[int, int]],
    read: Callable[[list[Any]], list[Any]] | None = None,
    materialized: bool = False,
) -> Any:
    """Task body: the work of a partition's blocks, all local to this worker (``read`` turns store
    blocks into arrays; Dask gives the task arrays already); ``materialized``: concatenated first,
    one call."""
    if materialized:
        return on_materialized(work, materialize(blocks, aligned, ranges, read), args)
    if read is not None:
        blocks, aligned = read(blocks), [read(a) for a in aligned]
    return work.call_partition(blocks, aligned, args, ranges)


def materialize(
    blocks: list[Any],
    aligned: list[list[Any]],
    ranges: list[tuple[int, int]],
    read: Callable[[list[Any]], list[Any]] | None = None,
) -> tuple[Any, list[Any], list[tuple[int, int]]]:
    """Task body: a partition as one array (and its aligned arrays), on its worker."""
    if read is not None:
        blocks, aligned = read(blocks), [read(a) for a in aligned]
    return concatenate(blocks), [concatenate(a) for a in aligned], ranges


def on_materialized(
    work: BlockWork, partition: tuple[Any, list[Any], list[tuple[int, int]]], args: Sequence[Any]
) -> Any:
    """Task body: the work of one materialized partition, in one call."""
    data, aligned, ranges = partition
    return work.call(data, aligned, args, rows_of(ranges) if work.with_rows else None)


class HeldBlocks:
    """A partition's blocks held on its worker, in one object: references to the arrays that the
    worker already holds under the blocks' own keys (no copy), the aligned arrays' blocks, the
    blocks' row ranges and how a task reads them (``read``: store blocks).

    Its size, for Dask's memory accounting, is that of the references only: the bytes are counted
    once, under the blocks' keys. It is pinned to its worker and never sent; were Dask to spill it,
    the pickle would hold the blocks' bytes (a copy), as spilling does.
    """

    __slots__ = ("aligned", "blocks", "ranges", "read")

    def __init__(
        self,
        blocks: list[Any],
        aligned: list[list[Any]],
        ranges: list[tuple[int, int]],
        read: Callable[[list[Any]], list[Any]] | None,
    ) -> None:
        self.blocks, self.aligned, self.ranges, self.read = blocks, aligned, ranges, read

    def __sizeof__(self) -> int:
        return 64 + 8 * (len(self.blocks) + sum(len(a) for a in self.aligned))

    def __len__(self) -> int:
        return len(self.blocks)


def hold(
    blocks: list[Any],
    aligned: list[list[Any]],
    ranges: list[tuple[int, int]],
    read: Callable[[list[Any]], list[Any]] | None = None,
) -> HeldBlocks:
    """Task body: the partition's blocks (Dask gives the task the worker's own arrays) held in one object."""
    return HeldBlocks(list(blocks), [list(a) for a in aligned], list(ranges), read)


def on_held(work: BlockWork, held: HeldBlocks, args: Sequence[Any], materialized: bool = False) -> Any:
    """Task body: :func:`on_partition` of a held partition (its one dependency)."""
    return on_partition(work, held.blocks, held.aligned, args, held.ranges, held.read, materialized)


def hold_partitions(
    session: Session,
    partitions: Sequence[Partition],
    aligned: Callable[[Partition], list[list[Any]]] | None = None,
) -> list[Future]:
    """One pinned task per partition that holds its blocks on its worker (:class:`HeldBlocks`): the
    one dependency of every later task on the partition (``map_partitions(held=...)``). Each block
    future is a dependency here, once."""
    return session.submit_pinned(
        [
            PinnedCall(
                hold, (p.blocks, aligned(p) if aligned else [], p.item_ranges, p.read), p.worker, task_key("hold")
            )
            for p in partitions
        ]
    )


def map_partitions(
    session: Session,
    partitions: Sequence[Partition],
    work: BlockWork,
    args: Sequence[Any],
    aligned: Callable[[Partition], list[list[Any]]] | None = None,
    materialized: bool = False,
    held: Sequence[Future] | None = None,
) -> list[Future]:
    """One task per partition, pinned to its worker: ``work`` over its blocks (a partition's blocks in
    one call, or one call per block and a local merge; ``materialized``: concatenated, one call).

    ``aligned(partition)`` gives the blocks of other arrays with the partition's indexes (labels ...).
    The block futures are the task's dependencies (the scheduler sees them); pinning with
    ``allow_other_workers=False`` keeps work stealing from moving the task away from its blocks.
    ``held``: the partitions' :func:`hold_partitions` futures, in the same order; each task then
    depends on its partition's one future instead of every block (``aligned`` is what was held).
    """
    if held is not None:
        if len(held) != len(partitions):
            raise ValueError(f"{len(held)} held partitions for {len(partitions)} partitions")
        return session.submit_pinned(
            [
                PinnedCall(on_held, (work, h, args, materialized), p.worker, task_key(work.name))
                for h, p in zip(held, partitions)
            ]
        )
    return session.submit_pinned(
        [
            PinnedCall(
                on_partition,
                (work, p.blocks, aligned(p) if aligned else [], args, p.item_ranges, p.read, materialized),
                p.worker,
                f"{work.name}-{uuid.uuid4().hex}",  # a fresh key, named as traces show it (strategies' task_key)
            )
            for p in partitions
        ]
    )


def _work(function: Callable[..., Any], merge: Callable[[list[Any]], Any] | None, kwargs: dict[str, Any]) -> BlockWork:
    """``run_partitions``' arguments as block work: ``function`` (with ``kwargs`` bound) of a block, or
    of a partition's list of blocks when there is no ``merge``."""
    bound = functools.partial(function, **kwargs) if kwargs else function
    if merge is not None:
        return BlockWork(block=bound, merge=merge)
    # ``list``: never called, each partition's result comes back unmerged
    return BlockWork(block=bound, blocks=bound, merge=list)


def run_partitions(
    session: Session,
    partitions: Sequence[Partition],
    function: Callable[..., Any],
    *args: Any,
    merge: Callable[[list[Any]], Any] | None = None,
    materialize: bool = False,
    with_arrays: Sequence[da.Array] = (),
    **kwargs: Any,
) -> list[Future]:
    """One task per partition, pinned to its worker; returns their futures: :func:`map_partitions`
    (the ``split`` strategies' tasks) with ``function`` and ``merge`` as block work.

    - ``materialize=True``: ``function(concatenated blocks, *args, **kwargs)``;
    - ``merge`` given: ``merge([function(block, ...) for block in partition])``, a local merge
      (a partition of one block gives its one result as it is, as every strategy merges);
    - otherwise ``function(list of blocks, ...)``.
    ``with_arrays``: other persisted arrays cut into the same row blocks (labels ...); their blocks
    with the partition's indexes come after each block argument, the same way.
    """
    if materialize and merge is not None:
        raise ValueError(
            "choose materialize=True (one call on the concatenated blocks) or merge= (one call per block), not both"
        )
    source = partitions[0].source if partitions else None
    for other in with_arrays:
        if source is not None:
            check_same_blocks(source, other, ("the split array", "an aligned array"))
    return map_partitions(
        session,
        partitions,
        _work(function, merge, kwargs),
        args,
        lambda p: [aligned(p, o, session) for o in with_arrays],
        materialized=materialize,
    )


def aligned(partition: Partition, other: Any, session: Session) -> list[Any]:
    """The blocks of ``other`` with the same indexes as ``partition``'s (e.g. labels).

    ``other`` must have the same row blocks as the partitioned array, and be persisted (a Dask
    array gives block futures, a store collection block proxies).
    """
    if _is_collection(other):
        return [other.blocks[i] for i in partition.get_indexes()]
    if isinstance(other, PlacedBlocks):
        return [other.block_futures[i] for i in partition.get_indexes()]
    if not futures_of(other):
        raise ValueError("the aligned array is not persisted: session.client.persist(array) it first")
    other_blocks = block_futures(other)
    return [other_blocks[i] for i in partition.get_indexes()]


def check_same_blocks(x: Any, y: Any, names: tuple[str, str] = ("points", "labels")) -> None:
    """Raise a clear error unless ``x`` and ``y`` are cut into the same row blocks.

    Where either array's row counts are unknown (NaN chunks), only the number of blocks can be
    compared without computing them.
    """
    cx, cy = _row_chunks(x), _row_chunks(y)
    unknown = any(c != c for c in (*cx, *cy))  # NaN != NaN
    if (len(cx) != len(cy)) if unknown else (cx != cy):
        raise ValueError(
            f"{names[0]} and {names[1]} have different row blocks ({len(cx)} vs {len(cy)} blocks, "
            f"first {cx[:3]} vs {cy[:3]}): rechunk {names[1]} to {names[0]}.chunks[0]"
        )
