"""``rechunk``: Dask rechunks the array to one block per worker (the data moves, timed), then one
task per block, as ``blocks`` does."""

from __future__ import annotations

from workbench.runtime.blocks import rows_per_block
from workbench.runtime.strategies.base import Strategy, register
from workbench.runtime.strategies.blocks import DaskPlan


class RechunkPlan(DaskPlan):
    """Blocks consolidated to one per worker at open (phase ``rechunk``), released at close."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        placed = self.blocks()
        with self.recorder.phase("rechunk"):
            rows = rows_per_block(len(self.session.workers()), placed.shape[0])
            self.placed = placed.rechunked(rows)
            self.aligned = tuple(a.rechunked(rows) for a in self.aligned)

    def close(self) -> None:
        """Release the rechunked copies."""
        super().close()
        for placed in (self.placed, *self.aligned):
            placed.release()


class Rechunk(Strategy):
    """Rechunk to one block per worker (moving data), then one task per block."""

    name = "rechunk"
    description = "rechunk to one block per worker (the data moves), then one task per block"
    plan = RechunkPlan


register(Rechunk())
