"""What a persistent class is: a ``PersistentObject`` subclass whose ``@active`` methods run in the store.

An *active* method runs on the backend (Dask worker) that holds the object, next to its data, and
sends back only its result. ``@active`` marks read-only methods (they may run concurrently on one
object); ``@active(writes=True)`` marks methods that change the object (they run alone on it).
Between calls the object's numpy attributes are kept read-only, so a "read-only" method that
writes into ``self`` fails loudly instead of corrupting a shared object.

This module has no Dask imports: a class written in a notebook only needs this base class (and the
store's process-wide state, :mod:`~workbench.runtime.store.current`, to persist it).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np

import workbench.runtime.store.current as current
from workbench.names import did_you_mean

F = TypeVar("F", bound=Callable[..., Any])
ACTIVE_ATTRIBUTE = "__workbench_active__"  # on a function: {"writes": bool}
PROJECT_MODULES = ("workbench",)  # installed on every worker with the workbench (its kernels and datasets too)


@overload
def active(function: F) -> F: ...
@overload
def active(*, writes: bool = False) -> Callable[[F], F]: ...
def active(function: Callable[..., Any] | None = None, *, writes: bool = False) -> Any:
    """Mark a method of a :class:`PersistentObject` as active (runs where the object is).

    ``@active`` is a read-only method (concurrent calls on one object are allowed);
    ``@active(writes=True)`` changes the object (calls on one object run one at a time, and a
    replicated object refuses it, since its replicas would differ).
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise TypeError(f"@active decorates a method, got {type(f).__name__}")
        setattr(f, ACTIVE_ATTRIBUTE, {"writes": bool(writes)})
        return f

    return mark(function) if function is not None else mark


_ACTIVE_METHODS: weakref.WeakKeyDictionary[type, dict[str, bool]] = weakref.WeakKeyDictionary()


def new_object_ids(count: int) -> list[str]:
    """``count`` random object ids (128 bits as 32 hex digits, as ``uuid4().hex``), drawn at once."""
    raw = os.urandom(16 * count).hex()
    return [raw[i : i + 32] for i in range(0, 32 * count, 32)]


class StoredHandle:
    """Base class of store proxies: what a backend resolves to its object when it is an argument."""

    ref: ObjectRef


class PersistentObject:
    """Base class of objects that can live in the store (see :mod:`workbench.runtime.store`).

    ``obj.make_persistent(alias=None, backend=None)`` places it on a backend of the current store
    and returns a :class:`~workbench.runtime.store.Proxy`; calling an active method on the proxy
    runs it there. Attributes are the object's state; keep them picklable (numpy arrays travel
    without copies through Dask's serialisation).
    """

    def make_persistent(self, alias: str | None = None, backend: str | None = None) -> Any:
        """Persist this object and return its proxy.

        In a client: in the current store (the last one opened), on ``backend`` or round-robin.
        Inside a task on a worker: on that worker's backend (the object does not move).
        """
        return current.persist(self, alias, backend)

    @classmethod
    def active_methods(cls) -> dict[str, bool]:
        """Active method name -> whether it writes (worked out once per class: a batch of 10^5
        objects of one class asks 10^5 times)."""
        found = _ACTIVE_METHODS.get(cls)
        if found is None:
            found = {}
            for klass in reversed(cls.__mro__):
                for name, value in vars(klass).items():
                    mark = getattr(value, ACTIVE_ATTRIBUTE, None)
                    if mark is not None:
                        found[name] = mark["writes"]
            _ACTIVE_METHODS[cls] = found
        return dict(found)


