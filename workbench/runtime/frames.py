"""Dask's message frames as byte views that never hold a buffer exported by another memoryview.

Before a frame is written to a socket, compressed or spilled, Dask makes it a 1-D view of unsigned
bytes with ``distributed.utils.ensure_memoryview``. A frame that is not one already (a float64
array's buffer, the pickle buffer of a 2-D block: the arrays of store objects and task results)
becomes ``PickleBuffer(frame).raw()``: a second memoryview that holds a buffer *exported by* the
frame's memoryview. CPython before 3.12.7 (gh-77894) crashes when the garbage collector breaks a
reference cycle that holds both: ``tp_clear`` of the frame's memoryview refuses to release it
("Exception ignored in tp_clear of: <class 'memoryview'>", "BufferError: memoryview has 1 exported
buffer") but drops its managed buffer all the same; when the second view then lets go of it, the
frame's memoryview is deallocated and releases itself through that NULL managed buffer (SIGSEGV in
``memory_dealloc``: the process dies with no Python traceback, a worker's nanny restarts it). Any
cycle that keeps the frames of a serialisation or a transfer makes one, such as a traceback that
holds them, or a sampling profiler that keeps ``sys._current_frames()`` in a cycle (Dask's does
when its sample fails: see :mod:`workbench.runtime.failures`).

:func:`byte_view` makes the same 1-D byte view (zero copy) without that export: a cast of the
frame's memoryview when it is C-contiguous (a view of the same managed buffer, as a slice is), a
numpy byte view otherwise (a buffer exported by an ndarray, which the collector never clears).
:func:`install` puts it in place of ``ensure_memoryview`` in Dask's modules. Importing this module
changes nothing: :func:`workbench.runtime.session.start` installs it in the calling process and
registers :class:`FramesPlugin`, which installs it on every worker of the cluster it starts or joins
(a Slurm cluster's too), those that join later included. On an interpreter with the fix it leaves
Dask as it is. Dask's ``ensure_memoryview`` is not public: the replacement is made by
:func:`workbench.runtime.dask_seam.replace_ensure_memoryview`, whose contract test fails when Dask
stops using it by that name.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

import workbench.runtime.dask_seam as dask_seam

# gh-77894 ("memoryview can set an exception in tp_clear"): fixed in 3.12.7 and 3.13.0.
AFFECTED = sys.version_info < (3, 12, 7)


def byte_view(obj: Any) -> memoryview:
    """``obj`` (bytes, bytearray, memoryview or ``PickleBuffer``) as a contiguous 1-D memoryview of
    unsigned bytes in memory order: what Dask's ``ensure_memoryview`` returns, made
    without holding a buffer exported by a memoryview. A non-contiguous view is copied, as Dask does."""
    view = obj if isinstance(obj, memoryview) else memoryview(obj)
    if not view.nbytes:
        return memoryview(bytearray())  # holds nothing of obj, so its memory can go
    if not view.contiguous:
        return memoryview(bytearray(view))
    if view.ndim == 1 and view.format == "B":
        return view
    if view.c_contiguous:
        return view.cast("B")  # a view of the same managed buffer: no export of ``view``
    try:  # Fortran order, which memoryview cannot cast: numpy's flat view in memory order
        return memoryview(np.asarray(view).ravel(order="K").view(np.uint8))
    except (TypeError, ValueError):  # a format numpy does not read: a copy in memory order
        return memoryview(view.tobytes(order="A"))


def install() -> bool:
    """Make Dask use :func:`byte_view` in this process, where the interpreter has gh-77894 (through
    :func:`~workbench.runtime.dask_seam.replace_ensure_memoryview`). Returns whether it is in place
    (False on an interpreter with the fix); calling it again changes nothing."""
    if not AFFECTED:
        return False
    dask_seam.replace_ensure_memoryview(byte_view)
    return True


PLUGIN_NAME = "workbench-frames"


class FramesPlugin(WorkerPlugin):
    """:func:`install` on every worker of a cluster, those that join later included (registered by
    :func:`workbench.runtime.session.start`, whichever cluster it starts or joins)."""

    def setup(self, worker: Any) -> None:
        """Install :func:`byte_view` in the worker's process."""
        install()
