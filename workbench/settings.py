"""The workbench's settings from the environment: every variable it reads, and the one place it reads them.

:class:`Settings` is a snapshot of the process's environment, taken by :meth:`Settings.read`. A
session takes one when :func:`workbench.start` opens it (its arguments override what the snapshot
says) and keeps it (``session.settings``): what the session's cluster, dashboard and Slurm jobs are
made from, and the environment of the processes it starts. Code that runs without a session in hand
(a worker's node id, a lesson's size before its session starts, the command line) reads a snapshot
where it runs. No other module of the package reads ``os.environ``, and none writes it but through
:func:`export`, for the variables another library reads when it is first imported (numba's cache
directory and its CUDA simulator). ``tests/test_settings.py`` checks both.

A value that is more than text is read here too, by the function of its kind, wherever it is read:
:func:`whole_number` and :func:`byte_amount` (the digits 0-9 alone) and :func:`flag`. :data:`CHECKS`
names the one each variable is read with, and :func:`described` (``workbench settings``) says with it
why a value is invalid.

This module imports nothing of the workbench, so every layer (the kernels included) may use it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# The workbench's variables, each with what it sets (`workbench settings` prints them with their values).
SIZE = "WORKBENCH_SIZE"
CLUSTER = "WORKBENCH_CLUSTER"
SCHEDULER = "WORKBENCH_SCHEDULER"
NODE_ID = "WORKBENCH_NODE_ID"
MAX_MEMORY = "WORKBENCH_MAX_MEMORY"
TLS = "WORKBENCH_TLS"
SLURM_PREFIX = "WORKBENCH_SLURM_"
DASHBOARD = "WORKBENCH_DASHBOARD"
DASHBOARD_DIR = "WORKBENCH_DASHBOARD_DIR"
FILES_DIR = "WORKBENCH_FILES_DIR"
TIER_DIR = "WORKBENCH_TIER_DIR"
STORE_DIR = "WORKBENCH_STORE_DIR"
PMEM_DIR = "WORKBENCH_PMEM_DIR"
DRAM_BUDGET = "WORKBENCH_DRAM_BUDGET"
GPU_BYTES = "WORKBENCH_GPU_BYTES"
HUB_PREFIX = "JUPYTERHUB_SERVICE_PREFIX"  # set by JupyterHub: the learner's server's base URL
CACHE_HOME = "XDG_CACHE_HOME"  # the user's cache; the workbench's is locality-workbench in it
NUMBA_CACHE = "NUMBA_CACHE_DIR"  # numba's compiled kernels (workbench.kernels sets it when the user has not)
NUMBA_SIMULATOR = "NUMBA_ENABLE_CUDASIM"  # numba's CUDA simulator (lesson 10 sets it where there is no GPU)

# What code on the workers reads: a session carries these of its settings to the workers it starts
# (their environment), so that its workers follow its settings, not those of the process they came from.
WORKER_NAMES = (FILES_DIR, TIER_DIR, STORE_DIR, PMEM_DIR, DRAM_BUDGET, GPU_BYTES)

NAMES: dict[str, str] = {
    SIZE: 'the lessons\' and benchmarks\' problem size: "ci", "lab" (default) or "full"',
    CLUSTER: 'the kind of cluster start() opens when its caller names none: "local", "scheduler", "slurm", ...',
    SCHEDULER: "the address of a running Dask scheduler start() joins (the 'scheduler' kind)",
    NODE_ID: "this process's node id (default: its hostname): workers with the same id share a node's memory",
    MAX_MEMORY: "the per-learner cap on a local cluster's memory (workers x memory limit), e.g. '4GiB'",
    TLS: "0: clusters the workbench starts talk plain TCP (default 1: TLS, with credentials of their own)",
    SLURM_PREFIX + "<FIELD>": "the Slurm kind's options (JOBS, CORES, MEMORY, WALLTIME, ACCOUNT, PARTITION, ...)",
    DASHBOARD: 'where the dashboard is served: "off", "port" or "socket"',
    DASHBOARD_DIR: "where the dashboard socket's private directory is made (default: the temporary directory)",
    FILES_DIR: "a directory every worker can read, for the files tasks write (a shared file system)",
    TIER_DIR: "where the file tiers keep their files (default: a private directory in the temporary directory)",
    STORE_DIR: "the active store's directory (default: ~/.cache/locality-workbench/store)",
    PMEM_DIR: "a DAX-mounted persistent-memory directory for the mapped tier, where the node has one",
    DRAM_BUDGET: "the tier strategies' DRAM budget per backend, in bytes (default 256 MiB)",
    GPU_BYTES: "the most device memory the gpu tier may hold, e.g. '8GiB' (default: the device's free memory)",
    HUB_PREFIX: "set by JupyterHub in a learner's server: its base URL, under which the dashboard is linked",
    CACHE_HOME: "the user's cache directory; the workbench's (kernels, Slurm logs) is locality-workbench in it",
    NUMBA_CACHE: "numba's cache of compiled kernels (default: the workbench's cache, numba/ in it)",
    NUMBA_SIMULATOR: "1: numba's CUDA simulator instead of a GPU (lesson 10 sets it where it finds no GPU)",
}


@dataclass(frozen=True)
class Settings:
    """The environment as it was when it was read: ``get`` a variable of it, ``prefixed`` a family of
    them, ``child_environment`` for a process started from it. Frozen, and its mapping read-only: a
    session's settings stay what they were when it started, whatever the process sets later."""

    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.environ, Mapping):
            raise TypeError(
                f"Settings takes a mapping of variable names to values, as os.environ is, got a "
                f"{type(self.environ).__name__}: Settings({{**os.environ, 'WORKBENCH_TLS': '0'}})"
            )
        wrong = [name for name, value in self.environ.items() if not (isinstance(name, str) and isinstance(value, str))]
        if wrong:
            value = self.environ[wrong[0]]
            raise TypeError(
                f"Settings holds strings, as the environment does: {wrong[0]!r} is a {type(value).__name__} "
                f"({value!r}); give it as a string (e.g. '0', '4GiB')"
            )
        object.__setattr__(self, "environ", MappingProxyType(dict(self.environ)))

    def __hash__(self) -> int:  # the snapshot's mapping is read-only: hash it by its items
        return hash(frozenset(self.environ.items()))

    def __reduce__(self) -> tuple[type[Settings], tuple[dict[str, str]]]:
        """Pickled as the plain mapping it holds (a read-only mapping cannot be pickled), e.g. to be
        sent to another process."""
        return (Settings, (dict(self.environ),))

    @classmethod
    def read(cls) -> Settings:
        """A snapshot of this process's environment now (the one place the package reads it)."""
        return cls(os.environ)

    def get(self, name: str, default: str = "") -> str:
        """``name``'s value with its surrounding blanks removed; ``default`` when it is unset or blank."""
        return self.environ.get(name, "").strip() or default

    def given(self, name: str) -> str | None:
        """``name``'s value exactly as set (None when unset), for a message that quotes it."""
        return self.environ.get(name)

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The variables whose names start with ``prefix`` and that are not blank, as set."""
        return {k: v for k, v in self.environ.items() if k.startswith(prefix) and v.strip()}

    def for_workers(self) -> dict[str, str]:
        """The variables of :data:`WORKER_NAMES` set here, for the environment of the workers a session
        starts (a worker started elsewhere, by the user, has its own)."""
        return {name: self.environ[name] for name in WORKER_NAMES if self.get(name)}

    def child_environment(self, **extra: str) -> dict[str, str]:
        """The environment for a process the workbench starts: this snapshot, with ``extra`` added."""
        return {**self.environ, **extra}


def now(name: str, default: str = "") -> str:
    """``name``'s value in this process's environment now, blanks removed (``default`` when unset or
    blank), as :meth:`Settings.get` reads it: for code that reads one setting where it runs, often (a
    worker's node id per task, a tier's directory per placement), where a whole snapshot would copy
    the environment (tens of microseconds) to read one variable."""
    return os.environ.get(name, "").strip() or default


# -- values: each kind of value a setting holds, read one way wherever it is read ------------------------------
LARGEST_COUNT = 2**63 - 1  # the largest count (of bytes) the kernel and numpy hold: a signed 64-bit integer
_AMOUNT = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*(?P<unit>[A-Za-z]*)")
_YES, _NO = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def whole_number(name: str, text: str, least: int = 0) -> int:
    """The value ``text`` of setting ``name`` as a whole number >= ``least``, written in the digits 0-9
    (blanks around it aside). Python's ``int()`` also reads other scripts' digits ('١٢' is 12), a sign
    and underscores: a ``ValueError`` naming the setting for those and for anything else."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or int(value) < least:
        raise ValueError(f"${name} is a whole number >= {least} written in the digits 0-9, got {text!r}")
    if int(value) > LARGEST_COUNT:
        raise ValueError(f"${name} is at most {LARGEST_COUNT} (a 64-bit count), got {text!r}")
    return int(value)


