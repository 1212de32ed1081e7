"""Row blocks of a Dask array placed in worker memory: its block futures in block order, and their rows.

SplIter, the store's ``persist_blocks`` and the applications' placement all need the same three
things of a persisted array: that it is cut along the first axis only, its block futures in block
order (futures, not keys, so the scheduler sees every dependency), and how many rows each block
holds, also when Dask does not know (``y[y > 0.5]`` has chunks of size NaN until computed).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dask.array as da
from distributed import Future, futures_of

from workbench.runtime.session import Session


def flat_keys(keys: Any) -> Iterator[Any]:
    """The keys of ``array.__dask_keys__()`` in block order, however deeply nested (any ndim)."""
    if isinstance(keys, list):
        for item in keys:
            yield from flat_keys(item)
    else:
        yield keys


def check_row_blocks(array: Any, what: str) -> da.Array:
    """``array`` if it is a Dask array cut along its first axis only; else a clear error for ``what``."""
    if not isinstance(array, da.Array):
        raise TypeError(f"{what} takes a dask.array.Array, got {type(array).__name__}")
    if array.ndim == 0 or any(n != 1 for n in array.numblocks[1:]):
        raise ValueError(
            f"{what} takes row blocks (cut along the first axis only); this array has {array.numblocks} blocks: "
            "make every other axis one block first (x.rechunk({1: -1, ...}))"
        )
    return array


def block_futures(array: da.Array) -> list[Future]:
    """The futures of a persisted array's blocks, in block order."""
    by_key = {f.key: f for f in futures_of(array)}
    if not by_key:
        raise ValueError("the array is not persisted: session.client.persist(array) it first")
    return [by_key[k] for k in flat_keys(array.__dask_keys__())]


def _rows(block: Any) -> int:
    return int(block.shape[0])


def row_chunks(session: Session, array: da.Array, futures: list[Future]) -> tuple[int, ...]:
    """Rows per block; measured on the workers (one tiny task per block) where Dask does not know them."""
    chunks = array.chunks[0]
    if not any(isinstance(c, float) and math.isnan(c) for c in chunks):
        return tuple(int(c) for c in chunks)
    sizes = session.gather(session.client.map(_rows, futures, pure=False))
    return tuple(int(s) for s in sizes)


def persist_row_blocks(session: Session, array: Any, what: str) -> tuple[da.Array, list[Future], tuple[int, ...]]:
    """Persist ``array`` if it is not already, wait (bounded) for its blocks; ``(array, futures, rows per block)``.

    Nothing is fetched to the client. Arrays of unknown chunk sizes are accepted: their row counts
    are measured where the blocks are.
    """
    array = check_row_blocks(array, what)
    if not futures_of(array):
        array = session.client.persist(array)
    futures = block_futures(array)
    session.wait(futures)
    return array, futures, row_chunks(session, array, futures)
