"""``split-balanced`` and ``split-balanced-replicas``: SplIter partitions that rebalance while they run.

``split`` pins one task per partition to the worker holding its blocks: perfect locality, no
balance; when blocks cost unequal time, or a worker is slower, everyone waits for the slowest
partition. Here each partition is cut into *chunks* of co-located blocks (one block each, at most
``MAX_CHUNKS`` per partition, so the task count still follows the workers, not the blocks), all
submitted at once, pinned to their owner in order (no block moves). A worker that starts its last
chunk *steals ahead*: it takes the next waiting chunk of the worker with the most bytes waiting
(cancelled there, pinned to the thief), so the stolen block travels (Dask fetches it) while the
thief still computes, and it never waits idle for a slow victim to serve it. The *next* chunk, not
the last, because cost is spatially correlated: the victim is slow where it is, and the blocks
beside its current one are the likeliest costly ones. A victim keeps its last waiting chunk
(``STEAL_WAITING``): taking it would only move the wait. Every steal is a ``steal`` event in the
trace with the bytes it moved (none when the thief holds a replica).

``split-balanced-replicas`` first copies the blocks most likely to be stolen (the back half of
every partition, ``TAIL_FRACTION``) to one other worker, with Dask's ``replicate``; the copy is
timed and counted in the same run (a ``replicate`` event), and a thief takes a chunk it holds a
replica of first, so its steals read locally. Replicas are dropped when the plan closes.

The client decides (it waits for chunk ends in bounded polls) and pins each chunk with
``allow_other_workers=False``, so Dask's own stealing, which moves single tasks by estimated cost
and knows nothing of partitions, stays out. A worker that leaves during a run fails the run with a
clear error (:class:`WorkerLost`), its chunks cancelled: its blocks are gone with it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from distributed import wait

from workbench.runtime.session import PinnedCall
from workbench.runtime.splitter import Partition
from workbench.runtime.strategies.base import BlockWork, Strategy, register, task_key
from workbench.runtime.strategies.split import SplitPlan, on_partition

POLL_SECONDS = 0.5  # how often a wait checks that every worker with chunks queued is still there
MAX_CHUNKS = 16  # chunks a partition is cut into at most (one block each when it has fewer blocks)
STEAL_WAITING = 2  # a victim keeps its last waiting chunk: stealing it would only move the wait
TAIL_FRACTION = 0.5  # the share of a partition's chunks replicated for balance (its back half)


class WorkerLost(RuntimeError):
    """A worker left the cluster while it held chunks of a balanced run."""


@dataclass(eq=False)
class Chunk:
    """Co-located blocks of one partition: their positions in the placed array, and their bytes."""

    indexes: list[int]
    nbytes: int


def cut(partition: Partition, sizes: list[int], chunks: int = MAX_CHUNKS) -> list[Chunk]:
    """``partition``'s blocks in ``chunks`` contiguous groups (fewer when it has fewer blocks)."""
    indexes = partition.block_indexes
    n = max(1, min(chunks, len(indexes)))
    bounds = [round(i * len(indexes) / n) for i in range(n + 1)]
    return [Chunk(list(indexes[a:b]), sum(sizes[i] for i in indexes[a:b])) for a, b in zip(bounds, bounds[1:]) if b > a]


class _Threads:
    """How many chunks each worker runs at once (its threads): the first ones of its queue are running."""

    def __init__(self, nthreads: dict[str, int]) -> None:
        self.nthreads = {w: max(1, int(n)) for w, n in nthreads.items()}

    def of(self, worker: str) -> int:
        return self.nthreads.get(worker, 1)

    def waiting(self, worker: str, queue: deque[Chunk]) -> list[Chunk]:
        """``worker``'s chunks not yet running, in the order it will run them."""
        return list(queue)[self.of(worker) :]


