"""Errors a task can send back: user code's exceptions made safe for Dask's worker.

Dask (2026.8) builds a failed task's message with ``str(error)`` and ``repr(error)`` outside any
guard. An exception whose ``__str__`` (or ``__repr__``) raises escapes the worker's task runner,
which then never removes the task's thread from ``Worker.active_threads``: from then on the
worker's profiler (it samples those threads every 10 ms) fails on a thread that no longer exists,
logging a traceback per sample for the rest of the worker's life and profiling nothing. Found in
CI: an exercise check that ran a channel rank raising such an exception left both workers in that
state for every later test. Task bodies that run user code (channel ranks, ``@task`` functions,
strategies' block work and merges) run it through :func:`sendable`, which swaps such an
exception for an :class:`UnprintableError` that names its type (:func:`unprintable`; the store's
active methods, whose errors travel in the store's own replies, use it too); printable exceptions
pass through untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

UNSHOWN = "(its message could not be shown)"


class UnprintableError(RuntimeError):
    """User code raised an exception whose message (``str`` or ``repr``) itself raises."""


def message(error: BaseException) -> str | None:
    """``str(error)``, or None when making it (or its ``repr``) raises: Dask needs both."""
    try:
        text = str(error)
        len(text)  # a str subclass may break here too (Dask measures the text)
        repr(error)
    except BaseException:  # noqa: BLE001 (any failure of a user's __str__/__repr__, even SystemExit)
        return None
    return str.__str__(text)


def sendable(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` for a task body: an exception it raises whose text cannot be made
    becomes an :class:`UnprintableError` naming its type, with the original's traceback (the user's
    lines); any other passes through untouched. The replacement is raised after the handler, so it
    carries no ``__context__``: Dask pickles an error's context too, and the original may not pickle
    (Dask then sends a bare ``Exception`` instead)."""
    try:
        return function(*args, **kwargs)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as error:
        if message(error) is not None:
            raise
        replacement = unprintable(error).with_traceback(error.__traceback__)
    raise replacement


def unprintable(error: BaseException) -> UnprintableError:
    """The :class:`UnprintableError` that stands for ``error`` (whose text cannot be made)."""
    name = f"{type(error).__module__}.{type(error).__qualname__}"
    return UnprintableError(
        f"the code raised {name}, {UNSHOWN[1:-1]}: its __str__ or __repr__ raises; "
        "make them return text so that the error can be reported"
    )
