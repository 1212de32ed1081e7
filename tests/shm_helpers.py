"""Functions run in other processes by the shared-memory tests (importable by spawned children)."""

import os
import time

import numpy as np

from workbench.memory import shm


def slow_fill(out: np.ndarray) -> None:
    """Fill with a known pattern slowly, so racing processes really overlap the writer."""
    time.sleep(0.3)
    out[...] = np.arange(out.size, dtype=out.dtype).reshape(out.shape)


def race(name: str, directory: str) -> tuple[int, bool, float]:
    view, created = shm.attach_or_create(name, (1000, 10), np.float64, slow_fill, directory=directory, timeout=60)
    return os.getpid(), created, float(view.sum())


def write_forever(name: str, directory: str | None, ready: str) -> None:
    """Share an array, signal, then block: the test kills this process with SIGKILL."""
    view = shm.share(name, np.ones((256, 256)), directory=directory)
    open(ready, "w").close()
    while True:
        time.sleep(1 + 0 * view[0, 0])


def hang_in_fill(name: str, directory: str, ready: str) -> None:
    """Die (by SIGKILL from the test) in the middle of writing a segment."""

    def fill(out):
        open(ready, "w").close()
        time.sleep(600)

    shm.attach_or_create(name, (100,), np.float64, fill, directory=directory)


def hang_in_replace(name: str, directory: str, ready: str) -> None:
    """Start writing a new version of tier array ``name`` and die there (SIGKILL from the test)."""
    from workbench.memory import tiers

    def fill(out):
        out[...] = -1.0
        open(ready, "w").close()
        time.sleep(600)

    view = tiers.open_array(name, "mapped", directory=directory).array
    shm.replace(name, fill=fill, shape=view.shape, dtype=view.dtype, directory=directory)


def reopen_sum(name: str, tier: str, directory: str) -> float:
    """In a fresh process (a restart): reopen ``name`` on ``tier`` and sum it."""
    from workbench.memory import tiers

    return float(tiers.open_array(name, tier, directory=directory).array.sum())
