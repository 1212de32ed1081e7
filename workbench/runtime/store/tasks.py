"""The bodies of the store's Dask tasks: what an active or non-active call runs on a worker.

A caller (:mod:`~workbench.runtime.store.handles`, the store strategies) submits these functions; they
run on a worker and reach its backend by name (:func:`local_backend`: the worker plugin
``PLUGIN_NAME``), so the caller's side imports no module of the backend. Task bodies (these, and
those of ``handles.py`` and ``local.py``) use the backend's in-process API alone (``invoke``,
``resolve_arguments``, ``copy_of``, ``adopt``, ``adopt_here``, ``place``, ``held``, ``writing``),
never its object table or its placement.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from distributed import get_worker

from workbench.runtime import failures
from workbench.runtime.dask_seam import worker_plugin
from workbench.runtime.store.errors import StoreError
from workbench.runtime.store.model import ObjectRef
from workbench.runtime.store.protocol import PLUGIN_NAME


class LocalBackend(Protocol):
    """The in-process API of this worker's store backend: all that a task body uses of it (a
    :class:`~workbench.runtime.store.backend.StoreBackend` is one). Typed here, so the task side
    imports no module of the backend, and its object table and placement stay the backend's own."""

    def invoke(self, ref: ObjectRef, method: str, writes: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run an active method on an object held here, under its lock."""
        ...

    def resolve_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], task: str
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments with the proxies among them made their objects."""
        ...

    def copy_of(self, ref: ObjectRef, task: str) -> Any:
        """A copy of an object, from wherever it is."""
        ...

    def adopt(self, obj: Any, oid: str, alias: str | None) -> None:
        """Make ``obj`` an object of this backend, registered in the catalogue."""
        ...

    async def adopt_here(self, objs: list[Any], oids: list[str]) -> int:
        """Make many objects objects of this backend in place, registered in one message."""
        ...

    def place(self, oid: str, version: int, tier: str, reason: str) -> dict[str, Any]:
        """Put an object held here on a tier."""
        ...

    def held(self, ref: ObjectRef) -> Any:
        """An object as this backend holds it (no copy, no lock); ``NotHere`` if it is not here."""
        ...

    def writing(self, ref: ObjectRef) -> AbstractContextManager[Any]:
        """An object under its exclusive lock, for a ``with`` block."""
        ...


def local_backend() -> LocalBackend:
    """This worker's store backend (inside a task), as its in-process API."""
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
