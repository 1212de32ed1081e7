"""Blocked matrix multiplication as the PyCOMPSs paper's Algorithm 2, in files, dask and rro.

``C[i][j] += A[i][k] @ B[k][j]`` for all i, j, k: one task per block triple. A and B blocks are
RRO arguments (each is read by ``blocks`` tasks), C blocks INOUT (renamed: every update is a new
version). With few large blocks each A/B block is reused often; with many small ones, rarely:
the paper found RRO helps the first and costs in the second. The algorithm is written with
``@task`` functions, so it runs under the strategies that run such tasks (the RRO modes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import datasets
import kernels
from datasets import Dataset
from workbench.apps.registry import Application, PlacedData, register
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.session import Session
from workbench.runtime.strategies import Plan
from workbench.runtime.tasks import INOUT, RRO, task


@task(a=RRO, b=RRO, c=INOUT)
def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """``c += a @ b`` (a task: ``c`` is renamed, ``a`` and ``b`` are read by many tasks)."""
    kernels.multiply_accumulate(a, b, c)


@dataclass(kw_only=True)
class MatmulData(PlacedData):
    """A (the placed blocks) and B in worker memory, each a grid of ``n x n`` blocks."""

    b: PlacedBlocks
    n: int
    block_size: int

    def grid(self, placed: PlacedBlocks) -> list[list[Any]]:
        """The block futures of ``placed`` as rows of a grid."""
        return [placed.block_futures[i * self.n : (i + 1) * self.n] for i in range(self.n)]

    def locality(self) -> dict[str, str]:
        """Block of A or B -> the worker holding it."""
        return {f"A{k}": w for k, w in self.blocks.locality().items()} | {
            f"B{k}": w for k, w in self.b.locality().items()
        }

    def release(self) -> None:
        """Release A and B."""
        super().release()
        self.b.release()


def solve(plan: Plan, data: MatmulData) -> np.ndarray:
    """Algorithm 2 in the plan's task runtime; returns the whole product (gathered to the caller)."""
    n, size = data.n, data.block_size
    a, b = data.grid(data.blocks), data.grid(data.b)
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
    return MatmulData(
        blocks=PlacedBlocks(session, dataset.to_dask("A")),
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
        strategies=["files", "dask", "rro"],
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
