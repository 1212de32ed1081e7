"""The kinds of cluster ``workbench.start()`` can run on, each registered once and chosen by name.

``local``: worker processes on this machine (a LocalCluster, or a SpecCluster of simulated nodes).
``scheduler``: join a running Dask scheduler by its address (a cluster started by hand, by dask-mpi, ...).
``slurm``: workers submitted as Slurm jobs with dask-jobqueue's ``SLURMCluster``; the scheduler runs
in this process, and the jobs are cancelled (and checked gone from ``squeue``) when the session closes.
``gateway``: a cluster of the user's own from a dask-gateway server (a JupyterHub's), shut down when
the session closes.

A new way to get workers is one :class:`ClusterKind` subclass passed to :func:`register`: it checks
the :class:`ClusterRequest` before anything starts and opens a connected client with its workers up.

``$WORKBENCH_MAX_MEMORY`` (bytes, or "4GiB") caps a learner's local cluster, workers x memory limit,
so that a class sharing one server cannot take each other's memory: ``memory_limit="auto"`` shares the
cap, an explicit request above it is refused.

Every kind that starts its own scheduler (``local``, ``slurm``) talks TLS with credentials made for that
cluster alone (``Security.temporary()``), so another user of the machine cannot connect to a learner's
scheduler or workers (a client there runs code as that learner); ``$WORKBENCH_TLS=0`` turns it off. A
local cluster keeps them in memory; Slurm's worker jobs read them from files only the user can read, in
a directory of the log directory (which the nodes share), removed when the cluster closes
(:func:`shared_security`). A task's round trip costs the same (10.7 ms with TLS, 10.6 ms without, on
the 2-core machine of the decision log).

Every text setting of the ``slurm`` kind ends up in a job script: a line break in one would end its
``#SBATCH`` line and make the rest a command, so :class:`SlurmOptions` refuses control characters.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import dask
import psutil
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster
from distributed.deploy import Cluster
from distributed.security import Security

import workbench.runtime.dask_seam as dask_seam
import workbench.settings as settings_names
from workbench.kernels.cache import cache_root, private_directories
from workbench.memory.tiers import others_could_swap
from workbench.runtime.dashboard import (
    NO_WORKER_ROUTES_ENV,
    OFF,
    SOCKET,
    SocketLocalCluster,
    SocketScheduler,
    check_socket_place,
    no_worker_routes,
    socket_path,
)
from workbench.settings import Settings

NODE_ID_ENV = settings_names.NODE_ID
CLUSTER_ENV = settings_names.CLUSTER  # the kind start() uses when its caller names none
MAX_MEMORY_ENV = settings_names.MAX_MEMORY  # the per-learner cap: workers x memory limit of a local cluster
# "0": clusters the workbench starts talk plain TCP (default: TLS, with credentials of their own)
TLS_ENV = settings_names.TLS
SLURM_ENV_PREFIX = settings_names.SLURM_PREFIX  # WORKBENCH_SLURM_JOBS, _CORES, ...: SlurmOptions.from_settings
# Slurm's --time: [D-]HH:MM:SS (MM:SS or a bare minute count also parse in Slurm, but read as different things).
WALLTIME = re.compile(r"(\d+-)?\d{1,2}:[0-5]\d:[0-5]\d")  # matched whole: fullmatch, so no trailing newline
# A line break (or any control character) in a job script's setting ends its #SBATCH line: the rest
# becomes a shell command, and sbatch reads no #SBATCH line after it.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def worker_env(threads_per_worker: int, settings: Settings) -> dict[str, str]:
    """Environment for worker processes the session starts: its settings that workers read
    (:meth:`~workbench.settings.Settings.for_workers`), numba on the worker's threads, and the shared
    kernel cache."""
    from workbench.kernels import numba_cache_directory

    return {
        **settings.for_workers(),
        "NUMBA_NUM_THREADS": str(threads_per_worker),
        settings_names.NUMBA_CACHE: numba_cache_directory(),
    }


def tls_wanted(settings: Settings) -> bool:
    """Whether a cluster the workbench starts talks TLS: yes unless ``$WORKBENCH_TLS`` is 0, false, off or no."""
    return settings_names.flag(TLS_ENV, settings.get(TLS_ENV), default=True)


def _temporary_security() -> Security:
    """A new self-signed key and certificate, in memory, for every role of one cluster."""
    try:
        return Security.temporary()
    except ImportError as error:  # Security.temporary needs the cryptography package
        raise RuntimeError(
            f"a cluster's TLS credentials need the cryptography package ({error}): pip install cryptography, "
            f"or set {TLS_ENV}=0 on a machine no other user shares"
        ) from error


def local_security(settings: Settings) -> Security | None:
    """TLS credentials made for one local cluster (None when ``$WORKBENCH_TLS`` is 0, false, off or no):
    without them no other process, another user's included, can connect to its scheduler or workers."""
    return _temporary_security() if tls_wanted(settings) else None


