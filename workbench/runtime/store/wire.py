"""The store's one typed wire: each operation defined once, both ends' dispatch derived from it.

An operation is its handler, decorated where it is written: :func:`catalogue_op` on a method of the
catalogue (:class:`~workbench.runtime.store.catalogue.StoreCatalogue`), :func:`backend_op` on a
function of :mod:`~workbench.runtime.store.backend_ops` that takes the backend first. The decorator
makes it an :class:`Operation`, and that one definition says all of it:

* its name on the wire: the handler's name without ``op_`` (``op_records`` is ``records``);
* its arguments and their types: the handler's parameters and annotations, checked where it is sent
  and again where it arrives (a message with an argument missing, unknown or of the wrong type is
  refused with a ``TypeError`` that names it; an operation the end does not have, with a
  ``ValueError`` listing the ones it has);
* its reply: the handler's return annotation, checked where the reply arrives (a reply of another type
  is refused with a ``TypeError`` naming the operation and the end that sent it);
* its thread pool (:class:`Pool`): where the receiving end runs it;
* whether it may be re-sent (``resend``): running it twice does what running it once does, so a
  caller that got no reply may send it again (the error of an unanswered message says which);
* its handler, which the receiving end calls with the arguments.

Both ends' dispatch comes from it: a sender passes the operation itself
(``link.catalogue(StoreCatalogue.op_records, refs=...)``, ``link.backend(address, backend_ops.get,
...)``), and the receiving end finds it by name in its end's :class:`Operations`, filled by the
decorators as the modules defining operations are imported (no table is kept by hand). A new
operation is one decorated function; both ends of a cluster import its module.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class End(StrEnum):
    """The two ends that answer store operations, as errors name them."""

    CATALOGUE = "the store catalogue"
    BACKEND = "a store backend"


class Pool(StrEnum):
    """Where the receiving end runs an operation.

    LOOP: on the end's event loop (every catalogue operation: one at a time, each atomic; a backend's
    coroutine that must not hold a thread). IO: a backend's thread for the quick operations. COPIES: a
    backend's threads for copies of its objects, each of which may wait for its object's lock."""

    LOOP = "loop"
    IO = "io"
    COPIES = "copies"


Check = Callable[[Any], bool]


@dataclass(frozen=True)
class Argument:
    """One argument of an operation: its name, its type as written, and whether it may be left out."""

    name: str
    annotation: str
    required: bool
    accepts: Check = field(compare=False, repr=False)


@dataclass(eq=False)
class Operation:
    """One store operation, made by :func:`catalogue_op` or :func:`backend_op` from its handler."""

    end: End
    name: str
    handler: Callable[..., Any]
    arguments: tuple[Argument, ...]
    reply: str
    answers: Check = field(repr=False)
    pool: Pool
    resend: bool

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """On the class: the operation (to send); on an instance: its handler bound to it (to call)."""
        return self if instance is None else functools.partial(self.handler, instance)

    @property
    def summary(self) -> str:
        """The operation as a signature: ``get(oid: str, version: int) -> Any``."""
        parts = [f"{a.name}: {a.annotation}{'' if a.required else ' = ...'}" for a in self.arguments]
        return f"{self.name}({', '.join(parts)}) -> {self.reply}"

    def checked(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of ``message`` (name -> value), each checked against the definition: a
        ``TypeError`` naming an unknown, missing or mistyped one (and the operation's signature)."""
        if not isinstance(message, Mapping):
            raise TypeError(
                f"{self.end} got {self.name!r} with arguments of type {type(message).__name__}, not a mapping"
            )
        known = {a.name: a for a in self.arguments}
        unknown = [name for name in message if name not in known]
        if unknown:
            raise TypeError(
                f"{self.end}'s {self.name!r} got an unexpected keyword argument {unknown[0]!r}: {self.summary}"
            )
        for argument in self.arguments:
            if argument.name not in message:
                if argument.required:
                    raise TypeError(f"{self.end}'s {self.name!r} is missing argument {argument.name!r}: {self.summary}")
            elif not argument.accepts(message[argument.name]):
                value = message[argument.name]
                raise TypeError(
                    f"{self.end}'s {self.name!r} takes {argument.name}: {argument.annotation}, "
                    f"got {type(value).__name__} {_short(value)}"
                )
        return dict(message)

    def answered(self, reply: Any, where: str) -> Any:
        """``reply``, the result ``where`` (the end, as errors name it) sent back for this operation,
        checked against its reply type: a ``TypeError`` naming the operation for a reply of another."""
        if not self.answers(reply):
            raise TypeError(
                f"{where} answered {self.name!r} with {type(reply).__name__} {_short(reply)}, not {self.reply}: "
                "its end runs other code than this one (both ends of a cluster import the same workbench)"
            )
        return reply


