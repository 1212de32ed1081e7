"""Errors of the active object store; each message names the object and says what to do."""
from __future__ import annotations


class StoreError(RuntimeError):
    """Something the store cannot do for this object (the message says why and what to do)."""


class ObjectLost(StoreError):
    """Every copy of an object was on backends that left the cluster, and none is on disk."""


class UnknownAlias(KeyError):
    """No object has this alias (the message lists close matches)."""

    def __str__(self) -> str:  # KeyError quotes its argument; a sentence reads better
        return str(self.args[0]) if self.args else ""
