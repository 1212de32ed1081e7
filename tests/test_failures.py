"""User code that raises an exception whose text cannot be made: the error reaches the caller, named, and
the workers stay sound (Dask's task runner, hit by such an exception, left the thread in its
``active_threads`` for good: its profiler then failed every 10 ms for the rest of the session)."""

from __future__ import annotations

import pickle
import threading
import traceback

import dask.array as da
import pytest

from workbench.runtime import splitter, strategies
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.channels import ChannelError, run_group
from workbench.runtime.failures import UnprintableError, message, sendable
from workbench.runtime.strategies import BlockWork
from workbench.runtime.tasks import TaskRuntime, task


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class Unrepresentable(ValueError):
    def __repr__(self):
        raise RuntimeError("no repr")


def raise_unprintable(*args, **kwargs):
    raise Unprintable()


@task()
def unprintable_task(x):
    raise Unprintable()


def _raise(error):
    raise error


def test_printable_errors_pass_untouched_and_unprintable_ones_are_named():
    assert sendable(max, 3, 4) == 4
    assert sendable(dict, function=1) == {"function": 1}  # a user's keyword of any name passes
    error = ValueError("plain")
    with pytest.raises(ValueError) as caught:
        sendable(_raise, error)
    assert caught.value is error
    for bad in (Unprintable(), Unrepresentable("fine text, broken repr")):
        bad.lock = threading.Lock()  # nor can it be pickled
        with pytest.raises(UnprintableError, match=type(bad).__qualname__) as caught:
            sendable(_raise, bad)
        assert message(caught.value) is not None and "could not be shown" in str(caught.value)
        assert caught.value.__context__ is None  # Dask pickles the context: the original must not travel
        pickle.loads(pickle.dumps(caught.value))
        assert "_raise" in [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]  # user's lines
    with pytest.raises(SystemExit):
        sendable(_raise, SystemExit(3))
    assert message(Unprintable()) is None and message(error) == "plain"
    assert message(ExitingText()) is None and message(BadLengthText()) is None


class ExitingText(Exception):
    def __str__(self):
        raise SystemExit("a __str__ that exits")


class _Unmeasurable(str):
    def __len__(self):
        raise RuntimeError("no length")


class BadLengthText(Exception):
    def __str__(self):
        return _Unmeasurable("text")


class UnpicklableResult:
    def __reduce__(self):
        raise Unprintable()


def return_unpicklable(rank):
    return UnpicklableResult()


def test_an_unprintable_error_in_any_task_body_is_named_and_leaves_no_stale_thread(session, stale_task_threads):
    for rank_function in (raise_unprintable, return_unpicklable):
        with pytest.raises(ChannelError, match="could not be shown"):
            run_group(session, rank_function, timeout=30)
    assert not any(stale_task_threads(session).values())

    with TaskRuntime(session, "dask"):
        future = unprintable_task(1)
        with pytest.raises(UnprintableError, match="Unprintable"):
            future.result(timeout=30)
    assert not any(stale_task_threads(session).values())

    placed = PlacedBlocks(session, da.ones((40, 2), chunks=(10, 2)))
    try:
        for name in ("blocks", "split", "split-balanced"):
            with strategies.get(name).open(session, placed) as plan, pytest.raises(UnprintableError):
                plan.reduce(BlockWork(block=raise_unprintable, merge=sum))
        with strategies.get("blocks").open(session, placed) as plan, pytest.raises(UnprintableError):
            plan.reduce(BlockWork(block=lambda b: 1.0, merge=raise_unprintable))
        parts = splitter.split(session, placed.array)
        with pytest.raises(UnprintableError):
            session.gather(splitter.run_partitions(session, parts, raise_unprintable))
    finally:
        placed.release()
    assert not any(stale_task_threads(session).values())


def test_an_active_method_raising_an_unprintable_error_is_named(session, stale_task_threads):
    from store_helpers import Grumpy

    from workbench.runtime.store import store_for

    grumpy = store_for(session).make_persistent(Grumpy())
    try:
        for call in (grumpy.complain, grumpy.complain.non_active):  # as a task, active and not
            with pytest.raises(UnprintableError, match="_Unprintable"):
                call().result(timeout=30)
        with pytest.raises(UnprintableError, match="_Unprintable"):
            grumpy.complain.value()  # in the store's own message to the backend
    finally:
        grumpy.delete()
    assert not any(stale_task_threads(session).values())
