"""The n-dimensional histogram of a blocked point set: one task per block, then one sum.

This is the ``blocks`` variant every later mechanism is compared with: the number of tasks is the
number of blocks, so small blocks cost scheduling overhead and large ones cost parallelism.
"""
from __future__ import annotations

from collections.abc import Sequence

import dask.array as da
import numpy as np
from distributed import futures_of

import kernels
from workbench.runtime.session import Session


def persist_blocks(session: Session, points: da.Array) -> da.Array:
    """Generate and keep ``points`` in worker memory, waiting (with the session timeout) until done."""
    persisted = session.client.persist(points)
    session.gather(futures_of(persisted))
    return persisted


def sum_counts(partials: Sequence[np.ndarray]) -> np.ndarray:
    """Add per-block counts (a task body: runs on a worker)."""
    total = np.zeros_like(partials[0])
    for counts in partials:
        total += counts
    return total


def histogram_blocks(
    session: Session,
    points: da.Array,
    bins: int | Sequence[int],
    range: Sequence[tuple[float, float]],
) -> np.ndarray:
    """Histogram of a persisted (n, d) Dask array: one ``histogramdd`` task per block, one sum task.

    The block futures are passed to the tasks, so the scheduler sees the dependencies and runs each
    task where its block is.
    """
    if points.ndim != 2:
        raise ValueError(f"points must be a 2-D (n, d) Dask array, got {points.ndim}-D")
    block_futures = futures_of(points)
    if not block_futures:
        raise ValueError("points is not persisted: call persist_blocks(session, points) first")
    client = session.client
    # pure=False: a repeated run is a new run, not a cache hit on the previous result.
    partials = client.map(kernels.histogramdd, block_futures, bins=bins, range=range, pure=False)
    total = client.submit(sum_counts, partials, pure=False)
    return session.gather(total)
