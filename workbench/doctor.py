"""``workbench doctor``: is this machine ready for the course? One line per check, and the fix for each
that fails.

What a learner needs on day one: Linux (the measurements in :data:`LINUX_ONLY` read Linux's
``/proc`` and ``/sys`` or call Linux-only system calls), enough cores and memory, a ``/dev/shm`` big enough for the
shared-memory lessons, a JupyterLab that a browser can reach with the lessons' extensions (widgets,
bokeh, Dask's dashboard panes), a Dask dashboard that answers directly and through JupyterLab's
proxy (where dask-labextension reads it), and a numba cache it can write. For an instructor: how many
learners this machine holds at once (:data:`LEARNER_NEEDS` per learner), and whether N of them fit. Of
the shared-memory segments it lists only the caller's own. The checks that start
servers (JupyterLab, a small Dask cluster) stop them again, whatever happens; ``quick=True`` skips
them.
"""

from __future__ import annotations

import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dask.utils import format_bytes

from workbench import machine
from workbench.settings import NUMBA_CACHE, Settings
from workbench.units import size_text

GIB = 1024**3
MIN_CORES = 2
MIN_MEMORY = 2 * GIB  # free memory for size "ci"; "lab" wants about 4 GiB
MIN_SHM = 1 * GIB  # free /dev/shm for the shared-memory lessons at size "lab"
# The JupyterLab front-end extensions the lessons use (folder names under share/jupyter/labextensions).
LAB_EXTENSIONS = {
    "@jupyter-widgets/jupyterlab-manager": "ipywidgets' panels",
    "@bokeh/jupyter_bokeh": "bokeh figures inside widget panels",
    "dask-labextension": "Dask's task stream and worker memory panes",
    "@jupyterhub/jupyter-server-proxy": "the dashboard through JupyterLab's own port",
}
MIB = 1024**2


@dataclass(frozen=True)
class LearnerNeeds:
    """What one learner of a class takes from a shared server at one lesson size."""

    cores: float  # learners take turns computing: a share of a core, not a core each all day
    memory: int  # bytes of free memory: kernel, JupyterLab server and the lesson's cluster
    shm: int  # bytes of free /dev/shm: the shared-memory lessons' arrays


# Per learner, the single-user minimums above: "ci" is MIN_MEMORY and a quarter of MIN_SHM (its
# arrays are small), half a core; "lab" is the 4 GiB it wants, MIN_SHM, and a core of its own.
LEARNER_NEEDS = {
    "ci": LearnerNeeds(cores=0.5, memory=2 * GIB, shm=256 * MIB),
    "lab": LearnerNeeds(cores=1.0, memory=4 * GIB, shm=1 * GIB),
}
# Each check that can fail has a section there, under "FAIL <its name>" (a test holds the two together).
TROUBLESHOOTING = "docs/course/troubleshooting.md"
SERVER_START_SECONDS = 90.0  # bounded wait for JupyterLab to answer
HTTP_SECONDS = 10.0


@dataclass(frozen=True)
class LinuxOnly:
    """A measurement the course makes with a Linux interface, and what happens elsewhere.

    ``modules`` are the package's files that use the interface (a test checks that every use of a
    Linux-only interface in the package is listed here, so this table stays complete).
    """

    interface: str
    measurement: str
    where: str
    elsewhere: str
    modules: tuple[str, ...]


