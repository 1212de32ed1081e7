"""Node-level locality measured from Python: caches and strides, first touch and NUMA, pinning.

Lesson 09 calls these functions; each returns plain records (lists of dicts) that a table or a
figure is made from.

- Caches and strides: :func:`traversal` sums a C-ordered matrix by rows (stride 1) and by columns
  (stride = a row); :func:`transposes` times the PRK transpose untiled (tile = order) and tiled;
  :func:`cache_sweep` reads working sets sized from this machine's caches (:func:`read_caches`).
- First touch and NUMA: :func:`read_numa_nodes` parses ``/sys/devices/system/node``;
  :func:`numactl_hardware` prints what ``numactl --hardware`` would (numactl is not needed);
  :func:`first_touch` places a buffer by writing it from a thread pinned to each node, reads where
  its pages landed (:func:`pages_by_node`) and the bandwidth of reading it from each node.
- Pinning: :func:`pinning` times one thread unpinned, pinned to a core of its own and pinned to the
  core of a busy process, with the migrations the kernel counted; :class:`CoreAffinity` pins Dask
  workers (a worker plugin) and :func:`worker_runs` measures them.
- :func:`tiling_summary`, :func:`numa_summary` and :func:`pinning_summary` say in words what a
  measurement showed on this machine (the lesson prints them instead of asserting a result).

Timed variants are interleaved (one run of each in turn, ``repeats`` rounds) so that a change in
the machine's load hits every variant alike; the first call of each is timed apart (it compiles the
numba kernel or loads it from numba's cache). Linux only: affinity, ``/proc`` and ``/sys``.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from workbench.kernels import prk, strides
from workbench.lab.stats import claim
from workbench.runtime.session import PinnedCall, Session

KiB, MiB, GiB = 2**10, 2**20, 2**30
ITEM = 8  # bytes per float64 element
CPU_ROOT = Path("/sys/devices/system/cpu")
NODE_ROOT = Path("/sys/devices/system/node")
# Used only when /sys has no cache information (some containers and VMs): typical x86 server sizes.
ASSUMED_CACHES = {"L1": 32 * KiB, "L2": 1 * MiB, "L3": 32 * MiB}
SIZES: dict[str, dict[str, Any]] = {
    # orders: an order whose rows do not alias in the caches, and a power of two whose rows do
    # (a row of 2^k doubles is a multiple of 4 KiB: a column's lines fall into a few cache sets).
    # sample_elements: elements visited per timed sample (a small matrix is walked several times);
    # sweep_elements: elements read per sample of the cache sweep.
    "ci": {"orders": (1000, 1024), "tiles": (8, 16, 32, 64, 128), "sample_elements": 2**24,
           "sweep_elements": 2**24, "memory_cap": 1 * GiB, "pin_seconds": 0.2},
    "lab": {"orders": (2000, 2048), "tiles": (8, 16, 32, 64, 128), "sample_elements": 2**24,
            "sweep_elements": 2**26, "memory_cap": 2 * GiB, "pin_seconds": 0.5},
    "full": {"orders": (4000, 4096), "tiles": (8, 16, 32, 64, 128, 256), "sample_elements": 2**25,
             "sweep_elements": 2**27, "memory_cap": 4 * GiB, "pin_seconds": 1.0},
}  # fmt: skip
# The busy process of the pinning experiment: says it runs (one byte), then spins until killed.
BURN = "import os; os.write(1, b'r')\nwhile True: pass"
CHILD_TIMEOUT = 30.0


def knobs(size: str) -> dict[str, Any]:
    """The lesson's knobs at ``size`` ("ci", "lab" or "full")."""
    if size not in SIZES:
        raise ValueError(f"no size {size!r}: use one of {sorted(SIZES)}")
    return SIZES[size]


def require_affinity(what: str) -> None:
    """Refuse, with a sentence, to pin anything where the OS has no ``sched_setaffinity`` (not Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError(f"{what} needs Linux's sched_setaffinity, which {sys.platform} does not have")


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive whole number, got {value!r}")
    return int(value)


# -- timing -------------------------------------------------------------------------------------
def _interleaved(variants: Mapping[Any, Callable[[], object]], repeats: int) -> tuple[dict, dict]:
    """(first-call seconds, run seconds) per variant: one call of each first, then ``repeats`` rounds
    of one call each in turn, the order rotating every round."""
    repeats = _positive(repeats, "repeats")
    names = list(variants)
    first, runs = {}, {name: [] for name in names}
    for name in names:
        start = time.perf_counter()
        variants[name]()
        first[name] = time.perf_counter() - start
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            variants[name]()
            runs[name].append(time.perf_counter() - start)
    return first, runs


@contextlib.contextmanager
def one_numba_thread() -> Iterator[None]:
    """numba's parallel kernels use one thread inside the block (on this thread), as many as before after."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


