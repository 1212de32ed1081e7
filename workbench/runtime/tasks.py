"""Tasks with parameter directions, as PyCOMPSs declares them: ``@task(points=RRO)``.

A decorated function, called inside ``with TaskRuntime(session, mode):``, is submitted to the
Dask cluster and returns a future. Each parameter has a direction:

* ``IN`` (default): read by the task.
* ``INOUT``: updated by the task. Futures are immutable, so the update is a *renaming*: the task
  gets a private copy, mutates it, and the call returns the new version as a new future (the
  function itself returns None). Write-after-read hazards cannot arise.
* ``RRO`` (recurrent read-only): read by many tasks. What happens to it depends on the mode.

The mode is how data reaches a task, the variable of the PyCOMPSs paper:

* ``files``: objects as files, as PyCOMPSs does: each array argument is written once per version
  to a file, and every task deserializes it from the file, every time.
* ``dask``: plain Dask: arguments are futures in worker memory, pickled between worker processes
  when a task runs elsewhere; each worker process keeps its own copy.
* ``rro``: RRO arguments are published once per node into shared memory and attached zero-copy by
  every worker process through its lookup table (``workbench.runtime.rro``).

Changing ``@task(points=IN)`` to ``@task(points=RRO)`` is the whole change in user code.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import inspect
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from dask.base import tokenize
from distributed import Future

from workbench.memory import owners, shm
from workbench.runtime import rro, trace
from workbench.runtime.failures import sendable
from workbench.runtime.session import PinnedCall, Session, node_id

MODES = ("files", "dask", "rro")
FILES_DIR_ENV = "WORKBENCH_FILES_DIR"  # a directory every worker can read (a shared file system on many nodes)


class Direction(enum.Enum):
    """A task parameter's direction: read (IN), updated (INOUT), read again and again (RRO)."""

    IN = "IN"
    INOUT = "INOUT"
    RRO = "RRO"


IN, INOUT, RRO = Direction.IN, Direction.INOUT, Direction.RRO

_CURRENT: contextvars.ContextVar[TaskRuntime | None] = contextvars.ContextVar("workbench_task_runtime", default=None)


@dataclass(frozen=True)
class _Published:
    """One value's shared copies: the segment of each node, and the tasks that make them."""

    segments: dict[str, str]
    publishing: list[Future]

    def running(self) -> list[Future]:
        """Publish tasks not known to be finished (a local check of the futures, no message)."""
        return [f for f in self.publishing if f.status != "finished"]


@dataclass(frozen=True)
class FileRef:
    """An array written to a file: what a ``files``-mode task receives and deserializes."""

    path: str
    nbytes: int


# Markers for converted arguments. Plain dicts, because Dask finds futures nested in dicts, lists
# and tuples (so they become real dependencies), never inside other objects.
_RRO_MARK = "__workbench_rro__"  # {_RRO_MARK: ({node: segment name}, [publish futures still running])}
_FILE_MARK = "__workbench_file__"  # {_FILE_MARK: FileRef or future of one}


# -- worker side -------------------------------------------------------------------------------
def _load_file(ref: FileRef) -> np.ndarray:
    start = time.time()
    array = shm.load_npy(ref.path)  # a full read and a new copy, every task
    trace.emit("file-read", start, time.time(), task="file-read", nbytes=ref.nbytes)
    return array


def _marked(value: Any, mark: str) -> bool:
    return isinstance(value, dict) and len(value) == 1 and mark in value


def _resolve(value: Any) -> Any:
    if _marked(value, _RRO_MARK):
        segments, _ = value[_RRO_MARK]  # the futures were only there to run the task after publishing
        return rro.resolve(segments)
    if _marked(value, _FILE_MARK):
        return _load_file(value[_FILE_MARK])
    return value


def _execute(function: Callable[..., Any], inout: tuple[str, ...], kwargs: dict[str, Any]) -> Any:
    """Task body: resolve every argument, give INOUT parameters private copies, call, rename."""
    values = {name: _resolve(value) for name, value in kwargs.items()}
    for name in inout:
        if not _marked(kwargs[name], _FILE_MARK):  # a file load is already a private copy
            values[name] = np.array(values[name], copy=True)
    result = sendable(function, **values)
    if not inout:
        return result
    if result is not None:
        raise TypeError(
            f"{function.__name__} has INOUT parameters {list(inout)} and returned a value: a task with INOUT "
            "parameters updates them in place and returns None (the call returns their new versions)"
        )
    updated = tuple(values[name] for name in inout)
    return updated[0] if len(updated) == 1 else updated


