"""What every memory tier shares: its errors, what a tier file sits on, the handle of a placed array,
and :class:`Tier`, what a tier is to the code that places arrays and objects on it.

:mod:`workbench.memory.tiers` (the host tiers and the one registry of tiers) and
:mod:`workbench.memory.gpu` (the device tier) both build on these; neither imports the other's internals.
Code outside the tier modules asks a :class:`Tier`'s flags and methods (``tiers.lookup(name)``), never
compares tier names: a new tier is a subclass in its own module and one line in the registry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from workbench.memory import shm
from workbench.memory.tier_set import TierSet

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs"})


class TierError(shm.SharedMemoryError):
    """A tier operation that cannot be done, with what to do instead (a file-tier problem found by
    ``workbench.memory.shm`` is one too: catch either)."""


class UnknownTier(TierError, ValueError):
    """A tier name that is not one of :data:`TIERS` (bad input: a ``ValueError`` too)."""


@dataclass(frozen=True)
class Medium:
    """What a tier directory sits on: reported with every measurement made there."""

    directory: str
    filesystem: str
    device: str
    mount: str
    dax: bool
    memory_backed: bool  # tmpfs/ramfs: the "file" is DRAM, and cannot be made cold

    def describe(self) -> str:
        """One line for reports: ``/tmp on ext4 (/dev/vda), page cache in front``."""
        if self.dax:
            kind = "DAX (persistent memory, MAP_SYNC)"
        elif self.memory_backed:
            kind = "memory (no device behind it: never cold)"
        else:
            kind = "page cache in front of the device"
        return f"{self.directory} on {self.filesystem} ({self.device}), {kind}"


def medium(directory: str | Path) -> Medium:
    """The mount ``directory`` lives on, from ``/proc/mounts`` (longest mount point that contains it)."""
    path = os.path.realpath(directory)
    best = ("", "?", "?", "")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 4:
                    continue
                device, mount, fstype, options = fields[:4]
                mount = mount.replace("\\040", " ")
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, device, fstype, options)
    except OSError:
        pass
    mount, device, fstype, options = best
    dax = any(o == "dax" or o.startswith("dax=") and o != "dax=never" for o in options.split(","))
    return Medium(str(directory), fstype, device, mount, dax, fstype in MEMORY_FILESYSTEMS)


PLAIN_TYPES = (np.ndarray, np.memmap)  # what a tier file holds whole: the bytes, shape and dtype


def check_plain(array: object, what: str, tier: str) -> None:
    """A ``TierError`` if ``array`` is a numpy array subclass whose meaning a file would lose (a masked
    array's mask, a matrix's type): a tier file holds a plain array (bytes, shape, dtype) only."""
    if isinstance(array, np.ndarray) and type(array) not in PLAIN_TYPES:
        kind = f"{type(array).__module__}.{type(array).__qualname__}"
        raise TierError(
            f"{what} is a {kind}, and a {tier} file holds a plain array only (the subclass and what it "
            "adds, such as a mask, would be lost): keep it on dram, or store its parts as plain arrays "
            "(np.asarray(x), and x.mask for a masked array)"
        )


class TierArray:
    """An array placed on a tier: ``.array`` is what code uses; ``sync()`` makes changes durable."""

    tier = ""
    cache: Any = None  # the DRAM cache the array is used through (None: none)
    held: TierSet | None = None  # the tier set a dram or gpu array is named in (None: a file names it)

    def __init__(self, name: str, directory: Path | None):
        self.name = name
        self.directory = directory

    @property
    def path(self) -> Path | None:
        """The file behind the array (None on ``dram``)."""
        return None if self.directory is None else shm.segment_path(self.name, self.directory)

    @property
    def array(self) -> np.ndarray:
        """The array to compute on."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes of the array's data."""
        return int(self.array.nbytes)

    @property
    def dram_bytes(self) -> int:
        """Bytes this placement holds in process memory (what a DRAM budget counts)."""
        return 0

    @property
    def file_bytes(self) -> int:
        """Bytes of the array held in a file mapped here (not counted against DRAM): 0 off the file tiers."""
        return 0

    @property
    def device_bytes(self) -> int:
        """Bytes the placement holds in device memory: 0 off the device."""
        return 0

    @property
    def mapping(self) -> np.ndarray:
        """The mapping of the array's file (what a store object's attribute is at rest on a file tier)."""
        raise TierError(f"{self.tier} array {self.name!r} is not a mapped file")

    def remap(self) -> np.ndarray:
        """Sync, drop this handle's mapping (and any DRAM copy) and map the file again: the fresh mapping."""
        raise TierError(f"{self.tier} array {self.name!r} is not a mapped file")

    def is_mapping(self, value: object) -> bool:
        """Whether ``value`` is this handle's own mapping of its file (else a new array, not in the file)."""
        return False

    def in_call(self, writes: bool) -> np.ndarray | None:
        """The array a store call uses instead of the attribute at rest (writeable if ``writes``), or
        None where the attribute is used as it is."""
        return None

    def sync(self) -> None:
        """Make changes to ``array`` durable on the tier (nothing on ``dram``)."""

    def medium(self) -> Medium | None:
        """What the file sits on (None on ``dram``)."""
        return None if self.directory is None else medium(self.directory)

    def __repr__(self) -> str:
        return f"<{self.tier} array {self.name!r} {self.array.shape} {self.array.dtype}>"