# -- 1. caches and strides ----------------------------------------------------------------------
def _calls(order: int, sample_elements: int) -> int:
    """How many walks of an ``order x order`` matrix make one timed sample of about ``sample_elements``."""
    return max(1, -(-_positive(sample_elements, "sample_elements") // order**2))


def _times(function: Callable[..., object], calls: int, *args: Any) -> Callable[[], None]:
    """A variant for :func:`_interleaved`: ``function(*args)`` called ``calls`` times."""

    def variant() -> None:
        for _ in range(calls):
            function(*args)

    return variant


def traversal(
    orders: Sequence[int], repeats: int = 3, sample_elements: int = 2**24, seed: int = 0
) -> list[dict[str, Any]]:
    """Sum an ``order x order`` C-ordered float64 matrix by rows and by columns, for each order.

    A timed sample walks the matrix ``calls`` times (about ``sample_elements`` elements: a short run
    is all noise on a busy machine). One row per (order, walk): ``stride_bytes`` between two
    consecutive loads, ``seconds`` per walk (median sample / calls), ``ns_per_element``, ``GB_per_s``
    (matrix bytes per second), ``first_call_s`` (the first sample, which compiles the kernel or loads
    it from numba's cache), ``runs`` (every sample's seconds per walk) and ``total`` (the sum: both
    walks agree to rounding).
    """
    records = []
    for order in orders:
        order = _positive(order, "order")
        matrix = np.random.default_rng(seed).random((order, order))
        calls = _calls(order, sample_elements)
        kernels = {"rows": strides.sum_by_rows, "columns": strides.sum_by_columns}
        first, runs = _interleaved({walk: _times(kernel, calls, matrix) for walk, kernel in kernels.items()}, repeats)
        for walk, stride in (("rows", ITEM), ("columns", ITEM * order)):
            seconds = statistics.median(runs[walk]) / calls
            records.append(
                {
                    "order": order,
                    "walk": walk,
                    "stride_bytes": stride,
                    "matrix_bytes": matrix.nbytes,
                    "calls": calls,
                    "seconds": seconds,
                    "ns_per_element": seconds / order**2 * 1e9,
                    "GB_per_s": matrix.nbytes / seconds / 1e9,
                    "first_call_s": first[walk],
                    "runs": [r / calls for r in runs[walk]],
                    "total": kernels[walk](matrix),
                }
            )
    return records


def slowdowns(records: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """Order -> the column walk's median time over the row walk's (from :func:`traversal`)."""
    seconds = {(r["order"], r["walk"]): r["seconds"] for r in records}
    return {order: seconds[order, "columns"] / seconds[order, "rows"] for order, walk in seconds if walk == "rows"}


def transposes(
    orders: Sequence[int], tiles: Sequence[int], repeats: int = 3, sample_elements: int = 2**24
) -> list[dict[str, Any]]:
    """The PRK transpose (``B += A.T; A += 1``) untiled (tile = order) and with each tile, on one core.

    The PRK kernel runs its tiles in parallel; here numba gets one thread so that only the access
    order differs between variants. A timed sample is ``calls`` transposes (about
    ``sample_elements`` elements). One row per (order, tile): ``label`` ("untiled" or "tile 32"),
    ``seconds`` per transpose (median), ``ns_per_element``, ``vs_untiled`` (untiled time / this
    time: above 1 is faster), ``first_call_s``, ``runs``, and ``verified`` (the PRK's closed-form
    check of B after every call).
    """
    records = []
    for order in orders:
        order = _positive(order, "order")
        chosen = [order] + sorted({_positive(t, "tile") for t in tiles if t < order})
        a, b = prk.transpose_init(order)
        calls = _calls(order, sample_elements)
        with one_numba_thread():
            first, runs = _interleaved({tile: _times(prk.transpose, calls, a, b, tile) for tile in chosen}, repeats)
        total_calls = len(chosen) * (1 + repeats) * calls  # each adds A.T to B; the PRK counts the first as warm-up
        verified = prk.transpose_error(b, total_calls - 1) < 1e-8
        untiled = statistics.median(runs[order]) / calls
        for tile in chosen:
            seconds = statistics.median(runs[tile]) / calls
            records.append(
                {
                    "order": order,
                    "tile": tile,
                    "label": "untiled" if tile == order else f"tile {tile}",
                    "calls": calls,
                    "seconds": seconds,
                    "ns_per_element": seconds / order**2 * 1e9,
                    "vs_untiled": untiled / seconds,
                    "first_call_s": first[tile],
                    "runs": [r / calls for r in runs[tile]],
                    "verified": bool(verified),
                }
            )
    return records


@dataclass(frozen=True)
class Cache:
    """One cache of a CPU, as ``/sys/devices/system/cpu/cpuN/cache/indexK`` describes it."""

    level: int
    kind: str  # "Data", "Instruction" or "Unified"
    size_bytes: int
    line_bytes: int | None
    ways: int | None
    shared_cpus: tuple[int, ...]

    @property
    def name(self) -> str:
        """``L1d``, ``L1i``, ``L2``, ``L3``."""
        suffix = {"Data": "d", "Instruction": "i"}.get(self.kind, "") if self.level == 1 else ""
        return f"L{self.level}{suffix}"


_SIZE = re.compile(r"(\d+)\s*([KMG]?)B?", re.IGNORECASE)


def parse_size(text: str, where: str = "size") -> int:
    """Bytes from a sysfs cache size (``48K``, ``1024K``, ``32M``, ``512``); ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{where}: {text.strip()[:40]!r} is not a size such as '48K' or '32M'")
    return int(match.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB}[match.group(2).upper()]


def _read(path: Path) -> str:
    return path.read_text(errors="replace").strip()


def _int_file(path: Path) -> int | None:
    try:
        text = _read(path)
    except OSError:
        return None
    if not text.isdigit():
        raise ValueError(f"{path}: {text[:40]!r} is not a whole number")
    return int(text)


def read_caches(cpu: int = 0, root: Path = CPU_ROOT) -> list[Cache]:
    """The caches of ``cpu`` from sysfs, smallest level first; empty when sysfs does not describe them.

    The files are read as untrusted text: a malformed one raises ValueError naming the file.
    """
    base = Path(root) / f"cpu{cpu}" / "cache"
    caches = []
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        if not re.fullmatch(r"index\d+", index.name):
            continue
        try:
            level_text, kind, size_text = (_read(index / name) for name in ("level", "type", "size"))
        except OSError:
            continue  # an index without the three files describes nothing we can use
        if not level_text.isdigit():
            raise ValueError(f"{index / 'level'}: {level_text[:40]!r} is not a cache level")
        shared = index / "shared_cpu_list"
        caches.append(
            Cache(
                level=int(level_text),
                kind=kind,
                size_bytes=parse_size(size_text, str(index / "size")),
                line_bytes=_int_file(index / "coherency_line_size"),
                ways=_int_file(index / "ways_of_associativity"),
                shared_cpus=tuple(parse_cpulist(_read(shared), str(shared))) if shared.exists() else (),
            )
        )
    return sorted(caches, key=lambda c: (c.level, c.kind))


def cache_levels(caches: Sequence[Cache]) -> dict[str, int]:
    """``{"L1": bytes, "L2": ..., "L3": ...}`` for the data caches in ``caches`` (levels it lacks are absent)."""
    return {f"L{c.level}": c.size_bytes for c in caches if c.kind in ("Data", "Unified")}


def sweep_plan(levels: Mapping[str, int], elements: int, memory_cap: int) -> list[dict[str, Any]]:
    """The working sets of :func:`cache_sweep`: half of each cache level, then four times the last
    level (at least 64 MiB, at most ``memory_cap``); ``passes`` so each reads about ``elements``.

    Half a level, because the level also holds other data (the code, the stack, the other cores'
    lines in a shared L3); four times the last level, so that most reads come from memory.
    """
    elements, memory_cap = _positive(elements, "elements"), _positive(memory_cap, "memory_cap")
    plan = []
    for name in sorted(levels, key=lambda n: levels[n]):
        plan.append({"where": f"in {name}", "bytes": levels[name] // 2})
    last = max(levels.values()) if levels else ASSUMED_CACHES["L3"]
    memory = min(max(4 * last, 64 * MiB), memory_cap)
    plan.append({"where": "memory", "bytes": memory, "vs_last_level": memory / last})
    for row in plan:
        row["bytes"] -= row["bytes"] % 4096
        row["passes"] = max(1, elements // (row["bytes"] // ITEM))
    return plan


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * KiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def cache_sweep(size: str = "ci", repeats: int = 3, caches: Sequence[Cache] | None = None) -> list[dict[str, Any]]:
    """Read bandwidth of one core for working sets that fit each cache level, and one that does not.

    One row per working set (see :func:`sweep_plan`): ``where``, ``bytes``, median ``GB_per_s`` and
    ``ns_per_element`` of a sequential sum read ``passes`` times, ``first_call_s``; ``caches`` says
    whether the sizes came from sysfs or were assumed. The memory-sized set is also kept under a
    quarter of the memory available now.
    """
    knob = knobs(size)
    caches = read_caches() if caches is None else caches
    levels = cache_levels(caches) or dict(ASSUMED_CACHES)
    cap = knob["memory_cap"]
    free = available_bytes()
    if free:
        cap = max(64 * MiB, min(cap, free // 4))
    plan = sweep_plan(levels, knob["sweep_elements"], cap)
    vectors = {row["where"]: np.ones(row["bytes"] // ITEM) for row in plan}
    variants = {
        row["where"]: (lambda row=row: strides.sum_passes(vectors[row["where"]], row["passes"])) for row in plan
    }
    first, runs = _interleaved(variants, repeats)
    records = []
    for row in plan:
        seconds = statistics.median(runs[row["where"]])
        read = row["bytes"] * row["passes"]
        records.append(
            {
                **row,
                "GB_per_s": read / seconds / 1e9,
                "ns_per_element": seconds / (read / ITEM) * 1e9,
                "runs_ns_per_element": [r / (read / ITEM) * 1e9 for r in runs[row["where"]]],
                "first_call_s": first[row["where"]],
                "caches": "sysfs" if cache_levels(caches) else "assumed (no cache information in /sys)",
            }
        )
    return records


# -- 2. first touch and NUMA --------------------------------------------------------------------
_CPULIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
MAX_CPU = 1 << 16  # no machine has more CPUs: a bigger number is a corrupt file, not a CPU


def parse_cpulist(text: str, where: str = "cpulist") -> list[int]:
    """The CPUs of a kernel CPU list (``0-3,8,10-11``) in order; an empty list for an empty text.

    The text is untrusted: anything else (``0-``, ``3-1``, ``a``, duplicates) raises ValueError
    naming ``where`` and showing what was found.
    """
    text = text.strip()
    if not text:
        return []  # a node with memory and no CPUs (or an offline one) has an empty list
    if not _CPULIST.fullmatch(text):
        raise ValueError(f"{where}: {text[:60]!r} is not a CPU list such as '0-3,8-11'")
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first or last >= MAX_CPU:
            raise ValueError(
                f"{where}: {part!r} in {text[:60]!r} is not a range of CPU numbers (low-high, up to {MAX_CPU - 1})"
            )
        cpus.extend(range(first, last + 1))
    if len(set(cpus)) != len(cpus):
        raise ValueError(f"{where}: {text[:60]!r} names a CPU twice")
    return cpus


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs, its memory, and its distances to every node (10 = local)."""

    node: int
    cpus: tuple[int, ...]
    mem_total_bytes: int | None
    mem_free_bytes: int | None
    distances: tuple[int, ...]


def _node_meminfo(path: Path) -> dict[str, int]:
    """``MemTotal``/``MemFree``... of a node's meminfo (``Node 0 MemTotal:  6514900 kB``), in bytes."""
    fields = {}
    for number, line in enumerate(_read(path).splitlines(), 1):
        parts = line.split()
        if not line.strip():
            continue
        if len(parts) < 4 or parts[0] != "Node" or not parts[2].endswith(":") or not parts[3].isdigit():
            raise ValueError(f"{path} line {number}: {line.strip()[:60]!r} is not 'Node N Field: value kB'")
        unit = KiB if len(parts) > 4 and parts[4] == "kB" else 1
        fields[parts[2][:-1]] = int(parts[3]) * unit
    return fields


def read_numa_nodes(root: Path = NODE_ROOT) -> list[NumaNode]:
    """The NUMA nodes that sysfs lists (``node0``, ``node1``, ...), by number; empty without sysfs.

    Every file is read as untrusted text: a malformed ``cpulist``, ``meminfo`` or ``distance``
    raises ValueError naming the file.
    """
    root = Path(root)
    nodes = []
    for path in root.glob("node*") if root.is_dir() else []:
        match = re.fullmatch(r"node(\d+)", path.name)
        if not match or not path.is_dir():
            continue
        cpulist = path / "cpulist"
        cpus = parse_cpulist(_read(cpulist), str(cpulist)) if cpulist.exists() else []
        memory = _node_meminfo(path / "meminfo") if (path / "meminfo").exists() else {}
        distances: tuple[int, ...] = ()
        if (path / "distance").exists():
            text = _read(path / "distance")
            if not re.fullmatch(r"\d+(\s+\d+)*", text):
                raise ValueError(f"{path / 'distance'}: {text[:60]!r} is not a list of distances such as '10 21'")
            distances = tuple(int(d) for d in text.split())
        nodes.append(
            NumaNode(int(match.group(1)), tuple(cpus), memory.get("MemTotal"), memory.get("MemFree"), distances)
        )
    return sorted(nodes, key=lambda n: n.node)


def cpu_ranges(cpus: Iterable[int]) -> str:
    """``0-3,8`` from CPU numbers (numactl prints them one by one; lscpu prints ranges)."""
    ordered, parts = sorted(cpus), []
    for cpu in ordered:
        if parts and cpu == parts[-1][1] + 1:
            parts[-1][1] = cpu
        else:
            parts.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts)


def numactl_hardware(nodes: Sequence[NumaNode]) -> str:
    """What ``numactl --hardware`` prints for ``nodes`` (from sysfs, so numactl need not be installed),
    followed by ``lscpu``'s NUMA lines."""
    if not nodes:
        return "no NUMA information in /sys/devices/system/node (not Linux, or a kernel without NUMA)"
    numbers = [n.node for n in nodes]
    lines = [f"available: {len(nodes)} nodes ({cpu_ranges(numbers)})"]
    for n in nodes:
        lines.append(f"node {n.node} cpus: {' '.join(str(c) for c in n.cpus)}")
        if n.mem_total_bytes is not None:
            lines.append(f"node {n.node} size: {n.mem_total_bytes // MiB} MB")
        if n.mem_free_bytes is not None:
            lines.append(f"node {n.node} free: {n.mem_free_bytes // MiB} MB")
    if all(len(n.distances) == len(nodes) for n in nodes):
        lines.append("node distances:")
        lines.append("node " + " ".join(f"{m:>3}" for m in numbers))
        lines.extend(f"{n.node:>3}: " + " ".join(f"{d:>3}" for d in n.distances) for n in nodes)
    lines.append("")
    lines.append(f"lscpu: NUMA node(s): {len(nodes)}")
    lines.extend(f"lscpu: NUMA node{n.node} CPU(s): {cpu_ranges(n.cpus) or '(none)'}" for n in nodes)
    return "\n".join(lines)


def _mapping_start(address: int, maps: str) -> int | None:
    """The start of the ``/proc/self/maps`` mapping that holds ``address``."""
    for line in maps.splitlines():
        bounds = line.split(maxsplit=1)[0] if line.strip() else ""
        low, _, high = bounds.partition("-")
        try:
            if int(low, 16) <= address < int(high, 16):
                return int(low, 16)
        except ValueError:
            continue
    return None


# move_pages(2) by syscall number (glibc has no wrapper; libnuma's is not needed for a question)
MOVE_PAGES = {"x86_64": 279, "aarch64": 239, "ppc64le": 301, "s390x": 310, "riscv64": 239}
ENOENT = 2  # move_pages' status of a page that is not present: never touched


def pages_by_node(array: np.ndarray) -> dict[int, int] | None:
    """Node -> pages of ``array`` placed there; pages never touched are on no node.

    Asks the kernel with ``move_pages(2)`` (no node given: it only reports where each page is), for
    exactly the pages the array spans; where that call is missing, falls back on
    :func:`numa_maps_pages` (whole mapping). None where neither can say (not Linux, no NUMA support).
    """
    start = array.__array_interface__["data"][0]
    first = start - start % mmap.PAGESIZE
    count = -(-(start + array.nbytes - first) // mmap.PAGESIZE)
    number = MOVE_PAGES.get(platform.machine())
    if number is not None and count:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        addresses = np.arange(first, first + count * mmap.PAGESIZE, mmap.PAGESIZE, dtype=np.uint64)
        status = np.full(count, -1, dtype=np.int32)
        done = libc.syscall(
            ctypes.c_long(number),
            ctypes.c_long(0),  # this process
            ctypes.c_ulong(count),
            ctypes.c_void_p(addresses.ctypes.data),
            None,  # no target nodes: report, do not move
            ctypes.c_void_p(status.ctypes.data),
            ctypes.c_int(0),
        )
        if done == 0:
            nodes, counts = np.unique(status[status >= 0], return_counts=True)
            return {int(n): int(c) for n, c in zip(nodes, counts)}
    try:
        return numa_maps_pages(array)
    except ValueError:
        return None


def numa_maps_pages(array: np.ndarray, proc: Path = Path("/proc/self")) -> dict[int, int] | None:
    """Node -> pages of the whole mapping that holds ``array``, from ``numa_maps``; None where the
    kernel has no ``numa_maps``. The kernel may merge neighbouring mappings into one line, so this
    counts the array's pages exactly only for an array alone in its mapping."""
    try:
        maps, numa_maps = (Path(proc) / "maps").read_text(), (Path(proc) / "numa_maps").read_text()
    except OSError:
        return None
    start = _mapping_start(array.__array_interface__["data"][0], maps)
    if start is None:
        raise ValueError("the array's address is in no mapping of /proc/self/maps")
    for line in numa_maps.splitlines():
        fields = line.split()
        if fields and fields[0] == f"{start:x}":
            return {int(m.group(1)): int(m.group(2)) for m in map(re.compile(r"N(\d+)=(\d+)").fullmatch, fields) if m}
    return {}


def fresh_buffer(nbytes: int) -> np.ndarray:
    """A float64 array of about ``nbytes`` in an anonymous mapping of its own, no page of it placed yet
    (nothing has touched it). The mapping goes away with the last reference to the array."""
    nbytes = _positive(nbytes, "nbytes")
    nbytes += -nbytes % mmap.PAGESIZE
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), dtype=np.float64)


def run_pinned(cpus: Iterable[int] | None, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` on a new thread pinned to ``cpus`` (None: not pinned); its result or its error.

    Only that thread is pinned (``sched_setaffinity(0, ...)`` sets the calling thread's mask), so
    the caller's own affinity never changes.
    """
    if cpus is not None:
        require_affinity("running a function on pinned cores")
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            if cpus is not None:
                os.sched_setaffinity(0, set(cpus))
            outcome["value"] = function(*args)
        except BaseException as error:  # noqa: BLE001 (handed to the caller's thread)
            outcome["error"] = error

    thread = threading.Thread(target=body, name="workbench-pinned")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _reader(array: np.ndarray, repeats: int, passes: int) -> list[float]:
    """Seconds per read of ``array`` (a sample reads it ``passes`` times), ``repeats`` samples."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        strides.sum_passes(array, passes)
        times.append((time.perf_counter() - start) / passes)
    return times


def first_touch(
    nodes: Sequence[NumaNode], nbytes: int, repeats: int = 3, passes: int = 4, max_nodes: int = 4
) -> list[dict[str, Any]]:
    """Where first touch puts memory, and what reading it from each node costs.

    For each node with CPUs (the first ``max_nodes``): a fresh buffer is written by a thread pinned
    to that node's CPUs, then read by a thread pinned to each node's CPUs. One row per (touched on,
    read from): ``pages_before`` (pages placed before the touch: none), ``pages_on`` (node -> pages
    after it, see :func:`pages_by_node`; None where the kernel cannot say), ``share_on_toucher``,
    median ``GB_per_s``
    of the read (a sample reads the buffer ``passes`` times), and ``local`` (touched and read on one
    node). Choose ``nbytes`` well above the last-level cache (the "memory" row of :func:`sweep_plan`),
    or the reads come from the cache, wherever the pages are.
    """
    require_affinity("placing memory from each NUMA node")
    allowed = os.sched_getaffinity(0)
    usable = [n for n in nodes if set(n.cpus) & allowed][:max_nodes]
    if not usable:
        raise ValueError("no NUMA node has a CPU this process may run on")
    strides.sum_passes(np.ones(16), 1)  # compile (or load) the reader before any timing
    records = []
    for toucher in usable:
        buffer = fresh_buffer(nbytes)
        before = pages_by_node(buffer)
        run_pinned(set(toucher.cpus) & allowed, buffer.fill, 1.0)
        after = pages_by_node(buffer)
        placed = sum(after.values()) if after else 0
        for reader in usable:
            seconds = statistics.median(run_pinned(set(reader.cpus) & allowed, _reader, buffer, repeats, passes))
            records.append(
                {
                    "touched_on": toucher.node,
                    "read_from": reader.node,
                    "local": toucher.node == reader.node,
                    "bytes": buffer.nbytes,
                    "pages_before": None if before is None else sum(before.values()),
                    "pages_on": after,
                    "share_on_toucher": (after.get(toucher.node, 0) / placed) if after and placed else None,
                    "GB_per_s": buffer.nbytes / seconds / 1e9,
                    "seconds": seconds,
                }
            )
        del buffer  # unmapped before the next node's buffer is made
    return records


# -- 3. pinning ---------------------------------------------------------------------------------
def thread_counters(tid: int | None = None) -> dict[str, int | None]:
    """The kernel's counters of one thread of this process (default: the calling thread).

    ``migrations`` (``se.nr_migrations`` of ``/proc/self/task/<tid>/sched``; None where the kernel
    does not publish it), ``involuntary`` (``nonvoluntary_ctxt_switches``: times it was preempted)
    and ``cpu`` (the core it last ran on, field 39 of ``stat``).
    """
    task = Path(f"/proc/self/task/{threading.get_native_id() if tid is None else tid}")
    counters: dict[str, int | None] = {"migrations": None, "involuntary": None, "cpu": None}
    with contextlib.suppress(OSError):
        for line in (task / "sched").read_text().splitlines():
            if line.startswith("se.nr_migrations"):
                counters["migrations"] = int(line.split(":")[1])
    with contextlib.suppress(OSError):
        for line in (task / "status").read_text().splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                counters["involuntary"] = int(line.split()[1])
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = (task / "stat").read_text()
        counters["cpu"] = int(stat[stat.rindex(")") + 2 :].split()[36])  # fields after "(comm)" start at 3
    return counters


def _delta(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def busy_work(passes: int, chunks: int = 50, vector_bytes: int = 256 * KiB) -> dict[str, Any]:
    """A fixed amount of arithmetic on the calling thread, in ``chunks``: its wall ``seconds``, the CPU
    seconds it got (``core_share`` = CPU / wall: 1 is a core to itself, 0.5 half a core) and what the
    kernel did to the thread meanwhile (migrations, preemptions, the cores it was seen on)."""
    vector = np.ones(vector_bytes // ITEM)
    strides.sum_passes(vector, 1)  # compiled or loaded before the clock starts
    before = thread_counters()
    seen = {before["cpu"]} if before["cpu"] is not None else set()
    start, cpu_start = time.perf_counter(), time.thread_time()
    for _ in range(_positive(chunks, "chunks")):
        strides.sum_passes(vector, passes)
        cpu = thread_counters()["cpu"]
        if cpu is not None:
            seen.add(cpu)
    seconds, cpu_seconds = time.perf_counter() - start, time.thread_time() - cpu_start
    after = thread_counters()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "core_share": min(1.0, cpu_seconds / seconds),
        "migrations": _delta(after["migrations"], before["migrations"]),
        "involuntary": _delta(after["involuntary"], before["involuntary"]),
        "cores_seen": sorted(seen),
    }


def calibrate(seconds: float, chunks: int = 50) -> int:
    """Passes per chunk of :func:`busy_work` that make a run last about ``seconds`` on a free core."""
    if not 0 < seconds <= 60:
        raise ValueError(f"seconds must be in (0, 60], got {seconds!r}")
    probe = 64
    elapsed = busy_work(probe, chunks=5)["seconds"] / 5
    return max(1, round(probe * (seconds / chunks) / max(elapsed, 1e-9)))


@contextlib.contextmanager
def busy_process(core: int | None) -> Iterator[int]:
    """A process that spins on ``core`` (None: anywhere) until the block ends; yields its pid once it spins."""
    hog = subprocess.Popen([sys.executable, "-S", "-c", BURN], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        if core is not None:
            os.sched_setaffinity(hog.pid, {core})
        ready, _, _ = select.select([hog.stdout], [], [], CHILD_TIMEOUT)  # a bounded wait: it spins from here
        if not ready or hog.stdout.read(1) != b"r":
            raise RuntimeError(f"the busy process did not start within {CHILD_TIMEOUT:.0f} s")
        yield hog.pid
    finally:
        hog.kill()
        hog.wait(timeout=CHILD_TIMEOUT)
        hog.stdout.close()


CONDITIONS = ("unpinned", "pinned, a core of its own", "pinned, on the busy core")
BUSY_SHARE = 0.8  # below this share of its own core, other programs were using the machine during the run


def pinning(seconds: float = 0.2, repeats: int = 3) -> list[dict[str, Any]]:
    """One thread's fixed work, while a busy process spins on one core, in each of :data:`CONDITIONS`.

    ``unpinned``: the thread may run on every core this process may; ``a core of its own``: pinned to
    a core the busy process is not on; ``on the busy core``: pinned to the busy process's core (the
    mistake of pinning without knowing what else runs there). The conditions take turns, ``repeats``
    rounds. One row per condition: ``cores`` allowed, median ``seconds``, ``slowest_s``, median
    ``core_share`` (CPU time / wall time), total ``migrations`` and ``involuntary`` switches over the
    runs (None where the kernel does not count migrations), every core the thread was seen on.
    With one core allowed, the core-of-its-own condition is left out (there is none).
    """
    require_affinity("the pinning experiment")
    repeats = _positive(repeats, "repeats")
    allowed = sorted(os.sched_getaffinity(0))
    busy, own = allowed[0], (allowed[1] if len(allowed) > 1 else None)
    passes = calibrate(seconds)
    cores = {CONDITIONS[0]: None, CONDITIONS[1]: {own} if own is not None else None, CONDITIONS[2]: {busy}}
    chosen = [c for c in CONDITIONS if not (c == CONDITIONS[1] and own is None)]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in chosen}
    with busy_process(busy):
        for round_ in range(repeats):
            shift = round_ % len(chosen)
            for condition in chosen[shift:] + chosen[:shift]:
                runs[condition].append(run_pinned(cores[condition], busy_work, passes))
    records = []
    for condition in chosen:
        done = runs[condition]
        counted = [r["migrations"] for r in done if r["migrations"] is not None]
        records.append(
            {
                "condition": condition,
                "cores": sorted(cores[condition]) if cores[condition] else allowed,
                "busy_core": busy,
                "seconds": statistics.median(r["seconds"] for r in done),
                "slowest_s": max(r["seconds"] for r in done),
                "core_share": statistics.median(r["core_share"] for r in done),
                "migrations": sum(counted) if len(counted) == len(done) else None,
                "involuntary": sum(r["involuntary"] or 0 for r in done),
                "cores_seen": sorted({c for r in done for c in r["cores_seen"]}),
                "runs": [r["seconds"] for r in done],
            }
        )
    return records


def _pin_process(cores: set[int]) -> None:
    """Pin every thread of this process to ``cores`` (threads started later inherit their creator's mask)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


class CoreAffinity(WorkerPlugin):
    """A Dask worker plugin that pins each worker process to its cores (Linux ``sched_setaffinity``).

    ``cores``: worker address -> the cores it may run on; a worker not named is left as it is.
    ``client.register_plugin(CoreAffinity({...}))`` pins the running workers (and workers that
    restart); ``client.unregister_worker_plugin(CoreAffinity.name)`` gives each its former cores
    back. The worker's threads are pinned when the plugin is set up; threads it starts later inherit
    the mask. The nanny (which only watches the worker) is not pinned.
    """

    name = "core-affinity"

    def __init__(self, cores: Mapping[str, Iterable[int]]):
        require_affinity("pinning Dask workers")
        if not isinstance(cores, Mapping):
            raise TypeError(f"cores must map worker addresses to sets of cores, got {type(cores).__name__}")
        self.cores = {str(address): {int(c) for c in chosen} for address, chosen in cores.items()}
        empty = [address for address, chosen in self.cores.items() if not chosen]
        if empty:
            raise ValueError(f"no cores given for {empty}: each worker needs at least one")
        self.before: set[int] | None = None

    def setup(self, worker: Any) -> None:
        """Pin this worker's threads to its cores (remembering the cores it had)."""
        chosen = self.cores.get(worker.address)
        if chosen is None:
            return
        self.before = os.sched_getaffinity(0)
        _pin_process(chosen)

    def teardown(self, worker: Any) -> None:
        """Give this worker's threads back the cores they had before."""
        if self.before is not None:
            _pin_process(self.before)


def worker_affinity(session: Session) -> dict[str, set[int]]:
    """Worker address -> the cores that worker's process may run on now (``os.sched_getaffinity``)."""
    return session.run(os.sched_getaffinity, 0)


def worker_runs(session: Session, passes: int, repeats: int = 3) -> list[dict[str, Any]]:
    """:func:`busy_work` on every worker at once, ``repeats`` rounds; one row per worker: its cores,
    median ``seconds`` and ``core_share``, total ``migrations``, the cores its task thread was seen on."""
    workers = session.workers()
    affinity = worker_affinity(session)
    done: dict[str, list[dict[str, Any]]] = {w: [] for w in workers}
    for round_ in range(_positive(repeats, "repeats")):
        calls = [
            PinnedCall(busy_work, (passes,), w, f"busy-work-{round_}-{i}-{time.monotonic_ns()}")
            for i, w in enumerate(workers)
        ]
        for worker, result in zip(workers, session.gather(session.submit_pinned(calls))):
            done[worker].append(result)
    return [
        {
            "worker": worker,
            "cores": sorted(affinity[worker]),
            "seconds": statistics.median(r["seconds"] for r in done[worker]),
            "core_share": statistics.median(r["core_share"] for r in done[worker]),
            "migrations": None
            if any(r["migrations"] is None for r in done[worker])
            else sum(r["migrations"] for r in done[worker]),
            "cores_seen": sorted({c for r in done[worker] for c in r["cores_seen"]}),
        }
        for worker in workers
    ]


# -- what the measurements say, in words (the lesson prints these) -------------------------------
def _labels(tiled: Mapping[str, Any]) -> tuple[str, str]:
    return f"tile {tiled['tile']}", "untiled"


def traversal_summary(records: Sequence[Mapping[str, Any]]) -> str:
    """Per order: the row walk against the column walk, from every timed sample (:func:`traversal`'s
    ``runs``), as :func:`workbench.lab.stats.claim` says it: which is faster, by how much, with the
    interval, or that this run cannot tell."""
    lines = []
    for order in dict.fromkeys(r["order"] for r in records):
        runs = {f"by {r['walk']}": r["runs"] for r in records if r["order"] == order}
        lines.append(claim(runs, "by rows", "by columns", where=f"at order {order}", expected="by rows"))
    return "\n".join(lines)


def sweep_summary(records: Sequence[Mapping[str, Any]]) -> str:
    """What :func:`cache_sweep` showed, in words: the rate from memory (the last working set), and the
    fastest level against memory per element read, from every sample (as :func:`workbench.lab.stats.claim`
    says it)."""
    memory, fastest = records[-1], max(records, key=lambda r: r["GB_per_s"])
    text = f"reading from memory: {memory['GB_per_s']:.1f} GB/s"
    if fastest is memory:
        return text + ", the fastest of the working sets here"
    per_element = {f"reading {r['where']}": r["runs_ns_per_element"] for r in (fastest, memory)}
    return f"{text}; per element read, {claim(per_element, *per_element, expected=next(iter(per_element)))}"


def tiling_summary(records: Sequence[Mapping[str, Any]], levels: Mapping[str, int]) -> str:
    """Per order: the fastest tile against untiled (from every timed sample, as
    :func:`workbench.lab.stats.claim` says it), and whether a column's lines fit L1/L2."""
    lines = []
    for order in dict.fromkeys(r["order"] for r in records):
        at_order = [r for r in records if r["order"] == order]
        tiled = [r for r in at_order if r["tile"] < order]
        if not tiled:
            continue
        best = min(tiled, key=lambda r: r["seconds"])
        column = order * 64  # one 64-byte line per row, for one column of A
        sized = sorted((size, name) for name, size in levels.items())
        within = next(
            (f"within {name} ({size // KiB} KiB)" for size, name in sized if column <= size), "beyond the caches listed"
        )
        above = [f"{name} ({size // KiB} KiB)" for size, name in sized if column > size]
        where = f"more than {above[-1]}, " if above else ""
        aliased = "; a power of two: they fall into a few cache sets" if order & (order - 1) == 0 else ""
        beaten = "" if best["vs_untiled"] >= 1 else " (no tile beat the untiled loop here)"
        untiled = next(r for r in at_order if r["tile"] == order)
        lines.append(
            f"order {order}: fastest tile {best['tile']}{beaten}: "
            f"{claim({'tile ' + str(best['tile']): best['runs'], 'untiled': untiled['runs']}, *_labels(best))}; "
            f"the untiled walk down one column of A touches {order} lines, {column // KiB} KiB: "
            f"{where}{within}{aliased}"
        )
    return "\n".join(lines)


def numa_summary(nodes: Sequence[NumaNode], records: Sequence[Mapping[str, Any]]) -> str:
    """What :func:`first_touch` showed, in words: placement, and local against remote where there is remote."""
    if not records:
        return "nothing was measured"
    placed = [r for r in records if r["local"]]
    first = placed[0] if placed else records[0]
    pages = first["pages_on"]
    if pages is None:
        where = "this kernel has no /proc/self/numa_maps, so where the pages landed cannot be read"
    else:
        where = (
            f"before the first write the buffer had {first['pages_before']} pages; after it, "
            + ", ".join(f"{count} on node {node}" for node, count in sorted(pages.items()))
            + f" (the writer ran on node {first['touched_on']})"
        )
    if len(nodes) == 1:
        node = nodes[0]
        return (
            f"One NUMA node (node {node.node}, CPUs {cpu_ranges(node.cpus)}): {where}. Every core reads all memory "
            f"at one cost here ({first['GB_per_s']:.1f} GB/s for one core), so there is no remote read to "
            "measure. On a two-socket node, numactl --hardware lists two nodes, each with its CPUs and memory, and "
            "distances such as 10 (local) and 21 (remote); this cell then measures every pair."
        )
    local = statistics.median(r["GB_per_s"] for r in records if r["local"])
    remote = [r["GB_per_s"] for r in records if not r["local"]]
    if not remote:
        return f"{where}. Only one node has CPUs this process may use: no remote read to measure."
    return (
        f"{len(nodes)} NUMA nodes: {where}. One core reads memory first touched on its own node at "
        f"{local:.1f} GB/s and on another node at {statistics.median(remote):.1f} GB/s (medians): remote reads "
        f"are {local / statistics.median(remote):.2f}x slower."
    )


def pinning_summary(records: Sequence[Mapping[str, Any]]) -> str:
    """What :func:`pinning` showed, in words."""
    by = {r["condition"]: r for r in records}
    busy, free, loose = by.get(CONDITIONS[2]), by.get(CONDITIONS[1]), by.get(CONDITIONS[0])
    parts = []
    if busy and free:
        runs = {"pinned onto the busy core": busy["runs"], "pinned to a core of its own": free["runs"]}
        parts.append(
            f"pinned onto the busy core, the thread got {busy['core_share']:.2f} of a core, and "
            f"{free['core_share']:.2f} pinned to a core of its own: {claim(runs, *runs)}"
        )
    elif busy:
        parts.append(f"with one core allowed, the thread shares it with the busy process ({busy['core_share']:.2f})")
    if loose:
        moved = loose["migrations"]
        parts.append(
            "unpinned, the kernel "
            + ("did not report migrations" if moved is None else f"moved it between cores {moved} times")
            + f" and it ran on cores {loose['cores_seen']}"
        )
    pinned = [r for r in records if r["condition"] != CONDITIONS[0] and r["migrations"] is not None]
    if pinned:
        parts.append(f"pinned, it migrated {sum(r['migrations'] for r in pinned)} times")
    text = "; ".join(parts) + "."
    if free and free["core_share"] < BUSY_SHARE:
        text += (
            f" The core of its own was not free either: other programs took {1 - free['core_share']:.0%} of it. "
            "On a machine this busy the times say little; the core shares and migrations still hold."
        )
    return text