LINUX_ONLY: tuple[LinuxOnly, ...] = (
    LinuxOnly(
        "POSIX shared memory as files in /dev/shm, mapped with mmap.MAP_POPULATE",
        "shared read-only arrays (RRO: one copy per node), channels between ranks on one node, 'workbench shm'",
        "lessons 02, 06, 07, 08; bench shm, bench channels",
        "no /dev/shm: sharing an array raises SharedMemoryError",
        ("workbench/memory/shm.py",),
    ),
    LinuxOnly(
        "/proc/<pid>/stat, /proc/self/ns/pid, /proc/sys/kernel/random/boot_id",
        "who a shared copy lives for: the next start() and 'workbench shm clean' free a killed kernel's copies",
        "lessons 02, 08 (RRO copies)",
        "no /proc: copies are kept, never reclaimed; 'workbench shm clean --all' removes them",
        ("workbench/memory/owners.py",),
    ),
    LinuxOnly(
        "os.posix_fadvise(POSIX_FADV_DONTNEED), /proc/mounts, /proc/self/io",
        "cold tiers (a file's pages evicted for real), the device each tier's files sit on, bytes read from it",
        "lesson 04's disk tier, lesson 05; bench tiers",
        "os.posix_fadvise does not exist: making a file cold raises AttributeError; the device is reported as '?'",
        ("workbench/memory/tiers.py", "workbench/memory/tier_base.py"),
    ),
    LinuxOnly(
        "/proc/<pid>/status (VmPTE), /proc/meminfo (PageTables), /proc/self/smaps, mmap.MAP_POPULATE, MADV_HUGEPAGE",
        "page-table memory per process, and first touch pre-faulted (MAP_POPULATE) and on huge pages",
        "lesson 07; bench execution-models",
        "those files and mmap flags do not exist: these measurements raise (the plain 4 KiB first touch runs)",
        ("workbench/lab/execution_models.py",),
    ),
    LinuxOnly(
        "proportional set size (PSS: psutil's memory_full_info, from /proc/<pid>/smaps)",
        "the memory of processes that share pages, each shared page counted once",
        "lesson 07's processes vs threads; bench shm",
        "psutil has no PSS: lesson 07's peak memory reads 0 and bench shm raises AttributeError",
        ("workbench/lab/execution_models.py", "workbench/bench/shm.py"),
    ),
    LinuxOnly(
        "/sys/devices/system/cpu (caches), /sys/devices/system/node, /proc/self/numa_maps, os.sched_getaffinity, "
        "os.sched_setaffinity",
        "this machine's caches for the cache sweep, its NUMA nodes and where first-touched pages landed, "
        "threads and Dask workers pinned to cores",
        "lesson 09",
        "no cache or NUMA information; os.sched_getaffinity does not exist: first touch and pinning raise",
        ("workbench/lab/node_locality.py", "workbench/teach/lesson09.py"),
    ),
    LinuxOnly(
        "os.sched_setaffinity, /proc/<pid>/task",
        "a worker slowed by pinning busy processes to its core",
        "bench balance",
        "refused with 'slowing a worker needs Linux's sched_setaffinity'",
        ("workbench/lab/imbalance.py",),
    ),
    LinuxOnly(
        "/proc/<pid>/stat (a process's state and flags), /proc/<pid>/environ",
        "the hub's clean after a learner's server stops: it waits for the server's kernels and workers, "
        "those part-way through exiting included, then frees the learner's shared memory",
        "a JupyterHub that runs the course (docs/course/deploy.md)",
        "no /proc: a process part-way through exiting is not waited for, and a segment it still maps is kept",
        ("workbench/hub.py",),
    ),
    LinuxOnly(
        "/proc/cpuinfo, /sys/devices/system/cpu/cpu0/cache",
        "the CPU model and last-level cache size recorded with every result",
        "every lesson and benchmark",
        "degrades: the architecture instead of the model, no cache size",
        ("workbench/machine.py",),
    ),
)


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: what was checked, what was found, and the fix if it failed."""

    name: str
    ok: bool
    found: str
    fix: str = ""

    def line(self) -> str:
        """``ok   name: found`` or ``FAIL name: found -> fix: ...``."""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.found}" + (
            "" if self.ok else f"\n     fix: {self.fix}"
        )


def check_os(system: str | None = None, arch: str | None = None) -> Check:
    """Linux: the course's measurements read ``/proc`` and ``/sys`` and use Linux-only calls (:data:`LINUX_ONLY`).

    ``system`` and ``arch`` default to ``platform.system()`` and ``platform.machine()``. Elsewhere the
    check fails and lists each measurement that will not work, with its lessons.
    """
    system = platform.system() if system is None else system
    arch = platform.machine() if arch is None else arch
    if system == "Linux":
        return Check("operating system", True, f"Linux {platform.release()} ({arch})")
    missing = "".join(f"\n       - {item.measurement} ({item.where}): {item.elsewhere}" for item in LINUX_ONLY)
    return Check(
        "operating system",
        False,
        f"{system or 'unknown'} ({arch}), not Linux; these measurements need Linux:{missing}",
        "use Binder (the badge in README.md: nothing to install), or Linux in a VM: WSL2 on Windows "
        "(wsl --install -d Ubuntu), a Linux VM or a container (docker run --shm-size=2g ...) on macOS; "
        "then follow docs/course/setup.md inside it",
    )


def check_cores(cores: int | None) -> Check:
    """At least two cores: one worker per core, and parallel speed-ups to see."""
    cores = cores or 1
    return Check(
        "cores",
        cores >= MIN_CORES,
        f"{cores} logical core(s)",
        f"give the machine or VM at least {MIN_CORES} cores (the lessons run one Dask worker per core)",
    )


def check_memory(available: int) -> Check:
    """Enough free memory for the lessons at size "ci"."""
    return Check(
        "memory",
        available >= MIN_MEMORY,
        f"{available / GIB:.1f} GiB free",
        f"free at least {MIN_MEMORY / GIB:.0f} GiB (close other programs) or give the VM more memory; "
        "at less than 4 GiB run the lessons at size='ci'",
    )


def check_shm(space: dict[str, int] | None, system: str | None = None) -> Check:
    """A /dev/shm with room for the shared-memory lessons (Docker's default is 64 MiB); ``system``
    (default ``platform.system()``) picks the fix when there is none."""
    if space is None:
        if (platform.system() if system is None else system) != "Linux":
            fix = "macOS and Windows have no /dev/shm: run the course on Linux (Binder, a Linux VM or WSL2)"
        else:
            fix = "mount a tmpfs there: sudo mount -t tmpfs -o size=2g tmpfs /dev/shm"
        return Check("/dev/shm", False, "absent: shared arrays cannot be made", fix)
    return Check(
        "/dev/shm",
        space["free"] >= MIN_SHM,
        f"{space['free'] / GIB:.2f} GiB free of {space['total'] / GIB:.2f} GiB",
        "in Docker: docker run --shm-size=2g ...; on Linux: sudo mount -o remount,size=2g /dev/shm; "
        "then 'workbench shm clean' removes what dead processes of yours left and no live process maps: the "
        "shared copies of sessions whose kernel died (killed, out of memory; the next workbench.start() removes "
        "those too), partial files and locks of killed writers, channel mailboxes; segments shared by name "
        "(shm.share) are kept until 'workbench shm clean --all'",
    )


def learners_that_fit(size: str, cores: int | None, available: int, shm_free: int | None) -> tuple[int, str]:
    """How many learners at ``size`` (a key of :data:`LEARNER_NEEDS`) this machine holds at once, and
    what limits it ("cores", "memory" or "/dev/shm"), from its cores, free memory and free /dev/shm."""
    if size not in LEARNER_NEEDS:
        raise ValueError(f"size must be one of {sorted(LEARNER_NEEDS)}, got {size!r}")
    needs = LEARNER_NEEDS[size]
    fits = {
        "cores": int((cores or 1) / needs.cores),
        "memory": available // needs.memory,
        "/dev/shm": (shm_free or 0) // needs.shm,
    }
    limit = min(fits, key=fits.__getitem__)
    return fits[limit], limit


def _needs_text(size: str, count: int = 1) -> str:
    needs = LEARNER_NEEDS[size]
    return (
        f"{needs.cores * count:g} core(s), {needs.memory * count / GIB:.1f} GiB free memory, "
        f"{needs.shm * count / GIB:.2f} GiB free /dev/shm"
    )


def check_learners(
    cores: int | None, available: int, space: dict[str, int] | None, learners: int | None = None
) -> Check:
    """How many learners of a class (each running the lessons at once) this machine holds at sizes
    "lab" and "ci"; with ``learners``, whether that many fit at size "lab" (the check fails if not)."""
    shm_free = space["free"] if space else None
    held = {size: learners_that_fit(size, cores, available, shm_free) for size in ("lab", "ci")}
    each = "; ".join(
        f"{count} at size {size} (each {_needs_text(size)}, limited by {limit})"
        for size, (count, limit) in held.items()
    )
    if learners is None:
        return Check("learners", True, f"this machine holds {each}")
    if learners < 1:
        raise ValueError(f"learners must be a positive number of learners, got {learners}")
    if learners <= held["lab"][0]:
        return Check("learners", True, f"{learners} fit at size lab; it holds {each}")
    ci_fits = learners <= held["ci"][0]
    return Check(
        "learners",
        False,
        f"{learners} do not fit at size lab{' (they fit at size ci)' if ci_fits else ' nor at size ci'}; "
        f"it holds {each}",
        f"for {learners} learners at size lab the server needs {_needs_text('lab', learners)}"
        + (
            "; or run the class at size ci (WORKBENCH_SIZE=ci in the learners' environment)"
            if ci_fits
            else f" ({_needs_text('ci', learners)} at size ci); or fewer learners per server"
        ),
    )


def check_own_segments() -> Check:
    """This user's shared-memory segments in /dev/shm: only the caller's own are listed (and cleaned)."""
    from workbench.memory import shm

    try:
        own = shm.list_segments()
    except shm.SharedMemoryError as error:
        return Check("your segments", True, f"none to list ({error})")
    size = sum(info.nbytes for info in own)
    left = sum(info.nbytes for info in own if info.reclaimable and not info.mapped_by)
    return Check(
        "your segments",
        True,
        f"{len(own)} in {shm.SHM_DIR} under {shm.PREFIX}* ({size_text(size)}"
        + (f", {size_text(left)} of them left by dead sessions" if left else "")
        + "); other users' are not yours to list or clean ('workbench shm clean' removes what dead sessions "
        "left, '--all' also yours shared by name that no process uses)",
    )


DISTRIBUTION = "locality-workbench"  # the name pyproject.toml gives this project


def check_import_name(owners: dict[str, list[str]] | None = None) -> Check:
    """No other installed distribution claims the import name ``workbench`` (PyPI has a ``workbench``
    project): where one does, which of the two ``import workbench`` finds depends on the order of
    the installs. ``owners``: top-level name -> distributions (None: the environment's own)."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions() if owners is None else owners
    others = sorted({d for d in owners.get("workbench", []) if d.lower().replace("_", "-") != DISTRIBUTION})
    if not others:
        return Check("import name", True, "only this project installs the package 'workbench'")
    return Check(
        "import name",
        False,
        f"{', '.join(others)} also installs a package called 'workbench': one of the two shadows the other",
        f"pip uninstall {' '.join(others)}, or give the workbench an environment of its own (python -m venv)",
    )


def check_numba_cache(directory: str | None) -> Check:
    """The numba cache directory can be created and written (kernels compile once, then load)."""
    fix = "export NUMBA_CACHE_DIR=$HOME/.cache/numba (an absolute path to a writable directory), or unset it"
    if not directory:
        return Check("numba cache", False, "NUMBA_CACHE_DIR is empty", fix)
    if not os.path.isabs(directory):
        return Check("numba cache", False, f"NUMBA_CACHE_DIR is relative ({directory}): each process resolves it", fix)
    if os.path.exists(directory) and not os.path.isdir(directory):
        return Check("numba cache", False, f"{directory} is a file, not a directory", fix)
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as error:
        return Check("numba cache", False, f"{directory} is not writable ({error.strerror or error})", fix)
    return Check("numba cache", True, f"{directory} is writable")


def check_gpu(devices: list[tuple[str, int]], simulated: bool) -> Check:
    """The GPUs numba's CUDA target sees (optional: the device kernels of ``workbench/kernels/gpu.py`` need one,
    or numba's simulator, which gives their answers but not their times)."""
    if devices:
        listed = ", ".join(f"{name} ({format_bytes(total)})" for name, total in devices)
        return Check(
            "GPU",
            True,
            f"{listed}: the gpu tier and the device kernels (workbench/kernels/gpu.py) run on it; lesson 10 and "
            "'workbench bench gpu' measure it",
        )
    how = "this process runs numba's CUDA simulator" if simulated else "none that numba's CUDA target sees"
    return Check(
        "GPU",
        True,
        f"{how}: the gpu tier and the device kernels run only in the simulator (NUMBA_ENABLE_CUDASIM=1), with "
        "right answers and byte counts and times that mean nothing; lesson 10 runs simulated and says so, and "
        "'workbench bench gpu' is skipped",
    )


def check_lab_extensions(prefixes: list[Path] | None = None) -> Check:
    """The front-end extensions the lessons need are installed where JupyterLab looks."""
    prefixes = prefixes or [Path(sys.prefix) / "share" / "jupyter" / "labextensions"]
    missing = [name for name in LAB_EXTENSIONS if not any((p / name / "package.json").exists() for p in prefixes)]
    return Check(
        "JupyterLab extensions",
        not missing,
        "all installed: " + ", ".join(LAB_EXTENSIONS) if not missing else "missing " + ", ".join(missing),
        "run 'make lab' (it installs the project's dependencies into .venv), or pip install "
        + " ".join(
            {
                "dask-labextension": "dask-labextension",
                "@jupyterhub/jupyter-server-proxy": "jupyter-server-proxy",
                "@bokeh/jupyter_bokeh": "jupyter_bokeh",
            }.get(m, "ipywidgets")
            for m in missing
        ),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    """Status and body (first 200 kB) of a GET; status 0 and the reason when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_SECONDS) as response:
            return response.status, response.read(200_000).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (OSError, ValueError) as error:
        return 0, str(getattr(error, "reason", error))


def _exit_on_termination() -> dict[int, Any]:
    """In the main thread, make SIGTERM and SIGHUP raise SystemExit (so cleanups run); the handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signals = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]  # no SIGHUP on Windows
    return {s: signal.signal(s, leave) for s in signals}


@contextmanager
def jupyter_lab(
    timeout: float = SERVER_START_SECONDS, env: dict[str, str] | None = None, root: Path | None = None
) -> Iterator[tuple[str, str]]:
    """A JupyterLab server on a free local port, as ``make lab`` starts it (``env`` added to its
    environment, serving ``root``, default an empty directory); yields (url, token), then stops it."""
    port, token = _free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="lwb-doctor-") as scratch:
        log_path = Path(scratch) / "jupyter.log"
        project = Path(__file__).resolve().parents[1]
        now = Settings.read()
        config = os.pathsep.join(filter(None, [str(project / "jupyter-config"), now.given("JUPYTER_CONFIG_PATH")]))
        env = now.child_environment(
            JUPYTER_RUNTIME_DIR=str(Path(scratch) / "runtime"), JUPYTER_CONFIG_PATH=config, **(env or {})
        )
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
        command += [f"--ServerApp.token={token}", f"--ServerApp.root_dir={root or scratch}"]
        if hasattr(os, "getuid") and os.getuid() == 0:
            command.append("--allow-root")
        with open(log_path, "w") as log:
            server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        previous = _exit_on_termination()  # a SIGTERM or SIGHUP still runs the finally below: no server left
        try:
            deadline = time.monotonic() + timeout
            while _get(f"{url}/api/status?token={token}")[0] != 200:
                if server.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-600:]
                    raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f} s: {tail}")
                time.sleep(0.25)
            yield url, token
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextmanager
def dask_dashboard() -> Iterator[int]:
    """A one-worker local Dask cluster serving its dashboard on a free port; yields the port."""
    from distributed import LocalCluster

    port = _free_port()
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=f"127.0.0.1:{port}")
    try:
        yield port
    finally:
        cluster.close(timeout=30)