class BalancedPlan(SplitPlan):
    """Partitions in chunks; idle workers steal the last chunks of the busiest (see the module)."""

    replicate = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        self.sizes = [int(s) for s in self._block_bytes(placed)]
        self.holders = placed.holders()
        self.replicas: dict[int, set[str]] = {i: {h} for i, h in enumerate(self.holders) if h}
        self.steals: list[dict[str, Any]] = []
        if self.replicate and len(self.partitions) > 1:
            self._replicate_tails()

    def _block_bytes(self, placed: Any) -> list[int]:
        itemsize = placed.dtype.itemsize
        width = 1
        for n in placed.shape[1:]:
            width *= int(n)
        return [int(rows) * width * itemsize for rows in placed.chunks] if placed.chunks else [0] * len(placed)

    def _replicate_tails(self) -> None:
        """Copy the back of each partition (``TAIL_FRACTION`` of its chunks, where thieves arrive) to the next
        worker (the likeliest thief), timed and counted as a ``replicate`` event."""
        workers = [p.worker for p in self.partitions]
        chosen: dict[str, list[int]] = {}
        for k, partition in enumerate(self.partitions):
            chunks = cut(partition, self.sizes)
            tail = chunks[len(chunks) - max(1, round(TAIL_FRACTION * len(chunks))) :]
            chosen.setdefault(workers[(k + 1) % len(workers)], []).extend(i for c in tail for i in c.indexes)
        start = time.time()
        placed = self.blocks()
        moved = 0
        for worker, indexes in chosen.items():
            futures = [placed.block_futures[i] for i in indexes]
            self.session.client.replicate(futures, n=2, workers=[worker, *{self.holders[i] for i in indexes}])
            for i in indexes:
                self.replicas.setdefault(i, set()).add(worker)
            moved += sum(self.sizes[i] for i in indexes)
        self.recorder.event(
            "replicate",
            start,
            time.time(),
            task=f"replicas of {sum(map(len, chosen.values()))} blocks",
            nbytes=moved,
            source="workers",
        )

    def _call(
        self, work: BlockWork, task_args: tuple[Any, ...], chunk: Chunk, owner: str, priority: int = 0
    ) -> PinnedCall:
        placed = self.blocks()
        blocks = [placed.block_futures[i] for i in chunk.indexes]
        aligned = [[a.block_futures[i] for i in chunk.indexes] for a in self.aligned]
        ranges = [placed.item_ranges()[i] for i in chunk.indexes]
        call = (work, blocks, aligned, task_args, ranges)
        return PinnedCall(on_partition, call, owner, task_key(work.name), priority=priority)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """Every chunk submitted at once to its owner (pinned: no block moves); each worker that starts its
        last chunk steals ahead the last queued chunk of the worker predicted to finish last (cancelled
        there, resubmitted to the thief), when the thief would finish it first."""
        task_args = self.task_args(args)
        queues = {p.worker: deque(cut(p, self.sizes)) for p in self.partitions}
        chunks = [(owner, chunk) for owner, queue in queues.items() for chunk in queue]
        # each worker runs its chunks in order (first chunk, highest priority): the last is the one to steal
        order = {id(c): -k for queue in queues.values() for k, c in enumerate(queue)}
        threads = _Threads(self.session.client.nthreads())
        futures = self.session.submit_pinned(
            [self._call(work, task_args, c, owner, order[id(c)]) for owner, c in chunks]
        )
        slot = {id(chunk): i for i, (_, chunk) in enumerate(chunks)}
        results: list[Any] = list(futures)
        running = {f: (owner, chunk) for f, (owner, chunk) in zip(futures, chunks)}
        deadline = time.monotonic() + self.session.timeout
        try:
            while running and any(len(threads.waiting(w, q)) >= STEAL_WAITING for w, q in queues.items()):
                try:
                    done, _ = wait(list(running), timeout=POLL_SECONDS, return_when="FIRST_COMPLETED")
                except TimeoutError:  # nothing ended within the poll: look for lost workers
                    done = set()
                if not done:
                    self._check_workers(running)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"a balanced run did not finish within {self.session.timeout:.0f} s")
                    continue
                for future in sorted(done, key=lambda f: running[f][0]):
                    worker, chunk = running.pop(future)
                    if future.status == "error":
                        future.result()  # raises the task's own error
                    if chunk in queues[worker]:
                        queues[worker].remove(chunk)
                for _ in range(len(chunks)):  # every worker down to its running chunks steals one ahead
                    stolen = next(
                        (
                            s
                            for w, q in queues.items()
                            if not threads.waiting(w, q) and (s := self._steal(queues, w, threads))
                        ),  # noqa: E501
                        None,
                    )
                    if stolen is None:
                        break
                    thief, victim, chunk = stolen
                    old = next((f for f, (owner, c) in running.items() if owner == victim and c is chunk), None)
                    if old is None or old.status != "pending":
                        queues[thief].remove(chunk)  # it finished meanwhile: nothing to take
                        continue
                    self.session.client.cancel([old])
                    running.pop(old)
                    new = self.session.submit_pinned([self._call(work, task_args, chunk, thief, 1)])[0]
                    running[new] = (thief, chunk)
                    results[slot[id(chunk)]] = new
        except BaseException:
            self.session.client.cancel(list(running))
            raise
        self._running = running
        return results  # chunks still running: the reduce's merges wait for them (no round trip here)

    def collect(self, future: Any) -> Any:
        """The merged answer, waiting in polls that notice a worker lost with chunks still to run."""
        running, self._running = getattr(self, "_running", {}), {}
        deadline = time.monotonic() + self.session.timeout
        try:
            while future.status == "pending":
                try:
                    wait([future], timeout=POLL_SECONDS)
                except TimeoutError:
                    running = {f: w for f, w in running.items() if f.status == "pending"}
                    self._check_workers(running)
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"a balanced run did not finish within {self.session.timeout:.0f} s"
                        ) from None
        except BaseException:
            self.session.client.cancel([future, *running])
            raise
        return self.session.gather(future)

    def _steal(self, queues: dict[str, deque[Chunk]], thief: str, threads: _Threads) -> tuple[str, str, Chunk] | None:
        """(thief, victim, chunk) when ``thief``, down to its running chunks, should take one: from the
        worker with the most bytes waiting, if it has at least ``STEAL_WAITING`` chunks waiting, the one
        it would run next (one the thief holds a replica of first); recorded as a ``steal`` event."""
        waiting = {w: threads.waiting(w, q) for w, q in queues.items() if w != thief}
        victims = [w for w, chunks in waiting.items() if len(chunks) >= STEAL_WAITING]
        if not victims:
            return None
        victim = max(victims, key=lambda w: sum(c.nbytes for c in waiting[w]))
        local = [c for c in waiting[victim] if all(thief in self.replicas.get(i, ()) for i in c.indexes)]
        chunk = (local or waiting[victim])[0]
        queues[victim].remove(chunk)
        queues[thief].append(chunk)
        moved = sum(self.sizes[i] for i in chunk.indexes if thief not in self.replicas.get(i, ()))
        now = time.time()
        self.steals.append({"thief": thief, "victim": victim, "blocks": len(chunk.indexes), "bytes": moved})
        self.recorder.event(
            "steal", now, now, task=f"{thief} took {len(chunk.indexes)} blocks of {victim}", nbytes=moved, source=victim
        )
        return thief, victim, chunk

    def _check_workers(self, running: dict[Any, tuple[str, Chunk]]) -> None:
        alive = set(self.session.workers())
        lost = sorted({w for w, _ in running.values() if w not in alive})
        if lost:
            raise WorkerLost(
                f"worker {lost[0]} left the cluster during a balanced run: its blocks and chunks are gone with it "
                "(their chunks were cancelled); place the data again and rerun on the remaining workers"
            )

    def close(self) -> None:
        """Drop the replicas made for balance (one copy of each block stays where it was)."""
        if self.replicate and self.placed is not None:
            extra = [self.placed.block_futures[i] for i, where in self.replicas.items() if len(where) > 1]
            if extra:
                try:
                    self.session.client.replicate(extra, n=1)
                except Exception:  # noqa: BLE001 (a closing plan must not hide the run's own error)
                    pass
        super().close()


class ReplicatedBalancedPlan(BalancedPlan):
    """``split-balanced`` with the back half of each partition replicated first (the copy counted in the run)."""

    replicate = True


class SplitBalanced(Strategy):
    """SplIter partitions in chunks, rebalanced by stealing chunks between workers."""

    name = "split-balanced"
    description = "SplIter partitions in one-block chunks; a worker starting its last one steals the busiest one's next"
    plan = BalancedPlan


class SplitBalancedReplicas(Strategy):
    """``split-balanced`` with the likeliest stolen blocks replicated beforehand."""

    name = "split-balanced-replicas"
    description = "split-balanced with the back half of each partition replicated to the next worker first"
    plan = ReplicatedBalancedPlan


register(SplitBalanced())
register(SplitBalancedReplicas())
