"""The one place the workbench touches parts of dask/distributed that are not public API.

Every use of a Dask internal (a scheduler's or a worker's private state, a method Dask documents
nowhere, a class wedged into Dask's own hierarchy) is a small function or class here, named after
what the workbench needs, with a docstring that names the internal and says why. The rest of the
package calls these and touches no internal itself: ``tests/test_dask_seam.py`` holds one contract
test per use, run against the installed Dask, which fails with "dask seam: <use> changed: ..."
when a Dask release changes it, and a check that no other module of the package matches a use's
``pattern`` (its code, strings and comments left out).

:data:`USES` lists them: what each touches, and the pattern of its source. Dask's public API
(``Client`` and its methods, ``LocalCluster``, ``SpecCluster(...)``, the plugin base classes and
their hooks, ``get_worker``, ``Actor``, ``Future``) stays where it is used.

This module imports nothing of the workbench: any layer may call it.
"""

from __future__ import annotations

import importlib
import socket
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dask
from distributed import Scheduler, SpecCluster
from distributed.core import Status
from distributed.deploy import LocalCluster


@dataclass(frozen=True)
class Use:
    """One use of a Dask internal: its name (the contract test's), what it touches, and the regex
    that finds it in code (strings and comments left out): only this module may match it."""

    name: str
    touches: str
    pattern: str


USES: tuple[Use, ...] = (
    Use("machine memory", "distributed.system.MEMORY_LIMIT", r"\bMEMORY_LIMIT\b|distributed\.system\b"),
    Use(
        "memory limits",
        "Worker.memory_manager.memory_limit, Scheduler.total_memory, WorkerState.memory_limit",
        r"\bmemory_manager\b|\btotal_memory\b",
    ),
    Use(
        "task records",
        "Scheduler.tasks (TaskState.state, .dependencies, .who_has, .nbytes)",
        r"scheduler\.tasks\b",
    ),
    Use(
        "task specs",
        "TaskState.run_spec and dask._task_spec (Task.func/.args/.kwargs, DataNode.value, TaskRef)",
        r"\brun_spec\b|_task_spec\b",
    ),
    Use("replica removal", "Scheduler.request_remove_replicas", r"\brequest_remove_replicas\b"),
    Use("scheduler workers", "Scheduler.workers (address -> WorkerState)", r"scheduler\.workers\b"),
    Use("scheduler clients", "Scheduler.clients (client id -> ClientState)", r"scheduler\.clients\b"),
    Use(
        "batched-stream counters",
        "Scheduler.stream_comms, Worker.batched_stream, BatchedSend.message_count / byte_count",
        r"\bstream_comms\b|\bbatched_stream\b",
    ),
    Use("transfer log", "Worker.transfer_incoming_log", r"\btransfer_incoming_log\b"),
    Use("outgoing transfer log", "Worker.transfer_outgoing_log", r"\btransfer_outgoing_log\b"),
    Use("spill counters", "Worker.data (a SpillBuffer).cumulative_metrics", r"\bcumulative_metrics\b"),
    Use(
        "restrictions and transitions",
        "Scheduler.unrunnable, TaskState.worker_restrictions, Scheduler.set_restrictions, Scheduler.transitions",
        r"\bset_restrictions\b|\.transitions\(|\bworker_restrictions\b|\.unrunnable\b",
    ),
    Use(
        "scheduler handlers and plugins",
        "Scheduler.handlers, Scheduler.plugins, Scheduler.worker_plugins",
        r"scheduler\.(handlers|plugins|worker_plugins)\b",
    ),
    Use(
        "worker handlers, plugins and state",
        "Worker.handlers, Worker.plugins, Worker.state.nthreads",
        r"worker\.(handlers|plugins|state)\b",
    ),
    Use(
        "handler replies",
        "distributed.protocol.to_serialize, distributed.core.Status.dont_reply",
        r"\bto_serialize\b|\bdont_reply\b|distributed\.(core|protocol)\b",
    ),
    Use(
        "sync and rpc",
        "Client.sync, Client.rpc, Client.scheduler, Worker.rpc, Worker.scheduler, Worker.loop, "
        "distributed.utils.sync, Cluster.sync, the scheduler's identity handler, ConnectionPool.connection_args, "
        "distributed.comm.addressing.parse_host_port",
        r"distributed\.utils\b|\.rpc\b|(client|cluster)\.sync\b|scheduler\.identity\b|worker\.(loop|scheduler)\b"
        r"|client\.scheduler\b",
    ),
    Use("worker data", "Worker.data (key -> value in the worker's memory)", r"worker\.data\b"),
    Use(
        "worker specs",
        "SpecCluster.new_spec, SpecCluster.worker_spec",
        r"\bnew_spec\b|\bworker_spec\b",
    ),
    Use(
        "http server",
        "ServerNode.start_http_server, distributed.http.routing.RoutingApplication, "
        "LocalCluster passing scheduler= to SpecCluster (a class between them in the MRO)",
        r"\bstart_http_server\b|distributed\.http\b|RoutingApplication|class\s+\w+\(\s*LocalCluster\s*,",
    ),
    Use(
        "scale errors",
        "SpecCluster._correct_state_internal, a job's distributed.core.Status",
        r"\b_correct_state_internal\b",
    ),
    Use("spill buffer", "distributed.spill.SpillBuffer", r"\bSpillBuffer\b|distributed\.spill\b"),
    Use("array meta", "dask.array.Array._meta", r"\._meta\b"),
    Use("frames", "distributed.utils.ensure_memoryview and the modules that imported it", r"\bensure_memoryview\b"),
)


