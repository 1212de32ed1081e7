"""``active``, ``non-active`` and ``active-split``: the blocks as objects of the active store.

The placed blocks become store objects where each already lives (``ArrayBlock``, made once per
placed array and kept until it is released; the first, untimed warm-up run pays for it).

* ``active``: the work of each block runs as an active call on the backend holding the block
  (``ArrayBlock.apply``): the code goes to the data, only the result travels.
* ``non-active``: the same call, but each task fetches a copy of its block through the store and
  computes wherever the scheduler ran it, as an object store without active methods makes you do.
* ``active-split``: one active call per SplIter partition of the store collection, on the backend
  holding the partition's blocks (they are its arguments, resolved there without a copy): the
  partition's blocks in one call of the work's ``blocks`` function when it has one, else
  concatenated and given to its block function once (one kNN tree per worker, not per block).

A :class:`~workbench.runtime.strategies.Broadcast` argument (kNN's queries) is itself placed in the
store, one piece per worker, and every call names its pieces: a call on another backend fetches
them (the many-to-many traffic the thesis measured for kNN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.runtime import splitter
from workbench.runtime.blocks import concatenate, rows_of
from workbench.runtime.store import ArrayBlock, BlockCollection, store_for
from workbench.runtime.store.handles import active_task, submit_active
from workbench.runtime.store.protocol import Resolved, call_task_name
from workbench.runtime.store.tasks import run_non_active
from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, register, task_key


@dataclass(frozen=True)
class StoreCall:
    """What ``ArrayBlock.apply`` runs on a backend: the work of one block, or of a partition (its
    first block is the object called; its other blocks arrive as store proxies, which the backend
    resolves to its own objects, no copy).

    The call's values, in order: ``others`` other blocks of the partition; ``aligned`` values of
    aligned arrays (an array per block, a list of arrays per partition); then the work's
    arguments, laid out by ``layout``: ``None`` one value as it is, ``n`` the data of ``n`` store
    blocks (a broadcast argument's pieces), concatenated.
    """

    work: BlockWork
    layout: tuple[int | None, ...]
    ranges: tuple[tuple[int, int], ...]
    others: int = 0
    aligned: int = 0
    partition: bool = False

    def __call__(self, data: np.ndarray, *values: Any) -> Any:
        """The work of this call's block or partition, on the backend that holds it."""
        blocks = [data, *(v.data for v in values[: self.others])]
        aligned = list(values[self.others : self.others + self.aligned])
        rest = values[self.others + self.aligned :]
        args, i = [], 0
        for n in self.layout:
            if n is None:
                args.append(rest[i])
                i += 1
            else:
                args.append(concatenate([v.data for v in rest[i : i + n]]))
                i += n
        rows = rows_of(self.ranges) if self.work.with_rows else None
        if not self.partition:
            return self.work.call(data, aligned, args, rows)
        if self.work.blocks is not None:
            return self.work.call_partition(blocks, [list(a) for a in aligned], args, list(self.ranges))
        return self.work.call(concatenate(blocks), [concatenate(list(a)) for a in aligned], args, rows)


class StorePlan(Plan):
    """The placed blocks as a store collection (made once per placed array), broadcast arguments
    as store pieces; subclasses say how each call is submitted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store = store_for(self.session)
        self.collection: BlockCollection = self.blocks().view(self.collection_key(), self.make_collection, _delete)

    def collection_key(self) -> tuple[Any, ...]:
        """What the placed array's store collection is kept under (one per key, made once)."""
        return ("store", ArrayBlock)

    def make_collection(self) -> BlockCollection:
        """The placed blocks as store objects, each where it already lives."""
        return self.store.persist_blocks(self.blocks().array)

    def pieces(self, broadcast: Broadcast) -> BlockCollection:
        """``broadcast``'s value in the store, one piece per worker, placed round-robin (made once)."""

        def make() -> BlockCollection:
            value = np.asarray(broadcast.value)
            parts = [p for p in np.array_split(value, max(1, len(self.session.workers()))) if len(p)]
            return self.store.persist_blocks(parts or [value])

        return self.blocks().view(("broadcast", id(broadcast)), make, _delete)

    def call_values(self, args: Sequence[Any]) -> tuple[tuple[int | None, ...], list[Any]]:
        """The layout and the values of ``args`` (broadcast ones as their pieces' proxies)."""
        layout: list[int | None] = []
        values: list[Any] = []
        for arg in args:
            if isinstance(arg, Broadcast):
                pieces = self.pieces(arg)
                layout.append(len(pieces))
                values.extend(pieces.blocks)
            else:
                layout.append(None)
                values.append(arg)
        return tuple(layout), values

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One store call per block."""
        layout, values = self.call_values(args)
        ranges = self.blocks().item_ranges()
        messages = [
            (
                StoreCall(work, layout, (ranges[i],), aligned=len(self.aligned)),
                *(a.block_futures[i] for a in self.aligned),
                *values,
            )
            for i in range(len(ranges))
        ]
        return self.submit_all(work.name, messages)

    def submit_all(self, name: str, messages: list[tuple[Any, ...]]) -> list[Any]:
        """One active call of ``apply`` per block, pinned to its holders, as one graph."""
        resolved = self.store.resolve([b.ref for b in self.collection.blocks])
        return submit_active(
            self.session,
            [active_task(r, "apply", False, message, {}, name=name) for r, message in zip(resolved, messages)],
        )


class NonActivePlan(StorePlan):
    """Each task fetches a copy of its block through the store and computes where it runs."""

    def submit_all(self, name: str, messages: list[tuple[Any, ...]]) -> list[Any]:
        """One non-active call per block, placed by the scheduler."""
        refs = [b.ref for b in self.collection.blocks]
        return self.session.client.map(  # one graph; the scheduler places the tasks
            run_non_active,
            refs,
            ["apply"] * len(refs),
            messages,
            [{}] * len(refs),
            pure=False,
            key=[task_key(call_task_name(name, active=False)) for _ in refs],
        )


class ActiveSplitPlan(StorePlan):
    """SplIter partitions of the store collection (phase ``split``), one active call per partition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self.recorder.phase("split"):
            self.partitions = splitter.split(self.session, self.collection)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One active call per partition, on its first block's backend."""
        layout, values = self.call_values(args)
        locations = {r.ref: r.workers for r in self.store.resolve([p.blocks[0].ref for p in self.partitions])}
        tasks = []
        for p in self.partitions:
            first, others = p.blocks[0], p.blocks[1:]
            call = StoreCall(
                work, layout, tuple(p.item_ranges), others=len(others), aligned=len(self.aligned), partition=True
            )
            aligned = [[a.block_futures[i] for i in p.block_indexes] for a in self.aligned]
            message = (call, *others, *aligned, *values)
            target = Resolved(first.ref, locations.get(first.ref, [p.worker]))
            tasks.append(active_task(target, "apply", False, message, {}, name=work.name))
        return submit_active(self.session, tasks)


def _delete(collection: BlockCollection) -> None:
    collection.delete()


class Active(Strategy):
    """Active store calls: each block's work runs on the backend holding it."""

    name = "active"
    description = "active store: each block's work runs as a method call on the backend holding it"
    plan = StorePlan


class NonActive(Strategy):
    """Non-active store: each task fetches its block through the store."""

    name = "non-active"
    description = (
        "object store without active methods: each task fetches a copy of its block and computes where it runs"
    )
    plan = NonActivePlan


class ActiveSplit(Strategy):
    """Active calls on SplIter partitions of the store collection."""

    name = "active-split"
    description = "active store and SplIter: one active call per partition, on the backend holding its blocks"
    plan = ActiveSplitPlan


register(Active())
register(NonActive())
register(ActiveSplit())
