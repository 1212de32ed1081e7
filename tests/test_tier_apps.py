"""The memory-tier configurations of the ch. 6 applications: every one gives the baseline's answer,
and each leaves nothing behind (store objects, tier files, spill and memmap files)."""

from __future__ import annotations

import pytest

from workbench.lab.runner import run_experiment
from workbench.runtime.strategies import tiers as tier_strategies

GRIDS = {
    "histogram1d": {"points": [200_000], "block": [25_000]},
    "matadd": {"rows": [256], "cols": [64], "block": [32]},
    "kmeans": {"points": [16_384], "dims": [4], "block": [2_048], "iterations": [2]},
    "matmul": {"blocks": [2], "block_size": [32]},
}


@pytest.mark.parametrize("app", sorted(GRIDS))
def test_every_tier_configuration_agrees_with_the_baseline(session, app):
    previous = tier_strategies.settings().dram_budget
    tier_strategies.configure(dram_budget=64 * 1024)  # far below the data: spilling and dynamic at work
    try:
        # The runner raises AssertionError when a variant's answer differs from the baseline's.
        experiment = run_experiment(
            session,
            app,
            ["blocks", *tier_strategies.TIER_VARIANTS],
            size="ci",
            grid=GRIDS[app],
            repeats=1,
            progress=False,
            baseline="blocks",
        )
    finally:
        tier_strategies.configure(dram_budget=previous)
    assert set(experiment.results["variant"]) == {"blocks", *tier_strategies.TIER_VARIANTS}
    phases = experiment.summary(phases=True).set_index("variant")
    assert phases.loc["mapped-cold", "phase_cool_s"] > 0  # the cold variants cool before they run


def test_the_tier_budget_setting_refuses_nonsense():
    with pytest.raises(ValueError, match="bytes per backend"):
        tier_strategies.configure(dram_budget=-1)
    with pytest.raises(ValueError, match="bytes per backend"):
        tier_strategies.configure(dram_budget=1.5)
