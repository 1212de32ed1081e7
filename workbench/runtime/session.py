"""The Dask cluster a workbench run uses: an embedded LocalCluster, an existing scheduler, or Slurm jobs.

``with workbench.start() as session:`` starts one worker process per core (one thread each),
and always closes it. ``start(address=...)`` or ``$WORKBENCH_SCHEDULER`` joins a running
scheduler instead, so the same code runs on many nodes; ``start(cluster="slurm", ...)`` or
``$WORKBENCH_CLUSTER=slurm`` submits the workers as Slurm jobs, cancelled when the session closes.
The kinds of cluster live in :mod:`workbench.runtime.clusters`. Every wait has a timeout.

Locality has two levels, the worker (a process) and the node (a host, where shared memory is
shared). A worker's node id is its hostname unless ``$WORKBENCH_NODE_ID`` says otherwise;
``start(nodes=[...])`` gives each local worker its own node id, simulating several nodes on one
machine for tests and lessons.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import html
import math
import numbers
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import dask
from distributed import Client, Future, LocalCluster, Nanny, Scheduler, SpecCluster, wait

import workbench.runtime.dask_seam as dask_seam
import workbench.settings as settings_names
from workbench.memory import shm, tier_set, tiers
from workbench.memory.tier_set import TierSet
from workbench.runtime.clusters import (
    CLUSTER_ENV,
    CONTROL_CHARACTERS,
    NODE_ID_ENV,
    ClusterRequest,
    SlurmOptions,
    amount_of_memory,
    kind_named,
    max_memory,
)
from workbench.runtime.dashboard import OFF, PORT, SOCKET, dashboard_place, proxy_link
from workbench.runtime.frames import PLUGIN_NAME, FramesPlugin, install
from workbench.runtime.shutdown import at_kernel_shutdown
from workbench.runtime.worker_state import PLUGIN_NAME as STATE_PLUGIN_NAME
from workbench.runtime.worker_state import WorkerState
from workbench.settings import Settings
from workbench.units import size_text

SCHEDULER_ENV = settings_names.SCHEDULER
# The dashboard pages Session.dashboard_links gives, name -> page (Dask's routes, beside "status")
DASHBOARD_PAGES = {
    "Status": "status",
    "Task Stream": "individual-task-stream",
    "Workers Memory": "individual-workers-memory",
    "Progress": "individual-progress",
}
DEFAULT_TIMEOUT = 60.0  # seconds for start-up, connections and waits on results

T = TypeVar("T")


@dataclass(frozen=True)
class PinnedCall:
    """One task for :meth:`Session.submit_pinned`: ``function(*args, **kwargs)`` named ``key``, on
    ``worker`` (an address, or several: any of them)."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    worker: str | Sequence[str]
    key: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0  # Dask's priority: a worker runs its higher-priority tasks first


def _name(function: Any) -> str:
    return getattr(function, "__name__", repr(function))


def cluster_identity(client: Client, timeout: float = 60) -> dict[str, Any]:
    """The scheduler's identity with every worker, asked of the scheduler itself.

    ``Client.scheduler_info()`` refreshes a cache and returns it, and the client's own periodic
    refresh (every 2 s) writes that cache with *no* workers in it: read just after such a refresh,
    a cluster of live workers looked empty (a lesson failed with "no workers" in CI). Asking the
    scheduler directly has no shared state to race with.
    """
    return dask_seam.scheduler_identity(client, timeout)


def set_memory_limits(session: Session, limit: int) -> None:
    """Give every running worker the memory limit ``limit`` (bytes) in place: the worker's memory
    manager (when it spills, pauses), its nanny's (when it restarts the worker, and with which limit)
    and the scheduler's record (what ``identity()`` and the dashboard show, and its total).

    Dask has no public call for this: the three attributes are its internals, set through
    :mod:`workbench.runtime.dask_seam` (``set_worker_memory_limit``, ``set_scheduler_memory_limits``), whose
    contract tests fail when Dask changes them."""

    def on_worker(dask_worker: Any) -> None:
        dask_seam.set_worker_memory_limit(dask_worker, limit)

    def on_scheduler(dask_scheduler: Any) -> None:
        dask_seam.set_scheduler_memory_limits(dask_scheduler, limit)

    client, where = session.client, "set the workers' memory limits"
    session.bounded(client.run, on_worker, nanny=True, where=where)  # the nanny first: a restart gets the new one
    session.bounded(client.run, on_worker, where=where)
    session.bounded(client.run_on_scheduler, on_scheduler, where=where)