def _write_private(directory_fd: int, name: str, text: str) -> None:
    """Write ``name`` in the directory open as ``directory_fd``, created new and readable by the user alone."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=directory_fd)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)  # whatever the umask
        file.write(text)


def shared_security(parent: str) -> tuple[Security, str]:
    """TLS credentials made for one cluster whose workers run elsewhere (Slurm jobs), and the directory
    holding them: a new directory in ``parent`` (a directory the nodes share) that only this user can
    enter, with the certificate and key readable by the user alone. The caller removes the directory
    when the cluster closes.

    The workers read the files by path (their command line names them), so the key itself is never
    in a job script or on a command line. The files are created through the directory's descriptor,
    checked first as the user's own and private, so a directory renamed or replaced meanwhile cannot
    receive them.
    """
    if shlex.quote(parent) != parent:  # dask-jobqueue writes the paths into the worker command unquoted
        raise ValueError(
            f"the log directory {parent!r} holds the workers' TLS credentials, and the worker command names "
            "them unquoted: choose a log directory whose path has no spaces or shell characters (letters, "
            f"digits and @%+=:,./- only), or set {TLS_ENV}=0 on a cluster no other user shares"
        )
    credentials = _temporary_security()
    private_directories(parent)  # each directory it makes 0700, whatever the umask (~/.cache/locality-workbench)
    # Dask reads the files by path at every connection: a user who may rename entries of ``parent``
    # (or of a directory above it) could swap the private directory for one holding a key of theirs
    if problem := others_could_swap(parent):
        raise ValueError(
            f"the log directory {parent} would hold the workers' TLS credentials, but {problem}: another "
            "user could swap them for their own and connect as you. Choose a log directory of your own "
            "(only you, or root, own it and every directory above it; none is writable by others unless sticky)"
        )
    directory = tempfile.mkdtemp(prefix="tls-", dir=parent)  # mode 0700, a name no one can guess
    try:
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            info = os.fstat(directory_fd)
            if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
                raise RuntimeError(f"{directory} is not this user's private directory: another user replaced it")
            _write_private(directory_fd, "cert.pem", credentials.tls_worker_cert)
            _write_private(directory_fd, "key.pem", credentials.tls_worker_key)
        finally:
            os.close(directory_fd)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    roles = {
        f"tls_{role}_{part}": path
        for role in ("client", "scheduler", "worker")
        for part, path in (("cert", cert), ("key", key))
    }
    return Security(require_encryption=True, tls_ca_file=cert, **roles), directory  # self-signed: its own CA


def amount_of_memory(value: object) -> int:
    """The bytes of an amount of memory (``"4GiB"``, ``2**30``), or 0 when ``value`` is not one.

    Dask's ``parse_bytes`` raises OverflowError for an amount no integer holds ("1e400"), ValueError
    for words and TypeError for other types: every caller names its setting in its own error. It also
    reads True as 1 byte, and a unit without a number (``"GiB"``, a space, a line separator) as one of that
    unit: not amounts either.
    """
    if isinstance(value, bool) or (isinstance(value, str) and not any(c.isdigit() for c in value)):
        return 0
    try:
        return parse_bytes(value)
    except (ValueError, TypeError, OverflowError):
        return 0


def max_memory(settings: Settings) -> int | None:
    """The per-learner memory cap in bytes, from ``$WORKBENCH_MAX_MEMORY`` (None: no cap)."""
    text = settings.get(MAX_MEMORY_ENV)
    return settings_names.byte_amount(MAX_MEMORY_ENV, text) if text else None


def one_line(setting: str, value: object) -> None:
    """Refuse a Slurm setting with a line break or another control character in it: the job script
    holds it on an ``#SBATCH`` line, which the break would end, making the rest a shell command."""
    if isinstance(value, str) and (found := CONTROL_CHARACTERS.search(value)):
        raise ValueError(
            f"{setting} {value!r} has a control character ({found.group()!r}, e.g. a line break): in the job "
            "script it would end the #SBATCH line and run the rest as a command; give it on one line"
        )


