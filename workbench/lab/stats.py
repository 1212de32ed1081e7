"""Honest comparisons of timings: Welch's t-test, the time ratio of two variants and its 95 % CI.

Two variants are compared by the ratio of their times, with Welch's t-test on the logarithms of
the times (:func:`time_ratio`): a time is positive and its noise is a factor (a slow run is slow by
a fraction of its length), so the interval of the log-ratio, taken back through ``exp``, is an
interval of the ratio that is always positive, never "below -100 %", and the same seen from either
variant (1/x). Welch's test does not assume equal variances, which two variants on a shared machine
rarely have.

The table keeps the format of Tables I and II of the PyCOMPSs shared-memory paper: for each
parameter point, the mean time of a variant and of the baseline, the 95 % confidence interval of
the change (here: of the time ratio, and the same interval as a change in percent of the
baseline), and the p-value. :func:`another_round` is the rule that decides whether an experiment
repeats once more: until every comparison that matters is decided, up to a bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from workbench.units import ratio_text

CONFIDENCE = 0.95
ALPHA = 0.05  # a difference is marked significant when p < ALPHA
# Two variants are "close" when the whole interval of their time ratio lies within 1/CLOSE..CLOSE:
# within 10 % of each other either way, a difference too small to matter for a lesson's claims.
CLOSE = 1.1


@dataclass(frozen=True)
class Difference:
    """Variant against baseline: means, the CI of the difference (s and %), Welch's p-value."""

    n_variant: int
    n_baseline: int
    mean_variant: float
    mean_baseline: float
    ci_low: float
    ci_high: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    dof: float

    @property
    def difference(self) -> float:
        """Mean of the variant minus mean of the baseline (seconds)."""
        return self.mean_variant - self.mean_baseline

    @property
    def significant(self) -> bool:
        """Whether p is below ``ALPHA``."""
        return self.p_value < ALPHA


def welch(variant: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE) -> Difference:
    """Compare two samples of times; needs at least two of each (a variance is needed)."""
    a = np.asarray(variant, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ValueError(
            f"Welch's test needs at least 2 runs of each variant, got {a.size} and {b.size}: use repeats >= 2"
        )
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    diff = a.mean() - b.mean()
    se = math.sqrt(va + vb)
    if se == 0.0:  # identical constant samples: no spread, a zero-width interval
        dof, p_value, half = float(a.size + b.size - 2), (1.0 if diff == 0 else 0.0), 0.0
    else:
        dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))  # Welch-Satterthwaite
        p_value = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        half = float(stats.t.ppf(0.5 + confidence / 2, dof)) * se
    base = b.mean()
    return Difference(
        n_variant=a.size,
        n_baseline=b.size,
        mean_variant=float(a.mean()),
        mean_baseline=float(base),
        ci_low=float(diff - half),
        ci_high=float(diff + half),
        ci_low_pct=float(100 * (diff - half) / base),
        ci_high_pct=float(100 * (diff + half) / base),
        p_value=p_value,
        dof=float(dof),
    )


@dataclass(frozen=True)
class Ratio:
    """How many times the first variant's time the second's is: the ratio of their geometric mean
    times, its confidence interval, Welch's p-value on the log times, and the runs of each."""

    ratio: float
    low: float
    high: float
    p_value: float
    n_first: int
    n_second: int

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1 (no difference): the same as p < ``ALPHA`` at 95 %."""
        return self.high < 1.0 or self.low > 1.0

    @property
    def verdict(self) -> str:
        """``"faster"`` (the first is faster: the whole interval below 1), ``"slower"`` (above 1),
        ``"close"`` (the whole interval within ``1/CLOSE``..``CLOSE``, 1 included) or ``"noise"``
        (the interval includes 1 and reaches past the margin: this run cannot tell)."""
        if self.high < 1.0:
            return "faster"
        if self.low > 1.0:
            return "slower"
        if self.low >= 1.0 / CLOSE and self.high <= CLOSE:
            return "close"
        return "noise"

    @property
    def decided(self) -> bool:
        """Whether this run says something: a difference, or that there is none worth naming."""
        return self.verdict != "noise"

    @property
    def speedup(self) -> tuple[float, float, float]:
        """The ratio and its interval turned so that the ratio is at least 1: ``(ratio, low, high)``
        of the slower one's time over the faster one's ("5.8x faster, CI 4.1x-7.9x")."""
        if self.ratio <= 1.0:
            return 1.0 / self.ratio, 1.0 / self.high, 1.0 / self.low
        return self.ratio, self.low, self.high

    def words(self) -> str:
        """The verdict in a few words, the first variant as subject: ``5.81x faster``, ``1.2x
        slower``, ``close (within 10 %)``, ``within the noise``."""
        if self.verdict in ("faster", "slower"):
            return f"{ratio_text(self.speedup[0])} {self.verdict}"
        if self.verdict == "close":
            return f"close (within {round((CLOSE - 1) * 100)} %)"
        return "within the noise"


def time_ratio(first: Sequence[float], second: Sequence[float], confidence: float = CONFIDENCE) -> Ratio:
    """The times of ``first`` over those of ``second``: Welch's test on the log times (see the
    module's docstring for why); needs at least two positive times of each."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.size and b.size and not (np.all(a > 0) and np.all(b > 0)):
        raise ValueError(f"a time ratio needs positive times, got {a.min():g} and {b.min():g} at least")
    d = welch(np.log(a), np.log(b), confidence)
    return Ratio(
        ratio=math.exp(d.difference),
        low=math.exp(d.ci_low),
        high=math.exp(d.ci_high),
        p_value=d.p_value,
        n_first=d.n_variant,
        n_second=d.n_baseline,
    )


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _runs_text(r: Ratio) -> str:
    return f"{r.n_first} runs each" if r.n_first == r.n_second else f"{r.n_first} and {r.n_second} runs"


