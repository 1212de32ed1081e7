"""Locality Workbench: data-locality mechanisms for HPC Python, measured and taught on Dask.

Layers, imports pointing down only: ``viz`` -> ``lab`` -> ``apps`` -> ``runtime`` -> ``memory``,
all over ``workbench.kernels`` (numba) and ``workbench.datasets``. See docs/architecture.md.

Importing ``workbench`` imports nothing else: ``start``, ``Session`` and the other names below are
loaded on first use (PEP 562), so ``workbench.kernels`` and ``workbench.datasets`` import without
Dask, and ``import workbench`` costs nothing until a session is started.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench.settings import SIZE as SIZE_ENV  # notebooks read $WORKBENCH_SIZE in their parameters cell

if TYPE_CHECKING:
    from workbench.datasets import SIZES
    from workbench.runtime.clusters import SlurmOptions
    from workbench.runtime.session import Session, node_id, start

__version__ = "0.1.0"

_LAZY = {  # name -> the module that defines it
    "SIZES": "workbench.datasets",  # "ci", "lab", "full"
    "SlurmOptions": "workbench.runtime.clusters",
    "Session": "workbench.runtime.session",
    "node_id": "workbench.runtime.session",
    "start": "workbench.runtime.session",
}


def __getattr__(name: str) -> Any:
    """``workbench.start`` and the other public names, imported from their modules on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def resolve_size(size: str | None = None) -> str:
    """The experiment size a notebook runs at: ``size`` if given (papermill injects it), else
    ``$WORKBENCH_SIZE`` (Binder sets "ci"), else "lab"."""
    from workbench.datasets import SIZES
    from workbench.settings import now

    size = size or now(SIZE_ENV) or "lab"
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES} (from the parameters cell or ${SIZE_ENV}), got {size!r}")
    return size


__all__ = ["SIZES", "Session", "SlurmOptions", "node_id", "resolve_size", "start", "__version__"]
