"""The recurrent read-only (RRO) argument, worker side: a lookup table of attached shared arrays.

Every worker process keeps ``(key, version) -> read-only view``. A task resolving an RRO argument
looks in the table first (``table-hit``); a miss attaches the node's segment (``shm-attach``).
The segment itself was made once per node by :func:`publish_on_node` (``shm-create``), with the
race-tolerant ``attach_or_create``: if two publishers meet on a node, one writes, one attaches.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from workbench.memory import shm
from workbench.runtime import trace

_TABLE: dict[str, np.ndarray] = {}  # segment name (encodes key and version) -> attached view


@dataclass(frozen=True)
class SharedRef:
    """A small, picklable reference to a node's shared copy of one version of an array."""

    segment: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    node: str


def segment_name(token: str, key: str, version: int, node: str) -> str:
    """Per node: simulated nodes share one /dev/shm, and each must still build its own copy."""
    return f"rro-{token}-{key}-v{version}-{re.sub(r'[^A-Za-z0-9_.=+-]', '_', node)}"


def publish_on_node(array: np.ndarray, segment: str) -> SharedRef:
    """Task body, pinned to one worker per node: make (or find) the node's shared copy."""
    from workbench.runtime.session import node_id

    start = time.time()
    # populate: the tasks read all of it, every time; fault the pages in once, here
    view, created = shm.copy_in(segment, array, populate=True)
    trace.emit("shm-create" if created else "shm-attach", start, time.time(), task="rro-publish", nbytes=array.nbytes)
    _TABLE[segment] = view
    return SharedRef(segment, tuple(array.shape), str(array.dtype), int(array.nbytes), node_id())


def publish_here(array: np.ndarray, segment: str) -> SharedRef:
    """Make the node's copy from the calling process (the client, when it shares a node with
    workers): the array is copied once, straight into shared memory, never sent to a worker."""
    from workbench.runtime.session import node_id

    shm.copy_in(segment, array)
    return SharedRef(segment, tuple(array.shape), str(array.dtype), int(array.nbytes), node_id())


def attach_on_worker(ref: SharedRef) -> SharedRef:
    """Task body, pinned to each worker of the node: attach the node's copy into the table.

    Every worker then holds its own (tiny) reference, so the tasks that use the argument have a
    dependency on every worker alike and the scheduler places them by load, not by where the
    one publisher ran.
    """
    start = time.time()
    if ref.segment in _TABLE:  # this worker published it
        trace.emit("table-hit", start, time.time(), task="rro-attach", nbytes=0)
        return ref
    _TABLE[ref.segment] = shm.attach(ref.segment, populate=True)
    trace.emit("shm-attach", start, time.time(), task="rro-attach", nbytes=ref.nbytes)
    return ref


def resolve(refs: dict[str, SharedRef]) -> np.ndarray:
    """The read-only view for this worker: from the table, or attached on a miss.

    ``refs`` maps worker addresses to references; any reference made on this worker's node names
    the node's segment.
    """
    from distributed import get_worker

    from workbench.runtime.session import node_id

    node = node_id()
    ref = refs.get(get_worker().address) or next((r for r in refs.values() if r.node == node), None)
    if ref is None:
        raise RuntimeError(
            f"no shared copy was published for node {node!r} (published on {sorted({r.node for r in refs.values()})}): "
            "the worker joined after the argument was published; publish it again"
        )
    start = time.time()
    view = _TABLE.get(ref.segment)
    if view is not None:
        trace.emit("table-hit", start, time.time(), task="rro", nbytes=0)
        return view
    view = shm.attach(ref.segment, populate=True)
    _TABLE[ref.segment] = view
    trace.emit("shm-attach", start, time.time(), task="rro", nbytes=ref.nbytes)
    return view


def forget(prefix: str) -> int:
    """Drop this process's views of segments starting with ``prefix``; returns how many."""
    names = [name for name in _TABLE if name.startswith(prefix)]
    for name in names:
        del _TABLE[name]
    return len(names)


def release_on_node(prefix: str) -> list[str]:
    """Task/run body: forget the views and delete the node's segments of ``prefix``."""
    forget(prefix)
    return shm.delete_prefix(prefix)


def table_size() -> int:
    return len(_TABLE)
