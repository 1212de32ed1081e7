"""The device kernels (workbench/kernels/gpu.py): their checks against the CPU kernels run in numba's CUDA
simulator, in a pytest process of its own (tests/gpu_sim_cases.py says why); what needs no device
runs here."""

from __future__ import annotations

import numpy as np
import pytest
from simulator import run_simulated


def test_the_device_kernels_agree_with_the_cpu_kernels_in_the_simulator():
    run_simulated("gpu_sim_cases.py")


def test_a_host_array_is_refused_before_any_device_is_needed():
    from workbench.kernels import gpu

    with pytest.raises(TypeError, match="x must be a device array"):
        gpu.histogram1d(np.zeros(3), 3, (0.0, 1.0))
    assert not gpu.simulated()  # this process runs the real CUDA target (and no GPU is needed for the check)


def test_device_addresses_overlap_as_numpy_says_the_host_bytes_do():
    """On a device, operands are compared by the addresses their ``__cuda_array_interface__`` names (the
    simulator's arrays are host arrays): a host array's own interface stands in for one here."""
    from workbench.kernels import gpu

    host = np.zeros((8, 12))

    def addresses(view):
        return np.asarray(gpu._Addresses(view.__array_interface__))

    assert np.shares_memory(addresses(host[:, 0:8]), addresses(host[:, 4:12]))
    assert not np.shares_memory(addresses(host[:, 0::2]), addresses(host[:, 1::2]))  # interleaved, apart
    assert addresses(host[:, 1:5]).__array_interface__["data"] == (host[:, 1:5].__array_interface__["data"][0], True)
