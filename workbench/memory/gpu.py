"""The ``gpu`` tier: arrays in a CUDA device's memory, where device kernels compute on them in place.

A GPU's memory is one more place an array can live, with the question the thesis asked of NVM: copy
the data in for every use, or keep it where the compute is? On this tier an array is a device array
(numba's, taken by every kernel of :mod:`workbench.kernels.gpu`); the bytes cross the bus only when the caller
says so, and every crossing is counted (:attr:`DeviceMemory.transfers`):

* :meth:`DeviceMemory.put` copies a host array in (host to device, counted);
* :attr:`GpuArray.array` is a **host copy** (device to host, counted): code that wants the bytes on
  the host pays for them, every time; :attr:`GpuArray.device` is the array itself, for kernels.

**When the device is full.** The tier's limit is ``$WORKBENCH_GPU_BYTES`` when set, else what the
device has free plus what this tier set already holds there (under numba's simulator, which has no
device memory, the host's available memory). A placement over it is a :class:`TierError` that says
how much is held, by which arrays, and what to do; the device's own out-of-memory error is one too.
Nothing is spilled to the host behind the caller's back: moving an array off the device is a
``tiers.move`` the caller makes (dask-cuda's workers spill device to host by themselves instead).

The arrays are a tier set's (:mod:`workbench.memory.tier_set`: a session's in its kernel, the
process's elsewhere; a CUDA context belongs to one process, as ``dram``'s arrays do): named in its
:class:`DeviceMemory` (``tiers.current().device``; :data:`DEVICE` is the process's set's), freed by
``tiers.free`` or with the set. :class:`GpuTier` is the tier itself (in the registry of
:mod:`workbench.memory.tiers`). numba is imported on first use, never at import time.
Under ``NUMBA_ENABLE_CUDASIM=1`` the tier runs in numba's CUDA simulator (how CI, which has no GPU,
tests it): the same placement rules and counts; its times mean nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import workbench.settings as settings_names
from workbench.kernels._checks import is_device_array
from workbench.memory import shm
from workbench.memory.tier_base import Tier, TierArray, TierError, check_plain
from workbench.memory.tier_set import TierSet
from workbench.settings import Settings
from workbench.units import size_text

GPU_BYTES_ENV = settings_names.GPU_BYTES
NUMBER_KINDS = "biufc"  # booleans, integers, floats, complex: what device kernels compute on


def cuda() -> Any:
    """``numba.cuda``, when a CUDA device (or numba's simulator) can run; a :class:`TierError` saying
    what to do otherwise."""
    from workbench.kernels import gpu as device_kernels

    if not device_kernels.available():
        raise TierError(
            "the gpu tier needs a CUDA device, and numba sees none here (no GPU, or no driver): keep the "
            "array on a host tier (dram, mapped), or set NUMBA_ENABLE_CUDASIM=1 before starting Python to "
            "run the gpu tier in numba's simulator (right answers, meaningless times)"
        )
    return device_kernels.cuda


def check_numbers(array: Any, what: str) -> None:
    """A :class:`TierError` unless ``array`` holds numbers (bool, int, float, complex) of a fixed size:
    what device kernels take. A datetime, string, object or structured array stays on a host tier."""
    dtype = np.dtype(array.dtype)
    if dtype.kind not in NUMBER_KINDS or dtype.fields is not None:
        raise TierError(
            f"{what} has dtype {dtype}, and the gpu tier holds arrays of numbers only (bool, int, float, "
            "complex): keep it on a host tier, or place a numeric view of it (dates: x.view('int64'))"
        )


def _host_or_device(value: Any) -> Any:
    """A device array as it is; anything else as ``numpy.asarray`` reads it (a list, a scalar), as the
    host tiers take it."""
    return value if is_device_array(value) else np.asarray(value)


def _limit_from(text: str | None) -> int | None:
    """The device limit that ``text`` (``$WORKBENCH_GPU_BYTES``'s value; None: read it now) gives, or None."""
    text = settings_names.now(GPU_BYTES_ENV) if text is None else text
    if not text:
        return None
    try:
        limit = settings_names.byte_amount(GPU_BYTES_ENV, text)  # what `workbench settings` checks it with
    except ValueError:
        raise TierError(
            f"${GPU_BYTES_ENV}={text!r} is not a size: give bytes (such as 2GiB or 500MB), or unset it to use "
            "the device's free memory"
        ) from None
    return limit


@dataclass
class Transfers:
    """Bytes (and copies) that crossed the bus through the tier, each way."""

    to_device: int = 0
    to_host: int = 0
    copies_to_device: int = 0
    copies_to_host: int = 0

    def snapshot(self) -> Transfers:
        """A copy of the counts now (subtract two to count what one piece of code moved)."""
        return Transfers(self.to_device, self.to_host, self.copies_to_device, self.copies_to_host)

    def __sub__(self, other: Transfers) -> Transfers:
        return Transfers(
            self.to_device - other.to_device,
            self.to_host - other.to_host,
            self.copies_to_device - other.copies_to_device,
            self.copies_to_host - other.copies_to_host,
        )


class DeviceMemory:
    """The named arrays one tier set holds on the device, their bytes, the tier's limit and the
    bytes that crossed the bus. ``settings``: where ``$WORKBENCH_GPU_BYTES`` is read (a session's
    snapshot; None: the environment where it runs)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings
        self.arrays: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.transfers = Transfers()
        self._caps: list[int] = []  # limits set by capped(), innermost last
        self.closed = False  # its tier set closed: it holds nothing and takes nothing more

    def cap(self) -> int | None:
        """The limit :meth:`capped` set for the block running now, or None."""
        return self._caps[-1] if self._caps else None

    @contextlib.contextmanager
    def capped(self, nbytes: int) -> Iterator[int]:
        """Within the block, the tier holds at most ``nbytes`` in this tier set, whatever
        ``$WORKBENCH_GPU_BYTES`` says (a lesson's full device); the limit before comes back after it."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise TierError(f"a device limit is a positive number of bytes, got {nbytes!r}")
        self._caps.append(nbytes)
        try:
            yield nbytes
        finally:
            self._caps.remove(nbytes)

    def used(self) -> int:
        """Bytes of the arrays held here."""
        with self.lock:
            return sum(int(a.nbytes) for a in self.arrays.values())

    def limit(self) -> int:
        """Bytes the tier may hold: ``$WORKBENCH_GPU_BYTES``, else the device's free memory plus what
        this tier set holds (the simulator: the host's available memory); within :meth:`capped`, its cap."""
        if self._caps:
            return self._caps[-1]
        configured = _limit_from(self.settings.get(GPU_BYTES_ENV) if self.settings is not None else None)
        if configured is not None:
            return configured
        free, _ = cuda().current_context().get_memory_info()
        if free == float("inf"):  # numba's simulator: device arrays are host memory
            import psutil

            free = psutil.virtual_memory().available
        return int(free) + self.used()

    def check_room(self, name: str, nbytes: int, replacing: int = 0) -> None:
        """A :class:`TierError` if ``nbytes`` more (``replacing`` bytes freed) would pass the limit."""
        limit = self.limit()
        used = self.used() - replacing
        if used + nbytes > limit:
            with self.lock:
                held = sorted(self.arrays.items(), key=lambda kv: -int(kv[1].nbytes))[:4]
            listed = ", ".join(f"{n!r} ({size_text(int(a.nbytes))})" for n, a in held) or "nothing"
            limit_set_by = f"${GPU_BYTES_ENV}" if self.cap() is None else "the cap of this block (DeviceMemory.capped)"
            raise TierError(
                f"{name!r} needs {size_text(nbytes)} of device memory, and the gpu tier holds {size_text(used)} "
                f"of its {size_text(limit)} limit (largest: {listed}): free() or move() arrays to a host tier "
                f"first, place a smaller array, or raise {limit_set_by}. Nothing is spilled to the host for you"
            )

    def to_device(self, name: str, value: Any) -> Any:
        """A new device array holding ``value``'s numbers (a host array: copied in and counted; a device
        array: copied on the device). Big-endian or non-contiguous host arrays are copied in native
        order, C-contiguous (the values and the shape are kept, 0-d too); a list or other sequence as
        ``numpy.asarray`` reads it. Nothing is registered: see :meth:`put`."""
        value = _host_or_device(value)
        check_numbers(value, f"array {name!r}")
        numba_cuda = cuda()
        try:
            if is_device_array(value):
                copy = numba_cuda.device_array(value.shape, dtype=value.dtype)
                copy.copy_to_device(value)
                return copy
            host = np.asarray(value, dtype=np.dtype(value.dtype).newbyteorder("="), order="C")  # 0-d stays 0-d
            copy = numba_cuda.to_device(host)
        except TierError:
            raise
        except Exception as error:  # the device's own out-of-memory (CudaAPIError), a lost context ...
            raise TierError(
                f"the device could not take {name!r} ({size_text(int(value.nbytes))}): {error}. Free device "
                f"memory, or set ${GPU_BYTES_ENV} below what the device has free"
            ) from None
        with self.lock:
            self.transfers.to_device += int(host.nbytes)
            self.transfers.copies_to_device += 1
        return copy

    def to_host(self, device: Any) -> np.ndarray:
        """A host copy of ``device`` (counted)."""
        host = device.copy_to_host()
        with self.lock:
            self.transfers.to_host += int(host.nbytes)
            self.transfers.copies_to_host += 1
        return host

    def put(self, name: str, value: Any, replace: bool = False) -> Any:
        """Place a copy of ``value`` on the device under ``name`` (within the limit); the device array."""
        with self.lock:
            there = self.arrays.get(name)
        if there is not None and not replace:
            raise TierError(f"{name!r} is on gpu already: free() it, or place(..., replace=True)")
        value = _host_or_device(value)
        check_numbers(value, f"array {name!r}")
        self.check_room(name, int(value.nbytes), int(there.nbytes) if there is not None else 0)
        copy = self.to_device(name, value)
        self._keep(name, copy)
        return copy

    def adopt(self, name: str, device: Any) -> Any:
        """Name an array already on the device (made by a kernel: no bytes move), within the limit."""
        with self.lock:
            there = self.arrays.get(name)
        if there is device:
            return device
        check_numbers(device, f"array {name!r}")
        self.check_room(name, int(device.nbytes), int(there.nbytes) if there is not None else 0)
        self._keep(name, device)
        return device

    def get(self, name: str) -> Any:
        """The device array named ``name``; a :class:`TierError` if there is none in this tier set."""
        with self.lock:
            if name not in self.arrays:
                raise TierError(
                    f"no gpu array {name!r} in this process (in this tier set: a session's arrays are its own): "
                    "device memory is this process's and does not survive a restart; list them with tiers.names('gpu')"
                )
            return self.arrays[name]

    def pop(self, name: str) -> bool:
        """Forget ``name`` (its memory goes when the last reference does); whether it was here."""
        with self.lock:
            return self.arrays.pop(name, None) is not None

    def names(self) -> list[str]:
        """The names held here, sorted."""
        with self.lock:
            return sorted(self.arrays)

    def close(self) -> None:
        """Forget every array (their memory goes with their last references) and take no more: its
        tier set closed."""
        with self.lock:
            self.closed = True
            self.arrays.clear()

    def _keep(self, name: str, device: Any) -> None:
        """Name ``device`` ``name`` here, unless closed meanwhile (checked under the lock close() takes)."""
        with self.lock:
            if self.closed:
                raise TierError(
                    f"the tier set of these device arrays is closed (its session ended): {name!r} was not kept"
                )
            self.arrays[name] = device


DEVICE = DeviceMemory()  # the process's tier set's device arrays (tiers.PROCESS); a session's set has its own


class GpuArray(TierArray):
    """An array in device memory: :attr:`device` for kernels, :attr:`array` a counted host copy."""

    tier = "gpu"

    def __init__(self, name: str, device: Any, memory: DeviceMemory, held: TierSet | None = None):
        super().__init__(name, None)
        self.device = device
        self.memory = memory
        self.held = held

    @property
    def array(self) -> np.ndarray:
        """A host copy of the array, made now and counted (changing it changes nothing on the device)."""
        return self.memory.to_host(self.device)

    @property
    def nbytes(self) -> int:
        """Bytes of the array on the device."""
        return int(self.device.nbytes)

    @property
    def device_bytes(self) -> int:
        """What the placement holds in device memory (all of it)."""
        return int(self.device.nbytes)

    def __repr__(self) -> str:
        return f"<gpu array {self.name!r} {tuple(self.device.shape)} {np.dtype(self.device.dtype)}>"


class GpuTier(Tier):
    """The ``gpu`` tier: device arrays of a tier set, every copy across the bus counted."""

    name = "gpu"
    process_local = True
    counts_transfers = True

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
    ) -> GpuArray:
        """Copy ``array`` (host or device) onto the device under ``name``, within the limit."""
        check_plain(array, f"array {name!r}", self.name)
        return GpuArray(name, held.device.put(name, array, replace), held.device, held)

    def open(self, name: str, *, directory: Path | None, cache: Any, writable: bool, held: TierSet) -> GpuArray:
        """The device array placed in ``held`` under ``name``."""
        return GpuArray(name, held.device.get(name), held.device, held)

    def free(self, name: str, *, directory: Path | None, held: TierSet) -> bool:
        """Forget the device array ``name`` (its memory goes with its last reference)."""
        return held.device.pop(name)

    def names(self, *, directory: Path | None, held: TierSet) -> list[str]:
        """The device arrays ``held`` holds."""
        return held.device.names()

    def adopt(self, name: str, array: Any, *, held: TierSet) -> GpuArray:
        """Name the device array ``array`` (a kernel's result: no bytes move) as ``name``, within the limit."""
        return GpuArray(name, held.device.adopt(name, array), held.device, held)