# -- memory -------------------------------------------------------------------------------------------------------
def machine_memory() -> int:
    """The memory Dask sees on this machine (bytes): ``distributed.system.MEMORY_LIMIT``, the least of
    the physical memory, the cgroup's limit and RLIMIT_RSS. A local cluster's "auto" limits share it:
    the same number Dask's own ``memory_limit="auto"`` divides."""
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT)


def worker_memory_limit(worker: Any) -> int | None:
    """A worker's (or nanny's) memory limit in bytes, None for none: ``memory_manager.memory_limit``
    (the store's backend sizes its objects' budget from it)."""
    return worker.memory_manager.memory_limit


def set_worker_memory_limit(worker: Any, limit: int) -> None:
    """Give a worker (or a nanny) the memory limit ``limit`` in place: ``memory_manager.memory_limit``,
    what its spilling and pausing (a worker) or its restart (a nanny, and the limit it restarts with)
    read. Dask has no public call to change it on a running worker; a scale under the per-learner
    cap needs it."""
    worker.memory_manager.memory_limit = limit


def set_scheduler_memory_limits(scheduler: Any, limit: int) -> None:
    """The scheduler's record of every worker's limit set to ``limit`` in place, and its total kept:
    ``WorkerState.memory_limit`` and ``Scheduler.total_memory`` (what ``identity()`` and the dashboard show)."""
    for ws in scheduler.workers.values():
        scheduler.total_memory += limit - ws.memory_limit
        ws.memory_limit = limit


# -- the scheduler's task and worker tables -----------------------------------------------------------------------
def new_tasks_and_dependencies(scheduler: Any, keys: Iterable[Any]) -> tuple[int, int]:
    """Of ``keys`` (a graph ``update_graph`` was given), the tasks the graph made and their dependencies:
    ``Scheduler.tasks``, ``TaskState.state`` and ``.dependencies``. A graph's own tasks are still
    "released" while its plugins' ``update_graph`` runs (Dask moves them on after); futures it refers to
    are in memory or running, and count as dependencies only. The graph counts need it."""
    known = scheduler.tasks
    n = deps = 0
    for key in keys:
        ts = known.get(key)
        if ts is not None and ts.state == "released":
            n += 1
            deps += len(ts.dependencies)
    return n, deps


def drop_replicas(scheduler: Any, extra: Mapping[str, Collection[Any]], stimulus_id: str) -> None:
    """On the scheduler: ask each worker to drop its copies of ``extra[worker]``, never a last copy:
    ``Scheduler.tasks`` / ``TaskState.who_has`` and ``Scheduler.request_remove_replicas`` (the active
    memory manager's own way; ``Client`` has no call that drops a replica). Placed blocks restore
    their holders with it."""
    for address, keys in extra.items():
        droppable = [
            key
            for key in keys
            if key in scheduler.tasks
            and len(scheduler.tasks[key].who_has or ()) > 1
            and any(ws.address == address for ws in scheduler.tasks[key].who_has or ())
        ]
        if droppable and address in scheduler.workers:
            scheduler.request_remove_replicas(address, droppable, stimulus_id=stimulus_id)


