"""``workbench bench splitter``: one task per block, rechunk and SplIter at 1, 48 and 200 blocks per core.

The histogram (5-D) and k-means (10 iterations) on numba kernels, so the scheduling cost is what
shows. Each variant's mean time is divided by ``split``'s (ratios above 1: slower than split).
One worker process per core, one thread each, so blocks per worker = blocks per core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench import machine
from workbench.lab.runner import run_experiment
from workbench.runtime.session import Session, start

VARIANTS = ("blocks", "rechunk", "split", "split-materialized")
# (app, blocks per core, other variant, minimum of other / split): printed next to the figures, never asserted
GOALS = (
    ("histogram", 48, "blocks", 5.0),
    ("histogram", 200, "blocks", 5.0),
    ("histogram", 48, "rechunk", 1.0),
    ("histogram", 200, "rechunk", 1.0),
    ("kmeans", 48, "rechunk", 1.0),
    ("kmeans", 200, "rechunk", 1.0),
)
AT_ONE_BLOCK = ("histogram", "kmeans")  # split within 5 % of blocks at 1 block per core


def run(
    size: str = "lab",
    repeats: int = 3,
    blocks_per_core: Sequence[int] = (1, 48, 200),
    apps: Sequence[str] = ("histogram", "kmeans"),
    session: Session | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Measure every variant of ``apps`` at each block count; ratios to ``split``.

    ``workers``: local worker processes when no ``session`` is given (default: one per core).
    """
    import contextlib

    rows = []
    with contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=300) as session:
        for app in apps:
            experiment = run_experiment(
                session,
                app,
                variants=list(VARIANTS),
                size=size,
                grid={"blocks_per_worker": list(blocks_per_core)},
                repeats=repeats,
                trace=True,
                progress=False,
                baseline="split",
            )
            means = experiment.summary(phases=True).set_index(["blocks_per_worker", "variant"])
            for (bpc, variant), row in means.iterrows():
                split_seconds = means.loc[(bpc, "split"), "mean_s"]
                building = row.get("phase_split_s")
                rows.append(
                    {
                        "app": app,
                        "blocks_per_core": int(bpc),
                        "variant": variant,
                        "seconds": float(row["mean_s"]),
                        "tasks": float(row["tasks"]),
                        "ratio_to_split": float(row["mean_s"] / split_seconds),
                        "partition_building_s": None if building is None or building != building else float(building),
                    }
                )
        workers = len(session.workers())
    goals = []
    for app, bpc, variant, minimum in GOALS:
        match = [r for r in rows if (r["app"], r["blocks_per_core"], r["variant"]) == (app, bpc, variant)]
        if match:
            goals.append(
                {
                    "app": app,
                    "blocks_per_core": bpc,
                    "variant": variant,
                    "goal": f"{variant} / split >= {minimum}",
                    "measured": match[0]["ratio_to_split"],
                    "met": match[0]["ratio_to_split"] >= minimum,
                }
            )
    one = {(r["app"], r["variant"]): r for r in rows if r["blocks_per_core"] == 1}
    for app in AT_ONE_BLOCK:
        if (app, "split") in one and (app, "blocks") in one:
            slower = one[(app, "split")]["seconds"] / one[(app, "blocks")]["seconds"] - 1
            goals.append(
                {
                    "app": app,
                    "blocks_per_core": 1,
                    "variant": "split",
                    "goal": "split at most 5 % slower than blocks",
                    "measured": slower,
                    "met": slower <= 0.05,
                }
            )
    return {
        "benchmark": "splitter",
        "size": size,
        "repeats": repeats,
        "workers": workers,
        "rows": rows,
        "goals": goals,
        "machine": machine.describe(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as the text table the command prints, goals last."""
    lines = [
        f"size {report['size']}, {report['workers']} workers (one per core), mean of {report['repeats']} runs",
        "",
        f"{'app':<10} {'blocks/core':>11} {'variant':<19} {'seconds':>8} {'tasks':>7} {'/ split':>8} "
        f"{'partitioning s':>15}",
    ]
    for r in report["rows"]:
        building = f"{r['partition_building_s']:.4f}" if r["partition_building_s"] is not None else "-"
        lines.append(
            f"{r['app']:<10} {r['blocks_per_core']:>11} {r['variant']:<19} {r['seconds']:>8.4f} {r['tasks']:>7.0f} "
            f"{r['ratio_to_split']:>8.2f} {building:>15}"
        )
    for g in report["goals"]:
        lines.append(
            f"goal {g['app']} at {g['blocks_per_core']} blocks/core: {g['goal']}: measured {g['measured']:.2f} "
            f"({'met' if g['met'] else 'NOT met'})"
        )
    return "\n".join(lines)
