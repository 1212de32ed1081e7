"""What runs inside a task on a worker: the objects of that worker's backend, used in place.

``local_object(proxy)`` reads an object where it lives; ``local_object(proxy, for_write=True)`` is a
``with`` block under the object's exclusive lock. ``persist_anywhere`` is what
``PersistentObject.make_persistent`` calls (the ``Store`` installs it when it opens, and its backends
when they start on a worker); ``store_blocks_here`` is the ``Client.run`` body of
``Store.persist_blocks``.
"""

from __future__ import annotations

from typing import Any

from distributed import get_worker

from workbench.runtime.dask_seam import worker_plugin, worker_value
from workbench.runtime.store.current import current_store
from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.handles import Proxy, persist_here
from workbench.runtime.store.model import StoredHandle
from workbench.runtime.store.protocol import PLUGIN_NAME
from workbench.runtime.store.tasks import LocalBackend, local_backend


def local_object(proxy: StoredHandle, for_write: bool = False) -> Any:
    """Inside a task on a worker: the object ``proxy`` names, from this worker's backend, no copy.

    For task bodies that run where an object lives (SplIter partitions of a store collection, a
    task pinned to a block's holder, ``proxy.locations()``) and use it in place.

    ``for_write=False`` (reading) returns the backend's own object, and **no lock is held once this
    returns**. Its numpy attributes are read-only (the store keeps them so between calls), so
    writing into them fails loudly; but an ``@active(writes=True)`` method of the object running
    at the same time (it takes the object's exclusive lock, which this read does not) may change
    those arrays in place while you read them, and an eviction may move the object to disk
    meanwhile (what you hold stays valid, unchanged, but is no longer the store's). For a
    consistent read alongside writers, read inside an ``@active`` method, or use ``for_write=True``.

    ``for_write=True`` returns a context manager that holds the object's **exclusive lock** for the
    ``with`` block and gives the object with its numpy attributes writeable::

        with local_object(proxy, for_write=True) as block:
            block.data += 1

    As ``@active(writes=True)`` does: a replicated object is refused (its replicas would differ);
    active calls and evictions of the object wait for the block (at most the backend's
    ``LOCK_WAIT_SECONDS``, 60 s, then they time out), so keep it short and call none of the object's
    own active methods inside it; on leaving it the arrays are read-only again, the object's size is
    updated and a stale disk copy is deleted.

    Raises :class:`NotHere` when this backend does not hold the object (it lives on other backends,
    or only on disk): run the task where the object lives (pin it to ``proxy.locations()``), or
    call an active method instead, which runs where the object is. Raises ``RuntimeError`` outside
    a task on a worker, and ``StoreError`` when the worker has no store backend.
    """
    if not isinstance(proxy, StoredHandle):
        raise TypeError(f"local_object takes a store proxy, got {type(proxy).__name__}")
    try:
        backend = local_backend()
    except ValueError:
        raise RuntimeError(
            "local_object runs inside a task on a worker (it reads that worker's backend); in a client, call an "
            "active method of the proxy, or proxy.fetch() for a copy"
        ) from None
    if for_write:
        return backend.writing(proxy.ref)
    return backend.held(proxy.ref)


def block_arrays(proxies: list[Any]) -> list[Any]:
    """Inside a task on the blocks' worker: the arrays of store blocks (``ArrayBlock``), from this
    worker's backend, without a copy (how SplIter reads a store collection's partition)."""
    return [local_object(p).data for p in proxies]


def persist_anywhere(obj: Any, alias: str | None, backend: str | None) -> Proxy:
    """``PersistentObject.make_persistent``: on this worker's backend inside a task, else in the current store."""
    try:
        get_worker()
    except ValueError:
        return current_store().make_persistent(obj, alias=alias, backend=backend)
    if backend is not None:
        raise ValueError("inside a task an object is persisted on the task's own worker: leave backend=None")
    return persist_here(obj, alias)


async def store_blocks_here(assignments: dict[str, Any], block_class: type, dask_worker: Any = None) -> int:
    """``Client.run`` body: make the blocks this worker holds objects of its backend, in place (no
    copy), registered in one catalogue message. ``assignments``: worker -> (block keys, object ids)."""
    mine = assignments.get(dask_worker.address)
    if not mine:
        return 0
    keys, oids = mine
    backend: LocalBackend | None = worker_plugin(dask_worker, PLUGIN_NAME)
    if backend is None:
        raise StoreError(f"worker {dask_worker.address} has no store backend: open the store first (Store(session))")
    objs = [block_class(worker_value(dask_worker, _as_key(key))) for key in keys]
    return await backend.adopt_here(objs, list(oids))


def _as_key(key: Any) -> Any:
    """A Dask key as the worker stores it (messages turn its tuples into lists)."""
    return tuple(_as_key(k) for k in key) if isinstance(key, (list, tuple)) else key
