"""An application written as docs/architecture.md's "adding an application" recipe says, as one file (tests run it).

Column means and row counts of the histogram dataset's points: the work of a block is its column
sums and its rows, the merge adds them. Declaring that is all it takes to run under every
registered strategy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.apps import Application, PlacedData, register
from workbench.datasets import Dataset
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks, rows_per_block
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork


def column_sums(block: np.ndarray) -> tuple[np.ndarray, int]:
    """The work of one block: its column sums and its number of rows."""
    return block.sum(axis=0), len(block)


def add(partials: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, int]:
    """The merge: add column sums and rows."""
    return sum(p[0] for p in partials), sum(p[1] for p in partials)


def prepare(session: Session, dataset: Dataset, params: dict[str, Any]) -> PlacedData:
    """The points, ``blocks_per_worker`` blocks on each worker."""
    rows = rows_per_block(
        len(session.workers()), dataset.spec("points").shape[0], int(params.get("blocks_per_worker", 1))
    )
    return PlacedData(blocks=PlacedBlocks(session, dataset.to_dask("points", rows)))


APP = register(
    Application(
        name="column-means",
        description="column sums and rows of the histogram points (the recipe's example)",
        dataset="histogram",
        prepare=prepare,
        work=BlockWork(block=column_sums, merge=add),
        strategies=strategies.names(),  # every registered strategy
        baseline="blocks",
        grids={"ci": {"blocks_per_worker": [3]}},
        parameters={"blocks_per_worker": "blocks per worker"},
        same_answer=lambda a, b: a[1] == b[1] and bool(np.allclose(a[0], b[0], rtol=1e-12)),
    )
)