def worker_addresses(scheduler: Any) -> list[str]:
    """The addresses of the workers the scheduler knows now, in its order (``Scheduler.workers``'s keys),
    read on the scheduler's event loop: the store's catalogue drops locations of workers that left."""
    return list(scheduler.workers)


def knows_client(scheduler: Any, client_id: str) -> bool:
    """Whether the scheduler (in this process) still has client ``client_id``: ``Scheduler.clients``. A
    session's close waits for it to let go of its client before stopping the workers."""
    return client_id in scheduler.clients


def release_unrunnable(scheduler: Any, stuck: Callable[[str, set[str], set[str]], bool]) -> list[str]:
    """Tasks waiting for ever ("no-worker") that ``stuck(key, allowed workers, live workers)`` picks, let
    run on any worker now; their keys. Touches ``Scheduler.unrunnable``, ``TaskState.worker_restrictions``,
    ``Scheduler.set_restrictions`` and ``Scheduler.transitions`` (as distributed's shuffle does): the
    store's active calls pinned to backends that all left need it."""
    import time

    live = set(scheduler.workers)
    keys = [
        ts.key
        for ts in list(scheduler.unrunnable)
        if isinstance(ts.key, str) and ts.worker_restrictions and stuck(ts.key, set(ts.worker_restrictions), live)
    ]
    if keys:
        scheduler.set_restrictions(dict.fromkeys(keys))  # None: no restriction
        scheduler.transitions(dict.fromkeys(keys, "processing"), stimulus_id=f"workbench-store-relax-{time.time()}")
    return keys


# -- message counters ---------------------------------------------------------------------------------------------
def scheduler_messages_sent(scheduler: Any) -> int:
    """Messages the scheduler has sent on its batched streams to workers: ``Scheduler.stream_comms``
    and ``BatchedSend.message_count`` (the counts that predict scale)."""
    return sum(int(getattr(bs, "message_count", 0)) for bs in scheduler.stream_comms.values())


def scheduler_bytes_sent(scheduler: Any) -> int:
    """Bytes the scheduler has sent on its batched streams to workers (task messages and their
    arguments): ``BatchedSend.byte_count`` (the capstone's bytes per stage)."""
    return int(sum(getattr(bs, "byte_count", 0) for bs in scheduler.stream_comms.values()))


def worker_messages_sent(worker: Any) -> int:
    """Messages a worker has sent to the scheduler on its batched stream: ``Worker.batched_stream.message_count``."""
    return int(getattr(worker.batched_stream, "message_count", 0))


def incoming_transfers(worker: Any, since: float) -> list[dict[str, Any]]:
    """A worker's incoming transfers that started at ``since`` (epoch seconds) or later, each with its
    ``who``, ``start``, ``stop``, ``total`` (bytes) and ``keys`` (each key moved and its bytes):
    ``Worker.transfer_incoming_log`` (the trace's transfer records, the bytes moved per run, and the
    keys the locality diagnosis sees moved more than once)."""
    return [
        {
            "who": t["who"],
            "start": t["start"],
            "stop": t["stop"],
            "total": t["total"],
            "keys": {k: int(n or 0) for k, n in t.get("keys", {}).items()},
        }
        for t in list(worker.transfer_incoming_log)
        if t["start"] >= since
    ]


def outgoing_transfers(worker: Any, since: float) -> list[dict[str, Any]]:
    """What a worker sent since ``since`` (epoch seconds) to whoever asked (``who``: a peer worker's
    address, or None or another address for a client's gather, directly or through the scheduler), each
    with ``start``, ``stop``, ``total`` (bytes) and ``keys`` (with their bytes):
    ``Worker.transfer_outgoing_log`` (the bytes a locality diagnosis sees brought to the client)."""
    return [
        {
            "who": t["who"],
            "start": t["start"],
            "stop": t["stop"],
            "total": t["total"],
            "keys": {k: int(n or 0) for k, n in t.get("keys", {}).items()},
        }
        for t in list(worker.transfer_outgoing_log)
        if t["start"] >= since
    ]


