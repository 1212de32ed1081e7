"""The recurrent read-only (RRO) argument, worker side: a lookup table of attached shared arrays.

Every worker keeps ``(key, version) -> read-only view`` in its :class:`~workbench.runtime.worker_state.WorkerState`
(``views``: a dict lookup, no message). A task resolving an RRO argument
looks in the table first (``table-hit``); a miss attaches the node's segment (``shm-attach``).
The segment itself was made once per node by :func:`publish_on_node` (``shm-create``), with the
race-tolerant ``attach_or_create``: if two publishers meet on a node, one writes, one attaches.
Every copy is made for an owner, the session's process (``owners.this_process()`` of the client,
handed to the worker that makes a node's copy): when that process and the copy's maker are both
dead (a kernel killed with SIGKILL), the next ``workbench.start()`` or ``workbench shm clean``
removes it; while the session lives, a copy outlives the worker that made it.

A task names its argument by the segment of each node (names are known before anything is
published), so a worker finds its node's copy by its own node id: no per-worker reference, and a
worker that joins a node later finds the node's copy too.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.memory import owners, shm
from workbench.runtime import trace
from workbench.runtime.worker_state import worker_state


@dataclass(frozen=True)
class SharedRef:
    """A small, picklable reference to a node's shared copy of one version of an array."""

    segment: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    node: str


def segment_prefix(token: str) -> str:
    """The name prefix of every shared segment a task runtime's RRO arguments make (one per runtime)."""
    return f"rro-{token}-"


def segment_name(token: str, key: str, version: int, node: str) -> str:
    """Per node: simulated nodes share one /dev/shm, and each must still build its own copy."""
    return f"{segment_prefix(token)}{key}-v{version}-{re.sub(r'[^A-Za-z0-9_.=+-]', '_', node)}"


def publish_on_node(array: np.ndarray, segment: str, owner: owners.Process | None = None) -> SharedRef:
    """Task body, pinned to one worker per node: make (or find) the node's shared copy, for
    ``owner`` (the session's process; default this worker)."""
    from workbench.runtime.session import node_id

    start = time.time()
    # populate: the tasks read all of it, every time; fault the pages in once, here
    view, created = shm.copy_in(segment, array, populate=True, owner=owner or owners.this_process())
    trace.emit("shm-create" if created else "shm-attach", start, time.time(), task="rro-publish", nbytes=array.nbytes)
    worker_state().views[segment] = view
    return SharedRef(segment, tuple(array.shape), str(array.dtype), int(array.nbytes), node_id())


def publish_here(array: np.ndarray, segment: str, owner: owners.Process | None = None) -> SharedRef:
    """Make the node's copy from the calling process (the client, when it shares a node with
    workers): the array is copied once, straight into shared memory, never sent to a worker. It
    lives for ``owner`` (default: this process, the session's)."""
    from workbench.runtime.session import node_id

    shm.copy_in(segment, array, owner=owner or owners.this_process())
    return SharedRef(segment, tuple(array.shape), str(array.dtype), int(array.nbytes), node_id())


def resolve(segments: dict[str, str]) -> np.ndarray:
    """The read-only view of this worker's node's copy: from the table, or attached on a miss.

    ``segments`` maps node ids to segment names (the task's dependencies made sure the segment of
    every node exists before the task runs).
    """
    from workbench.runtime.session import node_id

    node = node_id()
    segment = segments.get(node)
    if segment is None:
        raise RuntimeError(
            f"no shared copy was published for node {node!r} (published on {sorted(segments)}): "
            "this worker's node joined after the argument was published; publish it again"
        )
    start = time.time()
    views = worker_state().views
    view = views.get(segment)
    if view is not None:
        trace.emit("table-hit", start, time.time(), task="rro", nbytes=0)
        return view
    view = shm.attach(segment, populate=True)
    views[segment] = view
    trace.emit("shm-attach", start, time.time(), task="rro", nbytes=int(view.nbytes))
    return view


def forget(prefix: str, dask_worker: Any = None) -> int:
    """Drop this worker's views of segments starting with ``prefix``; returns how many."""
    views = worker_state(dask_worker).views
    names = [name for name in views if name.startswith(prefix)]
    for name in names:
        del views[name]
    return len(names)


def release_on_node(prefix: str, dask_worker: Any = None) -> list[str]:
    """``Client.run`` body: forget the worker's views and delete the node's segments of ``prefix``."""
    forget(prefix, dask_worker)
    return shm.delete_prefix(prefix)


def table_size(dask_worker: Any = None) -> int:
    """Views in this worker's lookup table (for tests and traces; a task, or ``Client.run``)."""
    return len(worker_state(dask_worker).views)
