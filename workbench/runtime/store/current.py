"""What the store keeps per process, all of it: the store opened last, and what ``make_persistent`` calls.

Nothing else of the store is state of the process (model's cache of each class's active methods is
worked out from the classes alone): a handle holds the store it belongs to (and through it the link
its messages go through), a backend its worker and its link. Two things cannot be held that way,
since a call without a store in hand needs them:

* the **current store**, the one opened last in this process (:func:`current_store`): what
  ``PersistentObject.make_persistent()`` persists into in a client, what :func:`store_for
  <workbench.runtime.store.client.store_for>` hands out, and what a handle that travelled belongs to
  (a handle travels as its reference alone). A ``Store`` becomes it when it opens
  (:func:`set_current_store`) and stops being it when it closes (:func:`clear_current_store`).
* the **persister**, what ``PersistentObject.make_persistent`` calls (:func:`persist`): installed
  by every ``Store`` that opens in this process and by every backend that starts on a worker,
  never at import. It holds no store (in a client it persists into the current store, in a task on
  its worker's backend), so closing a store leaves it installed. It is installed rather than
  imported so that :mod:`~workbench.runtime.store.model`, which a notebook's class imports, depends
  on nothing of the store but this module.

One more registration is the process's, and held only while a store needs it: a module of the
user's classes that a store sends by value (:func:`ship_by_value
<workbench.runtime.store.model.ship_by_value>`) is registered with cloudpickle until the last store
that sent it closes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workbench.runtime.store.errors import StoreError


class CurrentStore(Protocol):
    """The current store as the calls without a store in hand use it. It is a
    :class:`~workbench.runtime.store.client.Store`, named here by what those calls take: this module is
    below every other of the store but ``errors``, and imports none above it."""

    @property
    def closed(self) -> bool:
        """Whether the store was closed."""
        ...

    @property
    def key(self) -> str:
        """Which store it is: its cluster's scheduler and its directory (what a travelling proxy names)."""
        ...

    def make_persistent(self, obj: Any, alias: str | None = None, backend: str | None = None) -> Any:
        """Place ``obj`` in the store; its proxy."""
        ...


_store: CurrentStore | None = None  # the current store
_open: dict[str, list[CurrentStore]] = {}  # every store open in this process, by its key (the last opened last)
_persister: Callable[[Any, str | None, str | None], Any] | None = None  # what make_persistent calls


def current_store() -> CurrentStore:
    """The store opened last in this process (what ``PersistentObject.make_persistent`` uses)."""
    if _store is None:
        raise StoreError("no store is open: store = workbench.runtime.store.Store(session) first")
    return _store


def opened_store() -> CurrentStore | None:
    """The store opened last in this process, or None when none is open."""
    return _store


def set_current_store(store: CurrentStore) -> None:
    """Make ``store`` the current store, and one of the stores open here (a ``Store`` does when it opens)."""
    global _store
    _store = store
    opened = _open.setdefault(store.key, [])
    if store in opened:
        opened.remove(store)
    opened.append(store)


def clear_current_store(store: CurrentStore) -> None:
    """No store is current any more, if ``store`` was, and it is open here no longer (a ``Store`` does
    when it closes)."""
    global _store
    if _store is store:
        _store = None
    opened = _open.get(store.key, [])
    if store in opened:
        opened.remove(store)
    if not opened:
        _open.pop(store.key, None)


def store_named(key: str) -> CurrentStore | None:
    """The store open in this process whose :attr:`~CurrentStore.key` is ``key``, or None: a proxy
    that travelled finds the store it belongs to, whichever store is current (of two ``Store`` objects
    on one store, the last opened)."""
    opened = _open.get(key)
    return opened[-1] if opened else None


def open_stores() -> list[str]:
    """The keys of the stores open in this process."""
    return list(_open)


def install_persister(persister: Callable[[Any, str | None, str | None], Any]) -> None:
    """Set what ``PersistentObject.make_persistent(alias, backend)`` calls (``Store`` and its backends do)."""
    global _persister
    _persister = persister


def persist(obj: Any, alias: str | None, backend: str | None) -> Any:
    """``obj`` persisted by the installed persister; its proxy. A ``RuntimeError`` before any store opened here."""
    if _persister is None:
        raise RuntimeError(
            "no store is open in this process: open one first (store = workbench.runtime.store.Store(session))"
        )
    return _persister(obj, alias, backend)
