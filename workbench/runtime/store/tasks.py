"""The bodies of the store's Dask tasks: what an active or non-active call runs on a worker.

A caller (:mod:`~workbench.runtime.store.handles`, the store strategies) submits these functions; they
run on a worker and reach its backend by name (:func:`local_backend`: the worker plugin
``PLUGIN_NAME``), so the caller's side imports no module of the backend. Task bodies (these, and
those of ``handles.py`` and ``local.py``) use the backend's in-process API alone (``invoke``,
``resolve_arguments``, ``copy_of``, ``adopt``, ``adopt_here``, ``place``, ``held``, ``writing``),
never its object table or its placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed import get_worker

from workbench.runtime import failures
from workbench.runtime.dask_seam import worker_plugin
from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.model import ObjectRef
from workbench.runtime.store.protocol import PLUGIN_NAME

if TYPE_CHECKING:
    from workbench.runtime.store.backend import StoreBackend


def local_backend() -> StoreBackend:
    """This worker's store backend (inside a task)."""
    worker = get_worker()
    plugin = worker_plugin(worker, PLUGIN_NAME)
    if plugin is None:
        raise StoreError(f"worker {worker.address} has no store backend: open the store first (Store(session))")
    return plugin


def run_active(ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of an active call: the method runs on this worker, where the object lives."""
    return failures.sendable(local_backend().invoke, ref, method, writes, args, kwargs)


def run_non_active(ref: ObjectRef, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Task body of a non-active call: fetch a copy of the object through the store, run the method here."""
    backend = local_backend()
    obj = backend.copy_of(ref, method)
    args, kwargs = backend.resolve_arguments(args, kwargs, method)
    return failures.sendable(getattr(obj, method), *args, **kwargs)
