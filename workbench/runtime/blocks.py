"""Row blocks of a Dask array placed in worker memory: its block futures in block order, and their rows.

SplIter, the store's ``persist_blocks`` and the applications' data all need the same three
things of a persisted array: that it is cut along the first axis only, its block futures in block
order (futures, not keys, so the scheduler sees every dependency), and how many rows each block
holds, also when Dask does not know (``y[y > 0.5]`` has chunks of size NaN until computed).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask.array as da
import numpy as np
from distributed import Future, futures_of

import workbench.runtime.dask_seam as dask_seam
from workbench.runtime.session import PinnedCall, Session


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


def is_persisted(array: da.Array) -> bool:
    """Whether every block of ``array`` is a future (a graph built on persisted blocks, such as
    ``persisted.rechunk(...)``, holds futures too, but not of its own blocks)."""
    held = {f.key for f in futures_of(array)}
    return bool(held) and all(k in held for k in flat_keys(array.__dask_keys__()))


def block_futures(array: da.Array) -> list[Future]:
    """The futures of a persisted array's blocks, in block order."""
    by_key = {f.key: f for f in futures_of(array)}
    if not by_key:
        raise ValueError("the array is not persisted: session.client.persist(array) it first")
    return [by_key[k] for k in flat_keys(array.__dask_keys__())]