def spill_counters(worker: Any) -> dict[str, float]:
    """What a worker's memory has spilled to disk and read back so far: ``disk-write`` and ``disk-read``
    ``bytes``, ``count`` and ``seconds`` (keys such as ``"disk-write-bytes"``), from its ``SpillBuffer``'s
    ``cumulative_metrics`` (ever-increasing); zeros where its memory does not spill (no SpillBuffer).
    The locality diagnosis's spill finding needs it."""
    metrics = getattr(worker.data, "cumulative_metrics", None) or {}
    return {
        f"{label}-{unit}": float(metrics.get((label, unit), 0.0))
        for label in ("disk-write", "disk-read")
        for unit in ("bytes", "count", "seconds")
    }


# -- what tasks carry -------------------------------------------------------------------------------------------
SPEC_CONTAINER_ITEMS = 64  # a list, tuple or dict with more items than this is one value (not walked item by item)
SPEC_DEPTH = 8  # nesting walked into a task's spec, at most


def new_task_values(scheduler: Any, keys: Iterable[Any]) -> list[tuple[Any, list[Any]]]:
    """Of ``keys`` (a graph ``update_graph`` was given), each new task (still "released") and the literal
    values its spec carries, which travel inside the task's message to its worker: the arguments of
    ``TaskState.run_spec`` (``dask._task_spec``: a ``Task``'s function when it is a ``functools.partial``,
    its ``args`` and ``kwargs``, a ``DataNode``'s value, nested containers), references to other tasks
    left out. The locality diagnosis finds a large argument repeated in many task messages with it."""
    known = scheduler.tasks
    found = []
    for key in keys:
        ts = known.get(key)
        if ts is not None and ts.state == "released" and ts.run_spec is not None:
            values: list[Any] = []
            _spec_values(ts.run_spec, values, 0)
            found.append((key, values))
    return found


def _spec_values(node: Any, values: list[Any], depth: int) -> None:
    """Append the literal values inside ``node`` (a task spec or an argument of one) to ``values``."""
    import functools

    from dask._task_spec import DataNode, GraphNode, Task, TaskRef

    if depth > SPEC_DEPTH or node is None or isinstance(node, TaskRef):
        return
    if isinstance(node, DataNode):
        _spec_values(node.value, values, depth + 1)
    elif isinstance(node, Task):  # containers of dask._task_spec are Tasks too
        if isinstance(node.func, functools.partial):
            _spec_values(node.func, values, depth + 1)
        for item in (*node.args, *node.kwargs.values()):
            _spec_values(item, values, depth + 1)
    elif isinstance(node, GraphNode):  # an Alias: another task's value, not carried
        return
    elif isinstance(node, functools.partial):
        for item in (*node.args, *node.keywords.values()):
            _spec_values(item, values, depth + 1)
    elif isinstance(node, (list, tuple)) and len(node) <= SPEC_CONTAINER_ITEMS:
        for item in node:
            _spec_values(item, values, depth + 1)
    elif isinstance(node, dict) and len(node) <= SPEC_CONTAINER_ITEMS:
        for item in node.values():
            _spec_values(item, values, depth + 1)
    else:
        values.append(node)


def dependency_bytes(scheduler: Any, key: Any) -> int:
    """The bytes of the values task ``key`` takes from other tasks (its dependencies' ``nbytes``, unknown
    ones as 0): ``Scheduler.tasks``, ``TaskState.dependencies`` and ``.nbytes``. What a task reads, for
    the locality diagnosis's share of reads from other workers."""
    ts = scheduler.tasks.get(key)
    if ts is None:
        return 0
    return int(sum(max(int(dep.nbytes or 0), 0) for dep in ts.dependencies))


# -- handlers and plugins -----------------------------------------------------------------------------------------
def scheduler_plugin(scheduler: Any, name: str) -> Any:
    """The scheduler plugin registered as ``name``, or None: ``Scheduler.plugins`` (task code and
    ``run_on_scheduler`` functions reach a plugin's state by name)."""
    return scheduler.plugins.get(name)


