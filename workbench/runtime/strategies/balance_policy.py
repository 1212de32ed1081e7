"""Which blocks go in which chunk, and which chunk a worker steals: the policy of ``split-balanced``, pure.

Plain inputs, plain outputs, no Dask: worker addresses are strings, blocks are their indexes in the
placed array, the clock is a number the caller passes in. :mod:`.balance` is the plan that runs it
on a cluster.

- **Chunks.** The first map of a work cuts each worker's blocks with :func:`guided_cut` (chunks
  shrink towards the back, at most ``MAX_CHUNKS``). Once every block's cost in that work is measured,
  :func:`learned_queues` places the next map from the measures (:meth:`Forecast.assign`) and groups
  each worker's blocks in chunks of at least ``MIN_CHUNK_SECONDS``.
- **The steal** (:func:`choose_steal`), asked for a worker whose queue is down to its running chunks
  (it has started its last one, or is idle), the *thief*:

  1. Before costs are measured, if another worker has at least ``STEAL_WAITING`` chunks waiting, the
     thief takes, from the one with the most bytes waiting, the chunk it would run next (the first
     one the thief holds a replica of, if any), with no forecast: cost is spatially correlated, so
     the blocks beside the victim's current one are the likeliest costly ones.
  2. Otherwise (no worker has that many waiting, or this map was placed from measured costs), the
     thief takes a victim's *last* waiting chunk only when the :class:`Forecast` says it would
     finish it sooner than the victim by ``FORECAST_MARGIN`` of the chunk's time there, a steal's
     round trip and the transfer of the bytes it lacks counted; of such chunks, the one its victim
     would finish latest. Before costs are measured only victims with exactly one chunk waiting are
     considered. With nothing measured there is no forecast, and no steal.

  A chunk moves at most once in a map: one a thief took (``Chunk.stolen``, set by the caller that
  moves it) is never taken again, so a map's steals are at most its chunks, whatever the workers.
  Without the rule, a stolen chunk waiting behind its thief's last one could be taken again, and
  again, each time a task resubmitted with its blocks (measured at 8 workers on 2 cores: 9-19 % of
  the steals took a chunk from the thief that had taken it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_CHUNKS = 16  # chunks a partition is cut into at most (one block each when it has fewer blocks)
STEAL_WAITING = 2  # a victim with this many chunks waiting loses its next one with no forecast
TAIL_FRACTION = 0.5  # the share of a partition's chunks replicated for balance (its back half)
STEAL_LATENCY_S = 5e-3  # a steal's round trip: the client cancels, resubmits, the thief's worker starts it
TRANSFER_BYTES_PER_S = 1e9  # a stolen block's move between workers (forecasts only; local TCP does more)
FORECAST_MARGIN = 0.1  # the thief must win by this share of the chunk's time on the victim (noise)
GUIDED_DIVISOR = 4  # the first map's chunks take a quarter of the blocks left in their partition
MIN_CHUNK_SECONDS = 0.1  # once costs are learned, chunks last at least this (Dask's advice: ~1 ms per task)
LEARNED_CHUNKS = 2  # and a worker's placed load into about this many chunks per thread (fewer tasks)


@dataclass(eq=False)
class Chunk:
    """Co-located blocks of one partition: their positions in the placed array, their bytes, and the
    worker whose partition they belong to (``home``). Compared by identity: two chunks with the same
    blocks are two tasks."""

    indexes: list[int]
    nbytes: int
    home: str = ""
    stolen: bool = False  # a thief took it in this map: it stays with that thief (a chunk moves at most once)


class Steal(NamedTuple):
    """A steal the policy chose: ``chunk`` goes from ``victim``'s queue to the thief's."""

    victim: str
    chunk: Chunk


def cut(home: str, indexes: Sequence[int], sizes: Sequence[int], chunks: int = MAX_CHUNKS) -> list[Chunk]:
    """``home``'s blocks ``indexes`` in ``chunks`` contiguous groups of equal count (fewer when it has
    fewer blocks); ``sizes`` are the bytes of every block of the placed array."""
    n = max(1, min(chunks, len(indexes)))
    bounds = [round(i * len(indexes) / n) for i in range(n + 1)]
    return _chunks(home, indexes, sizes, bounds)


def guided_cut(home: str, indexes: Sequence[int], sizes: Sequence[int], divisor: int = GUIDED_DIVISOR) -> list[Chunk]:
    """``home``'s blocks in chunks that shrink towards the back (guided self-scheduling: each takes
    ``ceil(remaining / divisor)`` blocks, 8 blocks -> 2 2 1 1 1 1), so the end of a partition, where a
    steal decides who finishes last, moves in single blocks, with fewer tasks than one per block (each
    costs the client and scheduler CPU). Above ``MAX_CHUNKS`` chunks, :func:`cut` instead. The first
    map's cut, before anything is measured."""
    bounds, start = [0], 0
    while start < len(indexes):
        start += max(1, -(-(len(indexes) - start) // divisor))
        bounds.append(start)
    if len(bounds) - 1 > MAX_CHUNKS:
        return cut(home, indexes, sizes)
    return _chunks(home, indexes, sizes, bounds)


def _chunks(home: str, indexes: Sequence[int], sizes: Sequence[int], bounds: list[int]) -> list[Chunk]:
    return [
        Chunk(list(indexes[a:b]), sum(sizes[i] for i in indexes[a:b]), home)
        for a, b in zip(bounds, bounds[1:])
        if b > a
    ]


def replica_tails(homes: Mapping[str, Sequence[int]], sizes: Sequence[int]) -> dict[str, list[int]]:
    """Blocks to copy before a run, per receiving worker: the back ``TAIL_FRACTION`` of each worker's
    chunks (where thieves arrive) to the next worker in ``homes`` (the likeliest thief)."""
    workers = list(homes)
    chosen: dict[str, list[int]] = {}
    for k, (worker, indexes) in enumerate(homes.items()):
        chunks = cut(worker, indexes, sizes)
        tail = chunks[len(chunks) - max(1, round(TAIL_FRACTION * len(chunks))) :]
        chosen.setdefault(workers[(k + 1) % len(workers)], []).extend(i for c in tail for i in c.indexes)
    return chosen


def moved_bytes(chunk: Chunk, thief: str, sizes: Sequence[int], replicas: Mapping[int, Collection[str]]) -> int:
    """Bytes ``thief`` must fetch to run ``chunk``: those of the blocks it holds no copy of (``replicas``:
    block -> the workers holding it)."""
    return sum(sizes[i] for i in chunk.indexes if thief not in replicas.get(i, ()))


class Threads:
    """How many chunks each worker runs at once (its threads): the first ones of its queue are running."""

    def __init__(self, nthreads: Mapping[str, int]) -> None:
        self.nthreads = {w: max(1, int(n)) for w, n in nthreads.items()}

    def of(self, worker: str) -> int:
        """``worker``'s threads (1 for a worker not known)."""
        return self.nthreads.get(worker, 1)

    def waiting(self, worker: str, queue: Iterable[Chunk]) -> list[Chunk]:
        """``worker``'s chunks not yet running, in the order it will run them."""
        return list(queue)[self.of(worker) :]

    def running(self, worker: str, queue: Iterable[Chunk]) -> list[Chunk]:
        """``worker``'s chunks running now (as far as the client knows)."""
        return list(queue)[: self.of(worker)]


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
    started: dict[int, float] = field(default_factory=dict)  # id(chunk) -> when it started (caller's clock)

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

    def knows(self, work: str, blocks: Iterable[int]) -> bool:
        """Whether every block's cost in ``work`` was measured (a map of it ran before)."""
        return all((work, i) in self.cost for i in blocks)

    def load(self, work: str, worker: str, blocks: Iterable[int]) -> float:
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

    def free_at(self, work: str, worker: str, running: Sequence[Chunk], now: float) -> float | None:
        """When ``worker`` can start another chunk: its first running chunk's forecast end (now if idle)."""
        ends = []
        for chunk in running:
            seconds = self.seconds(work, chunk, worker)
            if seconds is None:
                return None
            ends.append(max(now, self.started.get(id(chunk), now) + seconds))
        return min(ends, default=now)

    def finish(
        self, work: str, chunk: Chunk, worker: str, running: Sequence[Chunk], ahead: Sequence[Chunk], now: float
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
        running: Mapping[str, Sequence[Chunk]],
        moved: int,
        now: float,
        ahead: Sequence[Chunk] = (),
    ) -> bool:
        """Whether ``thief`` would finish ``chunk`` (after a steal's round trip and moving ``moved`` bytes)
        sooner than ``victim`` (after its running chunks and the ``ahead`` ones), by ``FORECAST_MARGIN``
        of its time there; False when either is unknown."""
        on_victim = self.seconds(work, chunk, victim)
        thief_done = self.finish(work, chunk, thief, running.get(thief, []), [], now)
        victim_done = self.finish(work, chunk, victim, running.get(victim, []), ahead, now)
        if on_victim is None or thief_done is None or victim_done is None:
            return False
        thief_done += STEAL_LATENCY_S + moved / TRANSFER_BYTES_PER_S
        return thief_done < victim_done - FORECAST_MARGIN * on_victim

    def assign(
        self, work: str, homes: Mapping[str, Sequence[int]], bytes_per_s: float = TRANSFER_BYTES_PER_S
    ) -> dict[str, list[tuple[int, str]]]:
        """Blocks per worker for the next map, from the learned costs and slowdowns (``homes``: worker ->
        the blocks it holds): each worker keeps its own blocks, and blocks move from the worker forecast
        to finish last to the one forecast to finish first while that shortens the longest by more than
        the noise (the move's transfer counted): Charm++'s persistence principle, the last map's
        measure placing the next. Returns worker -> [(block, home)], own blocks first."""
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

    def group(self, work: str, worker: str, blocks: Sequence[tuple[int, str]], min_seconds: float) -> list[Chunk]:
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


def learned_queues(
    forecast: Forecast, work: str, homes: Mapping[str, Sequence[int]], threads: Threads
) -> tuple[dict[str, list[Chunk]], list[tuple[str, int, str]]]:
    """Chunks per worker for a map of ``work`` whose every block's cost is measured, and the moves that
    placement makes, as (worker, block, home). Blocks are placed by :meth:`Forecast.assign`, then cut
    in chunks of at least ``MIN_CHUNK_SECONDS``, about ``LEARNED_CHUNKS`` per worker thread (stealing
    corrects what the forecast missed with the last ones). When no block moves (the work is in
    balance), each worker's blocks are one chunk per thread, as ``split`` runs them: a second chunk
    would only be stolen if the forecast were wrong, and costs the client and scheduler a task per
    worker per map (measured: 2-3 % of a balanced run on two shared cores)."""
    assignment = forecast.assign(work, homes)
    moves = [(worker, i, home) for worker, blocks in assignment.items() for i, home in blocks if home != worker]
    per_thread = LEARNED_CHUNKS if moves else 1
    queues = {}
    for worker, blocks in assignment.items():
        load = forecast.load(work, worker, [i for i, _ in blocks])
        seconds = max(MIN_CHUNK_SECONDS, load / (per_thread * threads.of(worker)))
        queues[worker] = forecast.group(work, worker, blocks, seconds)
    return queues, moves


def choose_steal(
    thief: str,
    waiting: Mapping[str, Sequence[Chunk]],
    running: Mapping[str, Sequence[Chunk]],
    forecast: Forecast,
    work: str,
    now: float,
    replicas: Mapping[int, Collection[str]] | None = None,
    learned: bool = False,
) -> Steal | None:
    """The chunk ``thief`` (down to its running chunks) should take, or None (the rule in the module).

    ``waiting`` and ``running``: each worker's chunks not started yet (in the order it will run them)
    and running now; ``forecast``: the measures of ``work``, with ``now`` on the clock of its start
    times; ``replicas``: block -> the workers holding a copy; ``learned``: this map was placed from
    measured costs (:func:`learned_queues`). A chunk a thief took already (``stolen``) is never chosen.
    Nothing is changed: the caller moves the chunk and marks it stolen."""
    replicas = replicas or {}
    others = {w: list(chunks) for w, chunks in waiting.items() if w != thief}
    takeable = {w: [c for c in chunks if not c.stolen] for w, chunks in others.items()}  # a chunk moves once
    victims = [w for w, chunks in others.items() if len(chunks) >= STEAL_WAITING and takeable[w]]
    if victims and not learned:
        victim = max(victims, key=lambda w: sum(c.nbytes for c in others[w]))
        local = [c for c in takeable[victim] if all(thief in replicas.get(i, ()) for i in c.indexes)]
        return Steal(victim, (local or takeable[victim])[0])
    best, latest = None, 0.0
    for victim, chunks in others.items():
        if not takeable[victim] or (len(chunks) != 1 and not learned):
            continue
        chunk = takeable[victim][-1]  # its last waiting chunk that no thief took yet
        ahead = chunks[: next(k for k, c in enumerate(chunks) if c is chunk)]
        moved = moved_bytes(chunk, thief, forecast.sizes, replicas)
        if not forecast.thief_wins(work, chunk, thief, victim, running, moved, now, ahead):
            continue
        victim_done = forecast.finish(work, chunk, victim, running.get(victim, []), ahead, now) or now
        if best is None or victim_done > latest:
            best, latest = Steal(victim, chunk), victim_done
    return best
