"""``channels`` and ``eager``: block work as an SPMD group that talks through array channels.

One rank per placed block, on the worker holding it (several ranks share a worker when there are
more blocks than workers). A block function with a ``rank`` parameter is called as
``f(block, *aligned, *args, rank=rank)`` and uses ``rank.channel(...)`` to exchange data with the
other ranks (a halo, a reduction, tiles of a transpose); its return values are merged as any
strategy's. ``channels`` moves the bytes in place (shared memory on a node, sockets between
nodes); ``eager`` runs the same functions with every message a new array that Dask serializes and
sends worker to worker (an actor call into the receiving rank's inbox). The ranks'
message events (put, take, wait) join the run's trace.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from workbench.runtime.blocks import rows_of
from workbench.runtime.channels import Rank, run_group
from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, register


def takes_rank(function: Any) -> bool:
    """Whether a block function takes the rank context (a ``rank`` parameter)."""
    try:
        return "rank" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def run_block(rank: Rank, work: BlockWork, block: Any, aligned: Sequence[Any], args: Sequence[Any], rows: Any) -> Any:
    """A rank's body: the block function, with the rank's context when it takes one (an ordinary
    block function just computes its block: any application runs under these strategies)."""
    if not takes_rank(work.function):
        return work.call(block, aligned, args, rows)
    extra = {"rows": rows} if work.with_rows else {}
    return work.function(block, *aligned, *args, rank=rank, **extra)


class ChannelPlan(Plan):
    """One rank per block, in one SPMD group per ``map``."""

    eager = False

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """Run the group; one partial result per rank (values, here)."""
        placed = self.blocks()
        ranges = placed.item_ranges()
        holders = placed.holders()
        workers = self.session.workers()
        values = [a.value if isinstance(a, Broadcast) else a for a in args]
        calls = [
            (
                work,
                block,
                [a.block_futures[i] for a in self.aligned],
                values,
                rows_of(ranges[i : i + 1]) if work.with_rows else None,
            )
            for i, block in enumerate(placed.block_futures)
        ]
        rank_workers = [h or workers[i % len(workers)] for i, h in enumerate(holders)]
        with self.recorder.phase("group"):
            result = run_group(self.session, run_block, calls, workers=rank_workers, eager=self.eager, trace=True)
        self.recorder.records.extend(result.events)
        return result.results


class EagerPlan(ChannelPlan):
    """The same group, every message through Dask."""

    eager = True


class Channels(Strategy):
    """Block work as ranks of an SPMD group, data moved in place through array channels."""

    name = "channels"
    description = "one rank per block; ranks exchange data in place (shared memory / sockets), rendezvous"
    plan = ChannelPlan
    gives = frozenset({"ranks"})


class Eager(Strategy):
    """The same ranks, every message a new array serialized by Dask and sent worker to worker."""

    name = "eager"
    description = "one rank per block; every message a new array sent worker to worker by Dask (the eager baseline)"
    plan = EagerPlan
    gives = frozenset({"ranks"})


register(Channels())
register(Eager())
