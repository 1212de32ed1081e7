"""What a worker keeps between tasks, on one worker plugin: RRO views, spill buffers, channel marks and inboxes.

Task code that needs a table of its worker (the RRO lookup table, a ``dask-spill`` buffer, the groups
aborted here, an eager rank's inbox) reaches it through :func:`worker_state`, the way distributed's
shuffle reaches its worker plugin: by name in ``Worker.plugins``
(:func:`workbench.runtime.dask_seam.worker_plugin`). Nothing lives in a module
global: :func:`workbench.runtime.session.start` registers :class:`WorkerState` on every worker of the
cluster it starts or joins (later ones included), the worker makes its tables when the plugin arrives,
and :meth:`WorkerState.teardown` drops them when the worker closes. A function run with ``Client.run``
is not a task (Dask sets no current worker for it): it takes Dask's ``dask_worker`` argument and passes
it on.

This module imports neither the channels nor the strategies (they import it): the objects they keep
here are typed ``Any``.

What is kept per process rather than per worker (the store opened last, which
``PersistentObject.make_persistent()`` without a store uses, and that call's hook) is named in one
module, :mod:`workbench.runtime.store.current`, and nowhere else.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

import workbench.runtime.dask_seam as dask_seam

PLUGIN_NAME = "workbench-worker-state"


class NoWorkerState(RuntimeError):
    """Task code that keeps worker state ran where there is none (outside a task, or on a worker of a
    cluster that no workbench session registered the plugin on)."""


@dataclass
class SpillSpace:
    """One ``dask-spill`` buffer of this worker and the directory it spills to (its own)."""

    buffer: Any  # a distributed.spill.SpillBuffer
    directory: str


class WorkerState(WorkerPlugin):
    """The per-worker tables of the runtime: made empty when the plugin arrives on a worker (it travels
    as a new instance), dropped by :meth:`teardown` when the worker closes or the plugin is removed.

    - ``views``: the RRO lookup table (:mod:`workbench.runtime.rro`), segment name -> attached view;
    - ``spills`` (under ``spill_lock``): the ``dask-spill`` buffers (:mod:`workbench.runtime.strategies.tiers`);
    - ``aborted_groups``: channel groups aborted on this worker (:mod:`workbench.runtime.channels.transport`);
    - ``inboxes``: the eager ranks' inbox actors on this worker, by (group, rank)
      (:mod:`workbench.runtime.channels.channel`).
    """

    idempotent = True  # a second session joining the cluster keeps the workers' tables

    def __init__(self) -> None:
        self.views: dict[str, np.ndarray] = {}
        self.spills: dict[str, SpillSpace] = {}
        self.spill_lock = threading.Lock()  # a SpillBuffer is not thread-safe
        self.aborted_groups: set[str] = set()
        self.inboxes: dict[tuple[str, int], Any] = {}  # channels.channel.Inbox

    def setup(self, worker: Any) -> None:
        """Quiet the one failure a closing worker expects (:class:`ClosingHeartbeat`), and keep a
        nanny's worker process out of its parent's interrupts (:func:`ignore_interrupts`)."""
        quiet_closing_heartbeat(worker)
        if getattr(worker, "nanny", None):
            ignore_interrupts()

    def __reduce__(self) -> tuple[type[WorkerState], tuple[()]]:
        """Sent to a worker as a new, empty state (its tables are the worker's own; a lock does not pickle)."""
        return (WorkerState, ())

    def teardown(self, worker: Any) -> None:
        """Drop the worker's views, close its inboxes, forget its spill buffers and remove their files."""
        self.views.clear()
        self.aborted_groups.clear()
        for inbox in list(self.inboxes.values()):
            inbox.close("is on a worker that is closing")
        self.inboxes.clear()
        with self.spill_lock:
            spaces = list(self.spills.values())
            self.spills.clear()  # not each buffer's clear(): that unspills every key first, only to delete it
        for space in spaces:
            shutil.rmtree(space.directory, ignore_errors=True)


HEARTBEAT_FAILURE = "Failed to communicate with scheduler during heartbeat"  # Dask's words (distributed.worker)
_CLOSING = ("closing", "closed")  # a worker's Status names once it closes


class ClosingHeartbeat(logging.Filter):
    """Drops Dask's "Failed to communicate with scheduler during heartbeat" (an ERROR with its
    traceback) from ``worker`` once it is closing, and nothing else.

    A worker's close stops its heartbeat and then closes its connections; a heartbeat already on its
    way when the connections close fails, and Dask logs it as an error with two tracebacks: under
    lesson 03's ``session.close()`` at size ``lab``, once per worker. That failure is the close itself.
    The same message from a running worker (its scheduler went away) still shows, as does every
    other record.
    """

    def __init__(self, worker: Any) -> None:
        super().__init__()
        self._worker = weakref.ref(worker)

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for the heartbeat failure of this worker while it closes; True otherwise."""
        if not record.getMessage().startswith(HEARTBEAT_FAILURE):
            return True
        worker = self._worker()
        return worker is not None and getattr(getattr(worker, "status", None), "name", "") not in _CLOSING

    def of(self, worker: Any) -> bool:
        """Whether this filter is ``worker``'s."""
        return self._worker() is worker


def quiet_closing_heartbeat(worker: Any) -> None:
    """Put a :class:`ClosingHeartbeat` for ``worker`` on Dask's worker logger, once per worker. It
    stays until the process ends: the heartbeat it quiets fails during the close, after the plugins
    are gone."""
    dask_logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, ClosingHeartbeat) and f.of(worker) for f in dask_logger.filters):
        dask_logger.addFilter(ClosingHeartbeat(worker))


def ignore_interrupts() -> None:
    """Ignore SIGINT in this worker process (from its main thread; elsewhere nothing is changed).

    A nanny's worker process is in its parent's process group, and Jupyter interrupts a kernel by
    signalling the whole group (the Stop button, and first thing when it shuts a kernel down): each
    worker died with a KeyboardInterrupt traceback under the cell, its nanny restarted it with a
    warning, and the scheduler logged every result it held as lost. The interrupt is for the cell;
    the workers stop when their session closes (or their parent dies)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_state(worker: Any = None) -> WorkerState:
    """This worker's :class:`WorkerState`: of ``worker`` (a ``Client.run`` function's ``dask_worker``),
    else of the worker running the current task.

    Raises :class:`NoWorkerState` outside a task (with no ``worker``) and on a worker without the plugin.
    """
    if worker is None:
        try:
            worker = get_worker()
        except ValueError:
            raise NoWorkerState(
                "this code keeps per-worker state and runs only in a task on a Dask worker (a function run with "
                "Client.run takes a dask_worker argument and passes it to worker_state)"
            ) from None
    state = dask_seam.worker_plugin(worker, PLUGIN_NAME)
    if state is None:
        raise NoWorkerState(
            f"worker {worker.address} has no {PLUGIN_NAME!r} plugin: start the cluster or join it with "
            "workbench.runtime.session.start (it registers the plugin), or register it yourself with "
            "client.register_plugin(WorkerState(), name=PLUGIN_NAME)"
        )
    return state