def check_servers() -> list[Check]:
    """JupyterLab answers a browser's request for /lab, the Dask dashboard answers, and JupyterLab's proxy
    reaches the dashboard (the URL dask-labextension uses)."""
    checks = []
    lab_fix = "run 'make lab' and open the URL it prints; behind SSH: ssh -L 8888:localhost:8888 host"
    try:
        with jupyter_lab() as (url, token), dask_dashboard() as port:
            status, body = _get(f"{url}/lab?token={token}")
            checks.append(
                Check(
                    "JupyterLab",
                    status == 200 and "JupyterLab" in body,
                    f"{url}/lab answered {status}" + (" with the JupyterLab page" if "JupyterLab" in body else ""),
                    lab_fix,
                )
            )
            status, body = _get(f"http://127.0.0.1:{port}/status")
            checks.append(
                Check(
                    "Dask dashboard",
                    status == 200 and "bokeh" in body.lower(),
                    f"http://127.0.0.1:{port}/status answered {status or body}",
                    "pip install 'bokeh>=3.4' (the dashboard needs it); a firewall must allow local ports",
                )
            )
            status, body = _get(f"{url}/proxy/{port}/status?token={token}")
            checks.append(
                Check(
                    "dashboard in JupyterLab",
                    status == 200 and "bokeh" in body.lower(),
                    f"/proxy/{port}/status through JupyterLab answered {status or body}",
                    "pip install jupyter-server-proxy dask-labextension and restart JupyterLab ('make lab' does both)",
                )
            )
    except (RuntimeError, OSError) as error:
        checks.append(Check("JupyterLab", False, f"could not start: {error}", lab_fix))
    return checks


