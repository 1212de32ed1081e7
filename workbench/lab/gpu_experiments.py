"""GPU-memory experiments: copy the data in, or compute where it lies? (issue 39; lesson 10 and
``workbench bench gpu`` both use these functions.)

Each experiment times device work between ``cuda.synchronize()`` calls and counts the bytes that
crossed the bus (:attr:`workbench.memory.gpu.DeviceMemory.transfers` for the tier's copies, the
experiment's own arithmetic for raw copies):

* :func:`bus`: host to device from pageable and from pinned host memory, and device to host;
* :func:`device_floor`: STREAM's triad on the device, the device memory bandwidth (the floor);
* :func:`histogram_rate`: the histogram kernel's read rate against that floor;
* :func:`kmeans_placement`: k-means with the points kept on the device (one copy) against the points
  copied in every iteration (the RRO question on a GPU);
* :func:`store_active_vs_non_active`: a store object on the ``gpu`` tier: its histogram computed
  where it lies (an active method) against fetched to the caller and computed there.

Under numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) every experiment runs and every byte count
holds, but times mean nothing: each result carries ``simulated``. :data:`SIZES` keeps ``ci`` tiny
because the simulator runs each GPU thread as a Python thread.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from workbench.memory import gpu, tiers
from workbench.runtime.store import PersistentObject, active


@dataclass(frozen=True)
class GpuSize:
    """The inputs of the GPU experiments at one size."""

    points: int  # k-means points, and the histogram's and store object's values
    dims: int
    centres: int
    iterations: int
    bins: int
    bus_bytes: int  # bytes of each bus copy
    stream_items: int  # float64 items of each STREAM vector
    repeats: int


SIZES = {  # points, dims, centres, iterations, bins, bus bytes, stream items, repeats
    "ci": GpuSize(256, 2, 3, 3, 8, 2**16, 2**8, 1),  # the simulator runs each GPU thread as a Python thread
    "lab": GpuSize(4_000_000, 4, 8, 10, 64, 2**28, 2**25, 5),  # 128 MB of points, 256 MB per bus copy
    "full": GpuSize(32_000_000, 4, 8, 10, 64, 2**30, 2**28, 5),  # 1 GB of points, 1 GB per bus copy
}


def size_named(size: str) -> GpuSize:
    """The inputs at ``size`` (ci, lab or full); a ValueError naming the sizes otherwise."""
    if size not in SIZES:
        raise ValueError(f"no size {size!r}: the sizes are {', '.join(SIZES)}")
    return SIZES[size]


def device() -> dict[str, Any]:
    """What runs the experiments: the GPU's name and memory, or that numba's simulator stands in.
    A :class:`~workbench.memory.tiers.TierError` where neither can."""
    from workbench.kernels import gpu as device_kernels

    gpu.cuda()
    if device_kernels.simulated():
        return {"name": "numba CUDA simulator (times mean nothing)", "bytes": None, "simulated": True}
    name, nbytes = device_kernels.devices()[0]
    return {"name": name, "bytes": nbytes, "simulated": False}


def _samples(work: Callable[[], Any], repeats: int) -> list[float]:
    """The seconds of each of ``repeats`` runs of ``work``, each between two device synchronisations."""
    cuda = gpu.cuda()
    times = []
    for _ in range(max(1, repeats)):
        cuda.synchronize()
        start = time.perf_counter()
        work()
        cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def _timed(work: Callable[[], Any], repeats: int) -> float:
    """The median seconds of ``repeats`` runs of ``work`` (see :func:`_samples`)."""
    return statistics.median(_samples(work, repeats))


def _rate(nbytes: int, seconds: float) -> float:
    """GB/s (10^9 bytes per second)."""
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def bus(size: str = "ci") -> dict[str, Any]:
    """Host-to-device from pageable memory (what ``cuda.to_device(numpy_array)`` does: the driver
    stages it through a pinned buffer) and from pinned memory (DMA straight from it), and
    device-to-host, in GB/s, each the median of ``repeats`` copies of ``bus_bytes``; ``runs_ns_per_byte``:
    every copy's nanoseconds per byte, by way (what :func:`workbench.lab.stats.claim` compares)."""
    cuda, s = gpu.cuda(), size_named(size)
    items = s.bus_bytes // 8
    pageable = np.ones(items)
    pinned = cuda.pinned_array(items, dtype=np.float64)
    pinned[:] = 1.0
    target = cuda.device_array(items, dtype=np.float64)
    back = np.empty(items)
    runs = {
        "pageable": _samples(lambda: target.copy_to_device(pageable), s.repeats),
        "pinned": _samples(lambda: target.copy_to_device(pinned), s.repeats),
        "to_host": _samples(lambda: target.copy_to_host(back), s.repeats),
    }
    nbytes = items * 8
    return {
        "bytes": nbytes,
        "pageable_to_device_gbs": _rate(nbytes, statistics.median(runs["pageable"])),
        "pinned_to_device_gbs": _rate(nbytes, statistics.median(runs["pinned"])),
        "to_host_gbs": _rate(nbytes, statistics.median(runs["to_host"])),
        "runs_ns_per_byte": {way: [t / nbytes * 1e9 for t in times] for way, times in runs.items()},
        "simulated": device()["simulated"],
    }


