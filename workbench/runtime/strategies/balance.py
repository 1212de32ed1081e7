"""``split-balanced`` and ``split-balanced-replicas``: SplIter partitions that rebalance while they run.

``split`` pins one task per partition to the worker holding its blocks: perfect locality, no
balance; when blocks cost unequal time, or a worker is slower, everyone waits for the slowest
partition. Here each partition is cut into *chunks* of co-located blocks, all submitted at once,
each pinned to a worker that runs its chunks in order. What the chunks are and which one a worker
steals is :mod:`.balance_policy`'s (pure, and stated there); this module runs it on Dask:

- A worker that starts its last chunk steals ahead, so the stolen block travels (Dask fetches it)
  while the thief still computes: before costs are measured, the next waiting chunk of the worker
  with the most bytes waiting, if that worker has at least ``STEAL_WAITING`` waiting (a chunk the
  thief holds a replica of first); otherwise, or once the map was placed from measures, a victim's
  last waiting chunk, only when the thief is forecast to finish it sooner (:class:`Forecast`); a
  chunk moves at most once per map, so steals are at most the chunks. The client cancels the chunk
  on its victim and pins it to the thief; every steal is a ``steal`` event in the trace with the
  bytes it moved (none when the thief holds a replica).
- Every chunk reports its CPU and wall seconds as a Dask event (``CHUNK_TOPIC``), which the forecast
  learns from: the session's client subscribes once (:class:`ChunkEvents`, a resource the session owns
  and closes) and hands each event to the plan that submitted the chunk. Once a map of some work has
  run, the next map of the same work is placed from its measures (:func:`learned_queues`) and
  stealing only corrects what the forecast missed.
- ``split-balanced-replicas`` first copies the back half of every partition (:func:`replica_tails`)
  to the next worker, with Dask's ``replicate``; the copy is timed and counted in the same run (a
  ``replicate`` event). Replicas are dropped when the plan closes.

The client decides (it waits for chunk ends in bounded polls, until no chunk waits anywhere) and pins
each chunk with ``allow_other_workers=False``, so Dask's own stealing, which moves single tasks by
estimated cost and knows nothing of partitions, stays out. A worker that leaves during a run fails
the run with a clear error (:class:`WorkerLost`), its chunks cancelled: its blocks are gone with it.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from distributed import get_worker, wait

from workbench.runtime.session import PinnedCall
from workbench.runtime.strategies.balance_policy import (
    Chunk,
    Forecast,
    Threads,
    choose_steal,
    guided_cut,
    learned_queues,
    moved_bytes,
    replica_tails,
)
from workbench.runtime.strategies.base import BlockWork, Strategy, register, task_key
from workbench.runtime.strategies.split import SplitPlan, on_partition

POLL_SECONDS = 0.5  # how often a wait checks that every worker with chunks queued is still there
CHUNK_TOPIC = "workbench-chunk-seconds"  # Dask event topic: each chunk's CPU and wall seconds


class WorkerLost(RuntimeError):
    """A worker left the cluster while it held chunks of a balanced run."""


def on_chunk(
    tag: str, work: BlockWork, blocks: list[Any], aligned: list[list[Any]], args: Any, ranges: list[tuple[int, int]]
) -> Any:
    """Task body of a chunk: the partition work on its blocks, then its CPU and wall seconds sent to
    the client as a Dask event (``CHUNK_TOPIC``), which its forecasts learn from."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = on_partition(work, blocks, aligned, args, ranges)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    try:
        worker = get_worker()
    except ValueError:  # run outside a worker (a test): nobody to tell
        return result
    worker.log_event(CHUNK_TOPIC, {"tag": tag, "worker": worker.address, "cpu": cpu, "wall": wall})
    return result


CHUNK_EVENTS = "balance chunk events"  # the name of a session's ChunkEvents (Session.own)


class ChunkEvents:
    """A client's subscription to ``CHUNK_TOPIC``, one per session (a topic has one handler per client):
    each event goes to the plan that submitted the chunk, found by the plan id that leads its tag.
    Entered by :meth:`Session.own <workbench.runtime.session.Session.own>` on a session's first
    balanced plan; unsubscribed when the session closes."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.listeners: dict[str, Callable[[dict[str, Any]], None]] = {}  # plan id -> its handler of chunk seconds
        self.closed = True

    def __enter__(self) -> ChunkEvents:
        self.client.subscribe_topic(CHUNK_TOPIC, self.dispatch)
        self.closed = False
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.closed = True
        self.listeners.clear()
        try:
            self.client.unsubscribe_topic(CHUNK_TOPIC)
        except Exception:  # noqa: BLE001 (a client that is closing has no subscription left to end)
            pass

    def dispatch(self, event: tuple[float, Any]) -> None:
        """The client's handler of ``CHUNK_TOPIC``: each event to the plan that submitted the chunk."""
        message = event[1]
        if isinstance(message, dict) and isinstance(message.get("tag"), str):
            listener = self.listeners.get(message["tag"].split(":", 1)[0])
            if listener is not None:
                listener(message)


