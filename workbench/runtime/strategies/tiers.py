"""Memory-tier configurations as strategies: the same block work, with the data on another tier.

Thesis ch. 6 on this machine (see :mod:`workbench.memory.tiers` for what each tier is here). The
blocks become active-store objects where each already lives (as for ``active``), placed once on
the tier; every call then runs where the block is, on the tier:

* ``dram``: in the worker's memory (``active`` under the tier's name, the ratio's baseline);
* ``mapped`` / ``mapped-cold``: each block a file mapped in place; ``-cold`` evicts the files'
  pages before each run (``fsync`` + ``POSIX_FADV_DONTNEED``, checked; phase ``cool``);
* ``cached`` / ``cached-cold``: the files through each backend's DRAM cache of
  :func:`settings` ``.dram_budget`` bytes (Memory Mode in software); ``-cold`` empties both caches;
* ``disk``: evicted to the store's disk tier (and out of the page cache) before each run, so each
  call stages its block back from the device;
* ``dynamic``: placed ``dynamic``: each backend moves the blocks whose use turns hot into DRAM
  within the budget (and cold ones back to ``mapped``) by itself, during the calls (each move in
  the trace, with its reason); before each run the budget is set (one message per backend).

Two peers on the same blocks, not the store: ``dask-spill`` / ``dask-spill-lz4`` (Dask's own
:class:`distributed.spill.SpillBuffer`, the class a worker's memory is, with the DRAM budget as
its target, uncompressed / lz4) and ``memmap`` (each block an ``.npy`` file on local disk opened
with ``np.load(mmap_mode="r")``: the hand-made way, numba on the page cache). ``non-active`` (the
store without active methods) is in :mod:`.store`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import workbench.settings as settings_names
from workbench.memory import shm
from workbench.memory import tiers as memory_tiers
from workbench.runtime.store import ArrayBlock, BlockCollection
from workbench.runtime.strategies.base import BlockWork, Strategy, register, task_key
from workbench.runtime.strategies.blocks import DaskPlan
from workbench.runtime.strategies.store import StorePlan
from workbench.runtime.worker_state import SpillSpace, worker_state

BUDGET_ENV = settings_names.DRAM_BUDGET
DEFAULT_DRAM_BUDGET = 256 * 2**20


@dataclass
class TierSettings:
    """The DRAM budget per backend (bytes) the tier strategies work under: the ``cached`` cache,
    ``dynamic``'s DRAM share, the Dask spill buffer's target. ``$WORKBENCH_DRAM_BUDGET`` or 256 MiB."""

    dram_budget: int


def _checked(dram_budget: Any, where: str) -> int:
    if isinstance(dram_budget, bool) or not isinstance(dram_budget, int) or not 0 <= dram_budget < 2**63:
        raise ValueError(f"{where} is bytes per backend (an int >= 0), got {dram_budget!r}")
    return dram_budget


def settings() -> TierSettings:
    """The tier strategies' settings now: the budget :func:`configure` set in the tier set in use (a
    session's: :func:`workbench.memory.tiers.current`), else that set's ``$WORKBENCH_DRAM_BUDGET`` (its
    session's settings; the process's: read at each call), else 256 MiB."""
    held = memory_tiers.current()
    if held.dram_budget is not None:
        return TierSettings(held.dram_budget)
    value = held.setting(BUDGET_ENV)
    return TierSettings(settings_names.whole_number(BUDGET_ENV, value) if value else DEFAULT_DRAM_BUDGET)


def configure(dram_budget: int) -> TierSettings:
    """Set the DRAM budget per backend for the tier strategies in the tier set in use (a session's, for
    that session only; a benchmark sets it per dataset). Set before ``workbench.start()`` (in the
    process's set), it is the budget of each session started after it."""
    memory_tiers.current().dram_budget = _checked(dram_budget, "dram_budget")
    return settings()


class TierPlan(StorePlan):
    """The blocks as store objects on one tier (placed once), made cold before each run if asked."""

    tier = "dram"
    cold = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind = memory_tiers.REGISTRY.get(self.tier)  # None: a placement policy (dynamic), not a tier
        if kind is not None and kind.through_dram_cache:
            self.store.set_cache(settings().dram_budget)
        if self.cold:
            with self.recorder.phase("cool"):
                self.evictions = self.store.cool(self.collection.blocks)

    def collection_key(self) -> tuple[Any, ...]:
        """One collection per tier: placing one never moves another variant's blocks."""
        return ("store", ArrayBlock, self.tier)

    def make_collection(self) -> BlockCollection:
        """The blocks as store objects where they live, then placed on the tier."""
        collection = super().make_collection()
        if self.tier != memory_tiers.HOME:  # blocks are made in process memory: elsewhere they are placed
            try:
                self.store.place(collection.blocks, self.tier, reason=f"strategy {self.strategy.name!r}")
            except BaseException:
                collection.delete()
                raise
        return collection


class DiskPlan(TierPlan):
    """Every block evicted to the disk tier (and its file out of the page cache) before the run."""

    tier = "dram"

    def collection_key(self) -> tuple[Any, ...]:
        """Its own collection (evicting it moves no other variant's blocks)."""
        return ("store", ArrayBlock, "disk")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self.recorder.phase("cool"):
            self.store.place(self.collection.blocks, "disk", reason="strategy 'disk': staged from the device")


class DynamicPlan(TierPlan):
    """Placed ``dynamic``: each backend's policy moves the blocks between ``mapped`` and DRAM by their
    measured use, within the DRAM budget, by itself during the calls; the moves are in the trace.
    The budget is sent to the backends when it changes (a benchmark sets it per dataset)."""

    tier = "dynamic"

    def make_collection(self) -> BlockCollection:
        """The blocks placed ``dynamic``, then placed by the policy at once under the budget (those
        over it go to ``mapped`` now, in the plan's making, not during a measured run's calls)."""
        collection = super().make_collection()
        try:
            self.store.rebalance(budget=settings().dram_budget)
        except BaseException:
            collection.delete()
            raise
        return collection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store.set_dynamic_budget(settings().dram_budget)  # a message only when the budget changed


def tier_strategy(name: str, tier: str, cold: bool, description: str, plan: type[TierPlan] = TierPlan) -> Strategy:
    """A registered strategy that runs block work on ``tier``."""
    plan_class = type(f"{plan.__name__}_{tier}{'_cold' if cold else ''}", (plan,), {"tier": tier, "cold": cold})
    strategy_class = type(
        f"Tier_{name.replace('-', '_')}", (Strategy,), {"name": name, "description": description, "plan": plan_class}
    )
    strategy_class.__doc__ = description
    return register(strategy_class())


# -- peers: Dask's spill buffer and a hand-made np.memmap -------------------------------------
def submit_per_block(
    plan: DaskPlan, function: Any, calls: Sequence[Sequence[Any]], holders: Sequence[str | None], name: str
) -> list[Any]:
    """One task per block: ``function(*calls[i])`` pinned to ``holders[i]`` (where block i's data is)."""
    return [
        plan.session.client.submit(
            function, *call, workers=[holder] if holder else None, pure=False, key=task_key(name)
        )
        for call, holder in zip(calls, holders)
    ]


def block_calls(
    plan: DaskPlan, work: BlockWork, per_block: Sequence[Sequence[Any]], args: Sequence[Any]
) -> list[list[Any]]:
    """The arguments of each block's task: ``work``, the block's own values, its aligned blocks, the
    plan's task arguments and its rows."""
    placed = plan.blocks()
    ranges = placed.item_ranges()
    task_args = plan.task_args(args)
    return [
        [
            work,
            *per_block[i],
            [a.block_futures[i] for a in plan.aligned],
            task_args,
            np.arange(*ranges[i], dtype=np.int64) if work.with_rows else None,
        ]
        for i in range(len(placed))
    ]


def spill_put(name: str, directory: str, target: int, compression: bool, index: int, block: np.ndarray) -> int:
    """Task body: put ``block`` into this worker's spill buffer ``name`` (made on first use; kept in the
    worker's :class:`~workbench.runtime.worker_state.WorkerState`, which removes its files at teardown)."""
    import workbench.runtime.dask_seam as dask_seam

    state = worker_state()
    with state.spill_lock:
        if name not in state.spills:
            # a directory per buffer: two never share one (zict owns its directory), not even two workers
            # of one process (a threads-only cluster)
            path = os.path.join(directory, name, uuid.uuid4().hex[:12])
            state.spills[name] = SpillSpace(dask_seam.spill_buffer(path, target, compression), path)
        buffer = state.spills[name].buffer
    with state.spill_lock:  # a SpillBuffer is not thread-safe (a worker touches its own on one thread)
        buffer[f"block-{index}"] = np.array(block, copy=True)  # its own copy: spilling it frees it
    return int(block.nbytes)


def spill_drop(name: str, directory: str, dask_worker: Any = None) -> None:
    """``Client.run`` body, on every worker: forget spill buffer ``name`` and remove its files."""
    state = worker_state(dask_worker)
    with state.spill_lock:
        state.spills.pop(name, None)  # not clear(): that unspills every key first, only to delete it
    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def on_spilled(work: BlockWork, name: str, index: int, aligned: Sequence[Any], args: Sequence[Any], rows: Any) -> Any:
    """Task body: the work of block ``index``, read from the spill buffer (unspilled from disk if spilled)."""
    state = worker_state()
    with state.spill_lock:
        space = state.spills.get(name)
        if space is None:
            raise RuntimeError(
                f"spill buffer {name!r} is not on this worker (a worker restarted?): run the variant again"
            )
        block = space.buffer[f"block-{index}"]  # unspilled (read, decompressed, unpickled) if it was on disk
    return work.call(block, aligned, args, rows)


@dataclass
class SpilledBlocks:
    """The placed blocks in Dask spill buffers on their workers."""

    name: str
    directory: str
    holders: list[str | None]  # the worker whose buffer holds each block

    @property
    def workers(self) -> list[str]:
        """The workers with a buffer."""
        return sorted({h for h in self.holders if h})


class SpillPlan(DaskPlan):
    """The blocks in a Dask :class:`~distributed.spill.SpillBuffer` per worker (target: the DRAM budget)."""

    compression = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        self.spilled: SpilledBlocks = placed.view(("dask-spill", self.compression), self._make, self._drop)

    def _make(self) -> SpilledBlocks:
        placed = self.blocks()
        name = f"workbench-spill-{uuid.uuid4().hex[:12]}"
        directory = str(memory_tiers.default_directory("disk"))
        holders = placed.holders()
        calls = [
            (name, directory, settings().dram_budget, self.compression, i, block)
            for i, block in enumerate(placed.block_futures)
        ]
        self.session.gather(submit_per_block(self, spill_put, calls, holders, "spill-put"))
        return SpilledBlocks(name, directory, holders)

    def _drop(self, spilled: SpilledBlocks) -> None:
        alive = [w for w in spilled.workers if w in set(self.session.workers())]
        if alive:
            self.session.client.run(spill_drop, spilled.name, spilled.directory, workers=alive)
        # a worker that died (or a directory this machine shares with the workers): its files go from here
        shutil.rmtree(os.path.join(spilled.directory, spilled.name), ignore_errors=True)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per block, on the worker whose buffer holds it, reading it from there."""
        calls = block_calls(self, work, [(self.spilled.name, i) for i in range(len(self.blocks()))], args)
        return submit_per_block(self, on_spilled, calls, self.spilled.holders, work.name)


class SpillLz4Plan(SpillPlan):
    """Dask's spill buffer with lz4 compression of what it spills."""

    compression = True


def memmap_write(directory: str, index: int, block: np.ndarray) -> str:
    """Task body: ``block`` saved as ``<directory>/<index>.npy`` on this worker; its path."""
    Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    path = os.path.join(directory, f"{index}.npy")
    np.save(path, np.ascontiguousarray(block))
    return path


def memmap_remove(directory: str) -> None:
    """On every worker: remove the memmap peer's directory."""
    shutil.rmtree(directory, ignore_errors=True)


def on_memmap(work: BlockWork, path: str, aligned: Sequence[Any], args: Sequence[Any], rows: Any) -> Any:
    """Task body: the work of one block on ``np.load(path, mmap_mode="r")`` (the page cache in front)."""
    return work.call(shm.load_npy(path, mmap_mode="r"), aligned, args, rows)


class MemmapPlan(DaskPlan):
    """Each block an ``.npy`` file on its worker's local disk, computed on through ``np.memmap``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.files: tuple[str, list[str], list[str | None]] = self.blocks().view(("memmap",), self._make, self._drop)

    def _make(self) -> tuple[str, list[str], list[str | None]]:
        placed = self.blocks()
        directory = os.path.join(memory_tiers.default_directory("disk"), f"memmap-{uuid.uuid4().hex[:12]}")
        holders = placed.holders()
        calls = [(directory, i, block) for i, block in enumerate(placed.block_futures)]
        return (
            directory,
            self.session.gather(submit_per_block(self, memmap_write, calls, holders, "memmap-write")),
            holders,
        )

    def _drop(self, files: tuple[str, list[str], list[str | None]]) -> None:
        alive = set(self.session.workers())
        holders = sorted({h for h in files[2] if h and h in alive})
        if holders:
            self.session.client.run(memmap_remove, files[0], workers=holders)
        memmap_remove(files[0])  # a worker that died (or a directory shared with this machine)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per block, on the worker whose disk has its file, on the block's memory map."""
        calls = block_calls(self, work, [(path,) for path in self.files[1]], args)
        return submit_per_block(self, on_memmap, calls, self.files[2], work.name)


class DaskSpill(Strategy):
    """Dask's own spill-to-disk (SpillBuffer, no compression) with the DRAM budget as its target."""

    name = "dask-spill"
    description = "peer: Dask's SpillBuffer per worker (target = the DRAM budget), pickled to disk uncompressed"
    plan = SpillPlan


class DaskSpillLz4(Strategy):
    """Dask's own spill-to-disk with lz4 compression."""

    name = "dask-spill-lz4"
    description = "peer: Dask's SpillBuffer per worker (target = the DRAM budget), lz4-compressed on disk"
    plan = SpillLz4Plan


class Memmap(Strategy):
    """A hand-made np.memmap per block on local disk, numba on it."""

    name = "memmap"
    description = "peer: each block an .npy file on local disk, computed on through np.load(mmap_mode='r')"
    plan = MemmapPlan


tier_strategy("dram", "dram", False, "tier dram: the blocks as store objects in worker memory, active calls")
tier_strategy("mapped", "mapped", False, "tier mapped: each block a mapped file, active calls run on it in place")
tier_strategy("mapped-cold", "mapped", True, "tier mapped, cold: the files' pages evicted before each run")
tier_strategy("cached", "cached", False, "tier cached: mapped files behind a DRAM cache of the budget (Memory Mode)")
tier_strategy("cached-cold", "cached", True, "tier cached, cold: the DRAM cache and the page cache emptied per run")
tier_strategy("disk", "disk", False, "tier disk: evicted to the store's disk tier, staged back per call", DiskPlan)
tier_strategy("dynamic", "dynamic", False, "dynamic placement: hot blocks into DRAM within the budget", DynamicPlan)
register(DaskSpill())
register(DaskSpillLz4())
register(Memmap())

TIER_VARIANTS = [
    "dram",
    "mapped",
    "mapped-cold",
    "cached",
    "cached-cold",
    "disk",
    "non-active",
    "dynamic",
    "dask-spill",
    "dask-spill-lz4",
    "memmap",
]