def claim_text(r: Ratio, first: str, second: str, where: str = "", expected: str | None = None) -> str:
    """The sentence a lesson prints for the comparison ``r`` of ``first``'s times over ``second``'s
    (:func:`workbench.lab.stats.time_ratio`), ``where`` (e.g. "at 200 blocks per worker"): which is
    faster and by how much, with the interval; that they are close; or, plainly, that this run
    cannot tell. ``expected``: the variant the lesson (or a paper) predicts to be faster; a run
    that finds the other one faster says so."""
    where = f" {where}" if where else ""
    interval = interval_text
    if r.verdict in ("faster", "slower"):
        fast, slow = (first, second) if r.verdict == "faster" else (second, first)
        speed, low, high = r.speedup
        text = (
            f"{fast} is {ratio_text(speed)} faster than {slow}{where} (95 % CI {interval(low, high)}, "
            f"{_p_text(r.p_value)}, {_runs_text(r)})"
        )
        if expected is not None and expected != fast:
            text += f": the opposite of the prediction that {expected} is faster"
        return text
    measured = (
        f"{first} / {second} time ratio {ratio_text(r.ratio)}, 95 % CI {interval(r.low, r.high)}, "
        f"{_p_text(r.p_value)}, {_runs_text(r)}"
    )
    if r.verdict == "close":
        margin = round((CLOSE - 1) * 100)
        return f"{first} and {second} are within {margin} % of each other{where} ({measured})"
    return f"on this machine the difference between {first} and {second}{where} is within the noise ({measured})"


def point_text(point: Mapping[str, Any]) -> str:
    """A parameter point in words: ``200 blocks per worker``, ``1 block per worker``, ``128 dims, 4
    centres``."""
    return ", ".join(f"{value} {_unit_words(name, value)}" for name, value in point.items())


def _unit_words(name: str, value: Any) -> str:
    words = name.split("_")
    if value == 1 and words[0].endswith("s"):  # one block, one centre
        words[0] = words[0][:-1]
    return " ".join(words)


def claim(
    source: Any,
    first: str,
    second: str,
    point: Mapping[str, Any] | None = None,
    *,
    where: str | None = None,
    expected: str | None = None,
) -> str:
    """The sentence that states what this run measured of ``first`` against ``second`` (see
    :func:`claim_text`): "split is 5.8x faster than blocks at 200 blocks per worker (95 % CI
    4.1x–7.9x, p = 0.003, 5 runs each)", or "on this machine the difference between ... is within
    the noise (...)".

    ``source``: an experiment (:class:`workbench.lab.runner.Experiment`: the variants' timed runs
    at ``point``, which may be left out when it ran one point), or times by name (``{"numpy":
    [...], "numba": [...]}``).
    ``where`` says where the comparison was made (by default the point, in words)."""
    if hasattr(source, "runs") and hasattr(source, "points"):  # an Experiment (the runner imports this module)
        points = source.points()
        if point is None:
            if len(points) > 1:
                raise ValueError(f"this experiment ran at {len(points)} points: give one of {points}")
            point = points[0]
        first_times = source.runs(first, point)["seconds"].to_list()
        second_times = source.runs(second, point)["seconds"].to_list()
        where = f"at {point_text(point)}" if where is None and point else where
    elif isinstance(source, Mapping):
        missing = [name for name in (first, second) if name not in source]
        if missing:
            raise ValueError(f"no times of {missing}: the times given are of {sorted(source)}")
        first_times, second_times = list(source[first]), list(source[second])
    else:
        raise TypeError(f"claim takes an Experiment or a mapping of times by name, got {type(source).__name__}")
    where = where or ""
    if min(len(first_times), len(second_times)) < 2:
        at = f" {where}" if where else ""
        return (
            f"with {len(first_times)} run(s) of {first} and {len(second_times)} of {second}{at}, this run cannot "
            "say which is faster: a comparison needs at least 2 runs of each"
        )
    return claim_text(time_ratio(first_times, second_times), first, second, where, expected)


