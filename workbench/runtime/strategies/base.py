"""What a locality strategy is: one way of running the same block work over placed blocks.

An application declares its work once, as a :class:`BlockWork` (:mod:`workbench.runtime.work`): the
function of one block, the merge of partial results (and, optionally, a function of several
co-located blocks at once). A
:class:`Strategy` decides *where* and *how* that work runs (one task per block, fetched to the
caller, rechunked, SplIter partitions, active store calls, PyCOMPSs-style tasks ...): opened on
placed blocks it gives a :class:`Plan`, whose :meth:`Plan.map` returns one partial result per
task and :meth:`Plan.reduce` the merged answer. Every variant of every application is
``application.solve(strategy.open(...), data)``; a new strategy is one module that subclasses
:class:`Strategy` and calls :func:`register`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from distributed import Future

from workbench.names import did_you_mean
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.failures import sendable
from workbench.runtime.session import Session
from workbench.runtime.trace import Recorder, task_key  # task_key: strategies import it from here

# The work every strategy runs lives below the splitter and this package (see workbench.runtime.work);
# strategies and applications import it from here, or from the package.
from workbench.runtime.work import BlockWork as BlockWork
from workbench.runtime.work import Broadcast as Broadcast
from workbench.runtime.work import merge_here as merge_here
from workbench.runtime.work import merge_tree as merge_tree

T = TypeVar("T")


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


# What a strategy and an application can need from each other, or give each other: the one vocabulary
# both declare in (``needs``, ``gives``), checked when an experiment is declared
# (workbench.lab.runner.declare), before any cluster starts, so a run never fails half-way for it.
CAPABILITIES = {
    "blocks": "placed blocks to map the work over (prepare's PlacedData.blocks)",
    "ranks": "a rank context in every block call (an SPMD group: the block function's rank= parameter)",
}


def unmet(needs: frozenset[str], gives: frozenset[str]) -> list[str]:
    """What of ``needs`` ``gives`` does not meet, each as ``name (what it is)``, sorted."""
    return [f"{name} ({CAPABILITIES[name]})" for name in sorted(needs - gives)]


def checked_capabilities(names: Any, where: str) -> frozenset[str]:
    """``names`` as a frozen set of capabilities; a clear error (``where`` says whose) for an unknown one."""
    if isinstance(names, str) or not isinstance(names, (set, frozenset, list, tuple)):
        raise TypeError(f"{where} is a set of capability names, got {names!r}")
    unknown = sorted(set(names) - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"{where} names unknown capabilities {unknown}; there are {sorted(CAPABILITIES)}")
    return frozenset(names)


class Strategy:
    """A named way of running block work; :meth:`open` gives a :class:`Plan` for one run.

    ``needs``: what it needs from the application (placed blocks, by default); ``gives``: what it
    gives the application's work beyond its block (the SPMD strategies give ``ranks``). Both are
    names of :data:`CAPABILITIES`.
    """

    name: str = ""
    description: str = ""
    plan: type[Plan] = Plan
    needs: frozenset[str] = frozenset({"blocks"})
    gives: frozenset[str] = frozenset()

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
    """Make ``strategy`` available by its name (a variant name of every application that offers it);
    its ``needs`` and ``gives`` must be known capabilities."""
    if not isinstance(strategy, Strategy):
        raise TypeError(f"register takes a Strategy instance, got {type(strategy).__name__}")
    if not strategy.name or not isinstance(strategy.name, str):
        raise ValueError(f"a strategy needs a name, got {strategy.name!r}")
    if not inspect.getdoc(type(strategy)) and not strategy.description:
        raise ValueError(f"strategy {strategy.name!r} needs a description (what it does with the data)")
    checked_capabilities(strategy.needs, f"strategy {strategy.name!r}'s needs")
    checked_capabilities(strategy.gives, f"strategy {strategy.name!r}'s gives")
    _STRATEGIES[strategy.name] = strategy
    return strategy


def unregister(name: str) -> None:
    """Forget the strategy ``name`` (a test's or a notebook's own)."""
    _STRATEGIES.pop(name, None)


def named(table: Mapping[str, T], name: str, what: str) -> T:
    """``table[name]``; else a ``ValueError`` that lists the ``what``s there are and a close match."""
    if name not in table:
        hint = did_you_mean(name, table)
        raise ValueError(f"no {what} {name!r}; there are {sorted(table)}" + (f"; {hint}" if hint else ""))
    return table[name]


def get(name: str) -> Strategy:
    """The strategy ``name``; a close-match suggestion when there is none."""
    return named(_STRATEGIES, name, "strategy")


def names() -> list[str]:
    """Every registered strategy, in registration order."""
    return list(_STRATEGIES)
