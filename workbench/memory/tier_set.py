"""Whose arrays: a :class:`TierSet` is what one owner holds on the tiers that live in a process.

Three tiers keep their arrays in the process, not in files: ``dram`` (named arrays in process
memory), the ``cached`` tier's DRAM cache, and ``gpu`` (named device arrays). A tier set holds one of
each, with their counters (the cache's hits and misses, the bytes that crossed the bus) and the
settings they read (the DRAM budget, the device limit). The file tiers' arrays are files in a
directory, which names them; a tier set adds nothing to them but the cache they are read through.

Who owns a set:

* a :class:`~workbench.runtime.session.Session` owns one, made by ``workbench.start()`` from the
  session's settings, in use (:func:`active`) in the caller's context from then until the session
  closes, when its arrays are freed and the set in use before it comes back (if still open). Two
  sessions in one kernel hold two sets: an array one placed on ``dram`` or ``gpu`` is not among the
  other's names, and closing one frees nothing of the other;
* the process owns one (``workbench.memory.tiers.PROCESS``): what code uses where no session's set is
  in use (a worker, a thread the user starts, a script without a session);
* anyone may make one and use it for a block (:func:`using`) or pass it (``held=``) to the tier
  operations.

Which set is in use is a :class:`contextvars.ContextVar`: a session's set is in use in the context that
started it (a notebook's plain cells share one), a thread begins with none (the process's), and a block
under :func:`using` changes it for that block only. An asyncio task runs in a copy of its creator's
context, and so does a Jupyter cell with a top-level ``await`` (ipykernel 6.31, IPython 9): a session
started there is in use there only, not in the caller or the next cells (``activate(session.tier_set)``
in a plain cell puts it in use). A closed set is never in use: code that still
names it gets the latest still open of those put in use before it, else the process's. What is in use
is kept by the context as an immutable chain (:func:`in_use`), not on the sets: a block under
:func:`using` puts back exactly what was there before it. This module imports
nothing of the tiers: the cache and the device memory are made by :mod:`workbench.memory.tiers`
(``tiers.new_set``) and kept here as they are given.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.settings import Settings
from workbench.settings import now as setting_now


class TierSet:
    """One owner's ``dram`` arrays, DRAM cache and device arrays in this process, their counters, and
    the settings they read (a snapshot, or None: the environment where they run)."""

    def __init__(self, name: str, cache: Any, device: Any, settings: Settings | None = None):
        self.name = name  # who owns it, for messages ("the process", "session tcp://...")
        self.cache = cache  # a workbench.memory.tiers.DramCache: the cached tier's copies
        self.device = device  # a workbench.memory.gpu.DeviceMemory: the gpu tier's arrays
        self.settings = settings
        self.dram: dict[str, np.ndarray] = {}
        self.dram_lock = threading.Lock()
        self.dram_budget: int | None = None  # bytes per store backend the tier strategies use; None: the setting
        self.closed = False

    def setting(self, name: str) -> str:
        """The value of setting ``name`` for this set's tiers: from its snapshot, else where it runs."""
        return self.settings.get(name) if self.settings is not None else setting_now(name)

    def counters(self) -> dict[str, int]:
        """What the set holds and what it counted: its ``dram`` arrays and their bytes, the cache's hits,
        misses, bypasses, evictions and bytes, its device arrays and their bytes, and the bytes (and
        copies) that crossed the bus each way."""
        with self.dram_lock:
            dram_arrays, dram_bytes = len(self.dram), sum(int(a.nbytes) for a in self.dram.values())
        transfers = self.device.transfers
        return {
            "dram_arrays": dram_arrays,
            "dram_bytes": dram_bytes,
            **{f"cache_{k}": v for k, v in self.cache.stats().items()},
            "device_arrays": len(self.device.names()),
            "device_bytes": self.device.used(),
            "to_device": transfers.to_device,
            "to_host": transfers.to_host,
            "copies_to_device": transfers.copies_to_device,
            "copies_to_host": transfers.copies_to_host,
        }

    def close(self) -> None:
        """Free what the set holds (its ``dram`` arrays, its device arrays, its cache's copies, dirty
        ones written back first) and take it out of use; safe to call twice. Views callers still hold
        stay valid until dropped, as after ``tiers.free``; a cached copy a caller holds stays in the
        cache until its handle's ``sync()`` writes it back or the copy is dropped (``DramCache.close``)."""
        with self.dram_lock:  # under the lock a placement checks it with: none lands in a closed set
            self.closed = True
            self.dram.clear()
        self.device.close()
        self.cache.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.dram)} dram, {len(self.device.names())} gpu arrays"
        return f"<TierSet of {self.name}: {state}>"


@dataclass(frozen=True)
class _Uses:
    """The sets put in use in one context, the latest first (``below``: the ones before it). Immutable,
    and held by the context, not by the sets: a set in use in two contexts has two places, and a
    ``with using()`` block puts back exactly what was there before it."""

    held: TierSet
    below: _Uses | None


_ACTIVE: contextvars.ContextVar[_Uses | None] = contextvars.ContextVar("workbench_tier_sets", default=None)


def _chain(uses: _Uses | None) -> list[TierSet]:
    """The sets of ``uses``, the latest first."""
    sets = []
    while uses is not None:
        sets.append(uses.held)
        uses = uses.below
    return sets


def _uses_of(sets: list[TierSet]) -> _Uses | None:
    """The chain of ``sets`` (the latest first)."""
    uses = None
    for held in reversed(sets):
        uses = _Uses(held, uses)
    return uses


def in_use() -> list[TierSet]:
    """The sets put in use in this context and not yet taken out, the latest first (closed ones too:
    :func:`active` skips them)."""
    return _chain(_ACTIVE.get())


def active() -> TierSet | None:
    """The tier set in use in this context, or None (the process's is used). A closed one is not: the
    latest still open of those put in use before it is (a session closed from another thread, or at
    the kernel's shutdown, cannot take its set out of use in this context)."""
    return next((held for held in _chain(_ACTIVE.get()) if not held.closed), None)


def activate(held: TierSet) -> None:
    """Put ``held`` in use in this context from now on (what ``workbench.start()`` does with its
    session's set); the set in use before comes back when ``held`` is deactivated or closed, if still
    open. A set activated again moves to the top (it is never below itself)."""
    if not isinstance(held, TierSet):
        raise TypeError(f"activate() takes a TierSet, got {type(held).__name__}")
    if held.closed:
        raise ValueError(f"{held!r} is closed: its arrays were freed; make a new one (tiers.new_set)")
    _ACTIVE.set(_Uses(held, _uses_of([s for s in _chain(_ACTIVE.get()) if s is not held])))


def deactivate(held: TierSet) -> None:
    """Take ``held`` out of use in this context if it is the one put in use last (a session closing):
    the one before it comes back, or the latest still open before that, else the process's."""
    uses = _ACTIVE.get()
    if uses is not None and uses.held is held:
        _ACTIVE.set(uses.below)


@contextlib.contextmanager
def using(held: TierSet) -> Iterator[TierSet]:
    """Within the block, ``held`` is the set in use here (say, an earlier session's, after a later one
    started); what was in use before comes back after it, exactly (a session started inside the
    block is in use until the block ends: start sessions outside such blocks)."""
    if not isinstance(held, TierSet):
        raise TypeError(f"using() takes a TierSet (a session's: session.tier_set), got {type(held).__name__}")
    if held.closed:
        raise ValueError(f"{held!r} is closed: its arrays were freed; use an open session's set")
    token = _ACTIVE.set(_Uses(held, _ACTIVE.get()))
    try:
        yield held
    finally:
        _ACTIVE.reset(token)
