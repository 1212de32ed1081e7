"""On the scheduler, while an observation lasts: what each graph submitted and each task ran.

:class:`Watch` is a scheduler plugin (Dask's ``update_graph`` and ``transition`` hooks, as Dask's own
task stream is made) registered by :func:`workbench.locality.observe` for the observed block only. It
extends the graph counter of :mod:`workbench.runtime.counts` (one record per graph: its new tasks and
dependencies) with what a locality diagnosis needs that no log of Dask's keeps:

- **large arguments**: each new task's literal values (:func:`~workbench.runtime.dask_seam.new_task_values`)
  of at least ``findings.ARGUMENT_MIN_BYTES`` (smaller ones are not fingerprinted), as a fingerprint
  (type, size, shape and samples of the bytes), so the same object found in many task messages, of
  one graph or of many, is counted once per message that carries it;
- **the task stream**: each finished task's worker, thread, result bytes and start/stop spans (the
  entries Dask's task stream keeps, which :func:`workbench.runtime.trace.from_task_stream` reads);
- **what tasks read**: per task group, the bytes of its tasks' dependencies.

Nothing is added per task but a dictionary update; the records are read once, after the block
(:func:`collect`).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from dask.sizeof import sizeof

import workbench.runtime.dask_seam as dask_seam
from workbench.locality.findings import ARGUMENT_MIN_BYTES
from workbench.runtime import counts, trace

PLUGIN_NAME = "workbench-locality-watch"
KEEP_TASKS = 200_000  # finished tasks remembered (oldest dropped first): an observation of more says so
SAMPLE_BYTES = 4096  # bytes of an array's start, end and middle hashed into its fingerprint


def fingerprint(value: Any, nbytes: int) -> str:
    """A short name for ``value``'s content: its type, size and shape, and a hash of samples of its bytes
    (start, middle, end) where it exposes a buffer. Two copies of one array (each task's message
    unpickled apart) share it; hashing all of a large array on the scheduler would cost what sending it does."""
    digest = hashlib.blake2b(digest_size=8)
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    shape = getattr(value, "shape", None)
    digest.update(f"{kind}|{nbytes}|{shape}|{getattr(value, 'dtype', '')}".encode())
    try:
        view = memoryview(value).cast("B")
    except (TypeError, ValueError):  # no buffer, or not contiguous: type, size and shape only
        view = None
    if view is not None and len(view):
        middle = len(view) // 2
        for part in (view[:SAMPLE_BYTES], view[middle : middle + SAMPLE_BYTES], view[-SAMPLE_BYTES:]):
            digest.update(part)
    return digest.hexdigest()


def describe(value: Any) -> str:
    """What a value is, for a person: ``numpy.ndarray float64 (20000, 8)``."""
    kind = f"{type(value).__module__.split('.')[0]}.{type(value).__qualname__}"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    return " ".join(str(part) for part in (kind, dtype, shape) if part is not None)


class Watch(counts.GraphCounter):
    """On the scheduler: the graphs, large arguments, finished tasks and reads of an observation."""

    name = PLUGIN_NAME

    def __init__(self, argument_min_bytes: int = ARGUMENT_MIN_BYTES, owner: str = "") -> None:
        super().__init__()
        self.owner = owner  # the id of the client that observes: when it goes, the watch goes
        self.argument_min_bytes = int(argument_min_bytes)
        self.scheduler: Any = None
        # fingerprint -> {"what", "bytes", "copies", "groups": Counter(group -> copies)}
        self.arguments: dict[str, dict[str, Any]] = {}
        self.group_graphs: Counter[str] = Counter()  # group -> graphs that brought new tasks of it
        self.reads: dict[str, list[int]] = {}  # group -> [tasks, dependency bytes]
        self.stream: deque[dict[str, Any]] = deque(maxlen=KEEP_TASKS)
        self.finished = 0
        self.spent = 0.0  # seconds of the scheduler's time in this plugin's hooks: what the watch costs it

    async def start(self, scheduler: Any) -> None:
        """Keep the scheduler: ``transition`` is not given it."""
        self.scheduler = scheduler

    def remove_client(self, scheduler: Any, client: str) -> None:
        """The observing client left (closed inside the block, or its kernel died): the watch removes itself,
        so that it neither records every later graph nor refuses every later observation of the cluster."""
        if self.owner and client == self.owner:
            dask_seam.remove_scheduler_plugin(scheduler, PLUGIN_NAME)

    def update_graph(self, scheduler: Any, *, tasks: Iterable[Any] = (), **kwargs: Any) -> None:
        """Count the graph (as :class:`~workbench.runtime.counts.GraphCounter` does) and fingerprint the
        large literal values its new tasks carry."""
        began = time.perf_counter()
        tasks = list(tasks)
        super().update_graph(scheduler, tasks=tasks, **kwargs)
        groups: set[str] = set()
        for key, values in dask_seam.new_task_values(scheduler, tasks):
            group = trace.task_name(key)
            groups.add(group)
            for value in values:
                nbytes = int(sizeof(value))
                if nbytes < self.argument_min_bytes:
                    continue
                entry = self.arguments.setdefault(
                    fingerprint(value, nbytes), {"what": describe(value), "bytes": nbytes, "copies": 0, "groups": {}}
                )
                entry["copies"] += 1
                entry["groups"][group] = entry["groups"].get(group, 0) + 1
        self.group_graphs.update(groups)
        self.spent += time.perf_counter() - began

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """A task that finished: its task-stream entry and the bytes it read."""
        if start != "processing" or finish not in ("memory", "erred") or not kwargs.get("startstops"):
            return
        began = time.perf_counter()
        self.finished += 1
        self.stream.append(
            {
                "key": key,
                "worker": kwargs.get("worker", ""),
                "thread": kwargs.get("thread", 0),
                "nbytes": kwargs.get("nbytes", 0) if finish == "memory" else 0,
                "startstops": list(kwargs["startstops"]),
                "status": "OK" if finish == "memory" else "error",
            }
        )
        read = self.reads.setdefault(trace.task_name(key), [0, 0])
        read[0] += 1
        if self.scheduler is not None:
            read[1] += dask_seam.dependency_bytes(self.scheduler, key)
        self.spent += time.perf_counter() - began


def collect_here(dask_scheduler: Any) -> dict[str, Any] | None:
    """On the scheduler: what the watch recorded, as plain values (None: no watch registered)."""
    watch = dask_seam.scheduler_plugin(dask_scheduler, PLUGIN_NAME)
    if watch is None:
        return None
    return {
        "graphs": list(watch.graphs),
        "arguments": {f: {**a, "groups": dict(a["groups"])} for f, a in watch.arguments.items()},
        "group_graphs": dict(watch.group_graphs),
        "reads": {g: list(r) for g, r in watch.reads.items()},
        "stream": list(watch.stream),
        "dropped": watch.finished - len(watch.stream),
        "spent": watch.spent,
    }