def another_round(
    comparisons: Iterable[tuple[Sequence[float], Sequence[float]]], rounds: int, least: int, most: int
) -> bool:
    """Whether an experiment should run one more round of its variants: while it has run fewer
    than ``least`` rounds, always; from then on, while it has run fewer than ``most`` and some
    comparison (a pair of samples of times) is not yet decided (:attr:`Ratio.decided`: its interval
    still includes 1 and reaches past the ``CLOSE`` margin; fewer than two runs of a side decide
    nothing)."""
    if rounds < least:
        return True
    if rounds >= most:
        return False
    return any(undecided(first, second) for first, second in comparisons)


def undecided(first: Sequence[float], second: Sequence[float]) -> bool:
    """Whether one comparison of two samples of times is not yet decided: fewer than two runs of a
    side, or a ratio whose interval still includes 1 past the ``CLOSE`` margin (:attr:`Ratio.decided`)."""
    return min(len(first), len(second)) < 2 or not time_ratio(first, second).decided


def mean_ci(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Mean and its confidence interval (t distribution); the interval is the mean alone for n < 2."""
    x = np.asarray(samples, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def compare(
    results: pd.DataFrame, baseline: str, parameters: Sequence[str] = (), value: str = "seconds"
) -> pd.DataFrame:
    """One row per parameter point and non-baseline variant, in the papers' table format.

    ``results`` has a ``variant`` column, the ``value`` column and the ``parameters`` columns. Each
    row: the runs, the mean times, the time ratio variant / baseline with its interval
    (:func:`time_ratio`), the same interval as a change in % of the baseline (``ci_low_pct``,
    ``ci_high_pct``: never below -100 %), the p-value, whether it is significant, and the verdict in
    words (:meth:`Ratio.words`).
    """
    if baseline not in set(results["variant"]):
        raise ValueError(f"baseline {baseline!r} is not among the variants run: {sorted(set(results['variant']))}")
    rows = []
    groups = results.groupby(list(parameters), sort=False) if parameters else [((), results)]
    for point, group in groups:
        point = point if isinstance(point, tuple) else (point,)
        base = group.loc[group["variant"] == baseline, value]
        for variant in group["variant"].unique():
            if variant == baseline:
                continue
            times = group.loc[group["variant"] == variant, value]
            r = time_ratio(times, base)
            rows.append(
                {
                    **dict(zip(parameters, point)),
                    "variant": variant,
                    "baseline": baseline,
                    "runs": r.n_first,
                    "time_variant_s": float(times.mean()),
                    "time_baseline_s": float(base.mean()),
                    "ratio": r.ratio,
                    "ratio_low": r.low,
                    "ratio_high": r.high,
                    "ci_low_pct": 100 * (r.low - 1),
                    "ci_high_pct": 100 * (r.high - 1),
                    "p_value": r.p_value,
                    "significant": r.significant,
                    "verdict": r.words(),
                }
            )
    return pd.DataFrame(rows)


def interval_text(low: float, high: float) -> str:
    """A ratio's interval as it is printed everywhere: ``4.12x-7.9x`` (with an en dash)."""
    return f"{ratio_text(low)}\u2013{ratio_text(high)}"


def format_table(table: pd.DataFrame, parameters: Sequence[str] = ()) -> str:
    """The comparison as the papers print it, the interval as a time ratio; a ``*`` marks p < 0.05."""
    if table.empty:
        return "(no variant to compare with the baseline)"
    header = [
        *parameters,
        "variant",
        "time variant (s)",
        "time baseline (s)",
        "time ratio (95% CI)",
        "change (%)",
        "p-value",
        "verdict",
        "",
    ]
    lines = []
    for _, r in table.iterrows():
        lines.append(
            [
                *(str(r[p]) for p in parameters),
                f"{r['variant']} vs {r['baseline']}",
                f"{r['time_variant_s']:.4f}",
                f"{r['time_baseline_s']:.4f}",
                f"{ratio_text(r['ratio'])} ({interval_text(r['ratio_low'], r['ratio_high'])})",
                f"[{r['ci_low_pct']:+.1f}%, {r['ci_high_pct']:+.1f}%]",
                f"{r['p_value']:.3g}",
                r["verdict"],
                "*" if r["significant"] else "",
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    out.append(
        "* significant at p < 0.05 (Welch's t-test on log times); time ratio = variant / baseline (geometric "
        "means), its interval also as a change in % of the baseline"
    )
    return "\n".join(out)
