"""Data placed in worker memory for a run: a persisted Dask array and its block futures, in order."""
from __future__ import annotations

from typing import Any

import dask.array as da
from distributed import Future

from workbench.runtime.blocks import block_futures
from workbench.runtime.session import Session


def rows_per_block(session: Session, n_rows: int, blocks_per_worker: int = 1) -> int:
    """Rows per block so that ``n_rows`` make ``blocks_per_worker`` blocks on every worker (at least 1)."""
    return max(1, -(-n_rows // (blocks_per_worker * len(session.workers()))))


class PersistedBlocks:
    """A Dask array computed into worker memory, with its block futures in block order.

    Futures (not raw keys) are what tasks receive, so the scheduler sees each dependency and
    runs a task where its block lives.
    """

    def __init__(self, session: Session, array: da.Array):
        self.session = session
        self.array = session.client.persist(array)
        self.block_futures: list[Future] = block_futures(self.array)
        session.wait(self.block_futures)  # bounded wait until every block exists (nothing is fetched)
        self._collections: dict[type, Any] = {}

    def in_store(self, block_class: type) -> Any:
        """The same blocks as store objects of ``block_class``, made where each block already is.

        Made once per class and kept until :meth:`release` (the first, untimed warm-up run of a
        store variant pays for it, like placement in ``prepare``).
        """
        if block_class not in self._collections:
            from workbench.runtime.store import store_for

            self._collections[block_class] = store_for(self.session).persist_blocks(self.array, block_class=block_class)
        return self._collections[block_class]

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def locality(self) -> dict[str, str]:
        """Block index (as text, e.g. "(3, 0)") -> the worker holding it."""
        who_has = self.session.client.who_has(self.block_futures)
        return {
            str(tuple(f.key[1:])): (sorted(who_has.get(f.key, ())) or [""])[0] for f in self.block_futures
        }

    def release(self) -> None:
        """Drop the references; Dask frees the blocks once no client holds them."""
        for collection in self._collections.values():
            collection.delete()
        self._collections = {}
        self.block_futures = []
        self.array = None

