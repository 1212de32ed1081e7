"""What a locality strategy is: one way of running the same block work over placed blocks.

An application declares its work once, as a :class:`BlockWork`: the function of one block, the
merge of partial results (and, optionally, a function of several co-located blocks at once). A
:class:`Strategy` decides *where* and *how* that work runs (one task per block, fetched to the
caller, rechunked, SplIter partitions, active store calls, PyCOMPSs-style tasks ...): opened on
placed blocks it gives a :class:`Plan`, whose :meth:`Plan.map` returns one partial result per
task and :meth:`Plan.reduce` the merged answer. Every variant of every application is
``application.solve(strategy.open(...), data)``; a new strategy is one module that subclasses
:class:`Strategy` and calls :func:`register`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from distributed import Future

from workbench.runtime.blocks import PlacedBlocks, rows_of
from workbench.runtime.failures import sendable
from workbench.runtime.session import Session
from workbench.runtime.trace import Recorder, task_key  # task_key: strategies import it from here

T = TypeVar("T")


@dataclass(frozen=True)
class BlockWork:
    """The work of an application, declared once for every strategy.

    - ``block(block, *aligned_blocks, *args[, rows=global row indexes]) -> partial``: the work of
      one block (a plain function, or a ``@task`` function whose parameter directions the
      PyCOMPSs-style strategies use; a plain function's first parameter is read-only and recurrent
      there, ``RRO``);
    - ``merge(partials) -> partial``: combines partial results (associative: strategies merge in
      any grouping, locally or in tasks);
    - ``blocks(list of blocks, *lists of aligned blocks, *args[, rows=]) -> partial`` (optional):
      the work of several co-located blocks in one call (a partition), when that is cheaper than
      one call per block and a merge;
    - ``fan_in``: how many partials one merge takes (None: all of them in one merge; 2: a binary
      tree, as the Cascade SVM merges pairs);
    - ``with_rows``: pass ``rows=`` (the global row numbers of the block's items) to the functions.
    """

    block: Callable[..., Any]
    merge: Callable[[list[Any]], Any]
    blocks: Callable[..., Any] | None = None
    fan_in: int | None = None
    with_rows: bool = False

    def __post_init__(self) -> None:
        for name in ("block", "merge"):
            if not callable(getattr(self, name)):
                raise TypeError(f"BlockWork.{name} must be a function, got {getattr(self, name)!r}")
        if self.blocks is not None and not callable(self.blocks):
            raise TypeError(f"BlockWork.blocks must be a function or None, got {self.blocks!r}")
        if self.fan_in is not None and (
            isinstance(self.fan_in, bool) or not isinstance(self.fan_in, int) or self.fan_in < 2
        ):
            raise ValueError(
                "BlockWork.fan_in must be None (one merge of all partials) or an integer of at least 2, got "
                f"{self.fan_in!r}"
            )

    @property
    def function(self) -> Callable[..., Any]:
        """The plain function of one block (a ``@task`` function's own function)."""
        return getattr(self.block, "function", self.block)

    @property
    def name(self) -> str:
        """The name tasks carry in traces: the block function's."""
        return getattr(self.function, "__name__", "block")

    def call(self, block: Any, aligned: Sequence[Any], args: Sequence[Any], rows: np.ndarray | None) -> Any:
        """The work of one block, here."""
        return sendable(self.function, block, *aligned, *args, **({"rows": rows} if self.with_rows else {}))

    def call_partition(
        self, blocks: list[Any], aligned: Sequence[list[Any]], args: Sequence[Any], ranges: Sequence[tuple[int, int]]
    ) -> Any:
        """The work of a partition's blocks, here: ``blocks`` in one call when declared, else one
        call per block and a local merge."""
        if self.blocks is not None:
            return sendable(
                self.blocks, blocks, *aligned, *args, **({"rows": rows_of(ranges)} if self.with_rows else {})
            )
        partials = [
            self.call(b, [a[i] for a in aligned], args, rows_of(ranges[i : i + 1]) if self.with_rows else None)
            for i, b in enumerate(blocks)
        ]
        return merge_here(self, partials)


def merge_tree(partials: list[Any], merge: Callable[[list[Any]], Any], fan_in: int | None) -> Any:
    """Merge ``partials`` in groups of ``fan_in`` (all at once when None), level by level, down to one:
    the one merge tree of the workbench (here, or with ``merge`` submitting tasks)."""
    while len(partials) > 1:
        step = fan_in or len(partials)
        partials = [
            merge(partials[i : i + step]) if i + 1 < len(partials) else partials[i]
            for i in range(0, len(partials), step)
        ]
    return partials[0]


def merge_here(work: BlockWork, partials: list[Any]) -> Any:
    """Merge partial results in this process, in ``work.fan_in`` groups (a tree), as tasks would."""
    if not partials:
        raise ValueError("nothing to merge: there were no blocks")
    return merge_tree(partials, work.merge, work.fan_in)


@dataclass(frozen=True)
class Broadcast:
    """An argument every task reads whole (kNN's queries): each strategy decides how it travels
    (scattered to every worker once, placed in the store, written to a file ...)."""

    value: Any


class Plan:
    """A strategy opened on placed blocks for one run: map the work, reduce it, close.

    Subclasses implement :meth:`map`; :meth:`reduce` merges what it returns (futures, in tasks on
    the cluster; values, here). Use as a context manager: :meth:`close` releases what the plan
    made (rechunked copies, runtimes, scattered values).
    """

    def __init__(
        self,
        strategy: Strategy,
        session: Session,
        placed: PlacedBlocks | None,
        recorder: Recorder,
        aligned: Sequence[PlacedBlocks],
    ):
        self.strategy = strategy
        self.session = session
        self.placed = placed
        self.recorder = recorder
        self.aligned = tuple(aligned)

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what this plan made; the placed blocks stay."""

    def blocks(self) -> PlacedBlocks:
        """The placed blocks (a clear error for an application that placed none)."""
        if self.placed is None:
            raise ValueError(
                f"strategy {self.strategy.name!r} maps work over placed blocks, and this application placed none"
            )
        return self.placed

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One partial result of ``work`` per task (futures or values), with ``args`` after the blocks."""
        raise NotImplementedError(f"strategy {self.strategy.name!r} does not map block work")

    def merge_task(self, work: BlockWork, partials: list[Any]) -> Any:
        """One merge of ``partials`` as a task (a future), through :func:`~workbench.runtime.failures.sendable`."""
        return self.session.client.submit(
            sendable, work.merge, partials, pure=False, key=task_key(getattr(work.merge, "__name__", "merge"))
        )

    def reduce(self, work: BlockWork, *args: Any) -> Any:
        """``work`` mapped over the blocks and merged into one answer, here."""
        partials = self.map(work, *args)
        if not partials:
            raise ValueError("there are no blocks to compute on: the placed array has no rows")
        if not any(isinstance(p, Future) for p in partials):
            return merge_here(work, partials)
        return self.collect(merge_tree(partials, lambda group: self.merge_task(work, group), work.fan_in))

    def collect(self, future: Future) -> Any:
        """The merged answer's value, here (a bounded wait)."""
        return self.session.gather(future)


class Strategy:
    """A named way of running block work; :meth:`open` gives a :class:`Plan` for one run."""

    name: str = ""
    description: str = ""
    plan: type[Plan] = Plan

    def open(
        self,
        session: Session,
        placed: PlacedBlocks | None,
        recorder: Recorder | None = None,
        aligned: Sequence[PlacedBlocks] = (),
    ) -> Plan:
        """A plan for one run over ``placed`` (and ``aligned`` blocks cut the same way, e.g. labels)."""
        if placed is not None:
            for other in aligned:
                placed.check_aligned(other)
        return self.plan(self, session, placed, recorder or Recorder(), aligned)

    def __repr__(self) -> str:
        return f"<strategy {self.name}: {self.description}>"


_STRATEGIES: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Make ``strategy`` available by its name (a variant name of every application that offers it)."""
    if not isinstance(strategy, Strategy):
        raise TypeError(f"register takes a Strategy instance, got {type(strategy).__name__}")
    if not strategy.name or not isinstance(strategy.name, str):
        raise ValueError(f"a strategy needs a name, got {strategy.name!r}")
    if not inspect.getdoc(type(strategy)) and not strategy.description:
        raise ValueError(f"strategy {strategy.name!r} needs a description (what it does with the data)")
    _STRATEGIES[strategy.name] = strategy
    return strategy


def unregister(name: str) -> None:
    """Forget the strategy ``name`` (a test's or a notebook's own)."""
    _STRATEGIES.pop(name, None)


def named(table: Mapping[str, T], name: str, what: str) -> T:
    """``table[name]``; else a ``ValueError`` that lists the ``what``s there are and a close match."""
    if name not in table:
        hint = difflib.get_close_matches(name, list(table), n=1)
        raise ValueError(
            f"no {what} {name!r}; there are {sorted(table)}" + (f". Did you mean {hint[0]!r}?" if hint else "")
        )
    return table[name]


def get(name: str) -> Strategy:
    """The strategy ``name``; a close-match suggestion when there is none."""
    return named(_STRATEGIES, name, "strategy")


def names() -> list[str]:
    """Every registered strategy, in registration order."""
    return list(_STRATEGIES)
