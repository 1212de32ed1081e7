"""Statistics checked against values computed independently of workbench.lab.stats."""

import math
import statistics as pystats

import pandas as pd
import pytest
from scipy.stats import t as scipy_t

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
    assert row["ratio_high"] < 1 and row["ci_high_pct"] < 0 and row["significant"] and row["verdict"].endswith("faster")
    text = stats.format_table(table, ["blocks"])
    assert "fast vs base" in text and "*" in text and "p-value" in text and "time ratio" in text


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="at least 2 runs of each variant, got 1 and 3: use repeats >= 2"):
        stats.welch([1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="baseline 'nope' is not among the variants run"):
        stats.compare(pd.DataFrame(dict(variant=["a"], seconds=[1.0])), "nope")


# The log-ratio interval by hand: [2, 4, 8] against [1, 2, 4]. The logs are ln2 x (1, 2, 3) and
# ln2 x (0, 1, 2): difference ln2, each sample variance ln2^2, se = ln2 x sqrt(2/3), Welch's dof 4
# (equal variances and sizes: 2(n - 1)), t(0.975, 4) = 2.7764 from tables; ratio 2, interval
# exp(ln2 -+ 2.7764 ln2 sqrt(2/3)) = [0.4156, 9.626]; t = 1 / sqrt(2/3) = 1.2247.
def test_time_ratio_is_welch_on_the_log_times_by_hand():
    r = stats.time_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 4.0])
    half = 2.7764 * math.log(2) * math.sqrt(2 / 3)
    assert r.ratio == pytest.approx(2.0)
    assert r.low == pytest.approx(math.exp(math.log(2) - half), rel=1e-4) == pytest.approx(0.4156, abs=1e-4)
    assert r.high == pytest.approx(math.exp(math.log(2) + half), rel=1e-4) == pytest.approx(9.626, abs=1e-3)
    assert r.p_value == pytest.approx(2 * scipy_t.sf(1 / math.sqrt(2 / 3), 4))
    assert (r.n_first, r.n_second) == (3, 3) and r.verdict == "noise" and not r.significant
    swapped = stats.time_ratio([1.0, 2.0, 4.0], [2.0, 4.0, 8.0])  # the same seen from the other side: 1/x
    assert (swapped.ratio, swapped.low, swapped.high) == pytest.approx((1 / r.ratio, 1 / r.high, 1 / r.low))


def test_the_learners_run_gives_a_ratio_not_an_interval_below_minus_100_percent():
    """Lesson 03 at lab, 3 repeats: one fast run of blocks among slow ones gave the difference's
    interval [-141 %, +29 %]. The ratio's interval is positive, and so is its change in percent."""
    blocks, split = [0.05, 0.9, 0.1], [0.3, 0.31, 0.29]
    assert stats.welch(blocks, split).ci_low_pct < -100  # the old interval
    r = stats.time_ratio(blocks, split)
    assert 0 < r.low < r.ratio < r.high and r.verdict == "noise"
    results = pd.DataFrame(dict(variant=["blocks", "split"] * 3, seconds=[v for p in zip(blocks, split) for v in p]))
    row = stats.compare(results, "split").iloc[0]
    assert row["ci_low_pct"] > -100 and row["ci_low_pct"] == pytest.approx(100 * (r.low - 1))


@pytest.mark.parametrize(
    ("first", "second", "verdict", "words"),
    [
        ([1.0, 1.1, 1 / 1.1], [2.0, 2.2, 2 / 1.1], "faster", "2x faster"),  # geometric means 1 and 2
        ([2.0, 2.2, 2 / 1.1], [1.0, 1.1, 1 / 1.1], "slower", "2x slower"),
        ([1.0, 1.01, 0.99, 1.0], [1.0, 0.99, 1.01, 1.0], "close", "close (within 10 %)"),
        ([1.0, 1.5, 0.7], [1.1, 0.8, 1.4], "noise", "within the noise"),
    ],
)
def test_a_ratio_says_faster_slower_close_or_within_the_noise(first, second, verdict, words):
    r = stats.time_ratio(first, second)
    assert r.verdict == verdict and r.words() == words and r.decided == (verdict != "noise")
    speed, low, high = r.speedup
    assert low <= speed <= high and speed >= 1


