"""numba compute kernels with numpy references: pure functions on arrays, no runtime imports.

Every kernel checks its arguments in Python first (clear TypeError/ValueError), then runs a
``nogil=True, cache=True`` numba function. ``parallel=True`` splits the work over all numba threads;
the default runs on the calling thread, which is what a Dask task wants (one core per task).
"""

from __future__ import annotations

import os
import tempfile

import workbench.settings as _settings
from workbench.kernels.cache import cache_directory


def _default_numba_cache_dir() -> str:
    """A writable cache directory, so compiled kernels are reused across processes and runs: the
    user's ``~/.cache/locality-workbench/numba`` (made 0700, :mod:`workbench.kernels.cache`), else (a home that
    cannot hold it) a new private directory in the temporary directory, which this process's workers
    share: never a fixed name there, which another user could make first and fill with compiled code."""
    try:
        candidate = cache_directory("numba")
        if os.access(candidate, os.W_OK):
            return str(candidate)
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="locality-workbench-numba-")


# Set before numba reads its configuration; worker processes inherit the variable.
_settings.export(_settings.NUMBA_CACHE, _default_numba_cache_dir())

import numba.core.config  # noqa: E402

if not numba.core.config.CACHE_DIR:  # numba was imported before us: tell it directly
    numba.core.config.CACHE_DIR = _settings.now(_settings.NUMBA_CACHE)


def numba_cache_directory() -> str:
    """The directory numba keeps this process's compiled kernels in (what workers are told to share)."""
    return str(numba.core.config.CACHE_DIR)


from workbench.kernels import prk  # noqa: E402
from workbench.kernels.histogram import (  # noqa: E402
    histogram1d,
    histogram1d_reference,
    histogramdd,
    histogramdd_blocks,
    histogramdd_reference,
)
from workbench.kernels.kmeans import (  # noqa: E402
    kmeans_partial,
    kmeans_partial_blocks,
    kmeans_partial_reference,
    kmeans_update,
)
from workbench.kernels.linalg import (  # noqa: E402
    matrix_add,
    matrix_add_reference,
    multiply_accumulate,
    multiply_accumulate_reference,
)
from workbench.kernels.stream import stream_sum  # noqa: E402

__all__ = [
    "numba_cache_directory",
    "histogram1d",
    "histogram1d_reference",
    "histogramdd",
    "histogramdd_blocks",
    "histogramdd_reference",
    "kmeans_partial",
    "kmeans_partial_blocks",
    "kmeans_partial_reference",
    "kmeans_update",
    "matrix_add",
    "matrix_add_reference",
    "multiply_accumulate",
    "multiply_accumulate_reference",
    "prk",
    "stream_sum",
]