def remove_scheduler_plugin(scheduler: Any, name: str, handler: str | None = None) -> Any:
    """Take scheduler plugin ``name`` (and the comm handler ``handler`` it added) off the scheduler; the
    plugin, or None. ``Scheduler.plugins`` and ``.handlers``: ``Client.unregister_scheduler_plugin``
    forgets the plugin but leaves its handler."""
    plugin = scheduler.plugins.pop(name, None)
    if handler is not None:
        scheduler.handlers.pop(handler, None)
    return plugin


def has_worker_plugin(scheduler: Any, name: str) -> bool:
    """Whether a worker plugin is registered as ``name`` on the scheduler (for workers that join later):
    ``Scheduler.worker_plugins``."""
    return name in scheduler.worker_plugins


def add_scheduler_handler(scheduler: Any, name: str, handler: Callable[..., Any]) -> None:
    """Answer messages ``{"op": name, ...}`` on the scheduler with ``handler``: ``Scheduler.handlers``
    (the store's catalogue is asked this way)."""
    scheduler.handlers[name] = handler


def worker_plugin(worker: Any, name: str) -> Any:
    """The worker plugin registered as ``name`` on ``worker``, or None: ``Worker.plugins`` (how task code
    reaches its worker's state, as distributed's shuffle does)."""
    return worker.plugins.get(name)


def add_worker_handler(worker: Any, name: str, handler: Callable[..., Any]) -> None:
    """Answer messages ``{"op": name, ...}`` on ``worker`` with ``handler``: ``Worker.handlers`` (the
    store's backends are asked this way, worker to worker, with no scheduler in between)."""
    worker.handlers[name] = handler


def remove_worker_handler(worker: Any, name: str) -> None:
    """Stop answering ``name`` on ``worker``: ``Worker.handlers``."""
    worker.handlers.pop(name, None)


def worker_threads(worker: Any) -> int:
    """The threads a worker runs tasks on: ``Worker.state.nthreads`` (the store's backend sizes its pool)."""
    return int(worker.state.nthreads)


def worker_value(worker: Any, key: Any) -> Any:
    """The value of ``key`` in a worker's memory, no copy: ``Worker.data`` (the store makes blocks a
    worker holds objects of its backend in place)."""
    return worker.data[key]


def serialized(value: Any) -> Any:
    """``value`` marked to travel as Dask's serialised frames in a handler's message (numpy arrays
    without a pickle copy): ``distributed.protocol.to_serialize``."""
    from distributed.protocol import to_serialize

    return to_serialize(value)


DONT_REPLY: Any = Status.dont_reply
"""What a comm handler returns when it wrote its reply on the comm itself: ``distributed.core.Status.dont_reply``."""


# -- reaching the scheduler and workers ---------------------------------------------------------------------------
def scheduler_identity(client: Any, timeout: float) -> dict[str, Any]:
    """The scheduler's identity with every worker, asked of the scheduler now: the ``identity`` handler
    through ``Client.scheduler`` and ``Client.sync``. ``Client.scheduler_info()`` returns a cache that
    the client's periodic refresh writes with no workers in it."""
    return client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=timeout)


WORKERS_LISTED = "give a worker's address as the scheduler lists them (session.client.scheduler_info()['workers'])"