@dataclass(frozen=True)
class SlurmOptions:
    """How the ``slurm`` kind asks Slurm for workers: ``jobs`` jobs of ``cores`` cores and ``memory`` each.

    Each job runs ``cores / threads_per_worker`` worker processes (one per core by default, as the local
    cluster does), and its node id is the job's hostname. ``account`` and ``partition`` go to ``sbatch``
    as they are; ``interface`` is the network interface of the scheduler and the workers (e.g. "ib0");
    ``directives`` are more ``#SBATCH`` options (e.g. ``("--qos=debug",)``); the jobs' logs go to
    ``log_directory`` (default ``~/.cache/locality-workbench/slurm``, which compute nodes usually see),
    and so do the workers' TLS credentials, in a private directory removed at close. ``jobs=None`` takes
    one job, or as many as ``start(n_workers=...)`` needs. Account, partition, directives and log
    directory go into the job script as they are: a control character (a line break) is refused.
    """

    jobs: int | None = None
    cores: int = 1
    memory: str = "2GiB"
    walltime: str = "01:00:00"
    account: str | None = None
    partition: str | None = None
    interface: str | None = None
    directives: tuple[str, ...] = ()
    log_directory: str | None = None

    def __post_init__(self) -> None:
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1):
            raise ValueError(f"jobs must be a positive number of Slurm jobs, got {self.jobs!r}")
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise ValueError(f"cores must be a positive number of cores per job, got {self.cores!r}")
        if amount_of_memory(self.memory) <= 0:
            raise ValueError(f"memory must be an amount per job such as '2GiB', got {self.memory!r}")
        if not isinstance(self.walltime, str) or not WALLTIME.fullmatch(self.walltime):
            raise ValueError(f"walltime must be HH:MM:SS (or D-HH:MM:SS), e.g. '01:00:00', got {self.walltime!r}")
        if self.interface is not None and self.interface not in psutil.net_if_addrs():
            raise ValueError(
                f"interface {self.interface!r} is not a network interface of this machine "
                f"(it has {', '.join(sorted(psutil.net_if_addrs()))}): name the one the nodes share, or none"
            )
        if isinstance(self.directives, str):
            raise ValueError(f"directives must be a list of sbatch options, got the string {self.directives!r}")
        object.__setattr__(self, "directives", tuple(self.directives))
        for name in ("account", "partition", "log_directory"):
            one_line(name, getattr(self, name))
        for directive in self.directives:
            one_line("directives", directive)

    @classmethod
    def from_settings(cls, settings: Settings) -> SlurmOptions:
        """The options set by ``$WORKBENCH_SLURM_<FIELD>`` (``JOBS``, ``CORES``, ``MEMORY``, ``WALLTIME``,
        ``ACCOUNT``, ``PARTITION``, ``INTERFACE``, ``DIRECTIVES`` as one shell-quoted string, ``LOG_DIRECTORY``);
        the defaults for the others. A misspelt name is refused."""
        names = {f.name.upper(): f.name for f in fields(cls)}
        given: dict[str, Any] = {}
        for key, value in settings.prefixed(SLURM_ENV_PREFIX).items():
            name = names.get(key.removeprefix(SLURM_ENV_PREFIX))
            if name is None:
                known = ", ".join(SLURM_ENV_PREFIX + n for n in names)
                raise ValueError(f"${key} is not a Slurm setting of the workbench; the settings are {known}")
            if name in ("jobs", "cores"):
                given[name] = settings_names.whole_number(key, value, least=1)
            else:
                if name == "memory":
                    settings_names.byte_amount(key, value)  # checked as every amount setting is; sbatch takes the text
                one_line(f"${key}", value.strip())  # named as it was set (shlex.split would hide a line break)
                given[name] = _split(key, value) if name == "directives" else value.strip()
        return cls(**given)


def _split(key: str, value: str) -> tuple[str, ...]:
    """The sbatch options of ``$key``, one shell-quoted string; a ValueError naming it for a quote left open."""
    try:
        return tuple(shlex.split(value))
    except ValueError as error:  # shlex says only "No closing quotation"
        raise ValueError(
            f"${key} is sbatch options quoted as in a shell ({error.args[0].lower()}: {value!r}); close the quote"
        ) from None


# The scheduler's HTTP routes with the dashboard off (Dask's public setting
# distributed.scheduler.http.routes): health and the Prometheus metrics only. Dask's default adds its
# info pages (a learner's task exceptions with their messages, worker logs, call stacks), its JSON
# pages and a proxy to the workers' pages, on a loopback port that every local user can open.
OFF_SCHEDULER_ROUTES = ("distributed.http.scheduler.prometheus", "distributed.http.health")


