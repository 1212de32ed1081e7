"""Locality Workbench: data-locality mechanisms for HPC Python, measured and taught on Dask.

Layers, imports pointing down only: ``viz`` -> ``lab`` -> ``apps`` -> ``runtime`` -> ``memory``,
all over ``kernels`` (numba) and ``datasets``. See docs/architecture.md.
"""

from __future__ import annotations

import os

from workbench.runtime.clusters import SlurmOptions
from workbench.runtime.session import Session, node_id, start

__version__ = "0.1.0"

from datasets import SIZES  # "ci", "lab", "full"; notebooks read $WORKBENCH_SIZE in their parameters cell

SIZE_ENV = "WORKBENCH_SIZE"


def resolve_size(size: str | None = None) -> str:
    """The experiment size a notebook runs at: ``size`` if given (papermill injects it), else
    ``$WORKBENCH_SIZE`` (Binder sets "ci"), else "lab"."""
    size = size or os.environ.get(SIZE_ENV) or "lab"
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES} (from the parameters cell or ${SIZE_ENV}), got {size!r}")
    return size


__all__ = ["SIZES", "Session", "SlurmOptions", "node_id", "resolve_size", "start", "__version__"]
