"""``workbench bench tiers``: memory tiers measured (thesis ch. 6 on a machine without NVM).

Four parts, every figure a ratio within this run:

1. **Bandwidth** of each tier (``dram``, ``mapped``, ``disk``, ``cached``), read (numba sum) and
   write (fill, then made durable), hot and cold (pages evicted for real, or the reason why not),
   with the medium the files sit on.
2. **Applications** (1-D histogram, k-means, matrix addition, matmul) in every tier configuration
   and the peers (Dask's spill buffer, with and without lz4; ``np.memmap``), through the
   experiment runner (same answers checked), small objects (about the last-level cache, smaller at
   the ``ci`` size) and big ones (10x), a dataset that fits the DRAM budget and one 2.5x over it.
   Each configuration's whole time and method (compute) time as ratios to ``dram``.
3. **Result modes** on the store directly: matrix addition with a volatile result (returned),
   kept in the store on ``mapped``, or non-active (both objects fetched to the caller); matmul
   ``C += A @ B`` written in place into ``C`` on ``mapped`` against ``C`` in DRAM.
4. **A mixed workload** under a DRAM budget: a few small objects written every round and big
   ones read once per round, 2.5x the budget in all, under static ``dram`` (the store's
   ``memory_limit`` is the budget: the rest goes to its disk tier), static ``mapped``, static
   ``cached`` and ``dynamic`` placement.

Goals (issue 13) are printed beside the figures, never asserted.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import kernels
from workbench import machine
from workbench.bench.goals import goal, goal_lines
from workbench.lab.tier_experiments import APPS, budget_for, small_object_bytes, tier_variants
from workbench.memory import tiers
from workbench.runtime.session import Session, start
from workbench.runtime.store import ArrayBlock, Store, registered_directory
from workbench.runtime.strategies import tiers as tier_strategies

STATIC = ("dram", "mapped", "cached", "disk")
VARIANTS = tier_strategies.TIER_VARIANTS
MiB = 2**20
ALL_COMBOS = [("small", "small"), ("small", "big"), ("big", "small"), ("big", "big")]
# per size: bandwidth array bytes, repeats, the (objects, dataset) combinations the applications
# run at (the DRAM budget and object sizes: workbench.lab.tier_experiments)
SIZES: dict[str, dict[str, Any]] = {
    "ci": dict(stream=32 * MiB, repeats=3, combos=[("big", "big")]),
    "lab": dict(stream=512 * MiB, repeats=3, combos=ALL_COMBOS),
    "full": dict(stream=4096 * MiB, repeats=5, combos=ALL_COMBOS),
}
MATMUL_SIDE_MAX = 2048  # in-place FMA objects: 32 MiB (the product's n^3 work grows much faster than its bytes)
MIXED_BUDGET_MIN = 64 * MiB  # the mixed workload needs objects big enough that placement, not task overhead, decides


def _median_seconds(run: Callable[[], Any], repeats: int, before: Callable[[], Any] | None = None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- 1. bandwidth -------------------------------------------------------------------------------
def _cool(placed: tiers.TierArray) -> tiers.Eviction | None:
    """Make ``placed`` cold (its DRAM copy or cache entry dropped, its file's pages evicted)."""
    if isinstance(placed, (tiers.MappedArray, tiers.CachedArray)):
        return placed.evict()
    if isinstance(placed, tiers.DiskArray):
        placed.drop()
        return tiers.evict_pages(placed.path)
    return None


def _write(placed: tiers.TierArray) -> None:
    """Overwrite the array and make it durable on its tier (msync, write-back, cache write-back)."""
    placed.array.fill(1.0)
    if isinstance(placed, tiers.CachedArray):
        placed.cache.mark_dirty(placed)
        placed.cache.drop(placed)
    else:
        placed.sync()


def tier_bandwidth(tier: str, data: np.ndarray, where: Path, repeats: int) -> dict[str, Any]:
    """Read (hot, cold) and write GB/s of ``data`` placed on ``tier``."""
    name = f"bench-bandwidth-{tier}"
    directory = None if tier == "dram" else where
    placed = tiers.place(name, data, tier, directory=directory, cache=tiers.DramCache(2 * data.nbytes), replace=True)
    try:
        medium = placed.medium()
        kernels.stream_sum(placed.array)
        hot = _median_seconds(lambda: kernels.stream_sum(placed.array), repeats)
        eviction = None
        cold = hot
        if tier != "dram":
            cold = _median_seconds(lambda: kernels.stream_sum(placed.array), repeats, before=lambda: _cool(placed))
            eviction = _cool(placed)
        if tier == "mapped":
            placed = tiers.open_array(name, tier, directory=directory, writable=True)
        written = _median_seconds(lambda: _write(placed), repeats)
    finally:
        tiers.free(name, tier, directory=directory)
    return {
        "tier": tier,
        "medium": medium.describe() if medium else "process memory",
        "read_hot_GBs": data.nbytes / hot / 1e9,
        "read_cold_GBs": data.nbytes / cold / 1e9,
        "write_GBs": data.nbytes / written / 1e9,
        "cold_is_real": None if eviction is None else bool(eviction.evicted),
        "cold_note": "dram has no colder state" if eviction is None else eviction.reason,
    }


def bandwidth(nbytes: int, repeats: int = 3, directory: str | Path | None = None) -> dict[str, Any]:
    """Read and write GB/s of each tier, hot and cold, for an array of ``nbytes``, in this process."""
    data = np.random.default_rng(0).random(max(1, nbytes // 8))
    kernels.stream_sum(data[:1024])  # compile apart from what is timed
    where = Path(directory) if directory is not None else tiers.default_directory("mapped")
    rows = [tier_bandwidth(tier, data, where, repeats) for tier in ("dram", "mapped", "disk", "cached")]
    dram = rows[0]
    for row in rows:
        row["read_hot_vs_dram"] = row["read_hot_GBs"] / dram["read_hot_GBs"]
        row["read_cold_vs_dram"] = row["read_cold_GBs"] / dram["read_hot_GBs"]
        row["write_vs_dram"] = row["write_GBs"] / dram["write_GBs"]
    return {"nbytes": data.nbytes, "rows": rows}


# -- 2. applications ----------------------------------------------------------------------------
def _method_seconds(experiment: Any, variant: str, workers: int) -> float:
    """Compute time of the median run's tasks, per worker (what the work itself took)."""
    frame = experiment.median_trace(variant)
    if frame.empty:
        return float("nan")
    compute = frame[frame["action"] == "compute"]
    return float((compute["stop"] - compute["start"]).sum()) / max(1, workers)


def applications(
    session: Session, size: str, apps: Sequence[str], variants: Sequence[str], budget: int, repeats: int
) -> list[dict[str, Any]]:
    """Each application in each configuration at each (objects, dataset) combination of ``size``."""
    workers = len(session.workers())
    rows = []
    for objects, dataset in SIZES[size]["combos"]:
        for app in apps:
            experiment = tier_variants(
                session, app, size, list(variants), objects=objects, dataset=dataset, repeats=repeats, budget=budget
            )
            setting = experiment.tier_setting  # type: ignore[attr-defined]
            times = {v: statistics.median(experiment.runs(v)["seconds"]) for v in variants}
            methods = {v: _method_seconds(experiment, v, workers) for v in variants}
            for variant in variants:
                rows.append(
                    {
                        "app": app,
                        "objects": objects,
                        "dataset": dataset,
                        "object_bytes": setting["object_bytes"],
                        "data_bytes": setting["data_bytes"],
                        "grid": {k: v for k, v in experiment.points()[0].items()},
                        "variant": variant,
                        "whole_s": times[variant],
                        "method_s": methods[variant],
                        "whole_vs_dram": times[variant] / times["dram"],
                        "method_vs_dram": methods[variant] / methods["dram"] if methods["dram"] else float("nan"),
                    }
                )
    return rows


# -- 3. result modes ---------------------------------------------------------------------------
def result_modes(store: Store, object_bytes: int, repeats: int) -> dict[str, Any]:
    """Matrix addition's result volatile / in the store / non-active, and matmul's in-place FMA on
    ``mapped`` against DRAM, on objects of about ``object_bytes`` held by one backend."""
    cols = 512
    rows = max(8, object_bytes // (8 * cols))
    rng = np.random.default_rng(1)
    a = store.make_persistent(ArrayBlock(rng.random((rows, cols))))
    where = a.locations()[0]
    b = store.make_persistent(ArrayBlock(rng.random((rows, cols))), backend=where)
    side = max(64, min(MATMUL_SIDE_MAX, int(np.sqrt(object_bytes // 8))))
    ma = store.make_persistent(ArrayBlock(rng.random((side, side))), backend=where)
    mb = store.make_persistent(ArrayBlock(rng.random((side, side))), backend=where)
    c = store.make_persistent(ArrayBlock(np.zeros((side, side))), backend=where)
    made: list[Any] = []
    try:
        expected = a.plus.local(b)
        a.place("mapped")
        b.place("mapped")
        if not np.array_equal(a.plus.value(b), expected):
            raise AssertionError("matrix addition on mapped objects gave another answer")

        def stored() -> None:
            made.append(a.plus.to_store("mapped")(b).result(timeout=600))

        times = {
            "volatile": _median_seconds(lambda: a.plus.value(b), repeats),
            "store": _median_seconds(stored, repeats),
            "non-active": _median_seconds(lambda: a.plus.local(b), repeats),
        }
        if not np.array_equal(made[-1].fetch().data, expected):
            raise AssertionError("the result kept in the store differs")
        fma: dict[str, float] = {}
        for tier in ("dram", "mapped"):
            c.place(tier)
            c.fma.value(ma, mb)  # warm
            fma[tier] = _median_seconds(lambda: c.fma.value(ma, mb), repeats)
        product = ma.fetch().data @ mb.fetch().data
        if not np.allclose(c.fetch().data, 2 * (repeats + 1) * product, rtol=1e-9):
            raise AssertionError("C += A @ B in place gave another answer on mapped than in DRAM")
        return {
            "matadd_object_bytes": int(rows * cols * 8),
            "matadd_s": times,
            "matadd_non_active_vs_volatile": times["non-active"] / times["volatile"],
            "matadd_store_vs_volatile": times["store"] / times["volatile"],
            "matmul_side": side,
            "fma_s": fma,
            "fma_mapped_vs_dram": fma["mapped"] / fma["dram"],
        }
    finally:
        store.delete([a, b, ma, mb, c, *made])


# -- 4. mixed workload --------------------------------------------------------------------------
def mixed_workload(store: Store, budget: int, rounds: int = 4) -> dict[str, Any]:
    """Static placements and dynamic placement on a workload of hot written objects and cold read-once
    ones; static ``dram`` under the budget as the store's memory limit (the rest evicted to disk)."""
    hot_bytes = max(64 * 1024, budget // 8)  # four hot objects per worker: half the budget
    cold_bytes = max(256 * 1024, budget // 2)  # five cold ones per worker: 2.5x the budget
    out: dict[str, Any] = {"hot_bytes": hot_bytes, "cold_bytes": cold_bytes, "budget": budget, "configurations": {}}
    store.set_cache(budget)
    for configuration in ("dram", "mapped", "cached", "dynamic"):
        limits = store.set_memory_limit(budget if configuration == "dram" else None)
        try:
            out["configurations"][configuration] = _mixed_rounds(
                store, configuration, hot_bytes, cold_bytes, budget, rounds
            )
        finally:
            for worker, limit in limits.items():
                store.backend(worker, "set_memory_limit", nbytes=limit)
    checksums = {c["checksum"] for c in out["configurations"].values()}
    if len(checksums) != 1:
        raise AssertionError(f"the placements computed different answers: {checksums}")
    best_static = min(out["configurations"][c]["round_s"] for c in ("dram", "mapped", "cached"))
    out["dynamic_vs_best_static"] = out["configurations"]["dynamic"]["round_s"] / best_static
    return out


def _mixed_rounds(
    store: Store, configuration: str, hot_bytes: int, cold_bytes: int, budget: int, rounds: int
) -> dict[str, Any]:
    """One configuration of the mixed workload: the median round, the moves made, a checksum."""
    side = int(np.sqrt(hot_bytes // 8))
    rng = np.random.default_rng(2)
    identity = np.eye(side) * 1e-3
    hot, cold, small, homes = [], [], {}, {}
    try:
        for w in store.backends():
            small[w] = store.make_persistent(ArrayBlock(identity), backend=w)
            for _ in range(4):
                hot.append(store.make_persistent(ArrayBlock(rng.random((side, side))), backend=w))
                homes[hot[-1].oid] = w
            cold += [store.make_persistent(ArrayBlock(rng.random(cold_bytes // 8)), backend=w) for _ in range(5)]
        static = "mapped" if configuration == "dynamic" else configuration
        if static != "dram":
            store.place(hot + cold, static, reason=f"static {static}")
        if configuration == "dynamic":
            store.rebalance(budget)
            store.place(hot + cold, "dynamic")  # from now on each backend moves them by their use
        round_times = []
        for r in range(rounds + 1):
            start = time.perf_counter()
            futures = [h.fma(small[homes[h.oid]], small[homes[h.oid]]) for h in hot for _ in range(3)]  # written
            futures += [p.apply(kernels.stream_sum) for p in cold]  # read once a round
            store.session.gather(futures)
            if r > 0:
                round_times.append(time.perf_counter() - start)
        checksum = round(sum(float(p.apply.value(np.sum)) for p in hot + cold), 3)
        in_dram = {"hot": sum(p.tier() == "dram" for p in hot), "cold": sum(p.tier() == "dram" for p in cold)}
    finally:
        store.delete(hot + cold + list(small.values()))
    return {"round_s": statistics.median(round_times), "in_dram": in_dram, "checksum": checksum}


# -- the whole benchmark -------------------------------------------------------------------------
def run(
    size: str = "lab",
    apps: Sequence[str] = APPS,
    variants: Sequence[str] | None = None,
    session: Session | None = None,
    workers: int | None = None,
    mixed_budget: int | None = None,
) -> dict[str, Any]:
    """The whole benchmark; a dict for ``--json`` and :func:`format_report` (``mixed_budget``: the
    mixed workload's DRAM budget per worker, default the larger of the size's and 64 MiB)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    for app in apps:
        if app not in APPS:
            raise ValueError(f"no tier application {app!r}; they are {', '.join(APPS)}")
    variants = list(variants or VARIANTS)
    if "dram" not in variants:
        variants.insert(0, "dram")
    setting = SIZES[size]
    llc = machine.last_level_cache_bytes() or 32 * MiB
    small = small_object_bytes(size)
    budget = budget_for(size)
    with contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=600) as session:
        n_workers = len(session.workers())
        with tempfile.TemporaryDirectory(prefix="workbench-bench-tiers-") as directory:
            # a throwaway store of this benchmark's, unless the cluster has one (then joined, and left as found)
            store = Store(session, directory if registered_directory(session) is None else None)
            try:
                band = bandwidth(setting["stream"], repeats=setting["repeats"])
                app_rows = applications(session, size, apps, variants, budget, setting["repeats"])
                modes = result_modes(store, 10 * small, setting["repeats"])
                mixed = mixed_workload(store, mixed_budget or max(budget, MIXED_BUDGET_MIN))
            finally:
                store.close()
    report = {
        "benchmark": "tiers",
        "size": size,
        "workers": n_workers,
        "dram_budget_per_worker": budget,
        "small_object_bytes": small,
        "last_level_cache_bytes": llc,
        "medium": tiers.medium(tiers.default_directory("mapped")).describe(),
        "bandwidth": band,
        "applications": app_rows,
        "results": modes,
        "mixed": mixed,
        "machine": machine.describe(),
    }
    report["goals"] = goals(report)
    return report


def _row(rows: list[dict[str, Any]], app: str, variant: str, dataset: str | None = None) -> dict[str, Any] | None:
    found = [r for r in rows if r["app"] == app and r["variant"] == variant and dataset in (None, r["dataset"])]
    return max(found, key=lambda r: r["object_bytes"]) if found else None


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 13's goals against this run's figures."""
    rows = report["applications"]
    out = []
    mapped = _row(rows, "histogram1d", "mapped")
    if mapped:
        out.append(
            goal(
                "histogram in place on mapped (hot) within 10 % of dram",
                mapped["whole_vs_dram"],
                mapped["whole_vs_dram"] <= 1.10,
            )
        )
    km_mapped, km_spill = _row(rows, "kmeans", "mapped", "big"), _row(rows, "kmeans", "dask-spill", "big")
    if km_mapped and km_spill:
        ratio = km_spill["whole_s"] / km_mapped["whole_s"]
        out.append(
            goal(
                "k-means on the big dataset: mapped in place >= 3x faster than Dask spill-to-disk", ratio, ratio >= 3.0
            )
        )
    ma_dram, ma_na = _row(rows, "matadd", "dram"), _row(rows, "matadd", "non-active")
    if ma_dram and ma_na:
        ratio = ma_na["whole_s"] / ma_dram["whole_s"]
        out.append(
            goal("matrix addition, volatile result, >= 10x faster than non-active (runner)", ratio, ratio >= 10.0)
        )
    modes = report["results"]
    out.append(
        goal(
            "matrix addition, volatile result, >= 10x faster than non-active (store objects)",
            modes["matadd_non_active_vs_volatile"],
            modes["matadd_non_active_vs_volatile"] >= 10.0,
        )
    )
    out.append(
        goal(
            "matmul with in-place FMA into mapped within 15 % of a DRAM result (big objects)",
            modes["fma_mapped_vs_dram"],
            modes["fma_mapped_vs_dram"] <= 1.15,
        )
    )
    for app in sorted({r["app"] for r in rows}):
        dynamic = _row(rows, app, "dynamic")
        statics = [r for r in (_row(rows, app, v) for v in STATIC) if r]
        if dynamic and statics:
            ratio = dynamic["whole_s"] / min(r["whole_s"] for r in statics)
            out.append(goal(f"{app}: dynamic within 10 % of the best static placement", ratio, ratio <= 1.10))
    mixed = report["mixed"]["dynamic_vs_best_static"]
    out.append(goal("mixed workload: dynamic faster than every static placement", mixed, mixed < 1.0))
    return out


def format_report(report: dict[str, Any]) -> str:
    """The report as the text tables the command prints, goals last."""
    lines = [
        f"{report['workers']} workers; DRAM budget {report['dram_budget_per_worker'] / MiB:.1f} MiB per worker; "
        f"small objects {report['small_object_bytes'] / MiB:.2f} MiB (last-level cache "
        f"{report['last_level_cache_bytes'] / MiB:.0f} MiB)",
        f"tier files: {report['medium']}",
        "",
        f"bandwidth ({report['bandwidth']['nbytes'] / MiB:.0f} MiB array)",
        f"{'tier':<8} {'read hot GB/s':>14} {'read cold GB/s':>15} {'write GB/s':>11} {'hot/dram':>9} "
        f"{'cold/dram':>10}  cold",
    ]
    for r in report["bandwidth"]["rows"]:
        cold = "real" if r["cold_is_real"] else ("-" if r["cold_is_real"] is None else f"NOT cold: {r['cold_note']}")
        lines.append(
            f"{r['tier']:<8} {r['read_hot_GBs']:>14.2f} {r['read_cold_GBs']:>15.2f} {r['write_GBs']:>11.2f} "
            f"{r['read_hot_vs_dram']:>9.2f} {r['read_cold_vs_dram']:>10.2f}  {cold}"
        )
    lines += ["", "applications (ratios to dram in the same run; whole = the run, method = its compute tasks)"]
    lines.append(
        f"{'app':<12} {'objects':<8} {'dataset':<8} {'variant':<15} {'whole s':>9} {'whole/dram':>11} "
        f"{'method/dram':>12}"
    )
    for r in report["applications"]:
        lines.append(
            f"{r['app']:<12} {r['objects']:<8} {r['dataset']:<8} {r['variant']:<15} {r['whole_s']:>9.4f} "
            f"{r['whole_vs_dram']:>11.2f} {r['method_vs_dram']:>12.2f}"
        )
    p = report["results"]
    lines += [
        "",
        f"result modes (matrix addition of {p['matadd_object_bytes'] / MiB:.1f} MiB objects on mapped): "
        + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in p["matadd_s"].items())
        + f"; non-active/volatile {p['matadd_non_active_vs_volatile']:.2f}x, store/volatile "
        f"{p['matadd_store_vs_volatile']:.2f}x",
        f"in-place FMA C += A @ B ({p['matmul_side']}^2): C in dram {p['fma_s']['dram'] * 1e3:.2f} ms, "
        f"C on mapped {p['fma_s']['mapped'] * 1e3:.2f} ms ({p['fma_mapped_vs_dram']:.2f}x)",
        "",
        "mixed workload (hot objects written, cold ones read once, 2.5x the budget): median round",
    ]
    for name, c in report["mixed"]["configurations"].items():
        lines.append(
            f"  {name:<8} {c['round_s'] * 1e3:9.2f} ms  in DRAM at the end: {c['in_dram']['hot']} hot, "
            f"{c['in_dram']['cold']} cold objects"
        )
    lines.append("")
    lines += goal_lines(report["goals"])
    return "\n".join(lines)