class Operations:
    """The operations one end answers, by name: filled by the decorators, looked up by the end's handler."""

    def __init__(self, end: End):
        self.end = end
        self.by_name: dict[str, Operation] = {}

    def add(self, operation: Operation) -> None:
        """Know ``operation``; a ``ValueError`` if another handler has its name already."""
        known = self.by_name.get(operation.name)
        if known is not None and _where(known.handler) != _where(operation.handler):
            raise ValueError(
                f"{self.end} has an operation {operation.name!r} already ({_where(known.handler)}): "
                f"name the handler {_where(operation.handler)} otherwise"
            )
        self.by_name[operation.name] = operation

    def find(self, name: object) -> Operation:
        """The operation called ``name``; a ``ValueError`` naming the ones this end has if it has none."""
        operation = self.by_name.get(name) if isinstance(name, str) else None
        if operation is None:
            raise ValueError(f"{self.end} has no operation {name!r}; it has {', '.join(sorted(self.by_name))}")
        return operation

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self):
        return iter(self.by_name.values())


CATALOGUE = Operations(End.CATALOGUE)
BACKEND = Operations(End.BACKEND)


def catalogue_op(*, resend: bool = False) -> Callable[[Callable[..., Any]], Operation]:
    """Make a method of the catalogue (``op_<name>(self, ...)``) the operation ``<name>``; the catalogue
    runs every operation on the scheduler's event loop."""
    return lambda handler: _define(CATALOGUE, handler, Pool.LOOP, resend)


def backend_op(*, pool: Pool = Pool.IO, resend: bool = False) -> Callable[[Callable[..., Any]], Operation]:
    """Make a function ``op_<name>(backend, ...)`` (or ``<name>``) the backend operation ``<name>``,
    run on ``pool`` (``Pool.LOOP``: a coroutine function)."""
    return lambda handler: _define(BACKEND, handler, pool, resend)