class BalancedPlan(SplitPlan):
    """Partitions in chunks, submitted at once; a worker down to its running chunks steals (see the module)."""

    replicate = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        self.sizes = [int(s) for s in self._block_bytes(placed)]
        self.holders = placed.holders()
        self.replicas: dict[int, set[str]] = {i: {h} for i, h in enumerate(self.holders) if h}
        self.steals: list[dict[str, Any]] = []
        self.homes = {p.worker: list(p.block_indexes) for p in self.partitions}  # the policy's view of partitions
        self.forecast = Forecast(sizes=self.sizes)
        self._threads = Threads(self.session.client.nthreads())  # asked once per run, not per map
        self.id = uuid.uuid4().hex[:12]
        self._maps = itertools.count()
        self._tags: dict[str, tuple[str, Chunk]] = {}  # chunks whose seconds have not come back yet
        client = self.session.client
        self._events: ChunkEvents = self.session.own(CHUNK_EVENTS, lambda: ChunkEvents(client))
        self._events.listeners[self.id] = self._on_seconds
        if self.replicate and len(self.partitions) > 1:
            self._replicate_tails()

    def _on_seconds(self, message: dict[str, Any]) -> None:
        """A chunk's CPU and wall seconds, from its worker (on the client's event loop)."""
        work, chunk = self._tags.pop(message["tag"], ("", None))
        try:
            cpu, wall, worker = float(message["cpu"]), float(message["wall"]), str(message["worker"])
        except (KeyError, TypeError, ValueError):
            return  # not a message this plan sent: ignored
        if chunk is not None:
            self.forecast.learn(work, chunk, worker, cpu, wall)

    def _block_bytes(self, placed: Any) -> list[int]:
        itemsize = placed.dtype.itemsize
        width = 1
        for n in placed.shape[1:]:
            width *= int(n)
        return [int(rows) * width * itemsize for rows in placed.chunks] if placed.chunks else [0] * len(placed)

    def _replicate_tails(self) -> None:
        """Copy the back of each partition (:func:`replica_tails`) to the next worker, timed and counted as a
        ``replicate`` event."""
        chosen = replica_tails(self.homes, self.sizes)
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
        self, work: BlockWork, task_args: tuple[Any, ...], chunk: Chunk, owner: str, tag: str, priority: int = 0
    ) -> PinnedCall:
        placed = self.blocks()
        blocks = [placed.block_futures[i] for i in chunk.indexes]
        aligned = [[a.block_futures[i] for i in chunk.indexes] for a in self.aligned]
        ranges = [placed.item_ranges()[i] for i in chunk.indexes]
        call = (tag, work, blocks, aligned, task_args, ranges)
        return PinnedCall(on_chunk, call, owner, task_key(work.name), priority=priority)

    def _mark_running(self, queues: dict[str, deque[Chunk]], threads: Threads) -> None:
        """Note when each chunk that is running now started (the first time it is seen running)."""
        now = time.perf_counter()
        for worker, queue in queues.items():
            for chunk in threads.running(worker, queue):
                self.forecast.started.setdefault(id(chunk), now)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """Every chunk submitted at once to its owner (pinned: no block moves); each worker that starts its
        last chunk steals ahead (see :meth:`_steal`): the chunk is cancelled on its victim and resubmitted
        to the thief. Returns the chunks' futures as soon as no chunk is left waiting anywhere."""
        task_args = self.task_args(args)
        learned = self.forecast.knows(work.name, [i for blocks in self.homes.values() for i in blocks])
        queues = (
            self._learned_queues(work.name)
            if learned
            else {w: deque(guided_cut(w, blocks, self.sizes)) for w, blocks in self.homes.items()}
        )
        chunks = [(owner, chunk) for owner, queue in queues.items() for chunk in queue]
        # each worker runs its chunks in order (first chunk, highest priority)
        order = {id(c): -k for queue in queues.values() for k, c in enumerate(queue)}
        threads = self._threads
        map_number = next(self._maps)
        self.forecast.started.clear()  # start times are keyed by id(chunk): a freed chunk's id is reused
        tags = {id(c): f"{self.id}:{map_number}:{k}" for k, (_, c) in enumerate(chunks)}
        self._tags.update({tags[id(c)]: (work.name, c) for _, c in chunks})
        futures = self.session.submit_pinned(
            [self._call(work, task_args, c, owner, tags[id(c)], order[id(c)]) for owner, c in chunks]
        )
        self._mark_running(queues, threads)
        slot = {id(chunk): i for i, (_, chunk) in enumerate(chunks)}
        results: list[Any] = list(futures)
        running = {f: (owner, chunk) for f, (owner, chunk) in zip(futures, chunks)}
        deadline = time.monotonic() + self.session.timeout
        try:
            while running and any(threads.waiting(w, q) for w, q in queues.items()):
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
                self._mark_running(queues, threads)
                for _ in range(len(chunks)):  # every worker down to its running chunks steals one ahead
                    stolen = next(
                        (
                            s
                            for w, q in queues.items()
                            if not threads.waiting(w, q) and (s := self._steal(queues, w, threads, work.name, learned))
                        ),
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
                    new = self.session.submit_pinned([self._call(work, task_args, chunk, thief, tags[id(chunk)], 1)])[0]
                    running[new] = (thief, chunk)
                    results[slot[id(chunk)]] = new
                    self._mark_running(queues, threads)
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

    def _learned_queues(self, work: str) -> dict[str, deque[Chunk]]:
        """Chunks per worker placed from the last map's measures (:func:`learned_queues`), each planned move
        recorded as a ``steal`` event with its bytes."""
        queues, moves = learned_queues(self.forecast, work, self.homes, self._threads)
        for worker, i, home in moves:
            self._record_steal(worker, home, Chunk([i], self.sizes[i], home), "placed", "(learned)")
        return {worker: deque(chunks) for worker, chunks in queues.items()}

    def _record_steal(self, thief: str, victim: str, chunk: Chunk, verb: str = "took", note: str = "") -> None:
        """A ``steal`` event in the trace (and in ``steals``) with the bytes the thief must fetch."""
        moved = moved_bytes(chunk, thief, self.sizes, self.replicas)
        now = time.time()
        self.steals.append({"thief": thief, "victim": victim, "blocks": len(chunk.indexes), "bytes": moved})
        text = f"{thief} {verb} {len(chunk.indexes)} blocks of {victim}" + (f" {note}" if note else "")
        self.recorder.event("steal", now, now, task=text, nbytes=moved, source=victim)

    def _steal(
        self, queues: dict[str, deque[Chunk]], thief: str, threads: Threads, work: str = "", learned: bool = False
    ) -> tuple[str, str, Chunk] | None:
        """(thief, victim, chunk) when ``thief``, down to its running chunks, should take one
        (:func:`choose_steal`); the chunk moved from the victim's queue to the thief's and recorded as
        a ``steal`` event."""
        waiting = {w: threads.waiting(w, q) for w, q in queues.items()}
        running = {w: threads.running(w, q) for w, q in queues.items()}
        steal = choose_steal(thief, waiting, running, self.forecast, work, time.perf_counter(), self.replicas, learned)
        if steal is None:
            return None
        queues[steal.victim].remove(steal.chunk)
        queues[thief].append(steal.chunk)
        steal.chunk.stolen = True  # it stays with this thief (the policy moves a chunk at most once)
        self._record_steal(thief, steal.victim, steal.chunk)
        return thief, steal.victim, steal.chunk

    def _check_workers(self, running: dict[Any, tuple[str, Chunk]]) -> None:
        alive = set(self.session.workers())
        lost = sorted({w for w, _ in running.values() if w not in alive})
        if lost:
            raise WorkerLost(
                f"worker {lost[0]} left the cluster during a balanced run: its blocks and chunks are gone with it "
                "(their chunks were cancelled); place the data again and rerun on the remaining workers"
            )

    def close(self) -> None:
        """Stop listening for chunk seconds; drop the replicas made for balance (each block stays on its
        worker; a copy a steal left behind is Dask's to keep or drop, and an experiment's runner puts
        every block back before the next run)."""
        events = getattr(self, "_events", None)
        if events is not None:
            events.listeners.pop(self.id, None)
        if self.replicate and self.placed is not None:
            try:
                self.placed.restore(self.holders)
            except Exception:  # noqa: BLE001 (a closing plan must not hide the run's own error)
                pass
        super().close()


class ReplicatedBalancedPlan(BalancedPlan):
    """``split-balanced`` with the back half of each partition replicated first (the copy counted in the run)."""

    replicate = True


class SplitBalanced(Strategy):
    """SplIter partitions in chunks, rebalanced by stealing chunks between workers."""

    name = "split-balanced"
    description = "SplIter partitions in chunks; a worker starting its last chunk steals a waiting one from another"
    plan = BalancedPlan


class SplitBalancedReplicas(Strategy):
    """``split-balanced`` with the likeliest stolen blocks replicated beforehand."""

    name = "split-balanced-replicas"
    description = "split-balanced with the back half of each partition replicated to the next worker first"
    plan = ReplicatedBalancedPlan


register(SplitBalanced())
register(SplitBalancedReplicas())
