"""What closes when the Jupyter kernel that opened it is asked to shut down (or restart).

A lesson no longer closes its cluster in a cell that Run All reaches (the dashboard's panes would lose
it): the cluster, and what the lesson's teardown cell names, close when the learner asks or when the
kernel shuts down. The kernel's exit handlers cannot do that: once a Dask nanny has started
multiprocessing's resource tracker, the kernel's exit waits on its captured stderr, and Jupyter
(papermill too) sends SIGTERM 2.5 s after asking a kernel to shut down, before any ``atexit`` handler
ran (docs/architecture.md, "Nothing relies on a Jupyter kernel's exit handlers"). So the closers run
in the kernel's ``do_shutdown``, the method ipykernel calls when the shutdown (or restart) request
arrives, before it replies: :func:`at_kernel_shutdown` wraps it, once per kernel, and runs what was
registered, last registered first (a lesson's store and files before its cluster).

The budget is the 2.5 s before SIGTERM: whatever is local and quick (a directory, a store's catalogue)
is registered last so that it runs first; if the signal cuts a cluster's close short, its worker
processes end with the kernel (they watch their parent), and nothing they made outlives them but
Dask's own scratch space (``tests/test_notebooks.py`` checks the kernel's temporary directory and
``/dev/shm`` after papermill shut each lesson's kernel down).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_closers: dict[int, tuple[str, Callable[[], object]]] = {}  # token -> (what, closer), in registration order
_tokens = itertools.count()
_HOOKED = "_workbench_closes_at_shutdown"  # set on a kernel whose do_shutdown runs the closers


def _kernel() -> Any:
    """This process's ipykernel kernel, or None (a plain Python process, a terminal IPython)."""
    ipython_module = sys.modules.get("IPython")  # a kernel has imported it: never import it here
    if ipython_module is None:
        return None
    shell = ipython_module.get_ipython()
    kernel = getattr(shell, "kernel", None)
    return kernel if callable(getattr(kernel, "do_shutdown", None)) else None


def at_kernel_shutdown(closer: Callable[[], object], what: str = "") -> Callable[[], None] | None:
    """Run ``closer()`` when this process's Jupyter kernel is asked to shut down or restart, after
    every closer registered later (last registered, first run). ``what`` names it in the one line
    printed if it raises. Returns a function that cancels the registration (call it once the thing
    is closed otherwise); None outside a Jupyter kernel, where nothing is registered."""
    kernel = _kernel()
    if kernel is None:
        return None
    with _lock:
        if not getattr(kernel, _HOOKED, False):
            _hook(kernel)
        token = next(_tokens)
        _closers[token] = (what or getattr(closer, "__qualname__", repr(closer)), closer)

    def cancel() -> None:
        with _lock:
            _closers.pop(token, None)

    return cancel


def registered() -> list[str]:
    """What runs at the kernel's shutdown, in the order it runs."""
    with _lock:
        return [what for what, _ in reversed(list(_closers.values()))]


def run_closers() -> None:
    """Run every registered closer, last registered first, and forget them: what the kernel's
    shutdown runs. A closer that raises gets one line on stderr; the others still run."""
    with _lock:
        closers = list(reversed(list(_closers.values())))
        _closers.clear()
    for what, closer in closers:
        try:
            closer()
        except Exception as error:  # the kernel is going away: say what failed, close the rest
            print(f"workbench: closing {what} at the kernel's shutdown failed: {error!r}", file=sys.stderr)


def _hook(kernel: Any) -> None:
    """Make ``kernel.do_shutdown`` run the closers first (an attribute of this kernel object only)."""
    original = kernel.do_shutdown

    def do_shutdown(restart: bool) -> Any:
        run_closers()
        return original(restart)

    kernel.do_shutdown = do_shutdown
    setattr(kernel, _HOOKED, True)