def _write_file(array: np.ndarray, path: str) -> FileRef:
    """Task body (on the worker holding the array): serialize one version to its file."""
    start = time.time()
    np.save(path, np.asarray(array), allow_pickle=False)
    trace.emit("file-write", start, time.time(), task="file-write", nbytes=np.asarray(array).nbytes)
    return FileRef(path, int(np.asarray(array).nbytes))


# -- client side -------------------------------------------------------------------------------
class TaskRuntime:
    """Where and how tasks run: a session and a mode; owns the segments and files it creates.

    Use as a context manager; on exit every shared segment and file this runtime made is removed
    from every node, and every worker forgets its views of them.
    """

    def __init__(
        self,
        session: Session,
        mode: str = "dask",
        files_dir: str | Path | None = None,
        recorder: trace.Recorder | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.session = session
        self.mode = mode
        self.recorder = recorder  # client-side events (a segment made by the client) go here
        self.token = uuid.uuid4().hex[:8]
        self.owner = owners.this_process()  # what the RRO copies live for: this session's process
        base = files_dir or session.settings.get(FILES_DIR_ENV) or None
        self._files_dir = (
            Path(tempfile.mkdtemp(prefix=f"lwb-files-{self.token}-", dir=base)) if mode == "files" else None
        )
        self._published: dict[str, _Published] = {}  # identity -> its segments and publish tasks
        self._node_workers: dict[str, list[str]] | None = None
        self._turn = -1
        self._files: dict[str, Any] = {}  # identity -> FileRef or future of one
        self._scattered: dict[str, Future] = {}
        self._pinned: dict[str, np.ndarray] = {}  # arrays whose identity is in use
        self._token_var: contextvars.Token | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> TaskRuntime:
        self._token_var = _CURRENT.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._token_var is not None:
            _CURRENT.reset(self._token_var)
            self._token_var = None
        self.close()

    def close(self) -> None:
        """Remove this runtime's shared segments (on every node) and files; forget cached futures."""
        self._published.clear()
        self._files.clear()
        self._scattered.clear()
        self._pinned.clear()
        if self.mode == "rro":
            self.session.run(rro.release_on_node, self.segment_prefix)
        if self._files_dir is not None:
            shutil.rmtree(self._files_dir, ignore_errors=True)

    @property
    def segment_prefix(self) -> str:
        """The name prefix of every shared segment this runtime makes."""
        return rro.segment_prefix(self.token)

    # -- identity of values --------------------------------------------------------------------------
    def identity(self, value: Any) -> str:
        """Stable id of a value's version: a future's key, or the identity of an array object.

        Arrays are identified by object, not by hashing their bytes (hashing 256 MB costs more than
        sharing it); the runtime keeps a reference, so the id cannot be reused while it matters.
        Modify a client array in place and it is the same object: pass a new array for a new version.
        """
        if isinstance(value, Future):
            return tokenize(value.key)[:16]
        key = tokenize(id(value), value.shape, value.dtype.str, value.__array_interface__["data"][0])[:16]
        self._pinned[key] = value
        return key

    # -- argument conversion ---------------------------------------------------------------------
    def _nodes(self) -> dict[str, list[str]]:
        """Node id -> its workers, asked of the workers once per runtime (one ``Client.run``)."""
        if self._node_workers is None:
            self._node_workers = self.session.nodes()
        return self._node_workers

    def _publish(self, value: Any) -> _Published:
        """Once per node, the node's shared copy: made by the client itself on its own node (a client
        array is copied straight in), else by a publish task on one of the node's workers (the
        value is its dependency, so the scheduler runs it where the value already is, and the
        value crosses to a node at most once). Every node's publish task goes in one graph.

        Tasks name the copy by its segment on each node (known before publishing) and depend on
        the publish tasks only while those still run: later tasks have no RRO dependency at all,
        and the scheduler places them by load.
        """
        key = self.identity(value)
        if key not in self._published:
            here = node_id()
            segments, calls = {}, []
            for node, workers in self._nodes().items():
                segments[node] = segment = rro.segment_name(self.token, key, 0, node)
                if node == here and isinstance(value, np.ndarray):
                    started = time.time()
                    rro.publish_here(value, segment, self.owner)  # the client's node: copy it in directly
                    if self.recorder is not None:
                        self.recorder.event("shm-create", started, time.time(), task="rro-publish", nbytes=value.nbytes)
                else:
                    calls.append(
                        PinnedCall(
                            rro.publish_on_node, (value, segment, self.owner), workers, f"rro-publish-{key}-{node}"
                        )
                    )
            self._published[key] = _Published(segments, self.session.submit_pinned(calls))
        return self._published[key]

    def next_worker(self) -> str:
        """Workers in turn: where a task goes while the only thing it waits for is a publish."""
        workers = sorted(w for ws in self._nodes().values() for w in ws)
        self._turn += 1
        return workers[self._turn % len(workers)]

    def _file(self, value: Any) -> Any:
        key = self.identity(value)
        if key not in self._files:
            path = str(self._files_dir / f"{key}-v0.npy")
            if isinstance(value, Future):  # written by a task where the value lives
                self._files[key] = self.session.client.submit(
                    _write_file, value, path, pure=False, key=f"file-write-{key}"
                )
            else:
                self._files[key] = _write_file(value, path)
        return self._files[key]

    def _scatter(self, value: np.ndarray) -> Future:
        """Client arrays go into the cluster once, not into every task's message."""
        key = self.identity(value)
        if key not in self._scattered:
            self._scattered[key] = self.session.client.scatter(value, hash=False)
        return self._scattered[key]

    def convert(self, direction: Direction, value: Any) -> Any:
        """What the task message carries for one argument in this runtime's mode."""
        is_array = isinstance(value, np.ndarray)
        if not (is_array or isinstance(value, Future)):
            return value  # scalars, tuples of parameters ...: passed as they are
        if self.mode == "files":
            return {_FILE_MARK: self._file(value)}
        if self.mode == "rro" and direction is RRO:
            published = self._publish(value)
            return {_RRO_MARK: (published.segments, published.running())}
        if is_array and value.nbytes > 1 << 16:
            return self._scatter(value)
        return value


def current() -> TaskRuntime:
    """The runtime of the enclosing ``with TaskRuntime(...)``."""
    runtime = _CURRENT.get()
    if runtime is None:
        raise RuntimeError("task functions run inside 'with TaskRuntime(session, mode):' (no runtime is active)")
    return runtime


class TaskFunction:
    """A function with parameter directions; calling it submits a task and returns a future."""

    def __init__(self, function: Callable[..., Any], directions: dict[str, Direction]):
        self.function = function
        self.signature = inspect.signature(function)
        unknown = set(directions) - set(self.signature.parameters)
        if unknown:
            raise TypeError(f"@task names parameters {sorted(unknown)} that {function.__name__} does not have")
        for name, direction in directions.items():
            if not isinstance(direction, Direction):
                raise TypeError(f"direction of {name!r} must be IN, INOUT or RRO, got {direction!r}")
        self.directions = {name: directions.get(name, IN) for name in self.signature.parameters}
        self.inout = tuple(name for name, d in self.directions.items() if d is INOUT)
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Future:
        """Submit the task (see :meth:`submit`); returns its future."""
        return self.submit(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        """Travel by reference (module and name) when the module holds this very task function, as a
        plain function does: a task message then carries a few bytes, not the pickled function."""
        module, name = getattr(self.function, "__module__", None), getattr(self.function, "__qualname__", "")
        if module and "<" not in name and _lookup(module, name) is self:
            return (_lookup, (module, name))
        return (TaskFunction, (self.function, self.directions))

    def submit(self, *args: Any, workers: list[str] | None = None, **kwargs: Any) -> Future:
        """Submit the task; ``workers`` pins it (for benchmarks that need every worker to run it)."""
        runtime = current()
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        message = {name: runtime.convert(self.directions[name], value) for name, value in bound.arguments.items()}
        if not workers and _waits_only_on_publishing(message):
            # Its only dependencies are publish tasks: the scheduler would draw every such task to
            # the publishers' workers. Spread them instead (later calls have no such dependency).
            workers = [runtime.next_worker()]
        pinning = {"workers": workers, "allow_other_workers": False} if workers else {}
        return runtime.session.client.submit(
            _execute,
            self.function,
            self.inout,
            message,
            pure=False,
            key=f"{self.function.__name__}-{uuid.uuid4().hex}",
            **pinning,
        )


def _lookup(module: str, name: str) -> Any:
    """``module.name`` (a task function, found again where it is unpickled); None if there is none."""
    import importlib

    try:
        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return target


def _futures_in(value: Any) -> bool:
    if isinstance(value, Future):
        return True
    if isinstance(value, dict):
        return any(_futures_in(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_futures_in(v) for v in value)
    return False


def _waits_only_on_publishing(message: dict[str, Any]) -> bool:
    """True when the task's dependencies are all RRO publish tasks (and there is at least one)."""
    rro_args = [v for v in message.values() if _marked(v, _RRO_MARK)]
    others = [v for v in message.values() if not _marked(v, _RRO_MARK)]
    return any(v[_RRO_MARK][1] for v in rro_args) and not _futures_in(others)


def task(function: Callable[..., Any] | None = None, **directions: Direction):
    """Declare a task: ``@task`` or ``@task(points=RRO, c=INOUT)``."""
    if function is not None:
        return TaskFunction(function, {})
    return lambda f: TaskFunction(f, directions)