def device_floor(size: str = "ci") -> dict[str, Any]:
    """STREAM's triad ``a = b + s*c`` on the device: 3 vectors of ``stream_items`` float64 per run
    (two read, one written), in GB/s: the device memory bandwidth a kernel can reach (median), and
    every run's nanoseconds per byte (``runs_ns_per_byte``)."""
    from workbench.kernels import gpu as device_kernels

    cuda, s = gpu.cuda(), size_named(size)
    b = cuda.to_device(np.ones(s.stream_items))
    c = cuda.to_device(np.full(s.stream_items, 2.0))
    a = cuda.device_array(s.stream_items, dtype=np.float64)
    device_kernels.stream_triad(a, b, c, 3.0)  # compiled before it is timed
    runs = _samples(lambda: device_kernels.stream_triad(a, b, c, 3.0), s.repeats)
    correct = bool(np.all(a.copy_to_host() == 7.0))
    nbytes = 3 * 8 * s.stream_items
    return {
        "bytes": nbytes,
        "gbs": _rate(nbytes, statistics.median(runs)),
        "runs_ns_per_byte": [t / nbytes * 1e9 for t in runs],
        "correct": correct,
    }


def histogram_rate(size: str = "ci", floor_gbs: float | None = None) -> dict[str, Any]:
    """The device histogram's read rate (GB/s of values counted) over ``points * dims`` float64 values
    already on the device, its counts checked against numpy's, and its share of the triad's rate."""
    from workbench.kernels import gpu as device_kernels

    cuda, s = gpu.cuda(), size_named(size)
    values = np.random.default_rng(39).random(s.points * s.dims)
    on_device = cuda.to_device(values)
    counts = device_kernels.histogram1d(on_device, s.bins, (0.0, 1.0))  # compiled before it is timed
    seconds = _timed(lambda: device_kernels.histogram1d(on_device, s.bins, (0.0, 1.0)), s.repeats)
    floor = device_floor(size)["gbs"] if floor_gbs is None else floor_gbs
    gbs = _rate(values.nbytes, seconds)
    return {
        "bytes": int(values.nbytes),
        "gbs": gbs,
        "floor_gbs": floor,
        "share_of_floor": gbs / floor if floor and floor > 0 else float("nan"),
        "exact": bool(np.array_equal(counts, np.histogram(values, s.bins, (0.0, 1.0))[0])),
    }


def kmeans_step(points: Any, centres: np.ndarray) -> np.ndarray:
    """One Lloyd iteration on the device points (n, d): the new centres (a centre no point chose stays)."""
    from workbench.kernels import gpu as device_kernels

    sums, counts = device_kernels.kmeans_partial(points, centres)
    return np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centres)


def kmeans_placement(size: str = "ci") -> dict[str, Any]:
    """``iterations`` of k-means on the device two ways: the points placed on the ``gpu`` tier once
    (``resident``), and copied in from the host at every iteration (``copied``, as a code that keeps
    its data on the host and calls a GPU library does). Both end with the same centres (checked);
    reports each way's seconds per iteration and bytes moved to the device."""
    s = size_named(size)
    points = np.random.default_rng(10).random((s.points, s.dims))
    start = points[: s.centres].copy()

    def iterate(get_points: Callable[[], Any]) -> np.ndarray:
        centres = start.copy()
        for _ in range(s.iterations):
            centres = kmeans_step(get_points(), centres)
        return centres

    name = f"lesson10-points-{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {"points_bytes": int(points.nbytes), "iterations": s.iterations}
    try:
        before = tiers.current().device.transfers.snapshot()
        placed = tiers.place(name, points, "gpu")
        iterate(lambda: placed.device)  # compiled (and the device warmed) before it is timed
        resident_s = _timed(lambda: iterate(lambda: placed.device), s.repeats)
        resident = iterate(lambda: placed.device)
        results["resident_bytes_to_device"] = (tiers.current().device.transfers - before).to_device
        before = tiers.current().device.transfers.snapshot()
        copied_s = _timed(lambda: iterate(lambda: tiers.current().device.to_device(name, points)), 1)
        results["copied_bytes_to_device"] = (tiers.current().device.transfers - before).to_device
        copied = iterate(lambda: tiers.current().device.to_device(name, points))
    finally:
        tiers.free(name, "gpu")
    results.update(
        resident_s_per_iteration=resident_s / s.iterations,
        copied_s_per_iteration=copied_s / s.iterations,
        speedup=copied_s / resident_s if resident_s > 0 else float("nan"),
        same_centres=bool(np.allclose(resident, copied)),
        simulated=device()["simulated"],
    )
    return results


