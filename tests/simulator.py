"""Run a pytest file in numba's CUDA simulator, in a pytest process of its own.

``NUMBA_ENABLE_CUDASIM`` must be set before numba's CUDA module is first imported, which the suite's
own process has done (Dask imports it); so the device cases run in a child process with it set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_simulated(cases: str) -> None:
    """Run ``tests/<cases>`` under the simulator; an AssertionError with its output if any case failed
    or was skipped (a skipped device case would be a check that did not run). Without nbval's plugin:
    the cases are Python, and its import (nbformat's JSON-schema formats) takes seconds."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval", str(ROOT / "tests" / cases)],
        cwd=ROOT,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
