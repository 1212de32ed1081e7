"""Honest comparisons of timings: Welch's t-test and the 95 % CI of the difference of means.

The format is that of Tables I and II of the PyCOMPSs shared-memory paper: for each parameter
point, the mean time of a variant and of the baseline, the 95 % confidence interval of
(variant - baseline) in seconds and in percent of the baseline's mean, and the Welch p-value.
Welch's test does not assume equal variances, which two variants on a shared machine rarely have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05  # a difference is marked significant when p < ALPHA


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

    ``results`` has a ``variant`` column, the ``value`` column and the ``parameters`` columns.
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
            d = welch(group.loc[group["variant"] == variant, value], base)
            rows.append(
                {
                    **dict(zip(parameters, point)),
                    "variant": variant,
                    "baseline": baseline,
                    "runs": d.n_variant,
                    "time_variant_s": d.mean_variant,
                    "time_baseline_s": d.mean_baseline,
                    "ci_low_s": d.ci_low,
                    "ci_high_s": d.ci_high,
                    "ci_low_pct": d.ci_low_pct,
                    "ci_high_pct": d.ci_high_pct,
                    "p_value": d.p_value,
                    "significant": d.significant,
                }
            )
    return pd.DataFrame(rows)


def format_table(table: pd.DataFrame, parameters: Sequence[str] = ()) -> str:
    """The comparison as the papers print it; a ``*`` marks p < 0.05."""
    if table.empty:
        return "(no variant to compare with the baseline)"
    header = [
        *parameters,
        "variant",
        "time variant (s)",
        "time baseline (s)",
        "95% CI of difference (s)",
        "(%)",
        "p-value",
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
                f"[{r['ci_low_s']:+.4f}, {r['ci_high_s']:+.4f}]",
                f"[{r['ci_low_pct']:+.1f}%, {r['ci_high_pct']:+.1f}%]",
                f"{r['p_value']:.3g}",
                "*" if r["significant"] else "",
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    out.append("* significant at p < 0.05 (Welch's t-test); % relative to the baseline's mean time")
    return "\n".join(out)
