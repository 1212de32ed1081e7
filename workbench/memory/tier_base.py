"""What every memory tier shares: its errors, what a tier file sits on, and the handle of a placed array.

:mod:`workbench.memory.tiers` (the host tiers) and :mod:`workbench.memory.gpu` (the device tier) both
build on these; neither imports the other's internals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.memory import shm

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


class TierArray:
    """An array placed on a tier: ``.array`` is what code uses; ``sync()`` makes changes durable."""

    tier = ""

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

    def sync(self) -> None:
        """Make changes to ``array`` durable on the tier (nothing on ``dram``)."""

    def medium(self) -> Medium | None:
        """What the file sits on (None on ``dram``)."""
        return None if self.directory is None else medium(self.directory)

    def __repr__(self) -> str:
        return f"<{self.tier} array {self.name!r} {self.array.shape} {self.array.dtype}>"
