"""Errors of the active object store; each message names the object and says what to do.

The bottom of the store's layers: it imports no other module of the store.
"""

from __future__ import annotations

from typing import Protocol


class Labelled(Protocol):
    """What names an object in a message (an :class:`~workbench.runtime.store.model.ObjectRef` is one)."""

    def label(self) -> str:
        """The object as messages name it."""
        ...


class StoreError(RuntimeError):
    """Something the store cannot do for this object (the message says why and what to do)."""


class NotHere(StoreError):
    """The object is not (or no longer) on the backend asked: ask the catalogue where it is now."""


class BackendUnreachable(StoreError):
    """A backend did not answer (it left the cluster, or the connection failed)."""


class ObjectLost(StoreError):
    """Every copy of an object was on backends that left the cluster, and none is on disk."""


def object_lost(label: str, class_label: str, lost_from: list[str]) -> ObjectLost:
    """The error for an object no live backend holds and no disk copy keeps."""
    where = (
        f"backend {', '.join(lost_from)}, which left the cluster" if lost_from else "the backends of a previous cluster"
    )
    return ObjectLost(
        f"{label} of class {class_label} is lost: it was held only in memory by {where}, with no replica and no disk "
        "copy. "
        "Replicate objects you cannot recompute (proxy.replicate()) or write them to disk (proxy.flush())"
    )


def check_writable(ref: Labelled, workers: list[str], method: str, writes: bool) -> None:
    """A ``StoreError`` when a writing ``method`` would run on an object with several replicas (the
    caller checks before sending the call; the backend again when a replica was made while the call
    waited for the object's lock)."""
    if writes and len(workers) > 1:
        raise StoreError(
            f"{ref.label()} has {len(workers)} replicas ({', '.join(workers)}); "
            f"the writing method {method!r} would make them differ. "
            "Call proxy.drop_replicas() first, or change a new_version() and consolidate() it"
        )


class UnknownAlias(KeyError):
    """No object has this alias (the message lists close matches)."""

    def __str__(self) -> str:  # KeyError quotes its argument; a sentence reads better
        return str(self.args[0]) if self.args else ""
