"""Persistent classes used by the store tests (importable by workers: the tests directory is on their path)."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from workbench.runtime.store import PersistentObject, active

# Counter.meet's meeting points, per token (no module-level lock: this module travels by value, and a
# lock cannot be pickled; dict.setdefault is atomic on its own).
_BARRIERS: dict[str, threading.Barrier] = {}


def _meeting_points() -> dict[str, threading.Barrier]:
    """This process's meeting points: the imported module's. A copy of ``meet`` may run here with
    a copy of this module's globals: one that travelled by value to a worker and back, which rebinds
    ``Counter``'s methods in the process that sent it (cloudpickle's way with a class it sent by
    value, while a store ships this module); it still meets the test's calls. A worker that does not
    import this module has the copy's own."""
    return getattr(sys.modules.get(__name__), "_BARRIERS", _BARRIERS)


class Counter(PersistentObject):
    """Small state with read-only and writing active methods."""

    def __init__(self, values: np.ndarray):
        self.values = np.asarray(values, dtype=np.float64)
        self.hits = 0

    @active
    def total(self) -> float:
        return float(self.values.sum())

    @active
    def scaled_total(self, factor: float, offset: float = 0.0) -> float:
        return float(self.values.sum() * factor + offset)

    @active(writes=True)
    def scale(self, factor: float) -> None:
        self.values *= factor

    @active
    def sneaky_write(self) -> None:
        self.values[0] = -1.0  # a "read-only" method that writes: must fail

    @active(writes=True)
    def slow_increment(self) -> int:
        seen = self.hits
        time.sleep(0.02)  # a race would lose increments without the object's write lock
        self.hits = seen + 1
        return self.hits

    @active
    def count(self) -> int:
        return self.hits

    @active
    def slow_read(self, seconds: float) -> tuple[float, float]:
        start = time.time()
        time.sleep(seconds)
        return start, time.time()

    @active
    def meet(self, token: str, parties: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until ``parties`` calls with this ``token`` are inside the
        object at once; True if they met. Calls run one at a time can never meet."""
        meeting_points = _meeting_points()
        barrier = meeting_points.setdefault(token, threading.Barrier(parties))
        try:
            barrier.wait(timeout)
            return True
        except threading.BrokenBarrierError:
            return False
        finally:
            meeting_points.pop(token, None)

    @active
    def combined(self, other: Counter) -> float:
        return float(self.values.sum() + other.values.sum())

    @active
    def thread_name(self) -> str:
        return threading.current_thread().name


class SlowToLoad(Counter):
    """A Counter whose unpickling takes a while (a large object read back from disk): it widens the
    window in which concurrent callers could each reload it, on different backends."""

    def __setstate__(self, state: dict) -> None:
        time.sleep(0.2)
        self.__dict__.update(state)


class WithLock(Counter):
    """State that cannot be pickled: a lock."""

    def __init__(self) -> None:
        super().__init__(np.ones(3))
        self.lock = threading.Lock()


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class Grumpy(PersistentObject):
    """An object whose active method raises an exception whose text cannot be made."""

    @active
    def complain(self) -> None:
        error = _Unprintable()
        error.lock = threading.Lock()  # and it cannot be pickled either
        raise error


class Bag(PersistentObject):
    """Named attributes (arrays or anything), written in place, rebound, aliased or deleted by name."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)

    @active
    def read(self, name: str):
        value = getattr(self, name)
        return np.array(value, copy=True, subok=True) if isinstance(value, np.ndarray) else value

    @active
    def has(self, name: str) -> bool:
        return name in self.__dict__

    @active
    def same(self, name: str, other: str) -> bool:
        return getattr(self, name) is getattr(self, other)

    @active(writes=True)
    def add(self, value: float, *names: str) -> None:
        for name in names:
            array = getattr(self, name)
            array += value

    @active(writes=True)
    def bind(self, name: str, value) -> None:
        setattr(self, name, value)

    @active(writes=True)
    def bind_to(self, name: str, other: str) -> None:
        setattr(self, name, getattr(self, other))

    @active(writes=True)
    def forget(self, name: str) -> None:
        delattr(self, name)

    @active(writes=True)
    def bind_view(self, name: str, other: str, stop: int) -> None:
        setattr(self, name, getattr(self, other)[:stop])

    @active(writes=True)
    def fill_gated(self, name: str, value: float, gate: str, timeout: float = 60.0) -> bool:
        """Write ``value`` into array ``name``: its first half, then ``gate + '.started'``, then (once
        ``gate`` exists) its second half. A copy made meanwhile is torn unless taken under the lock."""
        array = getattr(self, name)
        half = len(array) // 2
        array[:half] = value
        open(gate + ".started", "w").close()
        wait_for_file(gate, timeout)
        array[half:] = value
        return True

    @active
    def everything(self) -> dict:
        """Every attribute (arrays copied)."""
        return {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in self.__dict__.items()}


def wait_for_file(path: str, timeout: float) -> None:
    """Wait (at most ``timeout`` s) until ``path`` exists: how a test opens a method's gate."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.001)  # a poll interval of a bounded wait on a state, not a timing assumption


class Halves(PersistentObject):
    """An array and a label written by one writing method, half at a time, that can stop between the
    halves at a gate (a file the test creates): a copy made while it waits there is torn unless the
    store copies under the object's lock (issue 35). ``label`` is written last."""

    def __init__(self, size: int, value: float = 0.0):
        self.data = np.full(size, value)
        self.label = value

    @active(writes=True)
    def fill(self, value: float, gate: str = "", timeout: float = 60.0) -> bool:
        """Write ``value`` everywhere: the first half; with a ``gate``, create ``gate + '.started'``
        and wait for ``gate``; the second half; the label."""
        half = len(self.data) // 2
        self.data[:half] = value
        if gate:
            open(gate + ".started", "w").close()
            wait_for_file(gate, timeout)
        self.data[half:] = value
        self.label = value
        return True

    @active
    def hold(self, gate: str, timeout: float = 60.0) -> bool:
        """A read-only call that stays inside the object (its shared lock held) until ``gate`` exists,
        after creating ``gate + '.started'``."""
        open(gate + ".started", "w").close()
        wait_for_file(gate, timeout)
        return True

    @active
    def hold_then_fetch_itself(self, oid: str, gate: str, timeout: float = 60.0) -> float:
        """A read-only call that, once ``gate`` exists (after creating ``gate + '.started'``), fetches
        a copy of its own object through the store (as a task: the worker's backend); the label copied."""
        from workbench.runtime.store.model import ObjectRef
        from workbench.runtime.store.tasks import local_backend

        open(gate + ".started", "w").close()
        wait_for_file(gate, timeout)
        return float(local_backend().table.fetch_copy(ObjectRef(oid), "hold_then_fetch_itself").label)

    @active
    def state(self) -> tuple[float, float, float]:
        """The smallest and largest element and the label: one version has all three equal."""
        return float(self.data.min()), float(self.data.max()), float(self.label)


def tier_files(store) -> list[str]:
    """The names of the files in a store's mapped tier directory (cached objects' files too)."""
    directory = store.directory / "tiers" / "mapped"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


class DeviceBag(Bag):
    """A :class:`Bag` of numeric arrays on any tier, the ``gpu`` one included: on ``gpu`` an attribute is
    a device array, read through a host copy and changed by a device kernel where it lies."""

    @active
    def read(self, name: str):
        value = getattr(self, name)
        return value.copy_to_host() if hasattr(value, "copy_to_host") else np.array(value, copy=True)

    @active
    def on_device(self, name: str) -> bool:
        from workbench.memory import gpu

        return gpu.is_device_array(getattr(self, name))

    @active(writes=True)
    def add(self, value: float, *names: str) -> None:
        for name in names:
            array = getattr(self, name)
            if hasattr(array, "copy_to_host"):  # on the device: x = x + value * 1, by a device kernel
                from workbench.kernels import gpu as device_kernels

                flat = array.reshape(array.size)  # a 0-d array too: the triad takes vectors
                ones = device_kernels.cuda.to_device(np.ones(array.size, dtype=array.dtype))
                device_kernels.stream_triad(flat, flat, ones, value)
            else:
                array += value