class Tier:
    """A memory tier: its name (the public, user-facing string), what the store and placement need to
    know of it (the flags), and its four operations on named arrays. One instance per tier, in the
    registry of :mod:`workbench.memory.tiers` (``tiers.lookup(name)``).

    The flags, each a class attribute:

    * ``persistent``: its arrays survive a restart of the process (they are files);
    * ``file_backed``: each array is a file in a directory (``directory=`` names it);
    * ``process_local``: its arrays are named in this process only (another process cannot open them);
    * ``counts_transfers``: its arrays are not in host memory: every copy to or from the host crosses a
      bus and is counted, and code that wants host bytes gets a host copy;
    * ``counts_against_dram_budget``: its arrays are process memory, what a DRAM budget counts (an
      object the store keeps on it is kept as Python made it);
    * ``staged``: an array is read into DRAM when used and written back when changed, not used in place
      (the store evicts an object placed here to its disk copy, staged back when used);
    * ``through_dram_cache``: an array is used through a DRAM cache with a byte budget.

    Every operation is given ``held``, the :class:`~workbench.memory.tier_set.TierSet` it works for: a
    ``process_local`` tier keeps its arrays there (a session's are not another's), a
    ``through_dram_cache`` one reads through its cache unless given one (``cache``).
    """

    name: ClassVar[str] = ""
    persistent: ClassVar[bool] = False
    file_backed: ClassVar[bool] = False
    process_local: ClassVar[bool] = False
    counts_transfers: ClassVar[bool] = False
    counts_against_dram_budget: ClassVar[bool] = False
    staged: ClassVar[bool] = False
    through_dram_cache: ClassVar[bool] = False

    def put(
        self,
        name: str,
        array: Any,
        *,
        directory: Path | None,
        cache: Any,
        replace: bool,
        owner: shm.Process | None,
        held: TierSet,
    ) -> TierArray:
        """Place a copy of ``array`` under ``name`` (``replace``: over an existing one); its handle."""
        raise NotImplementedError

    def open(self, name: str, *, directory: Path | None, cache: Any, writable: bool, held: TierSet) -> TierArray:
        """The handle of the array placed earlier under ``name``; an error saying why there is none."""
        raise NotImplementedError

    def free(self, name: str, *, directory: Path | None, held: TierSet) -> bool:
        """Remove ``name``; whether it was there."""
        raise NotImplementedError

    def names(self, *, directory: Path | None, held: TierSet) -> list[str]:
        """The names of the arrays on the tier, sorted."""
        raise NotImplementedError

    def adopt(self, name: str, array: Any, *, held: TierSet) -> TierArray:
        """Name ``array``, made on this tier already (by a kernel: no bytes move), as ``name``; a tier
        whose arrays are not made by code in place (a host tier) refuses."""
        raise TierError(
            f"the {self.name} tier cannot adopt {name!r}: only a tier whose arrays kernels make in place (gpu) "
            "can; place() a copy instead"
        )

    def __repr__(self) -> str:
        return f"<tier {self.name!r}>"