def byte_amount(name: str, text: str) -> int:
    """The value ``text`` of setting ``name`` as bytes > 0: a number in the digits 0-9 with a unit (``4GiB``,
    ``500MB``, ``1.5GiB``) or whole bytes (``1048576``). A ``ValueError`` naming the setting for anything
    else: words, other scripts' digits, a fraction of a byte ('1.5'), more than a 64-bit count."""
    value = text.strip()
    match = _AMOUNT.fullmatch(value)
    amount = 0
    if match is not None and (match["unit"] or float(match["number"]).is_integer()):
        from dask.utils import parse_bytes  # the units Dask reads a memory limit with

        try:
            amount = parse_bytes(value)
        except (ValueError, OverflowError):  # an unknown unit; a number past a float's range
            amount = 0
    if not 0 < amount <= LARGEST_COUNT:
        raise ValueError(
            f"${name} is an amount of memory: digits 0-9 and a unit (e.g. '4GiB', '500MB') or whole bytes, got {text!r}"
        )
    return amount


def flag(name: str, text: str, default: bool) -> bool:
    """The value ``text`` of setting ``name`` as yes (1, true, on, yes) or no (0, false, off, no), any
    case; ``default`` when it is blank. A ``ValueError`` naming the setting for anything else."""
    value = text.strip().lower()
    if not value:
        return default
    if value in _YES or value in _NO:
        return value in _YES
    raise ValueError(f"${name} is 1 (or true, on, yes) or 0 (or false, off, no), got {text!r}")


