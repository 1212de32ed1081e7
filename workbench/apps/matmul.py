"""Blocked matrix multiplication as the PyCOMPSs paper's Algorithm 2, in files, dask and rro.

``C[i][j] += A[i][k] @ B[k][j]`` for all i, j, k: one task per block triple. A and B blocks are
RRO arguments (each is read by ``blocks`` tasks), C blocks INOUT (renamed: every update is a new
version). With few large blocks each A/B block is reused often; with many small ones, rarely:
the paper found RRO helps the first and costs in the second.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import datasets
import kernels
from datasets import Dataset
from workbench.apps.placement import PersistedBlocks
from workbench.apps.registry import Application, per_mode, register
from workbench.runtime.session import Session
from workbench.runtime.tasks import INOUT, RRO, TaskRuntime, task
from workbench.runtime.trace import Recorder


@task(a=RRO, b=RRO, c=INOUT)
def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    kernels.multiply_accumulate(a, b, c)


class MatmulData:
    """A and B in worker memory as grids of block futures."""

    def __init__(self, session: Session, dataset: Dataset):
        self.blocks = dataset.params["blocks"]
        self.block_size = dataset.params["block_size"]
        self.a = PersistedBlocks(session, dataset.to_dask("A"))
        self.b = PersistedBlocks(session, dataset.to_dask("B"))

    def grid(self, placed: PersistedBlocks) -> list[list[Any]]:
        n = self.blocks
        return [placed.block_futures[i * n : (i + 1) * n] for i in range(n)]

    def locality(self) -> dict[str, str]:
        return {f"A{k}": w for k, w in self.a.locality().items()} | {f"B{k}": w for k, w in self.b.locality().items()}

    def release(self) -> None:
        self.a.release()
        self.b.release()


def matmul(session: Session, data: MatmulData, mode: str, recorder: Recorder | None = None) -> np.ndarray:
    """Algorithm 2 in ``mode``; returns the whole product (gathered to the caller)."""
    n, size = data.blocks, data.block_size
    a, b = data.grid(data.a), data.grid(data.b)
    with TaskRuntime(session, mode, recorder=recorder):
        c: list[list[Any]] = [[np.zeros((size, size)) for _ in range(n)] for _ in range(n)]
        for i in range(n):
            for j in range(n):
                for k in range(n):
                    c[i][j] = multiply(a[i][k], b[k][j], c[i][j])
        return np.block(session.gather(c))


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> MatmulData:
    shape = {k: int(params[k]) for k in ("blocks", "block_size") if k in params}
    if shape:
        dataset = datasets.get(dataset.name, dataset.size, dataset.seed, **shape)
    return MatmulData(session, dataset)


APP = register(
    Application(
        name="matmul",
        description="blocked matmul, PyCOMPSs Algorithm 2: A, B blocks RRO, C INOUT; files vs dask vs rro",
        dataset="matmul",
        prepare=prepare,
        variants=per_mode(matmul),
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
