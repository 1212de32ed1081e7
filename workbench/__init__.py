"""Locality Workbench: data-locality mechanisms for HPC Python, measured and taught on Dask.

Layers, imports pointing down only: ``viz`` -> ``lab`` -> ``apps`` -> ``runtime`` -> ``memory``,
all over ``kernels`` (numba) and ``datasets``. See docs/architecture.md.
"""
from __future__ import annotations

from workbench.runtime.session import Session, node_id, start

__version__ = "0.1.0"

from datasets import SIZES  # "ci", "lab", "full"; notebooks read $WORKBENCH_SIZE in their parameters cell

__all__ = ["SIZES", "Session", "node_id", "start", "__version__"]
