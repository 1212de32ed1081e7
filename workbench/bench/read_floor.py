"""The node's read floor: how fast all workers read an array at once when nothing has to be delivered.

Every way of ``workbench bench shm`` gets one array to every worker, then each of ``reads`` tasks
per worker sums all of it. Whatever the way, the workers' reads share the node's memory bandwidth;
the floor takes the delivery out: each worker first holds an array of the same size, every page
already in its own memory, then all of them start summing it ``reads`` times at one common moment
(tasks pinned to each worker, waiting for a start time given to all). The floor time is the slowest
worker's time for its reads (equivalently, the bytes all workers read over the aggregate read
bandwidth); a way's time over the floor time is what its delivery and scheduling cost on top of
reading (issue 36: RRO within 10 % of the floor).

A worker that starts late reads with less contention, which would make the floor look faster than
the node is with everyone reading; the start skew (latest start minus earliest) is reported so a
reader can see that the reads overlapped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench.runtime.session import PinnedCall, Session

LEAD_S = 0.5  # the common start is this far after submitting the reads: all pinned tasks are running by then


def _resident(items: int, dtype: str) -> np.ndarray:
    """An array of ``items`` of ``dtype`` on this worker, every page written (resident, nothing to fault in)."""
    return np.ones(items, dtype=dtype)


def _timed_reads(array: np.ndarray, reads: int, start_at: float) -> dict[str, float]:
    """Wait for the common start (a bounded wait: at most the lead), then sum ``array`` ``reads`` times."""
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(min(delay, LEAD_S))
    started = time.time()
    t = time.perf_counter()
    for _ in range(reads):
        float(array.sum())
    return {"start": started, "seconds": time.perf_counter() - t}


def floor(samples: Sequence[Mapping[str, float]], array_bytes: int, reads: int) -> dict[str, Any]:
    """The floor from each worker's ``{"start": epoch s, "seconds": its reads' time}``: the slowest
    worker's time, the aggregate bandwidth (every worker's bytes over that time) and the start skew."""
    if not samples:
        raise ValueError("the read floor needs at least one worker's reads, got none")
    if array_bytes < 1 or reads < 1:
        raise ValueError(f"array_bytes and reads must be positive, got {array_bytes!r} and {reads!r}")
    seconds = [float(s["seconds"]) for s in samples]
    if min(seconds) <= 0:
        raise ValueError(f"every worker's read time must be positive, got {seconds}")
    slowest = max(seconds)
    total = len(samples) * reads * array_bytes
    starts = [float(s["start"]) for s in samples]
    return {
        "workers": len(samples),
        "reads_per_worker": reads,
        "array_bytes": array_bytes,
        "seconds": slowest,
        "worker_seconds": seconds,
        "aggregate_bytes_per_s": total / slowest,
        "start_skew_s": max(starts) - min(starts),
    }


def measure(session: Session, like: np.ndarray, reads: int) -> dict[str, Any]:
    """All of ``session``'s workers, each summing its own resident array of the size and type of ``like``
    ``reads`` times, started together: :func:`floor` of what they measured."""
    if reads < 1:
        raise ValueError(f"reads must be at least 1, got {reads!r}")
    workers, token = session.workers(), uuid.uuid4().hex[:8]
    arrays = session.submit_pinned(
        [
            PinnedCall(_resident, (like.size, like.dtype.str), w, f"read-floor-array-{token}-{i}")
            for i, w in enumerate(workers)
        ]
    )
    try:
        session.wait(arrays)
        start_at = time.time() + LEAD_S
        timed = session.submit_pinned(
            [
                PinnedCall(_timed_reads, (a, reads, start_at), w, f"read-floor-reads-{token}-{i}")
                for i, (a, w) in enumerate(zip(arrays, workers))
            ]
        )
        samples = session.gather(timed)
    finally:
        session.client.cancel(arrays)
    return floor(samples, like.nbytes, reads)