def rows_of(ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Global row indexes of blocks with these ``[start, stop)`` ranges, in order."""
    if not ranges:
        return np.empty(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def row_offsets(chunks: Sequence[int]) -> np.ndarray:
    """Global first row of each block of ``chunks`` rows, and the total rows at the end."""
    return np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)


def holders_of(session: Session, futures: Sequence[Future]) -> list[str | None]:
    """One worker holding each future's block (None for a lost block), in order: one scheduler query."""
    who_has = session.client.who_has(list(futures))
    return [(sorted(who_has.get(f.key, ())) or [None])[0] for f in futures]


def concatenate(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Blocks as one array (a single block as it is: no copy)."""
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


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
    if not is_persisted(array):
        array = session.client.persist(array)
    futures = block_futures(array)
    if any(f.status != "finished" for f in futures):  # a local check: no message when all are there
        session.wait(futures)
    return array, futures, row_chunks(session, array, futures)


def rows_per_block(workers: int, n_rows: int, blocks_per_worker: int = 1) -> int:
    """Rows per block so that ``n_rows`` make ``blocks_per_worker`` blocks on each of ``workers`` (at least 1)."""
    if blocks_per_worker < 1:
        raise ValueError(f"blocks_per_worker must be at least 1, got {blocks_per_worker}")
    return max(1, -(-n_rows // (blocks_per_worker * max(1, workers))))


class PlacedBlocks:
    """A blocked Dask array computed into worker memory: its block futures in block order, where each
    block lives, and the views made of it (a store collection ...), released together.

    Every strategy maps work over these blocks; futures (not raw keys) are what tasks receive, so
    the scheduler sees each dependency and runs a task where its block lives. Row-blocked arrays
    (cut along the first axis only) also know their rows per block, measured on the workers where
    Dask does not know them; a grid of blocks (a matrix cut both ways) has block futures only.
    """

    def __init__(self, session: Session, array: Any, what: str = "placed blocks"):
        if not isinstance(array, da.Array):
            raise TypeError(f"{what} takes a dask.array.Array, got {type(array).__name__}")
        self.session = session
        self.row_blocked = array.ndim > 0 and all(n == 1 for n in array.numblocks[1:])
        if self.row_blocked:
            self.array, self.block_futures, self.chunks = persist_row_blocks(session, array, what)
        else:
            self.array = array if is_persisted(array) else session.client.persist(array)
            self.block_futures = block_futures(self.array)
            session.wait(self.block_futures)
            self.chunks = ()
        self._views: dict[Any, tuple[Any, Callable[[Any], None]]] = {}

    def __len__(self) -> int:
        return len(self.block_futures)

    def __repr__(self) -> str:
        return f"<PlacedBlocks {len(self)} blocks, shape {self.shape}, {self.dtype}>"

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the whole array (rows measured where Dask did not know them)."""
        if self.row_blocked:
            return (int(sum(self.chunks)), *(int(n) for n in self.array.shape[1:]))
        return tuple(int(n) for n in self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype."""
        return self.array.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def _rows_only(self, what: str) -> None:
        if not self.row_blocked:
            raise ValueError(
                f"{what} needs row blocks (cut along the first axis only); these are {self.array.numblocks} blocks: "
                "rechunk every other axis to one block first"
            )

    def offsets(self) -> np.ndarray:
        """Global first row of each block, and the total rows at the end."""
        self._rows_only("offsets")
        return row_offsets(self.chunks)

    def item_ranges(self) -> list[tuple[int, int]]:
        """Global ``[start, stop)`` rows of each block, in block order."""
        offsets = self.offsets()
        return [(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]

    def holders(self) -> list[str | None]:
        """One worker holding each block (None for a lost block), in block order: one scheduler query."""
        return holders_of(self.session, self.block_futures)

    def restore(self, holders: list[str | None], timeout: float = 10.0) -> int:
        """Put each block back on exactly its worker in ``holders`` (as :meth:`holders` gave them before
        a run): a copy made where the original was dropped, the replicas a run made dropped. So every
        run of an experiment starts from the same holders: stolen or fetched blocks leave copies
        behind, and on a cluster whose active memory manager runs (the workbench's own clusters turn
        it off) the copy may be kept and the original dropped, so that the next run splits the blocks
        differently. Dropping is asynchronous (a worker still using a block keeps it): the holders
        are checked again until it holds, for at most ``timeout`` seconds, then left as it is. Returns
        how many copies were out of place when called (missing from their home, or extra)."""
        if len(holders) != len(self.block_futures):
            raise ValueError(f"holders has {len(holders)} entries for {len(self.block_futures)} blocks: one per block")
        client = self.session.client
        back, extra = self._misplaced(holders)
        misplaced = sum(map(len, back.values())) + sum(map(len, extra.values()))
        deadline = time.monotonic() + timeout
        while (back or extra) and time.monotonic() < deadline:
            for home, futures in back.items():
                client.replicate(futures, n=1, workers=[home])
            if extra and not back:  # drop only once every block has its home copy (never a last copy)
                client.run_on_scheduler(_drop_replicas, extra)
                time.sleep(0.02)  # a bounded poll: a worker may refuse a drop and say so a moment later
            back, extra = self._misplaced(holders)
        return misplaced

    def _misplaced(self, holders: list[str | None]) -> tuple[dict[str, list[Future]], dict[str, list[Any]]]:
        """Blocks missing from their home worker (home -> futures), and copies elsewhere (worker -> keys)."""
        who_has = self.session.client.who_has(self.block_futures)
        back: dict[str, list[Future]] = {}
        extra: dict[str, list[Any]] = {}
        for future, home in zip(self.block_futures, holders):
            where = set(who_has.get(future.key, ()))
            if home is None or not where:
                continue  # a lost block cannot be put anywhere
            if home not in where:
                back.setdefault(home, []).append(future)
            for worker in where - {home}:
                extra.setdefault(worker, []).append(future.key)
        return back, extra

    def locality(self) -> dict[str, str]:
        """Block index (as text, e.g. "(3, 0)") -> the worker holding it."""
        return {str(tuple(f.key[1:])): holder or "" for f, holder in zip(self.block_futures, self.holders())}

    def check_aligned(self, other: PlacedBlocks, names: tuple[str, str] = ("the blocks", "the aligned blocks")) -> None:
        """A clear error unless ``other`` is cut into the same row blocks (labels beside points ...)."""
        self._rows_only("aligning")
        other._rows_only("aligning")
        if self.chunks != other.chunks:
            raise ValueError(
                f"{names[0]} and {names[1]} have different row blocks ({len(self.chunks)} vs {len(other.chunks)} "
                "blocks, "
                f"first {self.chunks[:3]} vs {other.chunks[:3]}): place {names[1]} with the same rows per block"
            )

    def rechunked(self, rows: int) -> PlacedBlocks:
        """The same rows in blocks of ``rows`` rows, placed (the data moves: Dask's rechunk)."""
        self._rows_only("rechunking")
        return PlacedBlocks(
            self.session, self.array.rechunk((rows, *(-1 for _ in self.array.shape[1:]))), "rechunked blocks"
        )

    def view(self, key: Any, make: Callable[[], Any], release: Callable[[Any], None]) -> Any:
        """What ``make()`` built from these blocks (a store collection ...), made once per ``key`` and
        released by ``release(view)`` with the blocks: the first, untimed warm-up run pays for it."""
        if self.array is None:
            raise RuntimeError("these blocks were released: place the data again")
        if key not in self._views:
            self._views[key] = (make(), release)
        return self._views[key][0]

    def release(self) -> None:
        """Release the views, then drop the references; Dask frees the blocks once no client holds them."""
        views, self._views = self._views, {}
        errors = []
        for view, release in views.values():
            try:
                release(view)
            except Exception as error:  # release every view, then report the first failure
                errors.append(error)
        self.block_futures = []
        self.array = None
        if errors:
            raise errors[0]


def _drop_replicas(extra: dict[str, list[Any]], dask_scheduler: Any = None) -> None:
    """On the scheduler: ask each worker to drop its copies of ``extra[worker]``, never a last copy."""
    import uuid

    dask_seam.drop_replicas(dask_scheduler, extra, stimulus_id=f"workbench-restore-holders-{uuid.uuid4().hex}")


def _block(value: Any) -> Any:
    """Task body: a block, computed where this task is pinned."""
    return value


def place_contiguous(session: Session, array: da.Array) -> da.Array:
    """``array``'s row blocks computed in contiguous runs, one run per worker (a domain decomposition:
    worker k holds blocks ``[k n / W, (k + 1) n / W)``), as a persisted array PlacedBlocks takes.

    Dask places blocks where it likes (round robin, here); an HPC code decomposes its domain into
    contiguous pieces, so a costly region lies on few workers: the layout imbalance experiments need.
    """
    array = check_row_blocks(array, "a contiguously placed array")
    workers = sorted(session.workers())
    blocks = array.to_delayed().ravel()
    name = "contiguous-" + array.name
    calls = [
        PinnedCall(_block, (block,), workers[i * len(workers) // len(blocks)], (name, i, *[0] * (array.ndim - 1)))
        for i, block in enumerate(blocks)
    ]
    futures = session.submit_pinned(calls)
    session.wait(futures)
    graph = {call.key: future for call, future in zip(calls, futures)}
    return da.Array(graph, name, chunks=array.chunks, dtype=array.dtype, meta=dask_seam.array_meta(array))