def run(quick: bool = False, learners: int | None = None) -> list[Check]:
    """Every check, in the order a learner would fix them; ``quick`` skips those that start servers.
    ``learners``: also say whether a class of that many fits on this machine (see :func:`check_learners`)."""
    from workbench import kernels  # noqa: F401  (sets NUMBA_CACHE_DIR when the user has not)
    from workbench.kernels import gpu

    info = machine.describe()
    checks = [
        check_os(),
        check_cores(info["logical_cores"]),
        check_memory(info["memory_available"]),
        check_shm(info["shm"]),
        check_own_segments(),
        check_learners(info["logical_cores"], info["memory_available"], info["shm"], learners),
        check_numba_cache(Settings.read().given(NUMBA_CACHE)),
        check_import_name(),
        check_gpu(gpu.devices(), gpu.simulated()),
        check_lab_extensions(),
    ]
    missing = [name for name, version in info["packages"].items() if version is None]
    checks.append(
        Check(
            "packages",
            not missing,
            "all installed" if not missing else "missing " + ", ".join(missing),
            "run 'make lab' (it installs them into .venv)",
        )
    )
    if not quick:
        checks.extend(check_servers())
    return checks


def report(checks: list[Check], write: Callable[[str], Any] = print) -> bool:
    """Print one line per check (and its fix when it failed), then "ready for the course" or what to fix
    and the page that says more (:data:`TROUBLESHOOTING`); True when every check passed."""
    for check in checks:
        write(check.line())
    failed = [c.name for c in checks if not c.ok]
    said = f"{len(failed)} to fix: {', '.join(failed)} (more in {TROUBLESHOOTING})"
    write("ready for the course" if not failed else said)
    return not failed