def address_problem(connection_args: Mapping[str, Any], address: str) -> str | None:
    """Why an end with ``connection_args`` (its rpc pool's: ``Client.rpc.connection_args``) cannot connect
    to ``address``, and what to check; None when it can try. Dask says it only when it connects, with a
    ``ValueError`` (a garbled address), a ``TypeError`` (TLS without credentials) or a ``RuntimeError``
    (plain TCP where encryption is required)."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except (ValueError, TypeError) as error:
        return f"{address!r} is not an address of a worker ({error}): {WORKERS_LISTED}"
    encrypted = scheme in ("tls", "wss")
    if encrypted and connection_args.get("ssl_context") is None:
        return f"{address} is a TLS address, and this cluster talks plain TCP: {WORKERS_LISTED}"
    if scheme in ("tcp", "ws") and connection_args.get("require_encryption"):
        return f"{address} is a plain-TCP address, and this cluster talks TLS only: {WORKERS_LISTED}"
    return None


def _checked_rpc(pool: Callable[[], Any]) -> Callable[[str], Any]:
    """The rpc pool ``pool()`` as a function of an address that raises ``ConnectionError`` (an
    ``OSError``: an unreachable address) saying what to check for one it cannot connect to:
    ``ConnectionPool.connection_args``. An address that passed is not checked again (a set lookup per
    message: a cluster's workers are few, and its pool's connection arguments stay what they are)."""
    passed: set[str] = set()

    def rpc(address: str) -> Any:
        if address not in passed:
            problem = address_problem(pool().connection_args, address)
            if problem is not None:
                raise ConnectionError(problem)
            passed.add(address)
        return pool()(address)

    return rpc


def client_link(client: Any) -> tuple[Callable[[], Any], Callable[[str], Any], Callable[..., Any]]:
    """How a client's thread sends handler messages: the scheduler's rpc (asked anew each time: a client's
    may be replaced), an rpc to an address (a ``ConnectionError`` saying what to check for an address
    the client cannot connect to), and a runner of a coroutine function to its end: ``Client.scheduler``,
    ``Client.rpc``, ``Client.sync``. The store's link is made of these."""
    return (lambda: client.scheduler), _checked_rpc(lambda: client.rpc), client.sync


def worker_link(worker: Any) -> tuple[Callable[[], Any], Callable[[str], Any], Callable[..., Any]]:
    """:func:`client_link` for a worker's threads (never its event loop): ``Worker.scheduler``,
    ``Worker.rpc``, and ``distributed.utils.sync`` on ``Worker.loop``."""
    from distributed.utils import sync

    return (lambda: worker.scheduler), _checked_rpc(lambda: worker.rpc), (lambda f: sync(worker.loop, f))