def node_id() -> str:
    """The node this process runs on: ``$WORKBENCH_NODE_ID`` or the hostname (read where it runs: a
    worker's node is its own process's setting)."""
    return settings_names.now(NODE_ID_ENV) or socket.gethostname()


@dataclass
class Session:
    """A Dask client and, when the workbench started it, the cluster it owns."""

    client: Client
    cluster: LocalCluster | SpecCluster | None = None
    timeout: float = DEFAULT_TIMEOUT
    dashboard: str = OFF  # where the dashboard is served (workbench.runtime.dashboard): off, port or socket
    request: ClusterRequest | None = field(default=None, repr=False)  # what start() was asked for
    kind: str = "local"  # the kind of cluster start() chose (workbench.runtime.clusters.KINDS)
    tier_set: TierSet | None = field(default=None, repr=False)  # its dram, DRAM cache and gpu arrays (start() makes it)
    _closed: bool = field(default=False, repr=False)
    _node_of: dict[str, str] = field(default_factory=dict, repr=False)  # worker address -> node id
    _owned: dict[str, Any] = field(default_factory=dict, repr=False)  # name -> what the session opened itself
    _exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)  # closes them
    _unhook: Callable[[], None] | None = field(default=None, repr=False)  # cancels the close at kernel shutdown

    def __post_init__(self) -> None:
        self._unhook = at_kernel_shutdown(self.close, "the workbench session")

    @property
    def settings(self) -> Settings:
        """The ``$WORKBENCH_*`` settings this session started with (:class:`~workbench.settings.Settings`,
        read once by :func:`start`); a session made from a client alone reads them now."""
        return self.request.settings if self.request is not None else Settings.read()

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close what the session opened for itself (:meth:`own`, last first), the client, and the
        cluster when this session started it: its workers first (:meth:`_stop_workers`), then its
        scheduler. Safe to call twice. In a Jupyter kernel it also runs when the kernel shuts down
        (:mod:`workbench.runtime.shutdown`)."""
        if self._closed:
            return
        self._closed = True
        if self._unhook is not None:
            self._unhook()
        # Each step runs even if one before it raised (an ExitStack's callbacks run last pushed first):
        # what it opened, its tier set, its client, then its cluster's workers and scheduler.
        with contextlib.ExitStack() as steps:
            if self.cluster is not None:
                steps.callback(self.cluster.close, timeout=self.timeout)
                steps.callback(self._stop_workers)
            steps.callback(self.client.close, timeout=self.timeout)
            if self.tier_set is not None:  # its arrays freed, out of use: the set in use before is again
                steps.callback(tier_set.deactivate, self.tier_set)
                steps.callback(self.tier_set.close)  # may raise: a cached copy that cannot be written back
            self._exits.close()

    def _stop_workers(self) -> None:
        """Stop a local cluster's worker processes before its scheduler, each given the session's
        timeout to exit, once the scheduler has let go of this session's client.

        Dask's own close gave each worker process 4 s to exit and then killed it with a warning under
        the lesson ("Worker process still alive after 4.0 seconds, killing", twice per lesson on a
        loaded 2-core machine, where ending a worker's interpreter took longer). Waiting for the
        client to be gone first means no worker leaves holding results that someone still wants
        (the scheduler logs every such key as lost)."""
        nannies = [w for w in list(getattr(self.cluster, "workers", {}).values()) if isinstance(w, Nanny)]
        if not nannies:
            return
        scheduler = getattr(self.cluster, "scheduler", None)
        if isinstance(scheduler, Scheduler):  # in this process: its table of clients is readable here
            deadline = time.monotonic() + self.timeout
            while dask_seam.knows_client(scheduler, self.client.id) and time.monotonic() < deadline:
                time.sleep(0.01)  # a poll of a bounded wait on the scheduler's state
        self._close_nannies(nannies, "workbench-session-close")

    def _close_nannies(self, nannies: list[Nanny], reason: str) -> None:
        """Close ``nannies`` (and their worker processes), each given the session's timeout to stop its
        worker before it kills it; Dask's cluster closes them with 5 s (4 for the worker)."""
        timeout = self.timeout

        async def stop() -> None:
            await asyncio.gather(*(n.close(timeout=timeout, reason=reason) for n in nannies))

        assert self.cluster is not None
        dask_seam.run_on_cluster_loop(self.cluster, stop, timeout=2 * timeout)

    def own(self, name: str, opener: Callable[[], AbstractContextManager[T]]) -> T:
        """The resource ``name`` that this session opened for its own use: entered from ``opener()``
        on the first call, the same one afterwards (opened again if someone closed it: its
        ``closed`` is true), exited when the session closes (e.g. the store of the store strategies
        when the caller opened none: see :func:`workbench.runtime.store.store_for`). :meth:`owned`
        lists them."""
        if self._closed:
            raise RuntimeError(f"the session is closed: start a new one before opening its {name}")
        if name not in self._owned or getattr(self._owned[name], "closed", False):
            self._owned[name] = self._exits.enter_context(opener())
        return self._owned[name]

    def owned(self) -> dict[str, Any]:
        """What the session opened for its own use (:meth:`own`), by name: closed with the session."""
        return dict(self._owned)

    @property
    def closed(self) -> bool:
        """Whether the session was closed (here, or its client by Dask)."""
        return self._closed or self.client.status in ("closing", "closed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- where things are ------------------------------------------------------------------------
    def workers(self) -> list[str]:
        """Worker addresses, sorted."""
        return sorted(cluster_identity(self.client)["workers"])

    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        timeout: float | None = None,
        workers: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Call ``function(*args)`` once on every worker (or on ``workers``); worker address -> result.

        ``Client.run`` has no timeout, so it runs on a helper thread that is waited on for at most
        ``timeout`` seconds (the session's by default); a hung worker raises TimeoutError here.
        """
        return self.bounded(
            self.client.run,
            function,
            *args,
            timeout=timeout,
            where=f"{_name(function)} did not finish on every worker",
            workers=list(workers) if workers else None,
        )

    def run_on_scheduler(self, function: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Call ``function(*args, dask_scheduler=...)`` on the scheduler, bounded like :meth:`run`."""
        return self.bounded(
            self.client.run_on_scheduler,
            function,
            *args,
            timeout=timeout,
            where=f"{_name(function)} did not finish on the scheduler",
        )

    def bounded(
        self, call: Callable[..., Any], *args: Any, timeout: float | None = None, where: str = "", **kwargs: Any
    ) -> Any:
        """``call(*args, **kwargs)`` waited on for at most ``timeout`` s (the session's by default).

        For the client calls that have no timeout of their own (``run``, ``run_on_scheduler``,
        plugin (un)registration): the call runs on a helper thread; past the timeout this raises
        ``TimeoutError`` saying what did not finish (``where``).
        """
        timeout = self.timeout if timeout is None else timeout
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-run")
        try:
            return pool.submit(call, *args, **kwargs).result(timeout=timeout)
        except FuturesTimeout:
            raise TimeoutError(f"{where or _name(call) + ' did not finish'} within {timeout} s") from None
        finally:
            pool.shutdown(wait=False)

    def worker_nodes(self) -> dict[str, str]:
        """Worker address -> node id, asked of each worker once (a worker's node never changes).

        Only workers not seen before are asked (one ``Client.run``); the list of workers itself is
        one message to the scheduler. At 16 workers, asking every worker on every call cost a
        noticeable share of a short RRO run.
        """
        workers = self.workers()
        new = [w for w in workers if w not in self._node_of]
        if new:
            self._node_of.update(self.run(node_id, workers=new))
        return {w: self._node_of[w] for w in workers}

    def nodes(self) -> dict[str, list[str]]:
        """Node id -> the worker addresses on it."""
        grouped: dict[str, list[str]] = {}
        for worker, node in self.worker_nodes().items():
            grouped.setdefault(node, []).append(worker)
        return grouped

    def scale(self, n_workers: int) -> None:
        """Run ``n_workers`` local worker processes (only for a cluster this session started).

        Workers get the memory limit of the rule ``start()`` used (the local kind's
        :meth:`~workbench.runtime.clusters.LocalKind.memory_limit`), now for ``n_workers``: under the
        per-learner cap ``$WORKBENCH_MAX_MEMORY``, "auto" shares the cap among them, the running
        workers' limits change in place to the new share (:func:`set_memory_limits`: nothing moves,
        nothing they hold is lost, and the limits never sum above the cap), and an explicit limit that
        ``n_workers`` times would pass the cap is refused.
        """
        if self.cluster is None:
            raise ValueError("this session joined an existing scheduler: scale that cluster where it was started")
        if self.kind == "slurm":
            raise ValueError(
                "a Slurm session's workers are whole jobs of SlurmOptions: start a new session with another "
                "n_workers (or SlurmOptions(jobs=...)), or scale its jobs yourself: session.cluster.scale(jobs=N)"
            )
        if self.kind == "gateway":
            raise ValueError(
                "a gateway session's workers are the gateway's: session.cluster.scale(N) asks the gateway for N "
                "(within its limits), or start a new session with another n_workers"
            )
        if not isinstance(self.cluster, LocalCluster):
            raise ValueError("a cluster of simulated nodes has a fixed shape: start a new session with other nodes=")
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers must be at least 1, got {n_workers!r}")
        share = None
        if self.request is not None:
            request = dataclasses.replace(self.request, n_workers=n_workers, nodes=None)
            memory_limit = kind_named("local").memory_limit(request)  # refuses a total above the cap
            dask_seam.set_new_worker_option(self.cluster, "memory_limit", memory_limit)
            if max_memory(request.settings) is not None:
                share = amount_of_memory(memory_limit)
        growing = n_workers > len(self.workers())
        if share is not None and growing:  # lower the running workers' limits before new ones start
            set_memory_limits(self, share)
        if not growing:
            self._retire(n_workers)
        self.cluster.scale(n_workers)
        # scaling down is not awaited by scale() itself
        self._until(lambda: len(self.workers()) == n_workers, f"reach {n_workers} workers")
        if share is not None and not growing:  # raise them once the workers that left are gone
            set_memory_limits(self, share)

    def _retire(self, n_workers: int) -> None:
        """Before scaling down to ``n_workers``: the workers that go (the cluster's last ones) hand
        the results they alone hold to the others (Dask's ``retire_workers``), and leave the cluster's
        spec, so that ``LocalCluster.scale`` closes exactly them.

        ``LocalCluster.scale`` alone closed them with their results: Dask's ``SpecCluster`` asks the
        scheduler to retire its workers by *name* where the scheduler takes addresses, so nothing was
        retired; the scheduler then logged every key it lost ("Removing worker ... caused the cluster
        to lose already computed task(s)", 400 of them under lesson 03's session cell) and a result
        pinned to the closed worker was never computed again. Retiring moves only Dask's keys: what
        a worker keeps outside them (the store's objects, its RRO views) goes with it, as before.
        The retired workers are closed here, each given the session's timeout (:meth:`_close_nannies`).
        """
        assert self.cluster is not None
        going = dask_seam.worker_names(self.cluster)[n_workers:]
        if not going:
            return
        info = cluster_identity(self.client, timeout=self.timeout)["workers"]
        addresses = sorted(address for address, worker in info.items() if worker.get("name") in going)
        if addresses:
            # close_workers=False, remove=False: they are closed below, by their nannies
            self.bounded(
                self.client.retire_workers,
                workers=addresses,
                close_workers=False,
                remove=False,
                where=f"moving the results of {len(addresses)} worker(s) to the others",
            )
        # closed here with the session's timeout (the cluster's own close would kill them after 4 s)
        leaving = [self.cluster.workers[n] for n in going if isinstance(self.cluster.workers.get(n), Nanny)]
        self._close_nannies(leaving, "workbench-scale")
        for name in going:
            dask_seam.forget_worker(self.cluster, name)

    def _until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait until ``condition()`` holds, at most the session's timeout; past it, TimeoutError saying ``what``."""
        deadline = time.monotonic() + self.timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not {what} within {self.timeout} s")
            time.sleep(0.05)

    def submit_pinned(self, calls: Sequence[PinnedCall], loose: bool = False) -> list[Future]:
        """Submit many tasks, each pinned to its own worker, as one graph; their futures in order.

        ``client.submit`` sends one graph per task and the scheduler takes each in turn: 16
        pinned tasks cost 16 graph updates where ``client.map`` costs one (measured 1.4x slower
        here, and it grows with the workers). Futures among the arguments, also inside lists, are
        real dependencies. Pinning (``allow_other_workers=False``) keeps work stealing away;
        ``loose=True`` makes each worker a preference that Dask's scheduler may override (its work
        stealing can then give the task to an idle worker).
        """
        delayed = []
        for call in calls:
            workers = [call.worker] if isinstance(call.worker, str) else list(call.worker)
            with dask.annotate(workers=workers, allow_other_workers=loose, priority=call.priority):
                delayed.append(
                    dask.delayed(call.function, pure=False)(*call.args, dask_key_name=call.key, **call.kwargs)
                )
        return list(self.client.compute(delayed)) if delayed else []

    def wait(self, futures: Future | Iterable[Future], timeout: float | None = None) -> None:
        """Wait until ``futures`` are done (at most ``timeout`` s, the session's by default), fetching nothing."""
        wait(futures, timeout=self.timeout if timeout is None else timeout)

    def gather(self, futures: Future | Iterable[Future], timeout: float | None = None) -> Any:
        """Wait for ``futures`` (at most ``timeout`` s, the session's by default) and return results."""
        timeout = self.timeout if timeout is None else timeout
        wait(futures, timeout=timeout)
        return self.client.gather(futures)

    def dashboard_link(self) -> str | None:
        """Where a browser opens this cluster's dashboard: JupyterLab's proxy of the user's dashboard
        socket, Dask's link (``distributed.dashboard.link``) for a port, None when it is off."""
        if self.dashboard == SOCKET:
            return proxy_link()
        return self.client.dashboard_link if self.dashboard == PORT else None

    def dashboard_links(self) -> dict[str, str]:
        """The dashboard's pages a learner opens beside a lesson, name -> link: Status, Task Stream,
        Workers Memory and Progress (each :meth:`dashboard_link` with its page in place of
        ``status``); empty when the dashboard is off."""
        link = self.dashboard_link()
        if not link:
            return {}
        base = link.removesuffix("status") if link.endswith("/status") else link.rstrip("/") + "/"
        return {name: base + page for name, page in DASHBOARD_PAGES.items()}

    def _repr_html_(self) -> str | None:
        """The session in a notebook: its workers and its dashboard's links, which work while cells
        still run (a link needs no kernel; dask-labextension's search waits for one)."""
        if self.closed:
            return "<p>This workbench session is closed: <code>workbench.start()</code> starts a new one.</p>"
        try:
            workers = self.describe()["workers"]
        except Exception:  # a cluster that stopped answering: the plain repr, never a traceback
            return None
        threads = sorted({w["threads"] for w in workers})
        memory = sorted({w["memory_limit"] for w in workers})
        shape = f"{len(workers)} worker process{'es' if len(workers) != 1 else ''}"
        shape += f" x {'/'.join(map(str, threads))} thread{'s' if threads != [1] else ''}"
        if memory and memory[0]:
            shape += f", {'/'.join(size_text(m) for m in memory)} of memory each"
        whose = "started by this session" if self.cluster is not None else "joined"
        lines = [f"<b>Dask cluster</b> ({whose}): {html.escape(shape)}."]
        links = self.dashboard_links()
        if links:
            anchors = " · ".join(
                f'<a href="{html.escape(url)}" target="_blank">{html.escape(name)}</a>' for name, url in links.items()
            )
            lines.append(
                f"<b>Dashboard</b>: {anchors} (each opens in a browser tab). To see the panes inside "
                f"JupyterLab, paste <code>{html.escape(self.dashboard_link() or '')}</code> into the box of "
                "the Dask tab in the left sidebar."
            )
        else:
            lines.append(
                "Dask's dashboard is off for this cluster: <code>make lab</code> turns it on "
                "(<code>WORKBENCH_DASHBOARD=1</code>)."
            )
        return "<p>" + "<br>".join(lines) + "</p>"

    def describe(self) -> dict[str, Any]:
        """Scheduler address, workers with threads and node, and whether the session owns the cluster."""
        info = cluster_identity(self.client)
        nodes = self.worker_nodes()
        return {
            "scheduler": info["address"],
            "owned": self.cluster is not None,
            "dashboard": self.dashboard_link(),
            "workers": [
                {"address": addr, "threads": w["nthreads"], "node": nodes.get(addr), "memory_limit": w["memory_limit"]}
                for addr, w in sorted(info["workers"].items())
            ],
        }


def start(
    address: str | None = None,
    *,
    cluster: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    nodes: Sequence[str] | None = None,
    memory_limit: str | int = "auto",
    slurm: SlurmOptions | None = None,
    dashboard: bool | str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    settings: Settings | None = None,
) -> Session:
    """Start (or join) the cluster for a workbench run and return a :class:`Session`.

    address: a scheduler to join (``tcp://host:8786``); default ``$WORKBENCH_SCHEDULER``.
    cluster: the kind of cluster (:mod:`workbench.runtime.clusters`): "local" (worker processes on this
        machine), "scheduler" (join ``address``), "slurm" (workers as Slurm jobs, ``slurm`` saying how)
        or "gateway" (a cluster of the user's own from a dask-gateway server, e.g. a JupyterHub's);
        default ``$WORKBENCH_CLUSTER``, else "scheduler" with an address, "slurm" with ``slurm``, else "local".
    n_workers: worker processes (default: one per core locally, one per entry of ``nodes``; with Slurm,
        the jobs of ``slurm``).
    threads_per_worker: threads per worker; 1 keeps one task per core, as the papers' runs do (a gateway
        cluster's workers have the gateway's: it refuses another number).
    nodes: one node id per local worker, to simulate several nodes on one machine.
    memory_limit: per local worker; "auto" shares the machine's memory equally, within the per-learner
        cap ``$WORKBENCH_MAX_MEMORY`` (workers x memory limit) when it is set; a request above it is refused.
        The Slurm kind (a job's memory: ``SlurmOptions(memory=...)``) and the gateway kind refuse anything
        but "auto".
    slurm: the jobs of a Slurm cluster (:class:`~workbench.runtime.clusters.SlurmOptions`); default
        ``$WORKBENCH_SLURM_*``.
    dashboard: where the Dask dashboard is served (:mod:`workbench.runtime.dashboard`): False or "off"
        (none), True or "port" (a free port of the loopback interface: ``make lab`` and Binder set
        ``$WORKBENCH_DASHBOARD=1``, so dask-labextension's panes can show the lesson's cluster; the link
        follows Dask's ``distributed.dashboard.link``, which they point at JupyterLab's proxy), or
        "socket" (a Unix socket only the user can open, which the user's Jupyter server proxies at
        ``lwb-dashboard/status``: for a server learners share); default ``$WORKBENCH_DASHBOARD``, else off.
    timeout: seconds for connecting, waiting for workers (Slurm jobs included) and closing.
    settings: the ``$WORKBENCH_*`` variables named above, as a :class:`~workbench.settings.Settings`
        (default: the environment, read once now); the session keeps them (``session.settings``), and the
        arguments above override them.

    The session owns a tier set (``session.tier_set``, :mod:`workbench.memory.tier_set`): the ``dram`` and
    ``gpu`` arrays and the DRAM cache that code in this context places from now on, with the device limit
    and DRAM budget of its settings; closing the session frees them, and another session's are its own.
    Every worker, those that join later included, gets a :class:`~workbench.runtime.worker_state.WorkerState`
    plugin: the tables task code keeps there (RRO views, spill buffers, channel marks and inboxes).
    On an interpreter before 3.12.7 it also replaces Dask's ``ensure_memoryview`` with
    :func:`workbench.runtime.frames.byte_view` in this process and, through a worker plugin, on every
    worker of the cluster (a CPython bug crashes a worker otherwise; see that module).
    """
    settings = _checked_settings(settings)
    request = _checked_request(
        address, n_workers, threads_per_worker, nodes, memory_limit, slurm, dashboard, timeout, settings
    )
    kind = kind_named(_kind_name(cluster, address, slurm, settings))
    kind.check(request)
    # What this user's dead sessions left in /dev/shm (a kernel killed with SIGKILL cannot delete its
    # RRO copies): freed before this session makes its own. Only copies whose owner and maker are both
    # dead and that no live process maps (workbench.memory.shm.reclaim); never another user's.
    shm.reclaim()
    tiers.reclaim_store_files()  # and the tier files of the default store's killed backends
    # The workbench decides where blocks live (strategies make replicas on purpose and drop them; the
    # runner restores the blocks to their holders after every run): Dask's active memory manager would drop those
    # replicas every 2 s, and could keep a thief's copy of a block and drop its original, so that the
    # next run splits differently. Its periodic loop is off in clusters the workbench starts.
    # With the dashboard off, the scheduler's loopback port answers health and metrics only.
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False, **request.scheduler_config}):
        client, owned = kind.open(request)
    try:
        dashboard = request.dashboard if kind.owns_cluster else PORT
        return _session(client, owned, timeout, dashboard=dashboard, request=request, kind=kind.name)
    except BaseException:
        if owned is not None:
            owned.close(timeout=timeout)
        raise


def _checked_request(
    address: str | None,
    n_workers: int | None,
    threads_per_worker: int,
    nodes: Sequence[str] | None,
    memory_limit: str | int,
    slurm: SlurmOptions | None,
    dashboard: bool | str | None,
    timeout: float,
    settings: Settings,
) -> ClusterRequest:
    """:func:`start`'s arguments as the request every cluster kind takes, each checked first: a
    ValueError naming the argument, what it got and what it takes (before anything starts)."""
    if not _is_number(timeout) or not _finite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be positive seconds (a finite number), got {timeout!r}")
    place = dashboard_place(dashboard, settings)
    if not _is_whole(threads_per_worker) or threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be a whole number, at least 1, got {threads_per_worker!r}")
    if n_workers is not None and (not _is_whole(n_workers) or n_workers < 1):
        raise ValueError(f"n_workers must be a positive number of worker processes, got {n_workers!r}")
    if address is not None and not isinstance(address, str):
        raise ValueError(f"address must be a scheduler's address such as 'tls://host:8786', got {address!r}")
    if not _memory_limit_ok(memory_limit):
        raise ValueError(
            "memory_limit must be 'auto', an amount per worker ('2GiB', or a number of bytes), or 0 or None "
            f"(no limit), got {memory_limit!r}"
        )
    if nodes is not None:
        if isinstance(nodes, (str, bytes)):  # a string is a sequence too: "ab" would be two nodes
            raise ValueError(f"nodes must be a list of node ids, one per worker ([{nodes!r}] for one), got {nodes!r}")
        nodes = [str(n) for n in nodes]
        if not nodes:
            raise ValueError("nodes must name at least one node id, got an empty list")
        for node in nodes:  # each becomes a worker's $WORKBENCH_NODE_ID (no NUL there) and a part of its name
            if not node.strip() or CONTROL_CHARACTERS.search(node):
                raise ValueError(
                    f"a node id must be printable text, without control characters (a NUL, a line break), got {node!r}"
                )
        if n_workers is not None and n_workers != len(nodes):
            raise ValueError(f"nodes gives {len(nodes)} node ids but n_workers is {n_workers}; give one per worker")
    if slurm is not None and not isinstance(slurm, SlurmOptions):
        raise ValueError(f"slurm must be a SlurmOptions(jobs=..., cores=..., ...), got {slurm!r}")
    return ClusterRequest(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        memory_limit=memory_limit,
        dashboard=place,
        timeout=timeout,
        nodes=tuple(nodes) if nodes is not None else None,
        address=address or settings.get(SCHEDULER_ENV) or None,
        slurm=slurm,
        settings=settings,
    )


def _is_number(value: object) -> bool:
    """Whether ``value`` is a real number (an int, a float, a numpy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


MAX_MEMORY_BYTES = 2**63 - 1  # the largest byte count the kernel and numpy hold (a signed 64-bit integer)


def _finite(value: numbers.Real) -> bool:
    """Whether ``value`` is a finite number a float holds (not nan, inf, or an int past 1e308)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_whole(value: object) -> bool:
    """Whether ``value`` is an integer (an int, a numpy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _memory_limit_ok(value: object) -> bool:
    """Whether ``value`` is a ``memory_limit`` Dask takes and the workbench means: "auto", a positive
    amount (bytes, or text such as "2GiB"), or Dask's "no limit" (0, "0", None). Dask's other readings
    (a float below 1 as a share of the machine, a negative number) are not amounts of memory here."""
    if value is None or (isinstance(value, str) and value in ("auto", "0")) or (_is_whole(value) and value == 0):
        return True
    if not (isinstance(value, str) or _is_number(value)) or (_is_number(value) and value < 1):
        return False
    return 0 < amount_of_memory(value) <= MAX_MEMORY_BYTES


def _checked_settings(settings: object) -> Settings:
    """``settings``, or the environment read now if None; a ``ValueError`` naming only its type otherwise
    (a mapping's repr is the whole environment, tokens included)."""
    if settings is None:
        return Settings.read()
    if not isinstance(settings, Settings):
        raise ValueError(
            f"settings must be a workbench.settings.Settings, got a {type(settings).__name__}: give "
            "Settings({**os.environ, 'WORKBENCH_TLS': '0'}) for the environment with changes, or Settings.read()"
        )
    return settings


def _kind_name(cluster: str | None, address: str | None, slurm: SlurmOptions | None, settings: Settings) -> str:
    """The kind of cluster to start: the caller's words first (``cluster``, ``address``, ``slurm``), then
    ``$WORKBENCH_CLUSTER``, then ``$WORKBENCH_SCHEDULER``, else "local"."""
    if cluster is not None:
        if address is not None and cluster != "scheduler":
            raise ValueError(f"address= joins a running scheduler, but cluster={cluster!r}: give one of them")
        if slurm is not None and cluster != "slurm":
            raise ValueError(f"slurm= describes Slurm jobs, but cluster={cluster!r}: give cluster='slurm' or no slurm=")
        return cluster
    if address is not None:
        if slurm is not None:
            raise ValueError("address= joins a running scheduler and slurm= starts one: give one of them")
        return "scheduler"
    if slurm is not None:
        return "slurm"
    named, scheduler = settings.get(CLUSTER_ENV), settings.get(SCHEDULER_ENV)
    if named and scheduler and named != "scheduler":
        raise ValueError(
            f"${CLUSTER_ENV}={named} and ${SCHEDULER_ENV}={scheduler} ask for two clusters: unset one of them"
        )
    return named or ("scheduler" if scheduler else "local")


def _session(
    client: Client,
    cluster: LocalCluster | SpecCluster | None,
    timeout: float,
    dashboard: str,
    request: ClusterRequest | None = None,
    kind: str = "local",
) -> Session:
    """The session of a new client: Dask's frames made safe from CPython's gh-77894 in this process
    and on every worker, present and future (:mod:`workbench.runtime.frames`), whichever cluster;
    every worker's tables of the runtime on its :class:`~workbench.runtime.worker_state.WorkerState`;
    and, with a dashboard, the scheduler's task stream recorded from the start (Dask begins it when
    a Task Stream pane first opens, which then showed none of the tasks that ran before); and the
    session's tier set, in use from now on in the caller's context."""
    try:
        install()
        client.register_plugin(FramesPlugin(), name=PLUGIN_NAME)
        client.register_plugin(WorkerState(), name=STATE_PLUGIN_NAME)
        if dashboard != OFF:  # the scheduler records the task stream now: a pane opened later shows what ran
            client.get_task_stream(count=0)
    except BaseException:
        client.close(timeout=timeout)
        raise
    session = Session(client, cluster, timeout, dashboard=dashboard, request=request, kind=kind)
    # The session's own dram, DRAM cache and gpu arrays (workbench.memory.tier_set), their limits from its
    # settings, in use in the caller's context until it closes: another session's are not these.
    session.tier_set = tiers.new_set(
        f"the session of {client.scheduler.address}", request.settings if request is not None else None
    )
    # A budget configured where no session was (the process's set, before start()) is each new session's.
    session.tier_set.dram_budget = tiers.PROCESS.dram_budget
    tier_set.activate(session.tier_set)
    return session
