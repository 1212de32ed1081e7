"""The device kernels (kernels/gpu.py): their checks against the CPU kernels run in numba's CUDA
simulator, in a pytest process of its own (tests/gpu_sim_cases.py says why); what needs no device
runs here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_device_kernels_agree_with_the_cpu_kernels_in_the_simulator():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "gpu_sim_cases.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]


def test_a_host_array_is_refused_before_any_device_is_needed():
    from kernels import gpu

    with pytest.raises(TypeError, match="x must be a device array"):
        gpu.histogram1d(np.zeros(3), 3, (0.0, 1.0))
    assert not gpu.simulated()  # this process runs the real CUDA target (and no GPU is needed for the check)
