"""Blocked matrix multiplication as the PyCOMPSs paper's Algorithm 2, in files, dask and rro.

``C[i][j] += A[i][k] @ B[k][j]`` for all i, j, k: one task per block triple. A and B blocks are
RRO arguments (each is read by ``blocks`` tasks), C blocks INOUT (renamed: every update is a new
version). With few large blocks each A/B block is reused often; with many small ones, rarely:
the paper found RRO helps the first and costs in the second. The algorithm is written with
``@task`` functions, so it runs under the strategies that run such tasks (the RRO modes).

Under every other strategy (the memory tiers of thesis ch. 6, ``blocks``, ``non-active``) the same
product is one reduce of block work over A's *row* blocks with B as a broadcast argument: each
row block of C is ``A[i, :] @ B``, computed where the row block lies, the row blocks stacked in
order. The product with its result written *in place* into a mapped object (``C += A @ B``) is
the store's writing method, measured by ``workbench bench tiers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench import datasets, kernels
from workbench.apps.registry import Application, PlacedData, register
from workbench.apps.tiered import stack_rows
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Broadcast, Plan
from workbench.runtime.strategies.modes import ModePlan
from workbench.runtime.strategies.tiers import TIER_VARIANTS
from workbench.runtime.tasks import INOUT, RRO, task


@task(a=RRO, b=RRO, c=INOUT)
def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """``c += a @ b`` (a task: ``c`` is renamed, ``a`` and ``b`` are read by many tasks)."""
    kernels.multiply_accumulate(a, b, c)


def multiply_rows(a_rows: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One row block of C: ``a_rows @ b`` (a new array)."""
    c = np.zeros((a_rows.shape[0], b.shape[1]))
    kernels.multiply_accumulate(np.ascontiguousarray(a_rows), b, c)
    return c


ROWS = BlockWork(block=multiply_rows, merge=stack_rows)


@dataclass(kw_only=True)
class MatmulData(PlacedData):
    """A and B in worker memory, each a grid of ``n x n`` blocks (``a_grid``, ``b``); A's row blocks
    (the placed blocks strategies map over) and B whole (a broadcast argument) for the row form."""

    a_grid: PlacedBlocks
    b: PlacedBlocks
    n: int
    block_size: int

    def grid(self, placed: PlacedBlocks) -> list[list[Any]]:
        """The block futures of ``placed`` as rows of a grid."""
        return [placed.block_futures[i * self.n : (i + 1) * self.n] for i in range(self.n)]

    def locality(self) -> dict[str, str]:
        """Block of A or B -> the worker holding it."""
        return {f"A{k}": w for k, w in self.a_grid.locality().items()} | {
            f"B{k}": w for k, w in self.b.locality().items()
        }

    def release(self) -> None:
        """Release A (grid and rows) and B."""
        super().release()
        self.a_grid.release()
        self.b.release()


def solve(plan: Plan, data: MatmulData) -> np.ndarray:
    """Algorithm 2 in a task-mode plan's runtime, else one reduce of the row form; returns the whole
    product (gathered to the caller)."""
    if not isinstance(plan, ModePlan):
        return plan.reduce(ROWS, *data.args)
    n, size = data.n, data.block_size
    a, b = data.grid(data.a_grid), data.grid(data.b)
    c: list[list[Any]] = [[np.zeros((size, size)) for _ in range(n)] for _ in range(n)]
    for i in range(n):
        for j in range(n):
            for k in range(n):
                c[i][j] = multiply(a[i][k], b[k][j], c[i][j])
    return np.block(plan.session.gather(c))


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> MatmulData:
    """A and B placed as grids of blocks (``blocks`` per side, ``block_size`` rows each)."""
    shape = {k: int(params[k]) for k in ("blocks", "block_size") if k in params}
    if shape:
        dataset = datasets.get(dataset.name, dataset.size, dataset.seed, **shape)
    side = dataset.params["blocks"] * dataset.params["block_size"]
    return MatmulData(
        blocks=PlacedBlocks(session, dataset.to_dask("A", (dataset.params["block_size"], side))),
        args=(Broadcast(dataset.load("B")),),
        a_grid=PlacedBlocks(session, dataset.to_dask("A")),
        b=PlacedBlocks(session, dataset.to_dask("B")),
        n=dataset.params["blocks"],
        block_size=dataset.params["block_size"],
    )


APP = register(
    Application(
        name="matmul",
        description="blocked matmul, PyCOMPSs Algorithm 2: A, B blocks RRO, C INOUT; files vs dask vs rro",
        dataset="matmul",
        prepare=prepare,
        solve=solve,
        strategies=["files", "dask", "rro", "blocks", *TIER_VARIANTS],
        baseline="files",
        grids={
            "ci": {"blocks": [2, 4], "block_size": [64]},
            "lab": {"blocks": [4, 8], "block_size": [256, 512]},
            "full": {"blocks": [8, 20], "block_size": [512, 2048]},
        },
        parameters={"blocks": "blocks per side of each matrix", "block_size": "rows (= columns) of one block"},
        same_answer=lambda x, y: bool(np.allclose(x, y, rtol=1e-12, atol=0.0)),
        knobs={"blocks": [2, 4, 8, 16, 20], "block_size": [64, 128, 256, 512, 1024]},
    )
)
