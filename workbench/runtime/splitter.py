"""SplIter: iterate a blocked, distributed array as partitions of blocks that live together.

The block size of a dataset sets its number of tasks, and a fragmented dataset buries the
scheduler. ``split`` groups the blocks that one worker already holds into a few partitions (by
default one per worker), so the number of tasks follows the compute resources, not the block
size, and no block moves. A store collection (:class:`~workbench.runtime.store.BlockCollection`)
is split the same way, from the store's location query instead of Dask's ``who_has``.
``run_partitions`` runs one task per partition on its worker, with the partition's block
futures as real dependencies; the task iterates the blocks (with a local merge)
or, with ``materialize=True``, concatenates them locally first (the thesis's extension for
compute-bound codes).

Barceló-Cuerda, *Bridging the Gap Between Object Stores and HPC*, ch. 5.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from distributed import Future, futures_of

from workbench.runtime.blocks import PlacedBlocks, block_futures, persist_row_blocks
from workbench.runtime.failures import sendable
from workbench.runtime.session import PinnedCall, Session
from workbench.runtime.store import BlockCollection, local_object


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

    def get_indexes(self) -> list[int]:
        """Global indexes of this partition's blocks (to align another array's blocks, e.g. labels)."""
        return list(self.block_indexes)

    def get_item_indexes(self) -> np.ndarray:
        """Global indexes of this partition's items (rows), in the order the blocks are iterated."""
        if not self.item_ranges:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in self.item_ranges])

    def __len__(self) -> int:
        return len(self.blocks)


def _is_collection(x: Any) -> bool:
    return isinstance(x, BlockCollection)


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
    who_has = session.client.who_has(blocks)
    return _group(
        x, blocks, [(sorted(who_has.get(f.key, ())) or [None])[0] for f in blocks], chunks, partitions_per_worker
    )


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
    offsets = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
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
                )
            )
    partitions.sort(key=lambda p: p.block_indexes[0])
    return partitions


def _concatenate(blocks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _run_store_partition(
    function: Callable[..., Any],
    blocks: list[Any],
    others: list[list[Any]],
    materialize: bool,
    merge: Callable[[list[Any]], Any] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Task body for a store collection: its blocks are objects of this worker's backend (no copy)."""

    def data(proxies: list[Any]) -> list[np.ndarray]:
        return [local_object(p).data for p in proxies]

    return _run_partition(function, data(blocks), [data(o) for o in others], materialize, merge, args, kwargs)


def _run_partition(
    function: Callable[..., Any],
    blocks: list[np.ndarray],
    others: list[list[np.ndarray]],
    materialize: bool,
    merge: Callable[[list[Any]], Any] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Task body: the partition's blocks (and aligned blocks of other arrays) are already local; the
    user's functions run through :func:`~workbench.runtime.failures.sendable`."""
    if materialize:
        return sendable(function, _concatenate(blocks), *(_concatenate(o) for o in others), *args, **kwargs)
    if merge is not None:
        partials = [sendable(function, b, *(o[i] for o in others), *args, **kwargs) for i, b in enumerate(blocks)]
        return sendable(merge, partials)
    return sendable(function, blocks, *others, *args, **kwargs)


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
    """One task per partition, pinned to its worker; returns their futures.

    - ``materialize=True``: ``function(concatenated blocks, *args, **kwargs)``;
    - ``merge`` given: ``merge([function(block, ...) for block in partition])``, a local merge;
    - otherwise ``function(list of blocks, ...)``.
    ``with_arrays``: other persisted arrays cut into the same row blocks (labels ...); their blocks
    with the partition's indexes come after each block argument, the same way.
    The block futures are the task's dependencies (the scheduler sees them); pinning with
    ``allow_other_workers=False`` keeps work stealing from moving the task away from its blocks.
    """
    if materialize and merge is not None:
        raise ValueError(
            "choose materialize=True (one call on the concatenated blocks) or merge= (one call per block), not both"
        )
    source = partitions[0].source if partitions else None
    for other in with_arrays:
        if source is not None:
            check_same_blocks(source, other, ("the split array", "an aligned array"))
    call = uuid.uuid4().hex  # every call is a new computation (a fixed key would return the last result)
    body = _run_store_partition if _is_collection(source) else _run_partition
    return session.submit_pinned(
        [
            PinnedCall(
                body,
                (function, p.blocks, [aligned(p, o, session) for o in with_arrays], materialize, merge, args, kwargs),
                p.worker,
                f"partition-{getattr(function, '__name__', 'function')}-{call}-{i}",
            )
            for i, p in enumerate(partitions)
        ]
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
