"""Execution models measured from Python: threads, processes and shared memory (Process-in-Process).

PiP (HPDC 2018, ``../shared/references/003_b930a90b83a05796.txt``) compares how tasks share an
address space with microbenchmarks; this module measures the same quantities on the machine at
hand, from Python, and the application-level question the workbench's own choices rest on:

- :func:`spawn_costs`: a thread, ``fork``, ``forkserver``, ``spawn``, ``posix_spawn`` (of Python, and
  of a binary that does nothing), and a Dask worker with and without its nanny, each timed to its
  first useful instruction (the child says "here" through a pipe, or runs its first task);
- :func:`first_touch`: minor page faults and time per page of a new array, faulted one page at a
  time, pre-faulted with ``MAP_POPULATE``, and on transparent huge pages;
- :func:`page_tables`: page-table memory (``VmPTE`` per process, ``PageTables`` of the node) as 1, 2,
  4, ... processes map and read the same shared segment, against as many threads of one process;
- :func:`mmap_contention`: ``mmap``/``munmap`` rates of threads of one process against processes
  (a numba loop that calls libc without the GIL: the kernel's per-process memory-map lock is what
  is measured, not Python);
- :func:`application_models`: histogram and k-means on a cluster of processes (without and with
  the RRO shared-memory argument) and on one process of threads, time and peak memory (PSS: a
  shared page counted once per node) side by side.

Every child process, shared segment and fork server made here is removed before the function
returns, also when it fails, with the directory of the fork server's socket. ``workbench bench
execution-models`` and lesson 07 call these functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.lab import stats
from workbench.memory import shm
from workbench.settings import Settings

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 * 2**20
MiB = 2**20
CHILD_TIMEOUT = 120.0  # the longest a child process may take to start, touch its pages or finish
_FORKSERVER_LOCK = threading.Lock()  # one fork-server measurement at a time: see _forkserver_scope
PAGE_TABLE_SECONDS = 60.0  # one page-table point, all its children together: well inside a notebook cell's timeout
SIZES: dict[str, dict[str, Any]] = {
    "ci": {"spawn_repeats": 5, "dask_repeats": 1, "touch_bytes": 64 * MiB, "pte_bytes": 64 * MiB,
           "tasks": (1, 2, 4), "mmap_iterations": 5_000, "mmap_tasks": (1, 2, 4), "app_repeats": 2},
    "lab": {"spawn_repeats": 10, "dask_repeats": 2, "touch_bytes": 256 * MiB, "pte_bytes": 128 * MiB,
            "tasks": (1, 2, 4, 8), "mmap_iterations": 10_000, "mmap_tasks": (1, 2, 4, 8), "app_repeats": 3},
    "full": {"spawn_repeats": 20, "dask_repeats": 3, "touch_bytes": 1024 * MiB, "pte_bytes": 128 * MiB,
             "tasks": (1, 2, 4, 8, 16), "mmap_iterations": 10_000, "mmap_tasks": (1, 2, 4, 8, 16),
             "app_repeats": 5},
}  # fmt: skip


def _check_size(size: str) -> dict[str, Any]:
    if size not in SIZES:
        raise ValueError(f"no size {size!r}: use one of {sorted(SIZES)}")
    return SIZES[size]


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive whole number, got {value!r}")
    return int(value)


# -- /proc readers ------------------------------------------------------------------------------
def meminfo_kib(field: str) -> int:
    """A field of ``/proc/meminfo`` (``PageTables``, ...), in KiB: node-wide."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(f"/proc/meminfo has no {field}")