class Readings(PersistentObject):
    """Values in the active store with a histogram: on the ``gpu`` tier the values are a device array
    and :meth:`histogram` runs the device kernel where they lie; on a host tier, the CPU kernel."""

    def __init__(self, values: np.ndarray):
        self.values = values

    @active
    def histogram(self, bins: int, low: float, high: float) -> np.ndarray:
        """Counts of the values in ``bins`` equal bins over ``[low, high]`` (numpy's counts exactly)."""
        if gpu.is_device_array(self.values):
            from workbench.kernels import gpu as device_kernels

            return device_kernels.histogram1d(self.values, bins, (low, high))
        from workbench.kernels.histogram import histogram1d

        return histogram1d(np.asarray(self.values), bins, (low, high))

    @active(writes=True)
    def scale(self, factor: float) -> None:
        """Multiply every value by ``factor`` in place (on the device for a ``gpu`` object)."""
        if gpu.is_device_array(self.values):
            from workbench.kernels import gpu as device_kernels

            zeros = device_kernels.cuda.device_array_like(self.values)
            zeros.copy_to_device(np.zeros(self.values.shape, dtype=self.values.dtype))
            device_kernels.stream_triad(self.values, zeros, self.values, factor)
        else:
            self.values *= factor


def device_transfers(session: Any) -> dict[str, dict[str, int]]:
    """Bytes each worker's ``gpu`` tier copied to and from its device so far (and how many copies), by
    worker address: :attr:`workbench.memory.gpu.DeviceMemory.transfers` (the tier is per process)."""

    def counts() -> dict[str, int]:
        return asdict(tiers.current().device.transfers)

    return session.client.run(counts)


def store_active_vs_non_active(session: Any, size: str = "ci") -> dict[str, Any]:
    """A :class:`Readings` object placed on the ``gpu`` tier of a worker: its histogram computed where
    it lies (active: no value crosses the bus, only the counts come back) against fetched to this
    process and counted here (non-active: every value copied off the device, then over the network).
    Reports both times, the bytes each copied off the device on the worker, and that the counts agree."""
    from workbench.runtime.store import store_for

    s = size_named(size)
    store = store_for(session)
    values = np.random.default_rng(4).random(s.points * s.dims)
    proxy = store.make_persistent(Readings(values))
    try:
        proxy.place("gpu")
        args = (s.bins, 0.0, 1.0)
        proxy.histogram.value(*args)  # compiled on the worker before it is timed

        def off_device() -> int:
            return sum(c["to_host"] for c in device_transfers(session).values())

        before = off_device()
        start = time.perf_counter()
        for _ in range(s.repeats):
            active_counts = proxy.histogram.value(*args)
        active_s = (time.perf_counter() - start) / s.repeats
        active_bytes = off_device() - before
        from workbench.kernels.histogram import histogram1d

        before = off_device()
        start = time.perf_counter()
        for _ in range(s.repeats):
            fetched = proxy.fetch()
            fetched_counts = histogram1d(np.asarray(fetched.values), *args[:1], args[1:])
        fetch_s = (time.perf_counter() - start) / s.repeats
        fetch_bytes = off_device() - before
        tier = proxy.tier()
    finally:
        proxy.delete()
    return {
        "values_bytes": int(values.nbytes),
        "tier": tier,
        "active_s": active_s,
        "non_active_s": fetch_s,
        "speedup": fetch_s / active_s if active_s > 0 else float("nan"),
        "active_bytes_off_device": active_bytes // s.repeats,
        "non_active_bytes_off_device": fetch_bytes // s.repeats,
        "same_counts": bool(np.array_equal(active_counts, fetched_counts)),
        "simulated": device()["simulated"],
    }
