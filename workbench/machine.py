"""What machine a measurement was taken on: cores, memory, /dev/shm, package versions.

Every benchmark and result file carries this record, because a ratio means little without it.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
from pathlib import Path
from typing import Any

import psutil

from workbench.settings import NUMBA_CACHE, Settings

PACKAGES = ("numpy", "numba", "dask", "distributed", "bokeh", "ipywidgets", "scipy", "pandas", "papermill")
SHM_DIR = "/dev/shm"


def package_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when missing)."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def shm_space(path: str = SHM_DIR) -> dict[str, int] | None:
    """Total and free bytes of the shared-memory filesystem (None where it does not exist)."""
    if not os.path.isdir(path):
        return None
    usage = shutil.disk_usage(path)
    return {"total": usage.total, "free": usage.free}


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache of core 0 (from sysfs), or None where it is not reported."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes) if sizes else None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; figures are quoted with it), else the architecture."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, Any]:
    """A JSON-ready description of this machine and software."""
    import numba

    memory = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "last_level_cache": last_level_cache_bytes(),
        "memory_total": memory.total,
        "memory_available": memory.available,
        "shm": shm_space(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "numba_cache_dir": Settings.read().given(NUMBA_CACHE),
        "packages": package_versions(),
    }


def summary_lines(info: dict[str, Any] | None = None) -> list[str]:
    """The description as short human-readable lines (for notebooks and the CLI)."""
    info = describe() if info is None else info
    gib = 1024**3
    shm = info["shm"]
    lines = [
        f"host {info['hostname']}: {info['logical_cores']} cores, "
        f"{info['memory_total'] / gib:.1f} GiB memory ({info['memory_available'] / gib:.1f} GiB free)",
        "/dev/shm: " + (f"{shm['total'] / gib:.1f} GiB ({shm['free'] / gib:.1f} GiB free)" if shm else "absent"),
        f"python {info['python']} on {info['platform']}",
        "packages: " + ", ".join(f"{k} {v or 'missing'}" for k, v in info["packages"].items()),
    ]
    return lines


def readiness(info: dict[str, Any] | None = None) -> list[str]:
    """Warnings about this machine for the lessons (an empty list means ready)."""
    info = describe() if info is None else info
    gib = 1024**3
    warnings = []
    if (info["logical_cores"] or 1) < 2:
        warnings.append("only one core: parallel speed-ups will not show; use a machine with 2 or more")
    if info["memory_available"] < 2 * gib:
        warnings.append(f"{info['memory_available'] / gib:.1f} GiB memory free: use size='ci'")
    if info["shm"] is None:
        warnings.append(
            "no /dev/shm: the shared-memory lessons (02, 04-07) and RRO strategies will refuse to run; "
            "use a Linux machine with tmpfs at /dev/shm (or Binder)"
        )
    elif info["shm"]["free"] < 1 * gib:
        warnings.append(
            f"/dev/shm has {info['shm']['free'] / gib:.2f} GiB free: the shared-memory lessons need "
            "about 1 GiB at size 'lab' (in Docker: --shm-size=2g)"
        )
    missing = [name for name, version in info["packages"].items() if version is None]
    if missing:
        warnings.append(f"missing packages {missing}: run 'make lab' (it installs them)")
    return warnings