def class_name(cls: type) -> str:
    """``module.QualName`` of a class, as the catalogue records it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def catalogue_entry(
    cls: type, oid: str, version: int, worker: str | None, nbytes: int, alias: str | None
) -> dict[str, Any]:
    """What the catalogue records when an object of ``cls`` is placed on ``worker``."""
    return {
        "oid": oid,
        "version": version,
        "class_label": class_name(cls),
        "kind": "object",
        "nbytes": int(nbytes),
        "methods": cls.active_methods(),
        "meta": {},
        "alias": alias,
        "worker": worker,
    }


def check_alias(alias: object) -> None:
    """A clear error unless ``alias`` is None or a name: non-empty, printable, encodable text.

    An alias travels in Dask messages (msgpack, UTF-8) and is stored in SQLite: a lone surrogate
    (``"\\ud800"``) cannot be encoded and used to fail deep inside the scheduler's comms.
    """
    if alias is None:
        return
    if not isinstance(alias, str) or not alias:
        raise ValueError(f"an alias is a non-empty string, got {alias!r}")
    try:
        alias.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"alias {alias!r} is not valid text (it holds a lone surrogate): use letters, digits and punctuation"
        ) from None
    if not alias.isprintable() or alias != alias.strip():
        raise ValueError(
            f"alias {alias!r} holds control characters or leading/trailing spaces: use a plain printable name"
        )
    if len(alias) > 1000:
        raise ValueError(f"an alias is a name of at most 1000 characters, got {len(alias)}")


def check_method(class_label: str, methods: dict[str, bool], name: str) -> bool:
    """Whether active method ``name`` writes; a clear error with a close match when there is none."""
    if name in methods:
        return methods[name]
    hint = did_you_mean(name, methods)
    raise AttributeError(
        f"{class_label} has no active method {name!r}; its active methods are {sorted(methods)}"
        + (f"; {hint}" if hint else ". Mark a method with @active to call it in the store.")
    )


def state_nbytes(obj: Any) -> int:
    """Bytes of an object's state in this process's memory: numpy attributes exactly, device arrays
    (the ``gpu`` tier's) none, other attributes by Dask's ``sizeof``."""
    from dask.sizeof import sizeof

    from workbench.memory.gpu import is_device_array

    state = getattr(obj, "__dict__", None)
    if state is None:
        return int(sizeof(obj))
    unique = {id(v): v for v in state.values()}.values()  # two attributes bound to one array count it once
    return int(sum(v.nbytes if isinstance(v, np.ndarray) else 0 if is_device_array(v) else sizeof(v) for v in unique))


_STATE_DEPTH = 4  # how deep detach_result looks into an object's state and into a result
_ATOMS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)  # immutable, or not state: never copied


def _state_parts(obj: Any) -> tuple[list[np.ndarray], set[int]]:
    """What of ``obj``'s state a result could alias: its numpy arrays, and the ids of its other
    mutable parts (``obj`` itself, lists, dicts, sets, tuples, nested objects), ``_STATE_DEPTH`` deep."""
    arrays: list[np.ndarray] = []
    parts: set[int] = set()

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return
        if isinstance(value, _ATOMS) or id(value) in parts:
            return
        parts.add(id(value))
        if depth == 0:
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            children: Any = value
        elif isinstance(value, dict):
            children = value.values()
        else:
            children = (getattr(value, "__dict__", None) or {}).values()
        for child in children:
            walk(child, depth - 1)

    walk(obj, _STATE_DEPTH)
    return arrays, parts


def detach_result(result: Any, obj: Any) -> Any:
    """``result`` with nothing in it that is part of ``obj``'s state: such parts are copied.

    A method may return ``self.data``, a view of it, ``self.items`` or ``self``; handed out as
    they are, a finished call's result would change when a later writing method changes the
    object (the future path keeps the result in the worker's memory, unserialised). Numpy arrays
    that may share memory with the state's arrays are copied, and so is any other part of the state
    (deep copy), also inside the tuples, lists and dicts of a result. New values are not copied.
    """
    if isinstance(result, _ATOMS):
        return result
    arrays, parts = _state_parts(obj)

    def detach(value: Any, depth: int) -> Any:
        if isinstance(value, np.ndarray):
            return value.copy() if any(np.may_share_memory(value, a) for a in arrays) else value
        if isinstance(value, _ATOMS):
            return value
        if id(value) in parts:
            return copy.deepcopy(value)
        if depth == 0:
            return value
        if isinstance(value, list):
            return [detach(v, depth - 1) for v in value]
        if isinstance(value, dict):
            return {k: detach(v, depth - 1) for k, v in value.items()}
        if isinstance(value, tuple):
            items = [detach(v, depth - 1) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple keeps its type
        return value

    return detach(result, _STATE_DEPTH)


def set_arrays_writeable(obj: Any, writeable: bool) -> None:
    """Make the numpy attributes of ``obj`` (not) writeable; a read-only buffer is copied to allow writes."""
    state = getattr(obj, "__dict__", None) or {}
    copies: dict[int, np.ndarray] = {}  # attributes bound to one array get one copy: they stay one array
    for name, value in list(state.items()):
        if id(value) in copies:
            state[name] = copies[id(value)]
            continue
        if not isinstance(value, np.ndarray) or value.flags.writeable == writeable:
            continue
        try:
            value.flags.writeable = writeable
        except ValueError:  # a view of an immutable buffer (e.g. received bytes): own a copy
            state[name] = copies[id(value)] = value.copy()


# The modules ship_by_value registered with cloudpickle, each with the open stores (and backends)
# that shipped one of its classes: a module is unregistered once the last of them closes, so that no
# registration outlives the stores that needed it (see ship_by_value). Registrations the user made are
# not in here, and never touched.
_SHIPPED: dict[str, weakref.WeakSet[object]] = {}
_SHIPPED_LOCK = threading.Lock()


def ship_by_value(cls: type, owner: object) -> list[str]:
    """Have cloudpickle send ``cls`` (and its bases) by value when their module is not installed,
    for as long as ``owner`` (the ``Store`` or backend that ships it) is open: :func:`stop_shipping`.

    A class from ``__main__`` (a notebook, a script) already travels by value. A class from a
    module next to the user's code (not in site-packages, not the workbench) is registered by
    value, so workers need no copy of that module. The registration is the process's: while it
    holds, every pickle of that module's classes and functions goes by value, and one that comes
    back to this process (an object fetched from a worker) rebinds the class's methods here to
    copies of them (cloudpickle's way with a class it sent by value). So it is held no longer than
    a store that needs it is open: closing the last one unregisters the module, and a later session
    in this process sends it by reference again. Returns the modules shipped.
    """
    import cloudpickle

    registered = []
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    for klass in cls.__mro__:
        module_name = klass.__module__
        if module_name in ("__main__", "builtins") or module_name.split(".")[0] in PROJECT_MODULES:
            continue
        module = sys.modules.get(module_name)
        path = getattr(module, "__file__", None)
        if module is None or path is None or any(path.startswith(p) for p in installed):
            continue
        spec = importlib.util.find_spec(module_name.split(".")[0])
        if spec is not None and spec.origin and any(spec.origin.startswith(p) for p in installed):
            continue
        with _SHIPPED_LOCK:
            owners = _SHIPPED.get(module_name)
            if owners is None:
                if module_name in cloudpickle.list_registry_pickle_by_value():
                    continue  # the user registered it: theirs to keep, and to undo
                try:
                    cloudpickle.register_pickle_by_value(module)
                except (ValueError, TypeError):
                    continue
                owners = _SHIPPED[module_name] = weakref.WeakSet()
            owners.add(owner)
        registered.append(module_name)
    return registered


def stop_shipping(owner: object) -> list[str]:
    """``owner`` (a ``Store`` or backend that closes) ships nothing by value any more: the modules
    :func:`ship_by_value` registered that no other open owner ships are unregistered. Returns them."""
    import cloudpickle

    stopped = []
    with _SHIPPED_LOCK:
        for module_name, owners in list(_SHIPPED.items()):
            owners.discard(owner)
            if len(owners) > 0:
                continue
            del _SHIPPED[module_name]
            if module_name in cloudpickle.list_registry_pickle_by_value():
                # the module itself, or its name alone once it left sys.modules (all cloudpickle keeps)
                module = sys.modules.get(module_name) or types.ModuleType(module_name)
                cloudpickle.unregister_pickle_by_value(module)
            stopped.append(module_name)
    return stopped


class ReadWriteLock:
    """Many readers or one writer (writers are not starved: a waiting writer blocks new readers).

    Readers are the read-only methods and every copy the store makes of the object (a fetch, a move,
    a replica, a new version): they run together, and never while a writing method is half-way.

    A copy (``copy=True``) waits for a waiting writer only while no method holds the lock: a
    read-only method that copies its own object (a fetch, a move, a proxy of it passed on to another
    call) would otherwise wait for the writer, which waits for the method. The writer still goes
    first once the methods holding the lock end (copies that did not join them wait for it).
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._copies = 0  # readers that are copies (the rest are read-only methods)

    @property
    def waiting(self) -> int:
        """How many threads wait to take the lock now (what a test waits for to order a call after another)."""
        return self._readers_waiting + self._writers_waiting

    def acquire(self, write: bool, timeout: float | None = None, copy: bool = False) -> bool:
        """Take the lock for writing (exclusive) or reading (shared; ``copy``: for a copy of the
        object, see the class); False on timeout."""
        with self._condition:
            if write:
                self._writers_waiting += 1
                try:
                    ok = self._condition.wait_for(lambda: not self._writer and self._readers == 0, timeout)
                finally:
                    self._writers_waiting -= 1
                if ok:
                    self._writer = True
                return ok
            self._readers_waiting += 1
            try:
                ok = self._condition.wait_for(
                    lambda: (
                        not self._writer and (self._writers_waiting == 0 or (copy and self._readers > self._copies))
                    ),
                    timeout,
                )
            finally:
                self._readers_waiting -= 1
            if ok:
                self._readers += 1
                self._copies += copy
            return ok

    def release(self, write: bool, copy: bool = False) -> None:
        """Release what :meth:`acquire` took (``copy`` as it was taken)."""
        with self._condition:
            if write:
                self._writer = False
            else:
                self._readers -= 1
                self._copies -= copy
            self._condition.notify_all()


@dataclass(frozen=True)
class ObjectRef:
    """What travels in a task or a message to name a stored object: id, version, alias, class."""

    oid: str
    version: int | None = None  # None: the current version
    alias: str | None = None
    class_label: str = ""
    pinned: bool = False  # True: exactly this version; False: whatever version is current

    def label(self) -> str:
        """The object as messages name it: alias or short id, and version."""
        name = f"{self.alias!r} ({self.oid[:8]})" if self.alias else self.oid[:8]
        return f"object {name}" + (f" v{self.version}" if self.version is not None else "")