@dataclass(frozen=True)
class ClusterRequest:
    """What ``start()`` was asked for, its common arguments already checked; every kind gets the same record."""

    n_workers: int | None
    threads_per_worker: int
    memory_limit: str | int
    dashboard: str  # workbench.runtime.dashboard: "off", "port" or "socket"
    timeout: float
    nodes: tuple[str, ...] | None = None
    address: str | None = None
    slurm: SlurmOptions | None = None
    settings: Settings = field(default_factory=Settings.read, repr=False)

    @property
    def scheduler_options(self) -> dict[str, Any]:
        """The scheduler's HTTP server (health, metrics) always runs, on a free port of the loopback
        interface (no clash between clusters, never on the network) or, for "socket", on the user's
        dashboard socket instead (:mod:`workbench.runtime.dashboard`); the bokeh dashboard on it only
        when asked for."""
        return {"dashboard_address": "127.0.0.1:0", "dashboard": self.dashboard != OFF}

    @property
    def scheduler_config(self) -> dict[str, Any]:
        """Dask's settings for a scheduler started in this process (the local and Slurm kinds; ``start()``
        sets them while the kind opens its cluster): with the dashboard off, the scheduler's HTTP server
        answers health and metrics only (:data:`OFF_SCHEDULER_ROUTES`)."""
        return {"distributed.scheduler.http.routes": list(OFF_SCHEDULER_ROUTES)} if self.dashboard == OFF else {}


class ClusterKind(ABC):
    """One way for ``start()`` to get workers: checks a request, then opens a client to them."""

    name: ClassVar[str]
    owns_cluster: ClassVar[bool] = True  # False: the session joins a cluster someone else closes

    @abstractmethod
    def check(self, request: ClusterRequest) -> None:
        """Refuse, with a ValueError saying what to do, what this kind cannot use (before anything starts)."""

    @abstractmethod
    def open(self, request: ClusterRequest) -> tuple[Client, Cluster | None]:
        """A client with the cluster's workers up, and the cluster when this kind started it; nothing is
        left running when it raises."""


KINDS: dict[str, ClusterKind] = {}


def register(kind: type[ClusterKind]) -> type[ClusterKind]:
    """Make ``kind`` a cluster ``start(cluster=...)`` can name (a class decorator)."""
    KINDS[kind.name] = kind()
    return kind


def kind_named(name: str) -> ClusterKind:
    """The registered kind ``name``; a ValueError listing the kinds for a name it does not know."""
    try:
        return KINDS[name]
    except KeyError:
        known = sorted(KINDS)
        raise ValueError(f"no cluster kind {name!r} (from cluster= or ${CLUSTER_ENV}); the kinds are {known}") from None


def _connected(cluster: Cluster, n_workers: int, timeout: float, wait: Any = None) -> Client:
    """A client of ``cluster`` once ``n_workers`` are up (``wait(client)`` instead, when given); the
    cluster is closed when that fails."""
    try:
        client = Client(cluster, timeout=timeout)
        try:
            if wait is None:
                client.wait_for_workers(n_workers, timeout=timeout)
            else:
                wait(client)
        except BaseException:
            client.close(timeout=timeout)
            raise
        return client
    except BaseException:
        cluster.close(timeout=timeout)
        raise


