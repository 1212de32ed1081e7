"""The operations of a store backend, each defined once (see :mod:`~workbench.runtime.store.wire`).

Each is a function of the backend it runs on (:class:`~workbench.runtime.store.backend.StoreBackend`)
and its arguments, decorated with :func:`~workbench.runtime.store.wire.backend_op`: its wire name
(``op_get`` is ``get``), typed arguments, reply, thread pool and whether it may be re-sent. It hands
the operation to the part of the backend that does it: its object table (``backend.table``), its
tier placement (``backend.placing``) or its active calls (``backend.answer_call``). Senders pass the
function itself: ``link.backend(address, backend_ops.op_get, oid=..., version=...)``.
"""

from __future__ import annotations

from typing import Any

from workbench.runtime.store.wire import Pool, backend_op

# The backend an operation runs on: a StoreBackend (backend.py). Named here as Any, not imported even for
# annotations: table.py and link.py send these operations and sit below backend.py, and this module with them.
StoreBackend = Any


@backend_op(pool=Pool.LOOP, resend=True)
async def op_call(backend: StoreBackend, call: dict[str, Any], wait: float = 0.0) -> dict[str, Any]:
    """Run an active method there (a direct message from a client): the answer to the
    :class:`~workbench.runtime.store.protocol.Call` ``call`` once it ended, or "still running" after
    ``wait`` seconds. A re-sent call is answered from the backend's memory of it, never run twice."""
    return await backend.answer_call(call, wait)


@backend_op()
def op_put(backend: StoreBackend, oid: str, version: int, obj: Any, announce: bool = False) -> int:
    """Take a copy of an object (a move or a replica); ``announce``: record this backend as a holder."""
    return backend.table.add(oid, version, obj, announce=announce)


@backend_op()
def op_put_many(
    backend: StoreBackend, keys: list[tuple[str, int]], data: bytes, buffers: list[Any], nbytes: list[int] | None = None
) -> int:
    """Take a batch of new objects, one message for all (:meth:`ObjectTable.put_many`)."""
    return backend.table.put_many(keys, data, buffers, nbytes)


@backend_op(resend=True)
def op_drop(backend: StoreBackend, oid: str, version: int) -> bool:
    """Forget a version here (and free its tier files); whether it was held."""
    return backend.table.drop(oid, version)


@backend_op(resend=True)
def op_drop_many(backend: StoreBackend, keys: list[tuple[str, int]]) -> int:
    """Forget a batch of objects here (a batch that failed elsewhere); how many were held."""
    return backend.table.drop_many(keys)


@backend_op(pool=Pool.COPIES, resend=True)
def op_get(backend: StoreBackend, oid: str, version: int) -> Any:
    """The object for a copy (a ``table.SendLocked``), under its shared lock until
    :meth:`StoreBackend.send_locked` has sent it."""
    return backend.table.copy_out(oid, version)


@backend_op(pool=Pool.COPIES)
def op_push(backend: StoreBackend, oid: str, version: int, target: str, move: bool = False) -> int:
    """Send a copy of the object to backend ``target`` (a replica, or with ``move`` the object itself)."""
    return backend.table.push(oid, version, target, move)


@backend_op(pool=Pool.COPIES)
def op_copy_version(backend: StoreBackend, oid: str, version: int, new_version: int) -> int:
    """Copy a version into a new one here (``new_version``)."""
    return backend.table.copy_version(oid, version, new_version)


@backend_op(resend=True)
def op_flush(backend: StoreBackend, oid: str, version: int) -> str:
    """Write the object to the disk tier (it stays in memory too); returns the file."""
    return backend.table.flush(oid, version)


@backend_op(resend=True)
def op_evict(backend: StoreBackend, oid: str, version: int) -> int:
    """Move the object to the disk tier; returns bytes freed."""
    return backend.table.evict(oid, version)


@backend_op(resend=True)
def op_load(backend: StoreBackend, oid: str, version: int, disk_path: str) -> int:
    """Read the object from the disk tier into this backend's memory (once, however many ask)."""
    return backend.table.load(oid, version, disk_path)


@backend_op(resend=True)
def op_place(backend: StoreBackend, oid: str, version: int, tier: str, reason: str = "") -> dict[str, Any]:
    """Put the object's numpy attributes on ``tier``; the placement (:meth:`TierPlacement.place`)."""
    return backend.placing.place(oid, version, tier, reason)


@backend_op()
def op_place_many(
    backend: StoreBackend, keys: list[tuple[str, int]], tier: str, reason: str = ""
) -> dict[str, list[list[Any]]]:
    """Place a batch of objects held here, all or nothing (:meth:`TierPlacement.place_many`)."""
    return backend.placing.place_many(keys, tier, reason)


@backend_op()
def op_unplace_many(backend: StoreBackend, placed: list[tuple[str, int, str]], tier: str) -> int:
    """Put objects placed by :func:`op_place_many` back on the tiers they were on; how many went back."""
    return backend.placing.unplace(placed, tier)


@backend_op(resend=True)
def op_cool(backend: StoreBackend, oid: str, version: int) -> list[dict[str, Any]]:
    """Make the object's tier files cold; what each eviction achieved."""
    return backend.placing.cool(oid, version)


@backend_op(resend=True)
def op_cool_many(backend: StoreBackend, keys: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """:func:`op_cool` for a batch of objects held here; every eviction."""
    return backend.placing.cool_many(keys)


@backend_op(resend=True)
def op_set_memory_limit(backend: StoreBackend, nbytes: int | None) -> int | None:
    """Set the bytes of objects kept in DRAM before evicting to disk (None: no limit); the old limit."""
    return backend.table.set_memory_limit(nbytes)


@backend_op(resend=True)
def op_set_cache(backend: StoreBackend, nbytes: int) -> int:
    """Set the byte budget of this backend's DRAM cache; the old budget."""
    return backend.placing.set_cache(nbytes)


@backend_op()
def op_rebalance(
    backend: StoreBackend, budget: int | None = None, hot_reads: int | None = None
) -> list[dict[str, Any]]:
    """Dynamic placement now, with a new budget when given; the moves made (:meth:`TierPlacement.rebalance`)."""
    return backend.placing.rebalance(budget, hot_reads)


@backend_op(resend=True)
def op_table(backend: StoreBackend) -> list[dict[str, Any]]:
    """What this backend holds: one row per object version."""
    return backend.table.rows()


@backend_op(resend=True)
def op_null(backend: StoreBackend) -> None:
    """Nothing: the cost of a message round trip."""
    return None