def test_a_time_ratio_needs_positive_times():
    with pytest.raises(ValueError, match="a time ratio needs positive times"):
        stats.time_ratio([1.0, 0.0], [1.0, 2.0])


DECIDED = ([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])  # 2x, interval well above 1
UNDECIDED = ([1.0, 1.5, 0.7], [1.1, 0.8, 1.4])


@pytest.mark.parametrize(
    ("comparisons", "rounds", "again"),
    [
        ([DECIDED], 2, True),  # below the minimum: always another round
        ([DECIDED], 3, False),  # decided at the minimum: stop
        ([UNDECIDED], 3, True),  # undecided: repeat
        ([UNDECIDED], 8, False),  # ... up to the bound
        ([DECIDED, UNDECIDED], 5, True),  # every comparison must be decided
        ([([1.0], [1.0, 2.0])], 3, True),  # one run of a side decides nothing
        ([], 3, False),  # nothing to decide: the minimum
    ],
)
def test_the_stopping_rule_repeats_until_every_comparison_is_decided_up_to_the_bound(comparisons, rounds, again):
    assert stats.another_round(comparisons, rounds, least=3, most=8) is again


def test_a_claim_says_which_is_faster_with_its_interval_or_that_the_run_cannot_tell():
    times = {"split": [0.1, 0.11, 0.12, 0.1, 0.105], "blocks": [0.6, 0.62, 0.58, 0.7, 0.61]}
    r = stats.time_ratio(times["blocks"], times["split"])
    text = stats.claim(times, "blocks", "split", where="at 200 blocks per core")
    speed, low, high = r.speedup
    assert text == (
        f"split is {speed:.3g}x faster than blocks at 200 blocks per core (95 % CI {low:.3g}x\u2013{high:.3g}x, "
        "p < 0.001, 5 runs each)"
    )
    assert stats.claim(times, "blocks", "split", expected="blocks").endswith(
        "the opposite of the prediction that blocks is faster"
    )
    noisy = stats.claim({"a": UNDECIDED[0], "b": UNDECIDED[1]}, "a", "b", where="at 8 blocks")
    assert noisy.startswith("on this machine the difference between a and b at 8 blocks is within the noise (a / b")
    assert "3 runs each" in noisy
    close = stats.claim({"a": [1.0, 1.01, 0.99, 1.0], "b": [1.0, 0.99, 1.01, 1.0]}, "a", "b")
    assert close.startswith("a and b are within 10 % of each other (")
    assert "cannot say which is faster" in stats.claim({"a": [1.0], "b": [1.0, 2.0]}, "a", "b")
    with pytest.raises(ValueError, match=r"no times of \['c'\]: the times given are of \['a', 'b'\]"):
        stats.claim({"a": [1.0], "b": [1.0]}, "a", "c")


def test_a_claim_reads_an_experiments_runs_at_a_point_and_names_the_point():
    from workbench.lab.runner import Experiment

    rows = [
        {"variant": variant, "blocks_per_worker": blocks, "seconds": seconds * (1.0 + 0.02 * repeat)}
        for blocks, (slow, fast) in ((1, (1.0, 1.0)), (200, (6.0, 1.0)))
        for repeat in range(4)
        for variant, seconds in (("blocks", slow), ("split", fast))
    ]
    results = pd.DataFrame(rows)
    experiment = Experiment("histogram", "blocks", ["blocks_per_worker"], results, results.iloc[:0])
    text = stats.claim(experiment, "blocks", "split", {"blocks_per_worker": 200}, expected="split")
    assert text.startswith("split is 6x faster than blocks at 200 blocks per worker (95 % CI") and "4 runs each" in text
    assert "within 10 % of each other at 1 block per worker" in stats.claim(
        experiment, "blocks", "split", {"blocks_per_worker": 1}
    )
    with pytest.raises(ValueError, match="this experiment ran at 2 points: give one of"):
        stats.claim(experiment, "blocks", "split")
    with pytest.raises(ValueError, match="this experiment has no variant 'splt'"):
        stats.claim(experiment, "blocks", "splt", {"blocks_per_worker": 1})


def test_a_point_in_words():
    assert stats.point_text({"blocks_per_worker": 200}) == "200 blocks per worker"
    assert stats.point_text({"blocks_per_worker": 1, "dims": 64}) == "1 block per worker, 64 dims"
