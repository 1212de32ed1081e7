"""Lesson 10 · Keep it on the device: which device runs the lesson, the full device of its third
exercise, and the checks of its exercises (bytes copied in every iteration against once, which call
moves a store object's values off the device, making room on a full device).

The checks judge byte counts, never times: numba's CUDA simulator, which runs the lesson where there
is no GPU, counts every byte right and times nothing meaningful. A "not yet" says what is wrong
without the expected value.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from workbench.lab import gpu_experiments
from workbench.memory import tiers
from workbench.settings import NUMBA_SIMULATOR, Settings, export
from workbench.teach.answers import AnswerError, choice, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise
from workbench.units import size_text

SIMULATOR_ENV = NUMBA_SIMULATOR


# -- which device ---------------------------------------------------------------------------------
def _driver_here() -> bool:
    """Whether this machine has an NVIDIA driver: its CUDA library, or the device file of a first GPU."""
    return ctypes.util.find_library("cuda") is not None or os.path.exists("/dev/nvidia0")


def choose_device() -> dict[str, Any]:
    """Pick what runs the lesson's GPU code, before anything imports numba's CUDA module; say what it chose.

    numba fixes its CUDA target (a real GPU, or its simulator) when ``numba.cuda`` is first imported,
    from ``$NUMBA_ENABLE_CUDASIM``. This function:

    - leaves everything as it is if ``numba.cuda`` is imported already (a cell ran GPU code before it),
      if ``$NUMBA_ENABLE_CUDASIM`` is set (to anything), or if an NVIDIA driver is here (its CUDA library
      or ``/dev/nvidia0``);
    - otherwise sets ``os.environ["NUMBA_ENABLE_CUDASIM"] = "1"`` in this process, so that numba's
      simulator runs the GPU code here and in the Dask workers started afterwards (they inherit the
      environment), and makes numba read its settings again (numba itself is imported already).

    Returns :func:`workbench.lab.gpu_experiments.device` (``name``, ``bytes``, ``simulated``) with
    ``set_simulator`` (whether this call set the variable) and ``why`` (the reason, in words). A
    :class:`~workbench.memory.tiers.TierError` says what to do where neither a GPU nor the simulator can run.
    """
    set_simulator, imported_before = False, "numba.cuda" in sys.modules
    if imported_before:
        why = "numba's CUDA module was imported already, so its target stays as it was"
    elif (given := Settings.read().given(SIMULATOR_ENV)) is not None:
        why = f"${SIMULATOR_ENV}={given} was set before the lesson: kept"
    elif _driver_here():
        why = "an NVIDIA driver is here: numba runs the GPU code on the device"
    else:
        export(SIMULATOR_ENV, "1", replace=True)
        from numba.core import config

        config.reload_config()  # numba (not its CUDA module) is imported with the workbench: read the variable now
        set_simulator = True
        why = (
            f"no NVIDIA driver here (no CUDA library, no /dev/nvidia0): set ${SIMULATOR_ENV}=1, for this kernel "
            "and the Dask workers it starts"
        )
    try:
        chosen = gpu_experiments.device()
    except tiers.TierError as error:
        if imported_before:
            raise tiers.TierError(
                f"{error}. Here numba's CUDA module was imported before choose_device() ran: restart the kernel "
                "and run the lesson from its first cells"
            ) from None
        raise
    return {**chosen, "set_simulator": set_simulator, "why": why}


def device_line(chosen: Mapping[str, Any]) -> str:
    """The line the lesson prints first: the device and its memory, or that the times are simulated."""
    if chosen["simulated"]:
        return (
            "SIMULATED: no GPU here, so numba's CUDA simulator runs the GPU code. Answers and byte counts are "
            "right; every time and rate below is meaningless (each GPU thread runs as a Python thread)."
        )
    return f"Device: {chosen['name']}, {size_text(int(chosen['bytes']))} of device memory"


def size_for(size: str, chosen: Mapping[str, Any]) -> str:
    """The size the lesson's GPU experiments run at: ``size``, but ``ci`` on the simulator (at ``lab``
    it would run millions of GPU threads as Python threads: hours)."""
    gpu_experiments.size_named(size)
    return "ci" if chosen["simulated"] else size


# -- the full device of exercise 10.3 -------------------------------------------------------------
FULL_DEVICE = {  # name -> (float64 values, what the array is for)
    "lesson10-points": (4096, "k-means points: every iteration reads them"),
    "lesson10-labels-old": (1024, "the last run's labels: done with, but kept for a plot later"),
    "lesson10-histogram-old": (512, "the last run's histogram: done with, but kept for a report"),
}
NEW_ARRAY = ("lesson10-distances", 1792)  # what must be placed: 14 KiB
ROOM = 4 * 1024  # bytes free on the full device: the new array needs more than moving one old array frees
KEEP = "lesson10-points"


def _scenario_names() -> list[str]:
    return [*FULL_DEVICE, NEW_ARRAY[0]]


def _clear_scenario() -> None:
    for name in _scenario_names():
        for tier in ("gpu", "dram"):
            tiers.free(name, tier)


@contextlib.contextmanager
def full_device() -> Iterator[dict[str, str]]:
    """Exercise 10.3's device, full: the arrays of :data:`FULL_DEVICE` on the ``gpu`` tier, and the
    tier capped in this process (:meth:`~workbench.memory.gpu.DeviceMemory.capped`) so that only
    :data:`ROOM` bytes are left (above what this process held on the device before). Yields
    ``{name: what it holds and its size}``. On exit the cap goes (the limit before it holds again) and
    the exercise's arrays are freed from ``gpu`` and ``dram``."""
    _clear_scenario()
    others = tiers.current().device.used()  # the learner's own device arrays stay, and count
    held = sum(values * 8 for values, _ in FULL_DEVICE.values())
    try:
        with tiers.current().device.capped(others + held + ROOM):
            for value, (name, (values, _)) in enumerate(FULL_DEVICE.items()):
                tiers.place(name, np.full(values, float(value)), "gpu")
            yield {name: f"{what} ({size_text(values * 8)})" for name, (values, what) in FULL_DEVICE.items()}
    finally:
        _clear_scenario()


