"""``files``, ``dask`` and ``rro``: PyCOMPSs-style tasks with parameter directions (the PyCOMPSs
paper's variable: how a task's data reaches it). See :mod:`workbench.runtime.tasks`.

The work's block function runs as a ``@task`` (its own directions when it is one; otherwise its
first parameter, the block, is ``RRO``: read by a task, and again by the next map), inside a
:class:`~workbench.runtime.tasks.TaskRuntime` that lives as long as the plan, so an RRO block is
published once per node and reused by every later map. Applications whose algorithm is written
with ``@task`` functions (blocked matmul) call them inside the plan directly.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, register
from workbench.runtime.tasks import MODES, RRO, TaskFunction, TaskRuntime


def block_task(work: BlockWork) -> TaskFunction:
    """The work's block function as a task: as declared, or with its first parameter ``RRO``."""
    if isinstance(work.block, TaskFunction):
        return work.block
    first = next(iter(inspect.signature(work.block).parameters))
    return TaskFunction(work.block, {first: RRO})


class ModePlan(Plan):
    """A task runtime in the strategy's mode, entered for the plan's lifetime."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.runtime = TaskRuntime(self.session, self.strategy.name, recorder=self.recorder).__enter__()

    def close(self) -> None:
        """Leave the task runtime: its segments and files are removed."""
        self.runtime.__exit__(None, None, None)

    def map(self, work: BlockWork, *args: Any) -> list[Any]:
        """One task per block through the runtime (the block ``RRO`` unless declared otherwise)."""
        placed = self.blocks()
        function = block_task(work)
        values = [a.value if isinstance(a, Broadcast) else a for a in args]
        ranges = placed.item_ranges() if work.with_rows else None
        calls = []
        for i, block in enumerate(placed.block_futures):
            rows = {"rows": np.arange(*ranges[i], dtype=np.int64)} if ranges is not None else {}
            calls.append(function.submit(block, *(a.block_futures[i] for a in self.aligned), *values, **rows))
        return calls

    def merge_task(self, work: BlockWork, partials: list[Any]) -> Any:
        """The merge as a task of the runtime (its arguments converted like any task's)."""
        return TaskFunction(work.merge, {}).submit(partials)


class Mode(Strategy):
    """PyCOMPSs-style tasks in one mode of the task runtime."""

    plan = ModePlan

    def __init__(self, mode: str, description: str):
        self.name, self.description = mode, description


DESCRIPTIONS = {
    "files": "PyCOMPSs-style tasks; every array argument a file, deserialized by every task",
    "dask": "PyCOMPSs-style tasks; arguments as Dask futures, one copy per worker process",
    "rro": "PyCOMPSs-style tasks; RRO arguments published once per node in shared memory, attached zero-copy",
}
for _mode in MODES:
    register(Mode(_mode, DESCRIPTIONS[_mode]))