@register
class LocalKind(ClusterKind):
    """Worker processes on this machine; ``nodes`` gives each its own simulated node id."""

    name = "local"

    def n_workers(self, request: ClusterRequest) -> int:
        """The number of workers: one per entry of ``nodes``, else ``n_workers``, else one per core."""
        return len(request.nodes) if request.nodes is not None else (request.n_workers or os.cpu_count() or 1)

    def memory_limit(self, request: ClusterRequest) -> str | int:
        """Each worker's memory limit within the per-learner cap (``$WORKBENCH_MAX_MEMORY``)."""
        n_workers, cap = self.n_workers(request), max_memory(request.settings)
        if request.memory_limit == "auto":
            machine = dask_seam.machine_memory()
            share = min(machine, cap or machine) // n_workers
            if share <= 1:  # Dask reads 0 as no limit at all and 1 as the whole machine: the cap would be lifted
                raise ValueError(
                    f"the per-learner cap ${MAX_MEMORY_ENV}={format_bytes(cap or 0)} cannot be shared among "
                    f"{n_workers} workers: ask for fewer workers, or set a cap of at least {2 * n_workers} bytes"
                )
            return share
        if cap is None:
            return request.memory_limit
        per_worker = amount_of_memory(request.memory_limit)
        if per_worker <= 0 and request.memory_limit not in (0, "0", None):  # Dask's 0 and None: no limit at all
            asked = request.memory_limit
            raise ValueError(f"memory_limit must be 'auto' or an amount such as '2GiB', got {asked!r}")
        if per_worker == 1:  # Dask reads 1 (as it reads 0.5) as a fraction of the machine: all of it
            raise ValueError("memory_limit=1 is the whole machine to Dask, above any per-learner cap: give an amount")
        if per_worker <= 0 or n_workers * per_worker > cap:
            asked = "no limit" if per_worker <= 0 else f"{n_workers} x {format_bytes(per_worker)}"
            raise ValueError(
                f"this cluster would take {asked} of memory, above the per-learner cap ${MAX_MEMORY_ENV}="
                f"{format_bytes(cap)}: ask for fewer workers or a smaller memory_limit, or memory_limit='auto' "
                f"(which shares the cap among the workers)"
            )
        return per_worker

    def check(self, request: ClusterRequest) -> None:
        """Refuse a memory request above the per-learner cap, and a dashboard socket path Unix cannot bind."""
        self.memory_limit(request)
        if request.dashboard == SOCKET:  # refused here, not as a scheduler that fails to start
            check_socket_place(socket_path(request.settings))

    def open(self, request: ClusterRequest) -> tuple[Client, Cluster | None]:
        """A LocalCluster, or a SpecCluster when ``nodes`` names each worker's simulated node."""
        n_workers, memory_limit = self.n_workers(request), self.memory_limit(request)
        env = worker_env(request.threads_per_worker, request.settings)
        # with the dashboard on the user's socket, no HTTP route on any worker's port either
        routes = {"config": no_worker_routes()} if request.dashboard == SOCKET else {}
        security = local_security(request.settings)
        tls = {"security": security, "protocol": "tls://"} if security is not None else {}
        cluster: LocalCluster | SpecCluster
        if request.nodes is None:
            cluster_class = SocketLocalCluster if request.dashboard == SOCKET else LocalCluster
            cluster = cluster_class(
                n_workers=n_workers,
                threads_per_worker=request.threads_per_worker,
                processes=True,
                memory_limit=memory_limit,
                scheduler_kwargs=request.scheduler_options,
                env=env,
                **routes,
                **tls,
            )
        else:  # LocalCluster gives every worker the same environment; a SpecCluster gives each its own
            workers = {
                f"{node}-{i}": {
                    "cls": Nanny,
                    "options": {
                        "nthreads": request.threads_per_worker,
                        "memory_limit": memory_limit,
                        "env": {**env, NODE_ID_ENV: node},
                        "host": "127.0.0.1",
                        "silence_logs": logging.WARNING,
                        **routes,
                        **tls,
                    },
                }
                for i, node in enumerate(request.nodes)
            }
            scheduler_class = SocketScheduler if request.dashboard == SOCKET else Scheduler
            scheduler = {"cls": scheduler_class, "options": {"host": "127.0.0.1", **request.scheduler_options, **tls}}
            cluster = SpecCluster(
                workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, security=security or Security()
            )
        return _connected(cluster, n_workers, request.timeout), cluster


@register
class SchedulerKind(ClusterKind):
    """A running scheduler, joined by its address; its workers are whatever that cluster runs."""

    name = "scheduler"
    owns_cluster = False

    def check(self, request: ClusterRequest) -> None:
        """An address is needed, and no local cluster's shape."""
        if not request.address:
            raise ValueError(
                "cluster='scheduler' joins a running scheduler: give start(address='tcp://host:8786') "
                "or set $WORKBENCH_SCHEDULER"
            )
        if request.nodes is not None or request.n_workers is not None:
            raise ValueError(
                "n_workers and nodes configure a local cluster; with a scheduler address the "
                "workers are whatever that cluster runs (set WORKBENCH_NODE_ID on those workers)"
            )

    def open(self, request: ClusterRequest) -> tuple[Client, Cluster | None]:
        """A client of the scheduler at ``request.address`` (Dask's TLS settings, if the address is tls://)."""
        security = Security()  # from Dask's configuration: distributed.comm.tls
        if request.address.startswith("tls://") and security.get_connection_args("client").get("ssl_context") is None:
            raise ValueError(
                f"{request.address} talks TLS and Dask has no TLS credentials configured here: a workbench local "
                f"cluster makes credentials of its own that no other process has; to join one from another "
                f"process, start it with {TLS_ENV}=0 (on a machine no other user shares), or configure "
                "distributed.comm.tls with a certificate both sides trust"
            )
        return Client(request.address, timeout=request.timeout, security=security), None


