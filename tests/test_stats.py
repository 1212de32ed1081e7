"""Statistics checked against values computed independently of workbench.lab.stats."""

import math
import statistics as pystats

import pandas as pd
import pytest

from workbench.lab import stats

# Welch's t-test example from Wikipedia ("Welch's t-test", Examples, 2nd): t = -2.46, df = 24.99, p = 0.021.
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_welch_matches_the_published_example():
    d = stats.welch(A1, A2)
    assert d.dof == pytest.approx(24.99, abs=0.01)
    assert d.p_value == pytest.approx(0.021, abs=0.0005)
    assert d.significant
    assert d.difference == pytest.approx(pystats.mean(A1) - pystats.mean(A2))


def test_confidence_interval_by_hand():
    """diff +- t(0.975, df) * se, with se and df from the stdlib and t(0.975, 24.99) = 2.0596 from tables."""
    se = math.sqrt(pystats.variance(A1) / 15 + pystats.variance(A2) / 15)
    diff = pystats.mean(A1) - pystats.mean(A2)
    d = stats.welch(A1, A2)
    assert d.ci_low == pytest.approx(diff - 2.0596 * se, abs=2e-3)
    assert d.ci_high == pytest.approx(diff + 2.0596 * se, abs=2e-3)
    base = pystats.mean(A2)
    assert d.ci_low_pct == pytest.approx(100 * d.ci_low / base)
    assert d.ci_high_pct == pytest.approx(100 * d.ci_high / base)


def test_equal_samples_are_not_significant_and_constant_ones_have_zero_width():
    assert not stats.welch([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).significant
    flat = stats.welch([2.0, 2.0], [2.0, 2.0])
    assert flat.ci_low == flat.ci_high == 0.0 and flat.p_value == 1.0


def test_mean_ci_of_one_sample():
    mean, low, high = stats.mean_ci([10.0, 12.0, 14.0])
    half = 4.3027 * 2.0 / math.sqrt(3)  # t(0.975, 2) = 4.3027, s = 2
    assert mean == 12.0 and low == pytest.approx(12 - half, abs=1e-3) and high == pytest.approx(12 + half, abs=1e-3)


def test_compare_builds_one_row_per_point_and_variant():
    results = pd.DataFrame(
        [
            dict(variant=v, blocks=b, seconds=s)
            for b in (1, 8)
            for v, s in (("base", 1.0), ("fast", 0.5), ("base", 1.1), ("fast", 0.6), ("base", 0.9), ("fast", 0.55))
        ]
    )
    table = stats.compare(results, "base", ["blocks"])
    assert list(table["blocks"]) == [1, 8] and set(table["variant"]) == {"fast"}
    row = table.iloc[0]
    assert row["time_variant_s"] == pytest.approx(0.55) and row["time_baseline_s"] == pytest.approx(1.0)
    assert row["ci_high_s"] < 0 and row["significant"]
    text = stats.format_table(table, ["blocks"])
    assert "fast vs base" in text and "*" in text and "p-value" in text


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="at least 2 runs of each variant, got 1 and 3: use repeats >= 2"):
        stats.welch([1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="baseline 'nope' is not among the variants run"):
        stats.compare(pd.DataFrame(dict(variant=["a"], seconds=[1.0])), "nope")