# -- the checks ------------------------------------------------------------------------------------
def _whole(value: Any, name: str) -> int:
    got = number(value, name)
    if got != int(got):
        raise AnswerError(f"`{name}` should be a whole number of bytes, got {value!r}")
    return int(got)


def _record(value: Any, name: str, keys: tuple[str, ...], made_by: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or any(k not in value for k in keys):
        raise AnswerError(f"`{name}` should be the dict {made_by} returned: run the lesson's cells first")
    return value


def _unit_slip(got: int, expected: int, name: str) -> tuple | None:
    """A "not yet" for an answer in MB, GB or float64 values instead of bytes; None otherwise."""
    for factor, unit in ((1e6, "MB"), (2**20, "MiB"), (1e9, "GB"), (2**30, "GiB")):
        scaled = expected / factor
        if scaled >= 1 and abs(got - scaled) <= max(0.5, 0.01 * scaled):
            return not_yet(f"`{name}` looks like {unit}: give bytes")
    if got * 8 == expected:
        return not_yet(f"`{name}` counts float64 values, not bytes: how many bytes is one float64?")
    return None


@exercise(
    "10.1",
    answers=("resident_bytes", "copied_bytes", "copied_bytes_full"),
    concept="data kept in device memory crosses the bus once; data copied in for every use crosses it once per "
    "use, so what the copies cost grows with the iterations while the computation stays the same",
    hint="the placement dict holds the bytes of the points (points_bytes) and the number of iterations; "
    "gpu_experiments.size_named('full') gives the points, dims and iterations at size full (a point is dims "
    "float64 values). Compute the three figures first, then compare with resident_bytes_to_device and "
    "copied_bytes_to_device",
)
def bytes_to_device(resident_bytes: Any, copied_bytes: Any, copied_bytes_full: Any, placement: Any) -> tuple:
    """The bytes the two ways moved to the device (as measured), and the copied way's at size full."""
    measured = _record(
        placement,
        "placement",
        ("points_bytes", "iterations", "resident_bytes_to_device", "copied_bytes_to_device"),
        "gpu_experiments.kmeans_placement",
    )
    points_bytes, iterations = int(measured["points_bytes"]), int(measured["iterations"])
    resident, copied = int(measured["resident_bytes_to_device"]), int(measured["copied_bytes_to_device"])
    got_resident = _whole(resident_bytes, "resident_bytes")
    if got_resident != resident:
        slip = _unit_slip(got_resident, resident, "resident_bytes")
        if slip:
            return slip
        if got_resident == points_bytes * iterations:
            return not_yet(
                "resident_bytes counts a copy per iteration: the resident way places the points on the device "
                "once, and every iteration reads them there"
            )
        return not_yet(
            f"resident_bytes ({got_resident}) is not what the resident way moved to the device: how many times "
            "did it copy the points in?"
        )
    got_copied = _whole(copied_bytes, "copied_bytes")
    if got_copied != copied:
        slip = _unit_slip(got_copied, copied, "copied_bytes")
        if slip:
            return slip
        if got_copied == points_bytes and iterations > 1:
            return not_yet("copied_bytes is one copy of the points: the copied way copies them in at every iteration")
        return not_yet(
            f"copied_bytes ({got_copied}) is not what the copied way moved to the device in its {iterations} iterations"
        )
    full = gpu_experiments.size_named("full")
    full_points_bytes = full.points * full.dims * 8
    expected_full = full_points_bytes * full.iterations
    got_full = _whole(copied_bytes_full, "copied_bytes_full")
    if got_full != expected_full:
        slip = _unit_slip(got_full, expected_full, "copied_bytes_full")
        if slip:
            return slip
        if got_full == full_points_bytes:
            return not_yet("copied_bytes_full is one copy of the points at size full: count every iteration")
        if got_full == full.points * 8 * full.iterations:
            return not_yet("copied_bytes_full counts one value per point: each point has dims values")
        if got_full == copied:
            return not_yet("copied_bytes_full is the figure at this lesson's size: the question is about size full")
        return not_yet(
            f"copied_bytes_full ({got_full}) is not the bytes the copied way would move at size full: points "
            "times dims times 8 bytes, once per iteration"
        )
    return passed(
        f"the resident way moved the points once ({resident} bytes), the copied way once per iteration "
        f"({iterations} x {points_bytes} = {copied} bytes). At size full the copied way would move "
        f"{expected_full / 1e9:.3g} GB over the bus for {full.iterations} iterations, the resident way "
        f"{full_points_bytes / 1e9:.3g} GB: the same arithmetic, {full.iterations}x the bus traffic"
    )


@exercise(
    "10.2",
    answers=("moves_values", "bytes_off_device"),
    concept="an active method runs where the object lies, here on its worker's device, and sends back only its "
    "result; a non-active call brings the object to the code instead",
    hint="store_run, the dict store_active_vs_non_active returned, holds the bytes each way copied off the "
    "device per call (active_bytes_off_device, non_active_bytes_off_device) and the bytes of the values "
    "(values_bytes); moves_values is 'active' or 'fetch'",
)
def off_device(moves_values: Any, bytes_off_device: Any, store_run: Any) -> tuple:
    """Which call copied the values off the device (as measured), and how many bytes per call."""
    measured = _record(
        store_run,
        "store_run",
        ("active_bytes_off_device", "non_active_bytes_off_device", "values_bytes"),
        "gpu_experiments.store_active_vs_non_active",
    )
    active, fetched = int(measured["active_bytes_off_device"]), int(measured["non_active_bytes_off_device"])
    mover = "fetch" if fetched > active else "active"
    got_way = choice(moves_values, "moves_values", ("active", "fetch"))
    if got_way != mover:
        if got_way == "active":
            return not_yet(
                "the active call ran the histogram on the worker's device, where the values lie: what did it send "
                "back, and what did the fetch have to copy off the device first?"
            )
        return not_yet("moves_values disagrees with the measurement: compare the two off-device counts of store_run")
    expected = fetched if mover == "fetch" else active
    got_bytes = _whole(bytes_off_device, "bytes_off_device")
    if got_bytes != expected:
        slip = _unit_slip(got_bytes, expected, "bytes_off_device")
        if slip:
            return slip
        if got_bytes == 0:
            return not_yet("bytes_off_device is 0, the active call's figure: give the bytes the call you chose moved")
        return not_yet(
            f"bytes_off_device ({got_bytes}) is not what one {mover} copied off the device: read it from store_run"
        )
    whole = " (all of the values)" if expected == int(measured["values_bytes"]) else ""
    return passed(
        f"a fetch copied {expected} bytes off the device per call{whole}, which then crossed the network; the active "
        f"histogram copied {active}: it computed where the values lie and sent back only its counts"
    )


@exercise(
    "10.3",
    answers=("make_room",),
    concept="a full tier refuses a placement instead of spilling behind your back; you decide what leaves the "
    "device: the arrays you are done with go to host memory, the ones every step reads stay",
    hint="make_room is a function of no arguments, run on the full device of lesson10.full_device(); inside it "
    "tiers.names('gpu') lists what is there, tiers.open_array(name, 'gpu') gives a placed array's handle and "
    "tiers.move(handle, 'dram') moves it to host memory (tiers.free would lose it). The TierError of a refused "
    "placement lists the largest arrays and their sizes",
)
def room_on_the_device(make_room: Any) -> tuple:
    """On exercise 10.3's full device, run the learner's ``make_room()``, then place the new array."""
    if not callable(make_room):
        raise AnswerError(f"`make_room` should be a function of no arguments, got {type(make_room).__name__}")
    name, values = NEW_ARRAY
    with full_device():
        make_room()
        on_device, on_host = set(tiers.names("gpu")), set(tiers.names("dram"))
        old = [n for n in FULL_DEVICE if n != KEEP]
        lost = [n for n in FULL_DEVICE if n not in on_device and n not in on_host]
        if lost:
            return not_yet(
                f"{', '.join(lost)} is neither on the device nor on dram: freeing an array loses its values; move "
                "it to host memory instead"
            )
        if KEEP not in on_device:
            return not_yet(
                f"{KEEP} left the device: every k-means iteration reads it, so each would now copy it back over the "
                "bus. Keep it there and move what you are done with"
            )
        try:
            if name not in on_device:  # make_room() may have placed it itself
                tiers.place(name, np.zeros(values), "gpu")
        except tiers.TierError as error:
            moved = sorted(n for n in old if n in on_host)
            return not_yet(
                f"placing {name} was still refused after make_room() (moved to dram: {moved or 'nothing'}): {error}"
            )
        moved = [n for n in old if n in on_host]
        if any(not np.array_equal(tiers.open_array(n, "dram").array, _values_of(n)) for n in moved):
            return not_yet("an array moved to dram holds other values than it had on the device: use tiers.move")
    return passed(
        f"{' and '.join(moved)} went to host memory ({size_text(sum(FULL_DEVICE[n][0] * 8 for n in moved))}), "
        f"{KEEP} stayed on the device, and {name} ({size_text(values * 8)}) fits: the tier refused until you "
        "chose what to move, and nothing was spilled or lost"
    )


def _values_of(name: str) -> np.ndarray:
    """The values :func:`full_device` placed under ``name``."""
    index = list(FULL_DEVICE).index(name)
    return np.full(FULL_DEVICE[name][0], float(index))
