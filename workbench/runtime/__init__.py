"""How work runs: all of it on Dask distributed."""

from workbench.runtime.session import Session, node_id, start

__all__ = ["Session", "node_id", "start"]
