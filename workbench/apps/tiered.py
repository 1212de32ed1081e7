"""The applications of thesis ch. 6 (memory tiers): 1-D histogram and matrix addition.

Both run under every memory-tier configuration (:mod:`workbench.runtime.strategies.tiers`: the
blocks on ``dram``, ``mapped`` hot and cold, ``cached`` hot and cold, ``disk``, placed
``dynamic``-ally; the peers ``dask-spill[-lz4]`` and ``memmap``), under ``non-active`` (each block
fetched through the store to where the task runs) and under ``blocks`` (plain Dask, the
baseline). k-means and blocked matmul, the other two applications of the chapter, carry the same
variants in their own modules.

* ``histogram1d``: counts of 64 equal bins of uniform values (``workbench.kernels.histogram1d`` per block,
  counts added). The result is small: where the data lies is all that matters.
* ``matadd``: ``C = A + B`` by row blocks (A the placed blocks, B aligned with them); the result
  is as big as the inputs and goes back to the caller (a *returned* result; a *volatile* one stays
  where it was computed: ``workbench bench tiers`` measures both on store objects).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench import kernels
from workbench.apps.histogram import check as check_counts
from workbench.apps.histogram import sum_counts
from workbench.apps.registry import Application, PlacedData, register, resized
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork
from workbench.runtime.strategies.tiers import TIER_VARIANTS

VARIANTS = ["blocks", *TIER_VARIANTS]


def count_block(values: np.ndarray, bins: int, value_range: tuple[float, float]) -> np.ndarray:
    """The 1-D histogram of one block (any array: a DRAM block, a mapping, a memmap)."""
    return kernels.histogram1d(values, int(bins), (float(value_range[0]), float(value_range[1])))


HISTOGRAM1D = BlockWork(block=count_block, merge=sum_counts)


def prepare_histogram1d(session: Session, dataset: Dataset, params: dict[str, Any]) -> PlacedData:
    """The values in worker memory in blocks of ``block`` values; bins and range as arguments."""
    dataset = resized(dataset, params, ("points", "block"))
    return PlacedData(
        blocks=PlacedBlocks(session, dataset.to_dask("points")),
        args=(dataset.params["bins"], tuple(dataset.params["range"])),
    )


def add_blocks(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` for one row block (``workbench.kernels.matrix_add``, into a new array: the result returned)."""
    return kernels.matrix_add(a, b)


def stack_rows(partials: Sequence[np.ndarray]) -> np.ndarray:
    """Row blocks of the result, in order, as one array (merges keep block order)."""
    return np.concatenate(list(partials)) if len(partials) > 1 else partials[0]


MATADD = BlockWork(block=add_blocks, merge=stack_rows)


def prepare_matadd(session: Session, dataset: Dataset, params: dict[str, Any]) -> PlacedData:
    """A and B in worker memory in row blocks of ``block`` rows, B's blocks aligned with A's."""
    dataset = resized(dataset, params, ("rows", "cols", "block"))
    return PlacedData(
        blocks=PlacedBlocks(session, dataset.to_dask("A")),
        aligned=(PlacedBlocks(session, dataset.to_dask("B")),),
    )


def check_matadd(c: np.ndarray, data: PlacedData) -> None:
    """The sum has A's shape (its values are checked against the baseline's)."""
    if c.shape != data.blocks.shape:
        raise AssertionError(f"A + B has shape {c.shape}, A has {data.blocks.shape}")


HISTOGRAM1D_APP = register(
    Application(
        name="histogram1d",
        description="1-D histogram of uniform values (thesis ch. 6): the data on each memory tier",
        dataset="histogram1d",
        prepare=prepare_histogram1d,
        work=HISTOGRAM1D,
        strategies=VARIANTS,
        baseline="blocks",
        grids={
            "ci": {"block": [131_072]},
            "lab": {"block": [262_144, 2_621_440]},
            "full": {"block": [4_194_304, 41_943_040]},
        },
        parameters={"points": "values binned", "block": "values per block (one store object each)"},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        check=check_counts,
        knobs={"block": [32_768, 131_072, 262_144, 1_048_576, 2_621_440, 4_194_304]},
    )
)

MATADD_APP = register(
    Application(
        name="matadd",
        description="matrix addition C = A + B by row blocks (thesis ch. 6): a result as big as the data",
        dataset="matadd",
        prepare=prepare_matadd,
        work=MATADD,
        strategies=VARIANTS,
        baseline="blocks",
        grids={
            "ci": {"block": [128]},
            "lab": {"block": [128, 1_024]},
            "full": {"block": [512, 4_096]},
        },
        parameters={"rows": "rows of A and B", "cols": "columns of A and B", "block": "rows per block"},
        same_answer=lambda a, b: bool(np.array_equal(a, b)),
        check=check_matadd,
        knobs={"block": [32, 128, 512, 1_024, 4_096]},
    )
)