def run_on_cluster_loop(cluster: Any, function: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    """Run the coroutine function ``function`` on a cluster's event loop to its end, from another thread:
    ``Cluster.sync`` (a session closes its nannies with its own timeouts this way)."""
    return cluster.sync(function, callback_timeout=timeout)


# -- cluster specs --------------------------------------------------------------------------------------------------
def set_new_worker_option(cluster: Any, name: str, value: Any) -> None:
    """Give the workers a SpecCluster starts from now on the option ``name=value``: ``SpecCluster.new_spec``
    (a scale under the per-learner cap starts its new workers with the new share)."""
    options = {**cluster.new_spec["options"], name: value}
    cluster.new_spec = {**cluster.new_spec, "options": options}


def worker_names(cluster: Any) -> list[Any]:
    """The names of a SpecCluster's workers in the order it made them: ``SpecCluster.worker_spec``'s keys
    (``scale`` closes the last ones)."""
    return list(cluster.worker_spec)


def forget_worker(cluster: Any, name: Any) -> None:
    """Take worker ``name`` out of a SpecCluster's spec (closed already, so ``scale`` closes no other):
    ``SpecCluster.worker_spec``."""
    del cluster.worker_spec[name]


# -- classes wedged into Dask's ----------------------------------------------------------------------------------
class SocketHTTPScheduler(Scheduler):
    """A scheduler whose HTTP server (dashboard, health, metrics) listens on a socket its subclass binds
    (:meth:`bind_http`) and on no TCP port: ``ServerNode.start_http_server`` (called from
    ``Scheduler.__init__``) replaced, with Dask's ``RoutingApplication`` of the routes in tornado's server."""

    def bind_http(self) -> tuple[socket.socket, str]:
        """The listening socket to serve on and the address the dashboard reports (a subclass's)."""
        raise NotImplementedError

    def start_http_server(self, routes, dashboard_address, default_port=0, ssl_options=None):  # noqa: ANN001
        """Dask's ``ServerNode.start_http_server`` on :meth:`bind_http`'s socket: the same application and server."""
        from distributed.http.routing import RoutingApplication
        from tornado.httpserver import HTTPServer

        listening, address = self.bind_http()
        self.http_application = RoutingApplication(routes)
        self.http_server = HTTPServer(self.http_application)
        self.http_server.add_socket(listening)
        self.http_server.address, self.http_server.port = address, None  # read by Dask's bokeh setup


def local_cluster_with_scheduler(scheduler_class: type[Scheduler]) -> type[LocalCluster]:
    """A ``LocalCluster`` class whose scheduler is ``scheduler_class``, every other
    option LocalCluster's: a class between ``LocalCluster`` and ``SpecCluster`` in the MRO swaps the class
    in the scheduler spec LocalCluster passes on as ``scheduler=`` (LocalCluster takes no scheduler class)."""

    class SchedulerClassSwap(SpecCluster):
        def __init__(self, *args: Any, scheduler: dict[str, Any] | None = None, **kwargs: Any) -> None:
            if scheduler is None or "cls" not in scheduler:
                raise RuntimeError("LocalCluster no longer passes its scheduler spec to SpecCluster as scheduler=")
            super().__init__(*args, scheduler={**scheduler, "cls": scheduler_class}, **kwargs)

    name = f"LocalClusterWith{scheduler_class.__name__}"
    return type(name, (LocalCluster, SchedulerClassSwap), {"__doc__": f"A LocalCluster whose scheduler is {name}."})


def keeping_scale_errors(cluster_class: type[SpecCluster]) -> type[SpecCluster]:
    """A subclass of ``cluster_class`` that keeps the error of a scale that failed in ``submit_error``
    (Dask's ``scale`` starts workers in the background and only logs it) and marks the jobs it never
    made failed (nothing to cancel; a close would assert on them): ``SpecCluster._correct_state_internal``
    and a job's ``distributed.core.Status``. The Slurm cluster needs it to say why sbatch refused."""

    class KeepingScaleErrors(cluster_class):  # type: ignore[valid-type, misc]
        submit_error: Exception | None = None

        async def _correct_state_internal(self) -> None:
            try:
                await super()._correct_state_internal()
            except Exception as error:
                self.submit_error = error
                for job in self.workers.values():
                    if not getattr(job, "job_id", None) and job.status == Status.created:
                        job.status = Status.failed
                raise

    KeepingScaleErrors.__name__ = KeepingScaleErrors.__qualname__ = f"KeepingScaleErrors{cluster_class.__name__}"
    return KeepingScaleErrors


# -- data -----------------------------------------------------------------------------------------------------------
def spill_buffer(directory: str, target: int, compression: bool) -> Any:
    """Dask's own spill-to-disk mapping (a worker's memory) over ``directory``, holding ``target`` bytes
    in memory, lz4-compressed on disk or not: ``distributed.spill.SpillBuffer`` (compression read from
    Dask's config when it is made). The tier strategies compare the workbench's tiers with it."""
    from distributed.spill import SpillBuffer

    with dask.config.set({"distributed.worker.memory.spill-compression": "lz4" if compression else False}):
        return SpillBuffer(directory, target=target)


def array_meta(array: Any) -> Any:
    """The empty array of a dask array's type and dtype that a new array built from its blocks passes as
    ``meta=``: ``dask.array.Array._meta``."""
    return array._meta


# Dask's modules that use ensure_memoryview, imported before replace_ensure_memoryview() replaces it in each.
ENSURE_MEMORYVIEW_USERS = (
    "distributed.utils",
    "distributed.comm.tcp",
    "distributed.protocol.core",
    "distributed.protocol.serialize",
    "distributed.protocol.compression",
)


def replace_ensure_memoryview(replacement: Callable[[Any], memoryview]) -> None:
    """Make Dask call ``replacement`` where it calls ``distributed.utils.ensure_memoryview`` (a frame as
    a 1-D byte view before it is written, compressed or spilled): in ``distributed.utils`` and in each
    loaded module of Dask's that imported it by name. Calling it again with the same function changes
    nothing. The frames fix (gh-77894) needs it."""
    for name in ENSURE_MEMORYVIEW_USERS:
        importlib.import_module(name)
    original = sys.modules["distributed.utils"].ensure_memoryview
    if original is replacement:
        return
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] == "distributed" and getattr(module, "ensure_memoryview", None) is original:
            module.ensure_memoryview = replacement
