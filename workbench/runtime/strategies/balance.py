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
beside its current one are the likeliest costly ones. A victim's *last* waiting chunk is taken
only when the thief is forecast to finish it sooner than the victim would (:class:`Forecast`):
every chunk reports its CPU and wall seconds (a Dask event), so the forecast knows each chunk's
cost in CPU seconds (learned for the next iteration; a neighbour's until then) apart from each
worker's slowdown (wall over CPU: a core shared with other work). Without that rule a slowed
worker kept a chunk the fast one could have finished in a third of the time; without the forecast
steals went back and forth on balanced data. Every steal is a ``steal`` event in the trace with
the bytes it moved (none when the thief holds a replica).

Once a map of some work has run, the next map of the same work (the next Lloyd iteration) is
*placed* from its measures (:meth:`Forecast.assign`, Charm++'s persistence principle): blocks move
from the worker forecast to finish last to the one forecast to finish first while that shortens
the longest, in chunks of at least ``MIN_CHUNK_SECONDS`` (fewer tasks: each costs the client and
scheduler CPU); stealing then only corrects what the forecast missed, and only when forecast to pay.
Work the forecast finds in balance (no block moves) runs as one chunk per worker thread, as ``split``.

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

import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distributed import get_worker, wait

from workbench.runtime.session import PinnedCall
from workbench.runtime.splitter import Partition
from workbench.runtime.strategies.base import BlockWork, Strategy, register, task_key
from workbench.runtime.strategies.split import SplitPlan, on_partition

POLL_SECONDS = 0.5  # how often a wait checks that every worker with chunks queued is still there
MAX_CHUNKS = 16  # chunks a partition is cut into at most (one block each when it has fewer blocks)
STEAL_WAITING = 2  # a victim with this many chunks waiting loses its next one with no forecast
TAIL_FRACTION = 0.5  # the share of a partition's chunks replicated for balance (its back half)
CHUNK_TOPIC = "workbench-chunk-seconds"  # Dask event topic: each chunk's CPU and wall seconds
STEAL_LATENCY_S = 5e-3  # a steal's round trip: the client cancels, resubmits, the thief's worker starts it
TRANSFER_BYTES_PER_S = 1e9  # a stolen block's move between workers (forecasts only; local TCP does more)
FORECAST_MARGIN = 0.1  # the thief must win by this share of the chunk's time on the victim (noise)
GUIDED_DIVISOR = 4  # the first map's chunks take a quarter of the blocks left in their partition
MIN_CHUNK_SECONDS = 0.1  # once costs are learned, chunks last at least this (Dask's advice: ~1 ms per task)
LEARNED_CHUNKS = 2  # and a worker's placed load into about this many chunks per thread (fewer tasks)


class WorkerLost(RuntimeError):
    """A worker left the cluster while it held chunks of a balanced run."""


@dataclass(eq=False)
class Chunk:
    """Co-located blocks of one partition: their positions in the placed array, their bytes, and the
    worker whose partition they belong to (``home``)."""

    indexes: list[int]
    nbytes: int
    home: str = ""


def cut(partition: Partition, sizes: list[int], chunks: int = MAX_CHUNKS) -> list[Chunk]:
    """``partition``'s blocks in ``chunks`` contiguous groups (fewer when it has fewer blocks)."""
    indexes = partition.block_indexes
    n = max(1, min(chunks, len(indexes)))
    bounds = [round(i * len(indexes) / n) for i in range(n + 1)]
    return _chunks(partition, sizes, bounds)


def guided_cut(partition: Partition, sizes: list[int], divisor: int = GUIDED_DIVISOR) -> list[Chunk]:
    """``partition``'s blocks in chunks that shrink towards its end (guided self-scheduling: each takes
    ``ceil(remaining / divisor)`` blocks, 8 blocks -> 2 2 1 1 1 1): the owner runs the front, thieves
    take from the back, where single blocks balance finely; fewer tasks than one per block (each
    costs the client and scheduler CPU). The first map's cut, before anything is measured."""
    indexes = partition.block_indexes
    bounds, start = [0], 0
    while start < len(indexes):
        start += max(1, -(-(len(indexes) - start) // divisor))
        bounds.append(start)
    if len(bounds) - 1 > MAX_CHUNKS:
        return cut(partition, sizes)
    return _chunks(partition, sizes, bounds)


def _chunks(partition: Partition, sizes: list[int], bounds: list[int]) -> list[Chunk]:
    indexes = partition.block_indexes
    return [
        Chunk(list(indexes[a:b]), sum(sizes[i] for i in indexes[a:b]), partition.worker)
        for a, b in zip(bounds, bounds[1:])
        if b > a
    ]


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


_listeners: dict[str, Callable[[dict[str, Any]], None]] = {}  # plan id -> its handler of chunk seconds
_subscribed: set[str] = set()  # ids of the clients whose chunk events come to _dispatch


def _dispatch(event: tuple[float, Any]) -> None:
    """The client's handler of ``CHUNK_TOPIC``: each event to the plan that submitted the chunk."""
    message = event[1]
    if isinstance(message, dict) and isinstance(message.get("tag"), str):
        listener = _listeners.get(message["tag"].split(":", 1)[0])
        if listener is not None:
            listener(message)


@dataclass
class Forecast:
    """When a worker is forecast to be free, and how long a chunk would take on it.

    A block's *cost* is CPU seconds (learned when its chunk ran, shared among the chunk's blocks by
    bytes, for the next map of the same work; until then, the CPU seconds per block last measured in
    its partition, since cost is spatially correlated); a worker's *slowdown* is wall over CPU
    seconds of its last chunk (above 1 when its core is shared). Seconds on a worker = cost x
    slowdown. Apart, they tell a costly chunk from a slowed worker, which a time per byte mixed up.
    """

    sizes: list[int] = field(default_factory=list)  # bytes per block
    cost: dict[tuple[str, int], float] = field(default_factory=dict)  # (work, block) -> CPU s
    recent: dict[tuple[str, str], float] = field(default_factory=dict)  # (work, home) -> CPU s per block, last chunk
    slowdown: dict[str, float] = field(default_factory=dict)  # worker -> wall / CPU of its last chunk
    started: dict[int, float] = field(default_factory=dict)  # id(chunk) -> when it started (client clock)

    def learn(self, work: str, chunk: Chunk, worker: str, cpu: float, wall: float) -> None:
        """One chunk's measured seconds."""
        if not (cpu > 0 and wall > 0) or not chunk.indexes:
            return
        total = sum(self.sizes[i] for i in chunk.indexes) if self.sizes else 0
        for i in chunk.indexes:
            share = self.sizes[i] / total if total else 1 / len(chunk.indexes)
            self.cost[work, i] = cpu * share
        self.recent[work, chunk.home] = cpu / len(chunk.indexes)
        self.slowdown[worker] = min(50.0, max(0.25, wall / cpu))

    def knows(self, work: str, blocks: list[int]) -> bool:
        """Whether every block's cost in ``work`` was measured (a map of it ran before)."""
        return all((work, i) in self.cost for i in blocks)

    def load(self, work: str, worker: str, blocks: list[int]) -> float:
        """Forecast seconds of ``blocks`` (all measured) on ``worker``."""
        return sum(self.cost[work, i] for i in blocks) * self.slowdown.get(worker, 1.0)

    def seconds(self, work: str, chunk: Chunk, worker: str) -> float | None:
        """Forecast seconds of ``chunk`` on ``worker`` (None with nothing measured yet)."""
        cpu = 0.0
        for i in chunk.indexes:
            cost = self.cost.get((work, i), self.recent.get((work, chunk.home)))
            if cost is None:
                return None
            cpu += cost
        return cpu * self.slowdown.get(worker, 1.0)

    def free_at(self, work: str, worker: str, running: list[Chunk], now: float) -> float | None:
        """When ``worker`` can start another chunk: its first running chunk's forecast end (now if idle)."""
        ends = []
        for chunk in running:
            seconds = self.seconds(work, chunk, worker)
            if seconds is None:
                return None
            ends.append(max(now, self.started.get(id(chunk), now) + seconds))
        return min(ends, default=now)

    def finish(
        self, work: str, chunk: Chunk, worker: str, running: list[Chunk], ahead: list[Chunk], now: float
    ) -> float | None:
        """When ``worker`` would finish ``chunk`` after its running chunks and the ``ahead`` ones."""
        free = self.free_at(work, worker, running, now)
        times = [self.seconds(work, c, worker) for c in [*ahead, chunk]]
        if free is None or None in times:
            return None
        return free + sum(t for t in times if t is not None)

    def thief_wins(
        self,
        work: str,
        chunk: Chunk,
        thief: str,
        victim: str,
        running: dict[str, list[Chunk]],
        moved: int,
        now: float,
        ahead: list[Chunk] | None = None,
    ) -> bool:
        """Whether ``thief`` would finish ``chunk`` (after a steal's round trip and moving ``moved`` bytes)
        sooner than ``victim`` (after its running chunks and the ``ahead`` ones), by ``FORECAST_MARGIN``
        of its time there; False when either is unknown."""
        on_victim = self.seconds(work, chunk, victim)
        thief_done = self.finish(work, chunk, thief, running.get(thief, []), [], now)
        victim_done = self.finish(work, chunk, victim, running.get(victim, []), ahead or [], now)
        if on_victim is None or thief_done is None or victim_done is None:
            return False
        thief_done += STEAL_LATENCY_S + moved / TRANSFER_BYTES_PER_S
        return thief_done < victim_done - FORECAST_MARGIN * on_victim

    def assign(
        self, work: str, partitions: list[Partition], bytes_per_s: float = TRANSFER_BYTES_PER_S
    ) -> dict[str, list[tuple[int, str]]]:
        """Blocks per worker for the next map, from the learned costs and slowdowns: each worker keeps its
        own blocks, and blocks move from the worker forecast to finish last to the one forecast to finish
        first while that shortens the longest (the move's transfer counted): Charm++'s persistence
        principle, the last map's measure placing the next. Returns worker -> [(block, home)], own
        blocks first."""
        homes = {p.worker: list(p.block_indexes) for p in partitions}
        slow = {w: self.slowdown.get(w, 1.0) for w in homes}
        load = {w: self.load(work, w, blocks) for w, blocks in homes.items()}
        order = {w: [(i, w) for i in blocks] for w, blocks in homes.items()}
        for _ in range(sum(map(len, homes.values()))):
            source, target = max(load, key=load.__getitem__), min(load, key=load.__getitem__)
            best = None
            for i, home in order[source]:
                cost = self.cost[work, i]
                longest = max(
                    load[source] - cost * slow[source],
                    load[target] + cost * slow[target] + STEAL_LATENCY_S + self.sizes[i] / bytes_per_s,
                )
                # a move must win more than the noise of a measure (FORECAST_MARGIN of the block's time)
                if longest < load[source] - FORECAST_MARGIN * cost * slow[source] and (
                    best is None or longest < best[0]
                ):
                    best = (longest, i, home)
            if best is None:
                break
            _, i, home = best
            order[source].remove((i, home))
            order[target].append((i, home))
            load[source] -= self.cost[work, i] * slow[source]
            load[target] += self.cost[work, i] * slow[target]
        return order

    def group(self, work: str, worker: str, blocks: list[tuple[int, str]], min_seconds: float) -> list[Chunk]:
        """``worker``'s blocks in chunks of at least ``min_seconds`` each (forecast), in order; a run of
        blocks from one home stays one chunk only while it lasts less than that."""
        chunks: list[Chunk] = []
        current: list[int] = []
        home = ""
        seconds = 0.0
        for i, owner in blocks:
            if current and (owner != home or seconds >= min_seconds):
                chunks.append(Chunk(current, sum(self.sizes[b] for b in current), home))
                current, seconds = [], 0.0
            current.append(i)
            home = owner
            seconds += self.cost[work, i] * self.slowdown.get(worker, 1.0)
        if current:
            chunks.append(Chunk(current, sum(self.sizes[b] for b in current), home))
        return chunks


class _Threads:
    """How many chunks each worker runs at once (its threads): the first ones of its queue are running."""

    def __init__(self, nthreads: dict[str, int]) -> None:
        self.nthreads = {w: max(1, int(n)) for w, n in nthreads.items()}

    def of(self, worker: str) -> int:
        return self.nthreads.get(worker, 1)

    def waiting(self, worker: str, queue: deque[Chunk]) -> list[Chunk]:
        """``worker``'s chunks not yet running, in the order it will run them."""
        return list(queue)[self.of(worker) :]

    def running(self, worker: str, queue: deque[Chunk]) -> list[Chunk]:
        """``worker``'s chunks running now (as far as the client knows)."""
        return list(queue)[: self.of(worker)]


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
        self.forecast = Forecast(sizes=self.sizes)
        self._threads = _Threads(self.session.client.nthreads())  # asked once per run, not per map
        self.id = uuid.uuid4().hex[:12]
        self._maps = itertools.count()
        self._tags: dict[str, tuple[str, Chunk]] = {}  # chunks whose seconds have not come back yet
        _listeners[self.id] = self._on_seconds
        client = self.session.client
        if client.id not in _subscribed:
            client.subscribe_topic(CHUNK_TOPIC, _dispatch)
            _subscribed.add(client.id)
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
        self, work: BlockWork, task_args: tuple[Any, ...], chunk: Chunk, owner: str, tag: str, priority: int = 0
    ) -> PinnedCall:
        placed = self.blocks()
        blocks = [placed.block_futures[i] for i in chunk.indexes]
        aligned = [[a.block_futures[i] for i in chunk.indexes] for a in self.aligned]
        ranges = [placed.item_ranges()[i] for i in chunk.indexes]
        call = (tag, work, blocks, aligned, task_args, ranges)
        return PinnedCall(on_chunk, call, owner, task_key(work.name), priority=priority)

    def _mark_running(self, queues: dict[str, deque[Chunk]], threads: _Threads) -> None:
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
        learned = self.forecast.knows(work.name, [i for p in self.partitions for i in p.block_indexes])
        queues = (
            self._learned_queues(work.name)
            if learned
            else {p.worker: deque(guided_cut(p, self.sizes)) for p in self.partitions}
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
        """Chunks per worker placed from the last map's measures (:meth:`Forecast.assign`), each planned
        move recorded as a ``steal`` event with its bytes; chunks of at least ``MIN_CHUNK_SECONDS``, about
        ``LEARNED_CHUNKS`` per worker thread (stealing corrects what the forecast missed with the last ones).
        When the forecast moves no block (the work is in balance), each worker's blocks are one chunk
        per thread, as ``split`` runs them: a second chunk would only be stolen if the forecast were wrong, and
        costs the client and scheduler a task per worker per map (measured: 2-3 % of a balanced run
        on two shared cores); a change of balance shows in the measures, and the next map is placed
        from them."""
        assignment = self.forecast.assign(work, self.partitions)
        moves = [(worker, i, home) for worker, blocks in assignment.items() for i, home in blocks if home != worker]
        for worker, i, home in moves:
            self._record_steal(worker, home, Chunk([i], self.sizes[i], home), "placed", "(learned)")
        per_thread = LEARNED_CHUNKS if moves else 1
        queues = {}
        for worker, blocks in assignment.items():
            load = self.forecast.load(work, worker, [i for i, _ in blocks])
            seconds = max(MIN_CHUNK_SECONDS, load / (per_thread * self._threads.of(worker)))
            queues[worker] = deque(self.forecast.group(work, worker, blocks, seconds))
        return queues

    def _record_steal(self, thief: str, victim: str, chunk: Chunk, verb: str = "took", note: str = "") -> None:
        """A ``steal`` event in the trace (and in ``steals``) with the bytes the thief must fetch."""
        moved = self._moved(chunk, thief)
        now = time.time()
        self.steals.append({"thief": thief, "victim": victim, "blocks": len(chunk.indexes), "bytes": moved})
        text = f"{thief} {verb} {len(chunk.indexes)} blocks of {victim}" + (f" {note}" if note else "")
        self.recorder.event("steal", now, now, task=text, nbytes=moved, source=victim)

    def _steal(
        self, queues: dict[str, deque[Chunk]], thief: str, threads: _Threads, work: str = "", learned: bool = False
    ) -> tuple[str, str, Chunk] | None:
        """(thief, victim, chunk) when ``thief``, down to its running chunks, should take one. Before costs
        are learned: from the worker with the most bytes waiting, if it has at least ``STEAL_WAITING``
        chunks waiting, the one it would run next (one the thief holds a replica of first); else a
        victim's last waiting chunk that the thief is forecast to finish sooner. Once learned (the
        chunks were placed by forecast): a victim's last waiting chunk, only when forecast to pay.
        Recorded as a ``steal`` event."""
        waiting = {w: threads.waiting(w, q) for w, q in queues.items() if w != thief}
        victims = [w for w, chunks in waiting.items() if len(chunks) >= STEAL_WAITING]
        if victims and not learned:
            victim = max(victims, key=lambda w: sum(c.nbytes for c in waiting[w]))
            local = [c for c in waiting[victim] if all(thief in self.replicas.get(i, ()) for i in c.indexes)]
            chunk = (local or waiting[victim])[0]
        else:
            last = self._last_worth_taking(queues, thief, threads, work, waiting, any_count=learned)
            if last is None:
                return None
            victim, chunk = last
        queues[victim].remove(chunk)
        queues[thief].append(chunk)
        self._record_steal(thief, victim, chunk)
        return thief, victim, chunk

    def _moved(self, chunk: Chunk, thief: str) -> int:
        """Bytes ``thief`` must fetch to run ``chunk`` (none of the blocks it holds a replica of)."""
        return sum(self.sizes[i] for i in chunk.indexes if thief not in self.replicas.get(i, ()))

    def _last_worth_taking(
        self,
        queues: dict[str, deque[Chunk]],
        thief: str,
        threads: _Threads,
        work: str,
        waiting: dict[str, list[Chunk]],
        any_count: bool = False,
    ) -> tuple[str, Chunk] | None:
        """(victim, chunk): of the victims' last waiting chunks (of victims with one waiting, unless
        ``any_count``), the one the thief is forecast to finish sooner, from the victim that would finish
        it latest."""
        now = time.perf_counter()
        running = {w: threads.running(w, q) for w, q in queues.items()}
        best, latest = None, 0.0
        for victim, chunks in waiting.items():
            if not chunks or (len(chunks) != 1 and not any_count):
                continue
            chunk, ahead = chunks[-1], chunks[:-1]
            moved = self._moved(chunk, thief)
            if not self.forecast.thief_wins(work, chunk, thief, victim, running, moved, now, ahead):
                continue
            victim_done = self.forecast.finish(work, chunk, victim, running[victim], ahead, now) or now
            if best is None or victim_done > latest:
                best, latest = (victim, chunk), victim_done
        return best

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
        _listeners.pop(getattr(self, "id", ""), None)
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
    description = "SplIter partitions in one-block chunks; a worker starting its last one steals the busiest one's next"
    plan = BalancedPlan


class SplitBalancedReplicas(Strategy):
    """``split-balanced`` with the likeliest stolen blocks replicated beforehand."""

    name = "split-balanced-replicas"
    description = "split-balanced with the back half of each partition replicated to the next worker first"
    plan = ReplicatedBalancedPlan


register(SplitBalanced())
register(SplitBalancedReplicas())