GATEWAY_WORKERS = 2  # a gateway cluster's workers when start() names none (a learner's share of a hub)


def _gateway_cluster_class() -> type:
    """dask-gateway's ``GatewayCluster``, closed the way a session closes every cluster it owns
    (``close(timeout=...)``): shut down on the gateway, whoever else holds it (imported when used)."""
    from dask_gateway import GatewayCluster

    class WorkbenchGatewayCluster(GatewayCluster):
        def close(self, timeout: float | None = None, shutdown: bool | None = True) -> Any:
            return super().close(shutdown=shutdown)

    return WorkbenchGatewayCluster


@register
class GatewayKind(ClusterKind):
    """A cluster of this user's own from a dask-gateway server (the hubs of Pangeo and 2i2c give
    each user Dask clusters so): its address, proxy and authentication come from Dask's configuration
    (``gateway.address``, ``gateway.auth.type``; a JupyterHub spawner sets them, and the hub's API
    token, in each user's environment). The gateway starts the scheduler and workers as this user,
    talks TLS with credentials made for this cluster, and keeps other users from listing, connecting
    to or stopping it; its own limits (cores, memory per cluster) apply. The session shuts the
    cluster down when it closes."""

    name = "gateway"

    def check(self, request: ClusterRequest) -> None:
        """dask-gateway is installed and a gateway address configured; no local cluster's shape."""
        try:
            import dask_gateway  # noqa: F401
        except ImportError:
            raise ValueError(
                "cluster='gateway' needs the dask-gateway client: pip install dask-gateway (the hub's image "
                "usually has it)"
            ) from None
        if not dask.config.get("gateway.address", None):
            raise ValueError(
                "cluster='gateway' needs the gateway's address in Dask's configuration: set "
                "$DASK_GATEWAY__ADDRESS (and $DASK_GATEWAY__AUTH__TYPE, e.g. jupyterhub), as the hub's spawner does"
            )
        if request.nodes is not None:
            raise ValueError("nodes simulates nodes on a local cluster; a gateway cluster's workers are the gateway's")
        if request.threads_per_worker != 1 or request.memory_limit != "auto":  # not passed on: refused, not ignored
            raise ValueError(
                "a gateway cluster's workers have the cores and memory the gateway gives them (its cluster options, "
                "such as worker_cores and worker_memory, where the hub offers them): start(cluster='gateway') takes "
                f"neither threads_per_worker nor memory_limit, got {request.threads_per_worker!r} and "
                f"{request.memory_limit!r}"
            )

    def open(self, request: ClusterRequest) -> tuple[Client, Cluster | None]:
        """A new cluster on the gateway, scaled to ``n_workers`` (default :data:`GATEWAY_WORKERS`),
        and a client once they are up; the cluster is shut down when that fails."""
        n_workers = request.n_workers or GATEWAY_WORKERS
        cluster = _gateway_cluster_class()(shutdown_on_close=True)
        try:
            cluster.scale(n_workers)
            client = cluster.get_client()  # the default client, as the other kinds make
            try:
                client.wait_for_workers(n_workers, timeout=request.timeout)
            except BaseException:
                client.close(timeout=request.timeout)
                raise
        except BaseException:
            cluster.close()
            raise
        return client, cluster


def _squeue(job_ids: Sequence[str], timeout: float = 30) -> dict[str, str]:
    """Job id -> ``STATE (reason)`` for those of ``job_ids`` still in Slurm's queue."""
    done = subprocess.run(
        ["squeue", "--noheader", f"--user={os.getuid()}", "--format=%i %T %R"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"squeue failed ({done.returncode}): {done.stderr.strip()}")
    states = {}
    for line in done.stdout.splitlines():
        job_id, _, state = line.strip().partition(" ")
        if job_id in job_ids:
            state, _, reason = state.partition(" ")  # the reason of a pending job, the nodes of a running one
            reason = reason.strip().strip("()")
            states[job_id] = f"{state} ({reason})" if reason else state
    return states


def _cancel(job_ids: Sequence[str], timeout: float) -> None:
    """``scancel`` the jobs, then wait (at most ``timeout`` s) until ``squeue`` lists none of them."""
    if not job_ids:
        return
    deadline = time.monotonic() + timeout
    while left := _squeue(job_ids):
        subprocess.run(["scancel", *left], capture_output=True, timeout=30, check=False)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"Slurm job(s) still in the queue {timeout} s after scancel: "
                + ", ".join(f"{j} {s}" for j, s in left.items())
                + f"; cancel them with: scancel {' '.join(left)}"
            )
        time.sleep(0.5)


