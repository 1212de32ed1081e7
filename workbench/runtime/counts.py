"""Counts that predict scale: tasks and dependencies the scheduler was given, and its messages.

Times depend on the machine; these counts do not. A strategy whose tasks or dependencies per
iteration grow with the blocks, where they should follow the workers, buries the scheduler on any
machine, so a benchmark records them beside its times (issue 36) and a test can check them
deterministically.

- **Graphs**: a scheduler plugin (:class:`GraphCounter`, Dask's ``update_graph`` hook) notes, for
  each graph a client submits, when it arrived, its new tasks and their dependencies (futures
  already on the cluster count as dependencies, not as tasks). One record per graph, written
  where the scheduler already holds the tasks: nothing is added per task run.
- **Messages**: the batched streams between the scheduler and its workers count what they send
  (``BatchedSend.message_count``); :func:`message_count` adds them up, both ways.

The scheduler's task records and the batched streams' counters are Dask internals, read through
:mod:`workbench.runtime.dask_seam` (``new_tasks_and_dependencies``, ``scheduler_messages_sent``,
``worker_messages_sent``, ``incoming_transfers``, ``scheduler_plugin``, ``worker_plugin``), whose
contract tests fail when Dask changes them; ``tests/test_counts.py`` checks the counts themselves.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

import workbench.runtime.dask_seam as dask_seam

if TYPE_CHECKING:
    from workbench.runtime.session import Session

PLUGIN_NAME = "workbench-graph-counts"
KEEP = 100_000  # graphs remembered (oldest dropped first)


@dataclass(frozen=True)
class Graph:
    """One graph submitted to the scheduler: when (scheduler's epoch seconds), its tasks, their dependencies."""

    time: float
    tasks: int
    dependencies: int


class GraphCounter(SchedulerPlugin):
    """On the scheduler: the tasks and dependencies of every graph submitted (see the module)."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.graphs: deque[tuple[float, int, int]] = deque(maxlen=KEEP)

    def update_graph(self, scheduler: Any, *, tasks: Iterable[Any] = (), **kwargs: Any) -> None:
        """Note the graph: its tasks and the dependencies the scheduler recorded for them."""
        # futures the graph refers to (blocks, held partitions, partials) count as dependencies only
        n, deps = dask_seam.new_tasks_and_dependencies(scheduler, tasks)
        self.graphs.append((time.time(), n, deps))


def _graphs_since(dask_scheduler: Any, since: float) -> list[tuple[float, int, int]]:
    plugin = dask_seam.scheduler_plugin(dask_scheduler, PLUGIN_NAME)
    return [g for g in plugin.graphs if g[0] >= since] if plugin is not None else []


class _Installed:
    """The counter registered on the session's scheduler while the session lives."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __enter__(self) -> _Installed:
        self.session.client.register_plugin(GraphCounter(), name=PLUGIN_NAME)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.session.client.unregister_scheduler_plugin(PLUGIN_NAME)
        except Exception:  # noqa: BLE001 (a closed or lost scheduler has no plugin left to remove)
            pass


def install(session: Session) -> None:
    """Count the graphs submitted to the session's scheduler from now on (once per session)."""
    session.own(PLUGIN_NAME, lambda: _Installed(session))


def graphs_since(session: Session, since: float) -> list[Graph]:
    """The graphs submitted since ``since`` (epoch seconds), oldest first (:func:`install` first)."""
    return [Graph(*g) for g in session.client.run_on_scheduler(_graphs_since, since=since)]


def _scheduler_sent(dask_scheduler: Any) -> int:
    return dask_seam.scheduler_messages_sent(dask_scheduler)


def _worker_sent(dask_worker: Any) -> int:
    return dask_seam.worker_messages_sent(dask_worker)


def message_count(session: Session) -> int:
    """Messages sent so far on the batched streams between the scheduler and the workers, both ways
    (a worker that left takes its count with it: compare counts of the same workers)."""
    sent = session.client.run_on_scheduler(_scheduler_sent)
    return int(sent) + sum(session.client.run(_worker_sent).values())


def _scheduler_bytes_sent(dask_scheduler: Any) -> int:
    return dask_seam.scheduler_bytes_sent(dask_scheduler)


def task_message_bytes(session: Session) -> int:
    """Bytes the scheduler has sent so far on its batched streams to workers: task messages and the
    arguments they carry (compare two readings: the capstone's bytes per stage, an observation's)."""
    return int(session.client.run_on_scheduler(_scheduler_bytes_sent))


def in_window(graphs: Iterable[Graph], windows: Iterable[tuple[float, float]]) -> tuple[int, int]:
    """Tasks and dependencies of the ``graphs`` that arrived inside any of ``windows`` ([start, stop])."""
    spans = list(windows)
    tasks = deps = 0
    for g in graphs:
        if any(start <= g.time <= stop for start, stop in spans):
            tasks += g.tasks
            deps += g.dependencies
    return tasks, deps


def _catalogue_received(dask_scheduler: Any) -> int:
    from workbench.runtime.store.protocol import PLUGIN_NAME as STORE

    return sum(getattr(dask_seam.scheduler_plugin(dask_scheduler, STORE), "received", {}).values())


def _backend_received(dask_worker: Any) -> int:
    from workbench.runtime.store.protocol import PLUGIN_NAME as STORE

    return sum(getattr(dask_seam.worker_plugin(dask_worker, STORE), "received", {}).values())


def store_message_count(session: Session) -> int:
    """Messages sent so far to the store's catalogue and backends (each one's ``workbench_store``
    handler counts what it receives: a client's calls, a backend's questions to the catalogue,
    copies between backends); 0 where no store is open."""
    sent = session.client.run_on_scheduler(_catalogue_received)
    return int(sent) + sum(session.client.run(_backend_received).values())


@dataclass(frozen=True)
class Counts:
    """What one stretch of work gave the cluster: graphs' tasks and dependencies, scheduler-worker
    messages, store messages and bytes moved between workers (incoming transfers)."""

    tasks: int
    dependencies: int
    messages: int
    store_messages: int
    bytes_moved: int

    def per(self, n: float) -> dict[str, float]:
        """Each count divided by ``n`` (an iteration, a task, a round), keyed ``<count>_per``."""
        return {f"{k}_per": v / n for k, v in self.as_dict().items()} if n else {}

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return {
            "tasks": self.tasks,
            "dependencies": self.dependencies,
            "messages": self.messages,
            "store_messages": self.store_messages,
            "bytes_moved": self.bytes_moved,
        }


def _bytes_in_since(since: float, dask_worker: Any = None) -> int:
    return sum(int(t["total"]) for t in dask_seam.incoming_transfers(dask_worker, since))


class Counting:
    """Counts what the code inside ``with counting(session) as c:`` gave the cluster; ``c.counts``
    after the block (read outside it, so its time does not include the reading)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.counts: Counts | None = None

    def __enter__(self) -> Counting:
        install(self.session)
        self._messages = message_count(self.session)
        self._store = store_message_count(self.session)
        self._since = time.time()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is not None:
            return
        session = self.session
        graphs = graphs_since(session, self._since)
        moved = session.client.run(_bytes_in_since, self._since)
        self.counts = Counts(
            tasks=sum(g.tasks for g in graphs),
            dependencies=sum(g.dependencies for g in graphs),
            messages=message_count(session) - self._messages,
            store_messages=store_message_count(session) - self._store,
            bytes_moved=int(sum(moved.values())),
        )


def counting(session: Session) -> Counting:
    """A window that counts tasks, dependencies, messages and bytes moved (see :class:`Counting`)."""
    return Counting(session)
