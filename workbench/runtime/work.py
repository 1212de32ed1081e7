"""What every strategy runs: an application's work, declared once (:class:`BlockWork`), the one
merge tree, and :class:`Broadcast` arguments.

It lives below both :mod:`workbench.runtime.splitter` (whose ``run_partitions`` builds block work)
and the strategies package (whose ``__init__`` imports every strategy, ``split`` among them, which
imports the splitter): the two import it at the top, and neither imports the other to reach it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.runtime.blocks import rows_of
from workbench.runtime.failures import sendable


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