SUBMIT_WAIT_S = 30.0  # past the start's timeout, how long a job's sbatch still under way may take to answer


def _submissions_ended(cluster: Cluster, jobs: int, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until every one of the ``jobs`` submissions has ended, submitted or
    refused (SpecCluster lists its jobs once all of them have): a job still being submitted has no id to
    report or cancel yet. False when one was refused (the caller says why), else True."""
    deadline = time.monotonic() + timeout
    while len(cluster.workers) < jobs and cluster.submit_error is None and time.monotonic() < deadline:
        time.sleep(0.05)  # a poll interval of a bounded wait on sbatch's answer
    return cluster.submit_error is None


def _job_ids(cluster: Cluster) -> list[str]:
    return [str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)]


def _slurm_cluster_class() -> type:
    """dask-jobqueue's SLURMCluster whose ``close`` also waits until its jobs have left ``squeue``."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ValueError(
            "cluster='slurm' needs dask-jobqueue, which is not installed: reinstall the workbench "
            "(pip install -e .) or pip install dask-jobqueue"
        ) from None

    class WorkbenchSLURMCluster(dask_seam.keeping_scale_errors(SLURMCluster)):  # type: ignore[misc]
        """A SLURMCluster whose close leaves none of its jobs in Slurm's queue nor its TLS credentials
        (``credentials_directory``) on disk, and that keeps the error of a submission that failed in
        ``submit_error`` (Dask's ``scale`` submits in the background and only logs it:
        :func:`~workbench.runtime.dask_seam.keeping_scale_errors`)."""

        credentials_directory: str | None = None  # removed at close: see shared_security

        def close(self, timeout: float | None = None) -> Any:
            job_ids = _job_ids(self)
            try:
                return super().close(timeout)
            finally:
                try:
                    _cancel(job_ids, timeout or 60)
                finally:
                    if self.credentials_directory is not None:
                        shutil.rmtree(self.credentials_directory, ignore_errors=True)

    return WorkbenchSLURMCluster