# How `workbench settings` checks a value: the reader of each variable that is more than text (a
# number, an amount, a flag) reads it with one of the functions above, and this names which.
CHECKS: dict[str, Callable[[str, str], object]] = {
    SLURM_PREFIX + "JOBS": functools.partial(whole_number, least=1),
    SLURM_PREFIX + "CORES": functools.partial(whole_number, least=1),
    SLURM_PREFIX + "MEMORY": byte_amount,
    MAX_MEMORY: byte_amount,
    DRAM_BUDGET: whole_number,
    GPU_BYTES: byte_amount,
    TLS: functools.partial(flag, default=True),
}


def problem(name: str, value: str | None) -> str | None:
    """Why ``value`` is not a value of setting ``name`` (its check in :data:`CHECKS`); None when it is one,
    is unset or blank (the default then), or ``name`` has no check."""
    check = CHECKS.get(name)
    if check is None or value is None or not value.strip():
        return None
    try:
        check(name, value)
    except ValueError as error:
        return str(error)
    return None


def described(settings: Settings | None = None) -> list[dict[str, str | None]]:
    """Every variable of :data:`NAMES` with what it sets, its value in ``settings`` (default: the
    environment now; None where unset; the Slurm family as the variables of it that are set) and
    ``error``: why that value is invalid (:func:`problem`), None when it is not."""
    settings = settings or Settings.read()
    rows: list[dict[str, str | None]] = []
    for name, meaning in NAMES.items():
        if name.endswith("<FIELD>"):
            given = settings.prefixed(name.removesuffix("<FIELD>"))
            value = " ".join(f"{k}={v}" for k, v in given.items()) or None
            errors = [why for k, v in given.items() if (why := problem(k, v))]
        else:
            value = settings.given(name)
            errors = [why] if (why := problem(name, value)) else []
        rows.append({"name": name, "meaning": meaning, "value": value, "error": "; ".join(errors) or None})
    return rows


def export(name: str, value: str, *, replace: bool = False) -> str:
    """Set ``name`` in this process's environment (unless it is set and ``replace`` is false): only for a
    variable another library reads at its first import, before the workbench's own use of it (numba's
    ``NUMBA_CACHE_DIR``, ``NUMBA_ENABLE_CUDASIM``). Returns the value in force."""
    if replace or name not in os.environ:
        os.environ[name] = value
    return os.environ[name]


def unexport(name: str, previous: str | None) -> None:
    """Put ``name`` back as it was before an :func:`export` (``previous`` None: unset)."""
    if previous is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = previous