def minor_faults() -> int:
    """Minor page faults of the calling thread so far (``getrusage``): the thread that touches the
    pages, not the process, whose other threads (a cluster's, in a notebook) fault at the same time."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def transparent_huge_pages() -> str:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``), or ``absent``."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "absent"
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else text.strip()


# -- 1. spawn costs -----------------------------------------------------------------------------
def _time_thread() -> float:
    here = threading.Event()
    start = time.perf_counter()
    thread = threading.Thread(target=here.set)
    thread.start()
    if not here.wait(CHILD_TIMEOUT):
        raise RuntimeError("a thread did not start within the timeout")
    seconds = time.perf_counter() - start
    thread.join(CHILD_TIMEOUT)
    return seconds


def _time_multiprocessing(method: str) -> float:
    context = multiprocessing.get_context(method)
    receiver, sender = context.Pipe(duplex=False)
    start = time.perf_counter()
    # the child's first useful instruction: say "here" through the pipe (a method of the standard
    # library, so that no child imports this module: the start method's own cost is measured)
    process = context.Process(target=sender.send_bytes, args=(b"x",), daemon=True)
    try:
        process.start()
        if not receiver.poll(CHILD_TIMEOUT):
            raise RuntimeError(f"a {method} child did not start within {CHILD_TIMEOUT:.0f} s")
        receiver.recv_bytes()
        return time.perf_counter() - start
    finally:
        if process.pid is not None:  # started (else start's own error is the one to see)
            process.join(CHILD_TIMEOUT)
            if process.is_alive():
                process.kill()
                process.join(CHILD_TIMEOUT)
        receiver.close()
        sender.close()


def _time_posix_spawn(argv: list[str], wait_exit: bool) -> float:
    """``posix_spawn`` of ``argv``: until it writes its first byte (or, ``wait_exit``, until it exits)."""
    read_end, write_end = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, write_end, 1)]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, Settings.read().child_environment(), file_actions=actions)
    os.close(write_end)
    try:
        if wait_exit:
            os.waitpid(pid, 0)
            pid = 0
            return time.perf_counter() - start
        if not os.read(read_end, 1):
            raise RuntimeError(f"{argv[0]} exited without saying it started")
        return time.perf_counter() - start
    finally:
        os.close(read_end)
        if pid:
            os.waitpid(pid, 0)


@contextlib.contextmanager
def _forkserver_scope() -> Iterator[None]:
    """Measure with multiprocessing's fork server, then stop it (when this scope started it) and
    remove the directory of its socket, which the scope made.

    multiprocessing puts the socket in a ``pymp-*`` directory that it removes only at interpreter
    exit, and a Jupyter kernel rarely exits cleanly: while multiprocessing's resource tracker (which
    a Dask nanny's spawn starts) holds the kernel's captured stderr, the kernel's shutdown waits for
    it and Jupyter kills the kernel first, so every run of lesson 07 left such a directory in /tmp.
    ``current_process()._config["tempdir"]`` and the fork server's ``_forkserver_pid`` are
    multiprocessing's private names, used here alone (``test_execution_models`` fails if Python
    changes them). A directory or a server that was there before is left to whoever made it; one
    scope at a time (the directory is the process's)."""
    from multiprocessing import forkserver

    with _FORKSERVER_LOCK:
        config = multiprocessing.current_process()._config
        started_here = getattr(forkserver._forkserver, "_forkserver_pid", None) is None
        ours = None
        if config.get("tempdir") is None:
            ours = tempfile.mkdtemp(prefix="pymp-", dir=_socket_base())
            config["tempdir"] = ours
        try:
            yield
        finally:
            if started_here:
                _stop_forkserver()
            if ours is not None:
                if config.get("tempdir") == ours:
                    config["tempdir"] = None
                shutil.rmtree(ours, ignore_errors=True)


def _socket_base() -> str:
    """Where the socket's directory goes: the temporary directory, or /tmp when a socket's path there
    would pass the 107 bytes AF_UNIX allows (``/pymp-XXXXXXXX/listener-XXXXXXXX`` is 32 more)."""
    base = tempfile.gettempdir()
    if len(base.encode()) + 32 > 107 and os.access("/tmp", os.W_OK):
        return "/tmp"
    return base


def _stop_forkserver() -> None:
    """Stop multiprocessing's fork server (it would live as long as this process otherwise)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)
    if stop is not None:
        with contextlib.suppress(Exception):
            stop()


def _null_binary() -> str | None:
    for candidate in ("/bin/true", "/usr/bin/true"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _time_dask_workers(nanny: bool, repeats: int) -> list[float]:
    """A ``dask worker`` process (with or without its nanny) joining a scheduler, until its first
    task ran; the scheduler lives in this process and every worker is stopped after."""
    import dask
    from distributed import Client, LocalCluster

    from workbench.runtime.clusters import OFF_SCHEDULER_ROUTES
    from workbench.runtime.session import cluster_identity

    times = []
    with (
        # no dashboard, and only health and metrics on the scheduler's HTTP port, as start() does
        dask.config.set({"distributed.scheduler.http.routes": list(OFF_SCHEDULER_ROUTES)}),
        LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster,
        Client(cluster, timeout=60) as client,
    ):
        for _ in range(repeats):
            name = f"spawn-probe-{uuid.uuid4().hex[:8]}"
            argv = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--nthreads", "1",
                    "--no-dashboard", "--name", name, "--nanny" if nanny else "--no-nanny"]  # fmt: skip
            start = time.perf_counter()
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                client.wait_for_workers(1, timeout=CHILD_TIMEOUT)
                probe = client.submit(int, 1, workers=[name], pure=False)
                probe.result(timeout=CHILD_TIMEOUT)
                times.append(time.perf_counter() - start)
                # the probe's result forgotten before its worker stops: a worker stopped while holding it
                # makes the scheduler warn that it lost a computed task (a log line in the lesson)
                probe.release()
                deadline = time.monotonic() + 30
                while client.who_has() and time.monotonic() < deadline:
                    time.sleep(0.05)  # a bounded wait for the scheduler to release it
            finally:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(30)
            deadline = time.monotonic() + 60
            while cluster_identity(client)["workers"] and time.monotonic() < deadline:
                time.sleep(0.05)  # a bounded wait for the scheduler to drop the stopped worker
    return times


def spawn_costs(repeats: int = 5, dask_repeats: int = 1, dask: bool = True) -> list[dict[str, Any]]:
    """Seconds from asking for a new task to its first useful instruction, per execution model: the
    median of ``repeats`` (``dask_repeats`` for Dask workers, which take seconds), with the fastest."""
    repeats = _positive(repeats, "repeats")
    models: list[tuple[str, str, Callable[[], float]]] = [
        ("thread", "threading.Thread, until it runs", _time_thread),
        ("fork", "multiprocessing 'fork': a copy of this process", lambda: _time_multiprocessing("fork")),
        ("posix_spawn (null binary)", "posix_spawn of a program that does nothing, until it exits",
         lambda: _time_posix_spawn([_null_binary() or "/bin/true"], wait_exit=True)),
        ("posix_spawn (python)", "posix_spawn of a new Python interpreter, until its first write",
         lambda: _time_posix_spawn([sys.executable, "-S", "-c", "import os; os.write(1, b'x')"], wait_exit=False)),
        ("forkserver", "multiprocessing 'forkserver': forked by a server process",
         lambda: _time_multiprocessing("forkserver")),
        ("spawn", "multiprocessing 'spawn': a new interpreter that unpickles its task",
         lambda: _time_multiprocessing("spawn")),
    ]  # fmt: skip
    if _null_binary() is None:
        models = [m for m in models if m[0] != "posix_spawn (null binary)"]
    rows = []
    with _forkserver_scope():
        for model, how, measure in models:
            measure()  # a warm-up (the forkserver starts its server, the page cache holds the binary)
            times = [measure() for _ in range(repeats)]
            rows.append({"model": model, "how": how, "seconds": statistics.median(times), "fastest_s": min(times),
                         "runs": repeats})  # fmt: skip
    if dask:
        for nanny in (False, True):
            times = _time_dask_workers(nanny, _positive(dask_repeats, "dask_repeats"))
            rows.append({"model": "dask worker" + (" + nanny" if nanny else ""),
                         "how": "a 'dask worker' process joining a scheduler, until its first task ran"
                         + (" (the nanny process starts the worker process)" if nanny else ""),
                         "seconds": statistics.median(times), "fastest_s": min(times), "runs": len(times)})  # fmt: skip
    thread = rows[0]["seconds"]
    for row in rows:
        row["vs_thread"] = row["seconds"] / thread
    return rows


# -- 2. first touch -----------------------------------------------------------------------------
TOUCH_MODES = ("4k pages", "MAP_POPULATE", "huge pages")


def _anonymous(nbytes: int, populate: bool = False) -> mmap.mmap:
    """A private anonymous read-write mapping of ``nbytes`` (every page mapped now with ``populate``)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (mmap.MAP_POPULATE if populate else 0)
    return mmap.mmap(-1, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def first_touch(nbytes: int, mode: str = "4k pages", repeats: int = 1) -> dict[str, Any]:
    """A new anonymous array of ``nbytes`` written one byte per 4 KiB page: the minor faults, and the
    seconds per page, of its first touch and of a second pass (its pages already mapped).

    ``mode``: ``"4k pages"`` (each first write faults), ``"MAP_POPULATE"`` (the kernel maps every page
    in ``mmap``, whose time is counted: the cost moves, it does not vanish), ``"huge pages"``
    (``madvise(MADV_HUGEPAGE)`` on a 2 MiB-aligned region: one fault per 2 MiB where the kernel
    allows transparent huge pages, see ``thp``).

    What the kernel gave is measured, not assumed: ``huge_pages_kib`` is the region's
    ``AnonHugePages`` (``/proc/self/smaps``) after the first touch, in every mode (the kernel may
    give huge pages without being asked when ``thp`` is ``always``, or none when asked), and
    ``expected_faults`` is what those pages need: one fault per huge page, one per other 4 KiB page.
    ``repeats`` fresh regions are touched and the one with the fewest faults is reported (its own
    ``huge_pages_kib``; every count in ``fault_counts``): the touching thread's count also holds
    faults that are not the region's (a library page or heap page faulted again), which come at
    random moments and only ever add.
    """
    nbytes = _positive(nbytes, "nbytes")
    repeats = _positive(repeats, "repeats")
    if mode not in TOUCH_MODES:
        raise ValueError(f"no first-touch mode {mode!r}: use one of {TOUCH_MODES}")
    rows = [_touch_once(nbytes, mode) for _ in range(repeats)]
    best = min(rows, key=lambda row: row["faults"])
    return {**best, "repeats": repeats, "fault_counts": [row["faults"] for row in rows]}


def _touch_once(nbytes: int, mode: str) -> dict[str, Any]:
    """One first touch of a fresh region (see :func:`first_touch`)."""
    pages = -(-nbytes // PAGE)
    span = pages * PAGE
    thp = transparent_huge_pages()
    extra = HUGE_PAGE if mode == "huge pages" else 0
    faults0, start = minor_faults(), time.perf_counter()
    region = _anonymous(span + extra, populate=mode == "MAP_POPULATE")
    try:
        view = np.frombuffer(region, np.uint8)
        offset = 0
        if mode == "huge pages":
            offset = (-view.ctypes.data) % HUGE_PAGE
            if hasattr(mmap, "MADV_HUGEPAGE"):
                region.madvise(mmap.MADV_HUGEPAGE, offset, span)
        pages_view = view[offset : offset + span : PAGE]
        pages_view[:] = 1  # the first touch
        first_s, faults1 = time.perf_counter() - start, minor_faults()
        huge_kib = _anon_huge_kib(view.ctypes.data + offset, span)  # what the kernel gave the region
        faults1b = minor_faults()  # reading smaps faults too: not the second pass's
        start = time.perf_counter()
        pages_view[:] = 2  # the second pass: mapped already
        second_s, faults2 = time.perf_counter() - start, minor_faults()
        del view, pages_view
    finally:
        region.close()
    given = min(huge_kib * 1024, span)
    return {
        "mode": mode,
        "bytes": span,
        "pages": pages,
        "faults": faults1 - faults0,
        "faults_per_page": (faults1 - faults0) / pages,
        "first_touch_s": first_s,
        "ns_per_page": first_s / pages * 1e9,
        "second_pass_s": second_s,
        "second_pass_faults": faults2 - faults1b,
        "ns_per_page_mapped": second_s / pages * 1e9,
        "huge_pages_kib": huge_kib,
        "expected_faults": given // HUGE_PAGE + (span - given) // PAGE,
        "thp": thp,
    }


def _anon_huge_kib(address: int, length: int) -> int:
    """``AnonHugePages`` (KiB) of the mapping that holds ``address`` (from ``/proc/self/smaps``)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


# -- 3. page tables -----------------------------------------------------------------------------
# A child is a bare interpreter (``python -S``, no numpy, no workbench): its page tables hold little
# but the segment's. It maps the segment's file, reads one byte of each page from ``threads``
# threads, prints its VmPTE before and after, and stays alive until it reads a byte or EOF on stdin.
_PAGE_TABLE_CHILD = r"""
import mmap, sys, threading
def pte():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPTE:"):
                return int(line.split()[1])
path, threads = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as segment:
    region = mmap.mmap(segment.fileno(), 0, prot=mmap.PROT_READ)
before = pte()
view = memoryview(region)
def read_all():
    total = 0
    for i in range(0, len(view), mmap.PAGESIZE):
        total += view[i]
workers = [threading.Thread(target=read_all) for _ in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
print(before, pte(), flush=True)
sys.stdin.read(1)
"""


def _start_page_table_child(path: Path, threads: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-S", "-c", _PAGE_TABLE_CHILD, str(path), str(threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _read_growth(child: subprocess.Popen[str], deadline: float) -> int:
    """A page-table child's VmPTE growth (KiB), once it has read its pages (waits until ``deadline``,
    a ``time.monotonic()`` value)."""
    assert child.stdout is not None
    done = threading.Event()
    line: list[str] = []

    def read() -> None:
        line.append(child.stdout.readline())  # type: ignore[union-attr]
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())) or not line[0].strip():
        error = child.stderr.read() if child.poll() is not None and child.stderr else ""
        raise RuntimeError(
            f"a page-table child (pid {child.pid}) did not read its pages within {PAGE_TABLE_SECONDS:.0f} s "
            f"(a busy or memory-starved machine?) {error[-300:]}"
        )
    before, after = (int(x) for x in line[0].split())
    return after - before


def page_tables(nbytes: int, tasks: Sequence[int] = (1, 2, 4), model: str = "processes") -> list[dict[str, Any]]:
    """Page-table memory when ``tasks`` processes (``model="processes"``), or as many threads of one
    process (``"threads"``), each read every page of one shared segment of ``nbytes`` (PiP's Figure 6).

    Per point: the summed ``VmPTE`` growth of the processes (their page tables for the segment), the
    node's ``PageTables`` growth while they live (``/proc/meminfo``, PiP's measure: it also counts the
    children's own small page tables and any other process), and the expected bytes of the
    segment's entries (8 bytes per 4 KiB page per process). Children are always reaped and the
    segment always deleted.
    """
    nbytes = _positive(nbytes, "nbytes")
    if model not in ("processes", "threads"):
        raise ValueError(f"model is 'processes' or 'threads', got {model!r}")
    counts = [_positive(n, "a number of tasks") for n in tasks]
    name = f"pte-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    shm.create(name, -(-nbytes // 8), np.int64)[:: PAGE // 8] = 1  # every page in the segment's file
    rows = []
    try:
        path = shm.segment_path(name)
        for n in counts:
            processes, threads = (n, 1) if model == "processes" else (1, n)
            node_before = meminfo_kib("PageTables")
            children: list[subprocess.Popen[str]] = []
            deadline = time.monotonic() + PAGE_TABLE_SECONDS  # one bound for the whole point
            measured = False
            try:
                children = [_start_page_table_child(path, threads) for _ in range(processes)]
                grown = [_read_growth(child, deadline) for child in children]
                node_after = meminfo_kib("PageTables")
                measured = True
            finally:
                for child in children:  # after a failure the others are killed at once, not awaited
                    # a byte, not only EOF: a process forked meanwhile may hold the pipe's write end open
                    with contextlib.suppress(OSError, ValueError):
                        child.stdin.write("q")  # type: ignore[union-attr]
                    with contextlib.suppress(OSError):
                        child.stdin.close()  # type: ignore[union-attr]
                    try:
                        child.wait(max(0.0, deadline - time.monotonic()) if measured else 0)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        child.wait(CHILD_TIMEOUT)
                    for stream in (child.stdout, child.stderr):
                        if stream is not None:
                            stream.close()
            pages = -(-nbytes // PAGE)
            rows.append({
                "model": model, "tasks": n, "processes": processes, "threads": threads, "bytes": nbytes,
                "vmpte_kib": sum(grown), "node_pagetables_kib": node_after - node_before,
                "expected_kib": processes * pages * 8 / 1024,
            })  # fmt: skip
    finally:
        shm.delete(name)
    return rows


# -- 4. mmap/munmap contention --------------------------------------------------------------------
_churn_function: Any = None


def _churn() -> Callable[[int, int], int]:
    """A numba loop (no GIL) that maps an anonymous region, writes its first byte and unmaps it,
    through libc's own ``mmap``/``munmap``/``memset``: returns how many calls failed."""
    global _churn_function
    if _churn_function is None:
        import numba

        libc = ctypes.CDLL(None, use_errno=True)
        c_mmap, c_munmap, c_memset = libc.mmap, libc.munmap, libc.memset
        c_mmap.restype, c_munmap.restype, c_memset.restype = ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
        c_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        c_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        c_memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS

        # Not cached: a function that calls a ctypes pointer is tied to this process's libc address.
        @numba.njit(nogil=True)
        def churn(iterations: int, nbytes: int) -> int:
            failures = 0
            for _ in range(iterations):
                address = c_mmap(0, nbytes, prot, flags, -1, 0)
                if address == 0 or address == 0xFFFFFFFFFFFFFFFF:
                    failures += 1
                    continue
                c_memset(address, 1, 1)
                c_munmap(address, nbytes)
            return failures

        _churn_function = churn
    return _churn_function


def _churn_child(iterations: int, nbytes: int, ready: Any, go: Any, done: Any) -> None:
    churn = _churn()
    ready.send_bytes(b"x")
    go.recv_bytes()
    done.send(churn(iterations, nbytes))


def mmap_contention(tasks: Sequence[int] = (1, 2, 4), iterations: int = 5_000, nbytes: int = PAGE) -> dict[str, Any]:
    """``mmap`` + first write + ``munmap`` of ``nbytes``, ``iterations`` times per task, by ``tasks``
    threads of this process and by as many forked processes: calls per second of all tasks, and
    threads' rate over processes' (PiP's Figure 8). The loop runs in numba without the GIL, so
    threads contend only for the kernel's lock on their shared memory map."""
    iterations = _positive(iterations, "iterations")
    nbytes = _positive(nbytes, "nbytes")
    counts = [_positive(n, "a number of tasks") for n in tasks]
    start = time.perf_counter()
    churn = _churn()
    churn(10, nbytes)
    compile_s = time.perf_counter() - start
    context = multiprocessing.get_context("fork")
    rows = []
    for n in counts:
        threads = [threading.Thread(target=churn, args=(iterations, nbytes)) for _ in range(n)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(CHILD_TIMEOUT)
        threads_s = time.perf_counter() - start
        children, links = [], []
        try:
            for _ in range(n):
                ready_r, ready_w = context.Pipe(duplex=False)
                go_r, go_w = context.Pipe(duplex=False)
                done_r, done_w = context.Pipe(duplex=False)
                child = context.Process(target=_churn_child, args=(iterations, nbytes, ready_w, go_r, done_w),
                                        daemon=True)  # fmt: skip
                child.start()
                children.append(child)
                links.append((ready_r, go_w, done_r))
            for child, (ready_r, _, _) in zip(children, links, strict=True):
                if not ready_r.poll(CHILD_TIMEOUT):
                    raise RuntimeError(f"an mmap child (pid {child.pid}) did not start in time")
                ready_r.recv_bytes()
            start = time.perf_counter()
            for _, go_w, _ in links:
                go_w.send_bytes(b"x")
            failures = 0
            for child, (_, _, done_r) in zip(children, links, strict=True):
                if not done_r.poll(CHILD_TIMEOUT):
                    raise RuntimeError(f"an mmap child (pid {child.pid}) did not finish in time")
                failures += done_r.recv()
            processes_s = time.perf_counter() - start
        finally:
            for child in children:
                child.join(CHILD_TIMEOUT)
                if child.is_alive():
                    child.kill()
                    child.join(CHILD_TIMEOUT)
        if failures:
            raise RuntimeError(f"{failures} mmap calls failed in the processes (out of memory maps?)")
        calls = n * iterations
        rows.append({"tasks": n, "threads_per_s": calls / threads_s, "processes_per_s": calls / processes_s,
                     "threads_vs_processes": processes_s / threads_s})  # fmt: skip
    return {"bytes": nbytes, "iterations": iterations, "compile_s": compile_s, "rows": rows}


# -- 5. the application-level question ------------------------------------------------------------
CONFIGURATIONS = {  # name: (worker processes, threads each, the variant that delivers the data)
    "processes": ("cores", 1, "dask"),
    "processes + shared memory (RRO)": ("cores", 1, "rro"),
    "one process, threads": (1, "cores", "dask"),
}
APP_POINTS = {"histogram": {"blocks_per_worker": 8}, "kmeans": {"dims": 32, "iterations": 3}}


class _PeakMemory:
    """Samples the summed PSS of some processes (a shared page counted once per node) on a thread,
    every ``interval`` seconds, until stopped: the peak."""

    def __init__(self, pids: Sequence[int], interval: float = 0.05):
        import psutil

        self.processes = [psutil.Process(pid) for pid in pids]
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        total = 0
        for process in self.processes:
            with contextlib.suppress(Exception):  # a process that just exited counts nothing
                total += process.memory_full_info().pss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(CHILD_TIMEOUT)


def application_models(
    apps: Sequence[str] = ("histogram", "kmeans"),
    size: str = "ci",
    cores: int | None = None,
    repeats: int = 2,
) -> list[dict[str, Any]]:
    """Each app in each :data:`CONFIGURATIONS` entry on a cluster of this machine with ``cores``
    cores (default: all): the median seconds of ``repeats`` runs, the peak PSS of the workers, and
    both as ratios to the best configuration of the app. Each configuration's answer is checked by
    the application's own check (the experiment runner, on its warm-up run)."""
    import workbench
    from workbench.lab.runner import run_experiment

    cores = _positive(cores or os.cpu_count() or 1, "cores")
    unknown = [app for app in apps if app not in APP_POINTS]
    if unknown:
        raise ValueError(f"no execution-model point for {unknown}: use some of {sorted(APP_POINTS)}")
    rows: list[dict[str, Any]] = []
    for configuration, (processes, threads, variant) in CONFIGURATIONS.items():
        n_workers = cores if processes == "cores" else processes
        n_threads = cores if threads == "cores" else threads
        with workbench.start(n_workers=n_workers, threads_per_worker=n_threads, timeout=120) as session:
            pids = list(session.run(os.getpid).values())
            for app in apps:
                point = APP_POINTS[app]
                with _PeakMemory(pids) as memory:
                    experiment = run_experiment(
                        session, app, [variant], size=size, grid={k: [v] for k, v in point.items()},
                        repeats=repeats, trace=False, progress=False,
                    )  # fmt: skip
                runs = experiment.results
                rows.append({
                    "app": app, "configuration": configuration, "variant": variant, "workers": n_workers,
                    "threads": n_threads, "seconds": float(runs["seconds"].median()), "runs": len(runs),
                    "runs_s": runs["seconds"].to_list(), "peak_pss_mib": memory.peak / MiB,
                })  # fmt: skip
    for app in apps:
        mine = [r for r in rows if r["app"] == app]
        fastest = min(r["seconds"] for r in mine)
        smallest = min(r["peak_pss_mib"] for r in mine) or 1.0
        for row in mine:
            row["time_vs_best"] = row["seconds"] / fastest
            row["memory_vs_best"] = row["peak_pss_mib"] / smallest
    return rows


def recommendation(rows: Sequence[dict[str, Any]], app: str, slack: float = 1.1) -> dict[str, Any]:
    """The configuration to pick for ``app`` from :func:`application_models`' rows: the fastest, unless
    one within ``slack`` of its time uses less memory (then that one), with the reason. Where the rows
    keep every run's seconds (``runs_s``), a fastest pick whose time the run cannot tell from the next
    one's (:func:`workbench.lab.stats.time_ratio`: the interval includes 1) says so."""
    mine = [r for r in rows if r["app"] == app]
    if not mine:
        raise ValueError(f"no rows for {app!r}")
    fastest = min(mine, key=lambda r: r["seconds"])
    close = [r for r in mine if r["seconds"] <= fastest["seconds"] * slack]
    pick = min(close, key=lambda r: r["peak_pss_mib"])
    why = (
        f"fastest ({pick['seconds']:.3f} s{_tie(pick, mine)})"
        if pick is fastest
        else f"within {slack - 1:.0%} of the fastest ({fastest['configuration']}) and "
        f"{fastest['peak_pss_mib'] / max(pick['peak_pss_mib'], 1e-9):.2f}x less memory"
    )
    return {"app": app, "configuration": pick["configuration"], "why": why}


def _tie(pick: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """``"; ..."`` when this run cannot tell ``pick``'s time from the next fastest's, else nothing."""
    others = sorted((r for r in rows if r is not pick), key=lambda r: r["seconds"])
    if not others or min(len(pick.get("runs_s", ())), len(others[0].get("runs_s", ()))) < 2:
        return ""
    ratio = stats.time_ratio(pick["runs_s"], others[0]["runs_s"])
    if ratio.significant:
        return ""
    return f"; on this machine its difference from {others[0]['configuration']} is within the noise"