@register
class SlurmKind(ClusterKind):
    """Workers as Slurm jobs (dask-jobqueue's SLURMCluster); the scheduler runs in this process, and all of
    them talk TLS with credentials of their own (see :meth:`cluster`)."""

    name = "slurm"

    def options(self, request: ClusterRequest) -> SlurmOptions:
        """The request's Slurm options, else those of ``$WORKBENCH_SLURM_*``."""
        return request.slurm if request.slurm is not None else SlurmOptions.from_settings(request.settings)

    def shape(self, request: ClusterRequest) -> tuple[int, int]:
        """(jobs, worker processes per job)."""
        options = self.options(request)
        if options.cores % request.threads_per_worker:
            raise ValueError(
                f"a job's {options.cores} cores do not split into workers of {request.threads_per_worker} "
                "threads: make cores a multiple of threads_per_worker"
            )
        per_job = options.cores // request.threads_per_worker
        if request.n_workers is None:
            return options.jobs or 1, per_job
        jobs = -(-request.n_workers // per_job)
        if options.jobs is not None and options.jobs * per_job != request.n_workers:
            raise ValueError(
                f"n_workers={request.n_workers} but {options.jobs} job(s) of {per_job} worker(s) make "
                f"{options.jobs * per_job}: give one of them (n_workers asks for {jobs} job(s))"
            )
        if request.n_workers % per_job:
            raise ValueError(f"n_workers={request.n_workers} is not a whole number of jobs of {per_job} workers")
        return jobs, per_job

    def check(self, request: ClusterRequest) -> None:
        """Slurm's commands on PATH, dask-jobqueue installed, a shape the options can make."""
        if request.nodes is not None:
            raise ValueError("nodes= simulates nodes on one machine; a Slurm worker's node is its job's host")
        if request.memory_limit != "auto":  # not passed on: refused, not ignored
            raise ValueError(
                "a Slurm job's memory is shared by its workers: give it as SlurmOptions(memory=...) or "
                f"$WORKBENCH_SLURM_MEMORY, not memory_limit (got {request.memory_limit!r})"
            )
        missing = [c for c in ("sbatch", "squeue", "scancel") if shutil.which(c) is None]
        if missing:
            raise ValueError(
                f"cluster='slurm' submits jobs with Slurm's commands, and {', '.join(missing)} is not on PATH: "
                "run this on a Slurm login node (or load Slurm's module), or use cluster='local'"
            )
        _slurm_cluster_class()
        self.shape(request)
        if request.dashboard == SOCKET:  # its scheduler runs here: refused before any job is submitted
            check_socket_place(socket_path(request.settings))

    def log_directory(self, request: ClusterRequest) -> str:
        """Where the jobs' logs (and the workers' TLS credentials) go, as an absolute path (the job script
        and the worker command name it): the options' ``log_directory``, else
        ``~/.cache/locality-workbench/slurm`` (``$XDG_CACHE_HOME`` when set)."""
        chosen = self.options(request).log_directory or str(cache_root(request.settings) / "slurm")
        return os.path.abspath(os.path.expanduser(chosen))

    def cluster(self, request: ClusterRequest) -> Cluster:
        """The SLURMCluster of ``request``, its scheduler running here and no job submitted yet.

        It talks TLS with credentials of its own unless ``$WORKBENCH_TLS`` is 0: the workers read them
        from a private directory of the log directory (:func:`shared_security`), removed at close."""
        options, (_, per_job) = self.options(request), self.shape(request)
        env = worker_env(request.threads_per_worker, request.settings)
        if request.dashboard == SOCKET:
            env.update(NO_WORKER_ROUTES_ENV)
        log_directory = self.log_directory(request)
        security, credentials_directory = (
            shared_security(log_directory) if tls_wanted(request.settings) else (None, None)
        )
        try:
            cluster = _slurm_cluster_class()(
                cores=options.cores,
                processes=per_job,
                memory=options.memory,
                walltime=options.walltime,
                account=options.account,
                queue=options.partition,
                interface=options.interface,
                job_extra_directives=list(options.directives),
                # The node id of a worker is its job's hostname: a WORKBENCH_NODE_ID that sbatch copies from
                # this process's environment would name every job's node the same.
                job_script_prologue=[f"unset {NODE_ID_ENV}", *(f"export {k}={shlex.quote(v)}" for k, v in env.items())],
                log_directory=log_directory,
                scheduler_options=request.scheduler_options,
                scheduler_cls=SocketScheduler if request.dashboard == SOCKET else Scheduler,
                silence_logs=logging.WARNING,
                security=security,
            )
        except BaseException:
            if credentials_directory is not None:
                shutil.rmtree(credentials_directory, ignore_errors=True)
            raise
        cluster.credentials_directory = credentials_directory
        return cluster

    def open(self, request: ClusterRequest) -> tuple[Client, Cluster | None]:
        """Submit the jobs and wait until every worker is up; past the timeout, say what ``squeue``
        says of each job, and cancel them."""
        (jobs, per_job), log_directory = self.shape(request), self.log_directory(request)
        cluster = self.cluster(request)
        n_workers = jobs * per_job

        def wait(client: Client) -> None:
            cluster.scale(jobs=jobs)
            deadline = time.monotonic() + request.timeout
            while len(dask_seam.scheduler_identity(client, 30)["workers"]) < n_workers:
                if cluster.submit_error is not None:
                    raise RuntimeError(
                        f"Slurm refused the workers' job ({str(cluster.submit_error).strip()}): check the account, "
                        "partition, memory and walltime (WORKBENCH_SLURM_* or SlurmOptions), and that sbatch works here"
                    ) from cluster.submit_error
                if time.monotonic() > deadline and _submissions_ended(cluster, jobs, SUBMIT_WAIT_S):
                    job_ids = _job_ids(cluster)
                    states = _squeue(job_ids)
                    said = ", ".join(f"job {j}: {states.get(j, 'not in the queue')}" for j in job_ids)
                    raise TimeoutError(
                        f"{n_workers} Slurm worker(s) were not up within {request.timeout} s ({said}); the jobs "
                        f"are cancelled. A PENDING job waits for Slurm (its reason says why: try a shorter "
                        f"walltime, another partition, less memory, or a longer timeout); a job that ran "
                        f"left its log in {log_directory}"
                    )
                time.sleep(0.2)

        return _connected(cluster, n_workers, request.timeout, wait), cluster