def message(operation: Operation, end: End, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``operation`` as sent to ``end``, checked there before they leave (a
    ``TypeError`` for an operation of the other end, or a wrong argument)."""
    if not isinstance(operation, Operation) or operation.end is not end:
        raise TypeError(
            f"{end} is sent one of its operations (a function decorated with "
            f"{'catalogue_op' if end is End.CATALOGUE else 'backend_op'}), got {operation!r}"
        )
    return operation.checked(arguments)


def _define(operations: Operations, handler: Callable[..., Any], pool: Pool, resend: bool) -> Operation:
    """The operation ``handler`` defines, added to ``operations``; a ``TypeError`` saying what is wrong
    with a handler that cannot be one."""
    name = handler.__name__.removeprefix("op_")
    if operations.end is End.CATALOGUE and pool is not Pool.LOOP:
        raise TypeError(f"{_where(handler)}: the catalogue runs every operation on its event loop (Pool.LOOP)")
    if inspect.iscoroutinefunction(handler) != (pool is Pool.LOOP and operations.end is End.BACKEND):
        raise TypeError(
            f"{_where(handler)}: a backend operation on Pool.LOOP is a coroutine function, and only it is one "
            "(a catalogue operation is a plain method)"
        )
    parameters = list(inspect.signature(handler).parameters.values())[1:]  # the first is the end itself
    hints = _hints(handler)
    arguments = []
    for parameter in parameters:
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"{_where(handler)}: an operation's arguments are named ({parameter} is not)")
        if parameter.name not in hints:
            raise TypeError(f"{_where(handler)}: argument {parameter.name!r} has no type annotation")
        annotation = parameter.annotation if isinstance(parameter.annotation, str) else _text(hints[parameter.name])
        accepts = _accepts(hints[parameter.name])
        arguments.append(Argument(parameter.name, annotation, parameter.default is parameter.empty, accepts))
    returns = inspect.signature(handler).return_annotation
    if returns is inspect.Signature.empty:
        raise TypeError(f"{_where(handler)}: an operation's reply has a type annotation (-> None if it has none)")
    reply = "None" if returns is None else returns if isinstance(returns, str) else _text(returns)
    answers = _accepts(hints["return"])
    operation = Operation(operations.end, name, handler, tuple(arguments), reply, answers, pool, resend)
    functools.update_wrapper(operation, handler, updated=())  # __doc__, __name__, __module__ for readers
    operations.add(operation)
    return operation


def _hints(handler: Callable[..., Any]) -> dict[str, Any]:
    """The handler's argument annotations and its return annotation (``"return"``), evaluated: each
    names a type of the wire (what its module imports for annotations only cannot be one)."""
    signature = inspect.signature(handler)
    written = {name: p.annotation for name, p in list(signature.parameters.items())[1:]}
    written["return"] = signature.return_annotation
    hints: dict[str, Any] = {}
    for name, annotation in written.items():
        if annotation is inspect.Parameter.empty:
            continue
        hints[name] = eval(annotation, handler.__globals__) if isinstance(annotation, str) else annotation  # noqa: S307
    return hints


def _accepts(annotation: Any) -> Check:
    """What a value of ``annotation`` may be on the wire (msgpack turns tuples into lists; a number
    may arrive as any integral or real type; ``Any`` takes everything; a list's items are checked too)."""
    if annotation is Any or annotation is object:
        return lambda value: True
    if annotation is None or annotation is type(None):
        return lambda value: value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return functools.partial(_any_option, tuple(_accepts(option) for option in typing.get_args(annotation)))
    kind = origin or annotation
    if kind is bool:
        return lambda value: isinstance(value, bool)
    if kind is int:  # an int first: the check runs per item of a batch's keys
        return lambda value: type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))
    if kind is float:
        return lambda value: isinstance(value, numbers.Real) and not isinstance(value, bool)
    args = typing.get_args(annotation)
    if kind is list or (kind is tuple and (not args or args[1:] == (...,))):
        # and each item of its type: refs=["ab"] would be read as oid "a", version "b"
        (item,) = args[:1] or (Any,)
        return functools.partial(_all_items, _accepts(item))
    if kind is tuple:  # a fixed number of items, each of its own type: refs=[["x"]] is not a [oid, version]
        return functools.partial(_each_item, tuple(_accepts(item) for item in args))
    if kind is bytes:
        return lambda value: isinstance(value, (bytes, bytearray, memoryview))
    if isinstance(kind, type):
        return lambda value: isinstance(value, kind)
    raise TypeError(
        f"an operation's argument or reply is of a plain type (str, int, list[...], tuple[...], X | None, Any), "
        f"not {annotation!r}"
    )


def _any_option(options: tuple[Check, ...], value: Any) -> bool:
    """Whether one check of ``options`` takes ``value`` (a loop, not ``any()``: it runs per item of a batch)."""
    for accepts in options:
        if accepts(value):
            return True
    return False


def _all_items(accepts: Check, value: Any) -> bool:
    """Whether ``value`` is a list (or tuple) whose every item ``accepts`` takes (a loop: a batch's keys)."""
    if not isinstance(value, (list, tuple)):
        return False
    for item in value:
        if not accepts(item):
            return False
    return True


def _each_item(accepts: tuple[Check, ...], value: Any) -> bool:
    """Whether ``value`` is a list (or tuple) of one item per check of ``accepts``, each taken by its own."""
    if not isinstance(value, (list, tuple)) or len(value) != len(accepts):
        return False
    for check, item in zip(accepts, value):
        if not check(item):
            return False
    return True


def _text(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def _where(handler: Callable[..., Any]) -> str:
    return f"{handler.__module__}.{handler.__qualname__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
