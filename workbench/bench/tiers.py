"""``workbench bench tiers``: memory tiers measured (thesis ch. 6 on a machine without NVM).

Four parts, every figure a ratio within this run:

1. **Bandwidth** of each tier (``dram``, ``mapped``, ``disk``, ``cached``), read (numba sum) and
   write (fill, then made durable), hot and cold (pages evicted for real, or the reason why not),
   with the medium the files sit on.
2. **Applications** (1-D histogram, k-means, matrix addition, matmul) in tier configurations and
   the peers (Dask's spill buffer, with and without lz4; ``np.memmap``), through the experiment
   runner (same answers checked), with small objects (about the last-level cache, smaller at the
   ``ci`` size) or big ones (10x), on a dataset that fits the DRAM budget or one 2.5x over it.
   Each configuration's whole time and method (compute) time as ratios to ``dram``, beside the
   counts that do not depend on the machine: tasks, dependencies, scheduler and store messages and
   bytes moved between workers per iteration, and the objects moved between tiers per run. The
   default size (``lab``, 5 minutes on 2 cores) runs small objects on the dataset over the budget,
   nine configurations, without matmul; ``full`` runs every combination, configuration and application.
3. **Result modes** on the store directly: matrix addition at several object sizes with its result
   volatile (held in the memory of the backend that computed it), returned to the caller, kept in
   the store on ``mapped``, or non-active (both objects fetched to the caller), with the fetch and
   add rates that predict non-active / volatile, and the messages and tasks of one call of each;
   matmul ``C += A @ B`` written in place into ``C`` on ``mapped`` against ``C`` in DRAM.
4. **A mixed workload** under a DRAM budget: a few small objects written every round and big
   ones read once per round, 2.5x the budget in all, under static ``dram`` (the store's
   ``memory_limit`` is the budget: the rest goes to its disk tier), static ``mapped``, static
   ``cached`` and ``dynamic`` placement, with the tasks and messages of a round.

Goals (issues 13 and 29) are printed beside the figures, never asserted; a goal not met says what
bounds it on this machine, from figures measured in the same run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench import kernels, machine
from workbench.bench.goals import goal, ratio_noise
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.bench.store import counts_per_iteration
from workbench.lab.tier_experiments import APPS, budget_for, small_object_bytes, tier_variants
from workbench.memory import tiers
from workbench.runtime import counts
from workbench.runtime.session import Session
from workbench.runtime.store import ArrayBlock, Store, registered_directory
from workbench.runtime.strategies import tiers as tier_strategies

STATIC = ("dram", "mapped", "cached", "disk")
VARIANTS = tier_strategies.TIER_VARIANTS
MiB = 2**20
ALL_COMBOS = [("small", "small"), ("small", "big"), ("big", "small"), ("big", "big")]
# the configurations the default size runs: each static tier, the peers the goals name, dynamic
LAB_VARIANTS = ["dram", "mapped", "mapped-cold", "cached", "disk", "non-active", "dynamic", "dask-spill", "memmap"]
# per size: the bandwidth array's bytes, repeats, the (objects, dataset) combinations the
# applications run at, which applications and configurations, the DRAM budget per worker (None:
# workbench.lab.tier_experiments.budget_for), and the object sizes of the result modes' matrix
# addition. The default (lab) is what fits 5 minutes on 2 cores: small objects on a dataset 2.5x a
# 64 MiB budget, without matmul (its n^3 work dwarfs the tiers on a 2.5x dataset); full runs all.
SIZES: dict[str, dict[str, Any]] = {
    "ci": dict(
        stream=32 * MiB,
        repeats=3,
        combos=[("big", "big")],
        apps=APPS,
        variants=VARIANTS,
        budget=None,
        matadd=[MiB, 8 * MiB],
    ),
    "lab": dict(
        stream=256 * MiB,
        repeats=3,
        combos=[("small", "big")],
        apps=("histogram1d", "kmeans", "matadd"),
        variants=LAB_VARIANTS,
        budget=64 * MiB,
        matadd=[8 * MiB, 32 * MiB, 128 * MiB, 256 * MiB],
    ),
    "full": dict(
        stream=4096 * MiB,
        repeats=5,
        combos=ALL_COMBOS,
        apps=APPS,
        variants=VARIANTS,
        budget=None,
        matadd=[8 * MiB, 32 * MiB, 128 * MiB, 512 * MiB],
    ),
}
MATMUL_SIDE_MAX = 2048  # in-place FMA objects: 32 MiB (the product's n^3 work grows much faster than its bytes)
MIXED_BUDGET_MIN = 64 * MiB  # the mixed workload needs objects big enough that placement, not task overhead, decides
CEILING_SHARE = 0.9  # a goal bounded by a ceiling measured in the run asks for 90 % of it ("within 10 %")
MOVES = ("promote", "demote")  # the trace events of an object moved between DRAM and a file tier
GOAL = {"spill": 3.0, "volatile": 10.0, "fma": 1.15, "histogram": 1.10, "dynamic": 1.10}


def _samples(run: Callable[[], Any], repeats: int, before: Callable[[], Any] | None = None) -> list[float]:
    """``repeats`` wall times of ``run`` in seconds (``before`` runs ahead of each, untimed)."""
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def _counted(session: Session, run: Callable[[], Any], repeats: int) -> tuple[list[float], dict[str, float]]:
    """:func:`_samples` of ``run``, and what one call gave the cluster (the mean of the ``repeats``):
    tasks, dependencies, scheduler and store messages, bytes moved between workers."""
    with counts.counting(session) as counted:
        times = _samples(run, repeats)
    return times, counted.counts.per(repeats) if counted.counts else {}


def _median_seconds(run: Callable[[], Any], repeats: int, before: Callable[[], Any] | None = None) -> float:
    return statistics.median(_samples(run, repeats, before))


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


def applications(session: Session, size: str, setting: dict[str, Any], progress: Progress) -> list[dict[str, Any]]:
    """Each application in each configuration at each (objects, dataset) combination of ``setting``."""
    workers = len(session.workers())
    variants = setting["variants"]
    rows = []
    with progress.phase("applications", len(setting["combos"]) * len(setting["apps"])) as phase:
        for objects, dataset in setting["combos"]:
            for app in setting["apps"]:
                experiment = tier_variants(
                    session,
                    app,
                    size,
                    variants,
                    objects=objects,
                    dataset=dataset,
                    repeats=setting["repeats"],
                    budget=setting["budget"],
                )
                rows += _application_rows(experiment, app, variants, workers)
                phase.step(f"{app}, {objects} objects, {dataset} dataset, {len(variants)} configurations")
    return rows


def tier_moves(experiment: Any, variant: str) -> dict[str, float]:
    """The objects a measured run of ``variant`` moved between tiers (``promote`` / ``demote`` events
    in its trace) and their bytes, the mean over its runs, and the share of its runs that moved none.
    Dynamic placement's moves are made by the backends during the calls, so a run that moves an
    object pays for the copy."""
    moves, moved = [], []
    for run_id in experiment.runs(variant)["run_id"]:
        frame = experiment.trace_of(run_id)
        events = frame[frame["action"].isin(MOVES)] if not frame.empty else frame
        moves.append(len(events))
        moved.append(float(events["bytes"].sum()) if len(events) else 0.0)
    return {
        "tier_moves_per_run": statistics.fmean(moves),
        "tier_moved_bytes_per_run": statistics.fmean(moved),
        "runs_without_tier_moves": sum(m == 0 for m in moves) / len(moves),
    }


def _application_rows(experiment: Any, app: str, variants: Sequence[str], workers: int) -> list[dict[str, Any]]:
    """One row per configuration of one application's experiment: times, ratios to ``dram``, and the
    counts per iteration (tasks, dependencies, scheduler and store messages, bytes moved between
    workers) with the tier moves per run."""
    setting = experiment.tier_setting
    samples = {v: list(experiment.runs(v)["seconds"]) for v in variants}
    times = {v: statistics.median(samples[v]) for v in variants}
    methods = {v: _method_seconds(experiment, v, workers) for v in variants}
    return [
        {
            "app": app,
            "objects": setting["objects"],
            "dataset": setting["dataset"],
            "object_bytes": setting["object_bytes"],
            "data_bytes": setting["data_bytes"],
            "grid": dict(experiment.points()[0]),
            "variant": variant,
            "whole_s": times[variant],
            "samples_s": samples[variant],
            "method_s": methods[variant],
            "whole_vs_dram": times[variant] / times["dram"],
            "method_vs_dram": methods[variant] / methods["dram"] if methods["dram"] else float("nan"),
            "workers": workers,
            **counts_per_iteration(experiment.runs(variant), workers),
            **tier_moves(experiment, variant),
        }
        for variant in variants
    ]


# -- 3. result modes ---------------------------------------------------------------------------
def _volatile(session: Session, a: Any, b: Any) -> None:
    """``a + b`` with a volatile result: computed where the objects are and held there, in the
    backend's memory (a Dask future), never sent to the caller; then let go."""
    future = a.plus(b)
    session.wait(future, timeout=600)
    if future.status != "finished":
        future.result()  # raises the task's error
    future.release()


def matadd_modes(store: Store, object_bytes: int, repeats: int) -> dict[str, Any]:
    """Matrix addition of two objects of about ``object_bytes`` on ``mapped`` (one backend), the
    result volatile (held in the backend's memory), returned to the caller, kept in the store on
    ``mapped``, or non-active (both objects fetched to the caller, added there). Also the two rates
    that bound non-active/volatile: fetching an object to the caller, and adding in this process."""
    cols = 512
    rows = max(8, object_bytes // (8 * cols))
    rng = np.random.default_rng(1)
    a = store.make_persistent(ArrayBlock(rng.random((rows, cols))))
    b = store.make_persistent(ArrayBlock(rng.random((rows, cols))), backend=a.locations()[0])
    made: list[Any] = []
    try:
        expected = a.plus.local(b)
        a.place("mapped")
        b.place("mapped")
        if not np.array_equal(a.plus(b).result(timeout=600), expected):
            raise AssertionError("matrix addition with a volatile result on mapped objects gave another answer")

        def stored() -> None:
            made.append(a.plus.to_store("mapped")(b).result(timeout=600))

        modes = {
            "volatile": lambda: _volatile(store.session, a, b),
            "returned": lambda: a.plus.value(b),
            "store": stored,
            "non-active": lambda: a.plus.local(b),
        }
        samples, per_call = {}, {}
        for mode, call in modes.items():
            samples[mode], per_call[mode] = _counted(store.session, call, repeats)
        if not np.array_equal(made[-1].fetch().data, expected):
            raise AssertionError("the result kept in the store differs")
        x, y = a.fetch().data, b.fetch().data
        kernels.matrix_add(x[:8], y[:8])  # compiled apart from what is timed
        fetch_s = statistics.median(_samples(a.fetch, repeats))
        add_s = statistics.median(_samples(lambda: kernels.matrix_add(x, y), repeats))
    finally:
        store.delete([a, b, *made])
    seconds = {mode: statistics.median(times) for mode, times in samples.items()}
    nbytes = int(rows * cols * 8)
    return {
        "object_bytes": nbytes,
        "seconds": seconds,
        "samples": samples,
        "counts_per_call": per_call,
        "non_active_vs_volatile": seconds["non-active"] / seconds["volatile"],
        "fetch_GBs": nbytes / fetch_s / 1e9,
        "add_GBs": nbytes / add_s / 1e9,
        # non-active = fetch both + add; volatile = add (+ a task): the ratio these two rates predict
        "expected_ratio": (2 * fetch_s + add_s) / add_s,
    }


def fma_in_place(store: Store, side: int, repeats: int) -> dict[str, Any]:
    """Matmul ``C += A @ B`` (``side`` x ``side``) written in place into ``C`` on ``mapped`` (each
    call made durable: ``msync``) against ``C`` in DRAM, on one backend; the answer checked."""
    rng = np.random.default_rng(1)
    ma = store.make_persistent(ArrayBlock(rng.random((side, side))))
    where = ma.locations()[0]
    mb = store.make_persistent(ArrayBlock(rng.random((side, side))), backend=where)
    c = store.make_persistent(ArrayBlock(np.zeros((side, side))), backend=where)
    try:
        samples: dict[str, list[float]] = {}
        for tier in ("dram", "mapped"):
            c.place(tier)
            c.fma.value(ma, mb)  # warm
            samples[tier] = _samples(lambda: c.fma.value(ma, mb), repeats)
        product = ma.fetch().data @ mb.fetch().data
        if not np.allclose(c.fetch().data, 2 * (repeats + 1) * product, rtol=1e-9):
            raise AssertionError("C += A @ B in place gave another answer on mapped than in DRAM")
    finally:
        store.delete([ma, mb, c])
    seconds = {tier: statistics.median(times) for tier, times in samples.items()}
    return {
        "side": side,
        "c_bytes": side * side * 8,
        "seconds": seconds,
        "samples": samples,
        "mapped_vs_dram": seconds["mapped"] / seconds["dram"],
    }


def result_modes(
    store: Store, object_sizes: Sequence[int], repeats: int, progress: Progress | None = None
) -> dict[str, Any]:
    """Matrix addition's result modes at each of ``object_sizes`` (bytes), and the in-place FMA
    with ``C`` as big as the largest (side at most ``MATMUL_SIDE_MAX``)."""
    progress = progress or Progress.quiet()
    side = max(64, min(MATMUL_SIDE_MAX, int(np.sqrt(max(object_sizes) // 8))))
    with progress.phase("result modes", len(object_sizes) + 1) as phase:
        matadd = []
        for nbytes in object_sizes:
            matadd.append(matadd_modes(store, nbytes, repeats))
            phase.step(f"matrix addition, {nbytes / MiB:g} MiB objects")
        fma = fma_in_place(store, side, repeats)
        phase.step(f"in-place FMA, {side}^2")
    return {"matadd": matadd, "fma": fma}


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
                store.set_memory_limit(limit, backends=[worker])
    checksums = {c["checksum"] for c in out["configurations"].values()}
    if len(checksums) != 1:
        raise AssertionError(f"the placements computed different answers: {checksums}")
    best_static = min(out["configurations"][c]["round_s"] for c in ("dram", "mapped", "cached"))
    out["dynamic_vs_best_static"] = out["configurations"]["dynamic"]["round_s"] / best_static
    return out


def _mixed_rounds(
    store: Store, configuration: str, hot_bytes: int, cold_bytes: int, budget: int, rounds: int
) -> dict[str, Any]:
    """One configuration of the mixed workload: the median round (after a first one untimed), what a
    round gave the cluster (tasks, scheduler and store messages), where the objects ended, a checksum."""
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

        def one_round() -> None:
            futures = [h.fma(small[homes[h.oid]], small[homes[h.oid]]) for h in hot for _ in range(3)]  # written
            futures += [p.apply(kernels.stream_sum) for p in cold]  # read once a round
            store.session.gather(futures)

        one_round()  # the first round settles the placement (dynamic: what is written turns hot)
        round_times, per_round = _counted(store.session, one_round, rounds)
        checksum = round(sum(float(p.apply.value(np.sum)) for p in hot + cold), 3)
        in_dram = {"hot": sum(p.tier() == "dram" for p in hot), "cold": sum(p.tier() == "dram" for p in cold)}
    finally:
        store.delete(hot + cold + list(small.values()))
    return {"round_s": statistics.median(round_times), "in_dram": in_dram, "checksum": checksum, "counts": per_round}


# -- the whole benchmark -------------------------------------------------------------------------
def _setting(size: str, apps: Sequence[str] | None, variants: Sequence[str] | None) -> dict[str, Any]:
    """The size's setting with the applications and configurations asked for (checked)."""
    setting = dict(SIZES[checked_size(size, SIZES)])
    for app in apps or ():
        if app not in APPS:
            raise ValueError(f"no tier application {app!r}; they are {', '.join(APPS)}")
    setting["apps"] = list(apps or setting["apps"])
    setting["variants"] = list(variants or setting["variants"])
    if "dram" not in setting["variants"]:
        setting["variants"].insert(0, "dram")
    setting["budget"] = setting["budget"] or budget_for(size)
    return setting


def run(
    size: str = "lab",
    apps: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    session: Session | None = None,
    workers: int | None = None,
    mixed_budget: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """The whole benchmark: a row per application and variant, the bandwidth, result modes and mixed
    workload in ``parts``, the goals (``apps`` / ``variants``:
    default the size's; ``mixed_budget``: the mixed workload's DRAM budget per worker, default the
    larger of the size's and 64 MiB)."""
    setting = _setting(size, apps, variants)
    progress = progress or Progress.quiet()
    budget = setting["budget"]
    with bench_session(session, workers, timeout=600) as session:
        n_workers = len(session.workers())
        with tempfile.TemporaryDirectory(prefix="workbench-bench-tiers-") as directory:
            # a throwaway store of this benchmark's, unless the cluster has one (then joined, and left as found)
            store = Store(session, directory if registered_directory(session) is None else None)
            try:
                with progress.phase("bandwidth", 1) as phase:
                    band = bandwidth(setting["stream"], repeats=setting["repeats"])
                    phase.step(f"{setting['stream'] / MiB:g} MiB on 4 tiers")
                app_rows = applications(session, size, setting, progress)
                modes = result_modes(store, setting["matadd"], setting["repeats"], progress)
                with progress.phase("mixed workload", 1) as phase:
                    mixed = mixed_workload(store, mixed_budget or max(budget, MIXED_BUDGET_MIN))
                    phase.step("dram, mapped, cached, dynamic")
            finally:
                store.close()
    figures = {
        "workers": n_workers,
        "dram_budget_per_worker": budget,
        "small_object_bytes": small_object_bytes(size),
        "last_level_cache_bytes": machine.last_level_cache_bytes() or 32 * MiB,
        "medium": tiers.medium(tiers.default_directory("mapped")).describe(),
        "bandwidth": band,
        "applications": app_rows,
        "results": modes,
        "mixed": mixed,
        "machine": machine.describe(),
    }
    report = Report(
        "tiers",
        size,
        rows=app_rows,
        parts={key: figures[key] for key in ("medium", "bandwidth", "results", "mixed")},
        counts={
            key: figures[key] for key in ("dram_budget_per_worker", "small_object_bytes", "last_level_cache_bytes")
        },
        workers=n_workers,
        machine=figures["machine"],
    )
    return dataclasses.replace(report, goals=goals(report))


def _row(rows: list[dict[str, Any]], app: str, variant: str, dataset: str | None = None) -> dict[str, Any] | None:
    found = [r for r in rows if r["app"] == app and r["variant"] == variant and dataset in (None, r["dataset"])]
    return max(found, key=lambda r: r["object_bytes"]) if found else None


def _tier_rate(report: Report, tier: str, key: str) -> float:
    return next(r[key] for r in report.parts["bandwidth"]["rows"] if r["tier"] == tier)


def histogram_goal(report: Report) -> dict[str, Any] | None:
    """The 1-D histogram on mapped (hot) against DRAM; bounded by the page cache's read rate."""
    rows = report.rows
    mapped, dram = _row(rows, "histogram1d", "mapped"), _row(rows, "histogram1d", "dram")
    if not (mapped and dram):
        return None
    hot = _tier_rate(report, "mapped", "read_hot_vs_dram")
    if 1 / hot > GOAL["histogram"]:
        bound = f"reading through the page cache: mapped reads hot at {hot:.2f}x DRAM's rate here (bandwidth part)"
    else:
        bound = f"not the page cache, which reads hot at {hot:.2f}x DRAM's rate here: the run's figures do not say"
    return goal(
        "histogram in place on mapped (hot) within 10 % of dram",
        mapped["whole_vs_dram"],
        GOAL["histogram"],
        better="lower",
        peers={"mapped": mapped["whole_s"], "dram": dram["whole_s"]},
        noise=ratio_noise(mapped["samples_s"], dram["samples_s"]),
        bound=bound,
    )


def spill_goal(report: Report) -> dict[str, Any] | None:
    """k-means on the dataset 2.5x the budget, mapped in place vs Dask's spill buffer: >= 3x, or within
    10 % of the ceiling measured here. No placement is faster than no tier at all, so spill / dram is
    the most any can gain; where Dask's spilled files never leave this machine's page cache its spill
    costs only pickling and copying, and that ceiling is below 3x: the goal is then 90 % of it."""
    rows = report.rows
    mapped, spill, dram = (_row(rows, "kmeans", v, "big") for v in ("mapped", "dask-spill", "dram"))
    if not (mapped and spill and dram):
        return None
    spilled = max(0, spill["data_bytes"] - report.counts["dram_budget_per_worker"] * spill["workers"])
    passes = spill["grid"].get("iterations", 1)
    cold = _tier_rate(report, "disk", "read_cold_GBs")
    from_disk = spilled * passes / (cold * 1e9)  # seconds, had Dask read every spilled byte from the device
    disk = next(r for r in report.parts["bandwidth"]["rows"] if r["tier"] == "disk")
    cold_read = (
        f"read cold from this disk at {cold:.2f} GB/s, the spilled bytes alone would take {from_disk:.1f} s"
        if disk["cold_is_real"]
        else f"this disk could not be read cold here ({disk['cold_note']})"
    )
    ceiling = spill["whole_s"] / dram["whole_s"]  # no placement is faster than no tier at all
    threshold = round(min(GOAL["spill"], CEILING_SHARE * ceiling), 2)
    if ceiling < GOAL["spill"]:
        bound = (
            f"the page cache: Dask spills about {spilled / 1e6:.0f} MB (the data over the budget), {passes} passes a "
            "run, into files that stay in "
            f"this machine's {(report.machine or {})['memory_total'] / 2**30:.0f} GiB of memory, so spilling adds only "
            f"{spill['whole_s'] - dram['whole_s']:.2f} s to DRAM's {dram['whole_s']:.2f} s and no placement can beat "
            f"it by more than {ceiling:.2f}x, so the goal is {CEILING_SHARE:.0%} of that ceiling, "
            f"{threshold:.2f}x ({cold_read}); mapped takes {mapped['whole_vs_dram']:.2f}x DRAM's time here"
        )
    else:
        bound = f"mapped's own cost: {mapped['whole_vs_dram']:.2f}x DRAM's time here (spill is {ceiling:.2f}x)"
    return goal(
        "k-means on the big dataset (2.5x the DRAM budget): mapped in place >= 3x faster than Dask spill-to-disk, "
        "or within 10 % of the most any placement can gain here (spill / dram) where that is less",
        spill["whole_s"] / mapped["whole_s"],
        threshold,
        peers={"mapped": mapped["whole_s"], "dask-spill": spill["whole_s"], "dram": dram["whole_s"]},
        noise=ratio_noise(spill["samples_s"], mapped["samples_s"]),
        bound=bound,
    )


def volatile_goal(report: Report) -> dict[str, Any]:
    """Matrix addition at the largest object size measured: a volatile result vs non-active. Two
    things bound it: moving data to the caller (the fetch rate against the addition's predicts the
    ratio at large sizes) and, below that prediction, the volatile call's own round trip."""
    top = report.parts["results"]["matadd"][-1]
    predicted, volatile = top["expected_ratio"], top["seconds"]["volatile"]
    add_s = top["object_bytes"] / (top["add_GBs"] * 1e9)
    if predicted < GOAL["volatile"]:
        bound = (
            f"moving data to the caller: it fetches at {top['fetch_GBs']:.2f} GB/s and adds at {top['add_GBs']:.2f} "
            f"GB/s here, so fetching both objects and adding costs about {predicted:.1f}x adding where they are"
        )
    else:
        bound = (
            f"the volatile call's round trip: it took {volatile * 1e3:.0f} ms where the addition alone takes "
            f"{add_s * 1e3:.0f} ms ({max(0.0, volatile - add_s) * 1e3:.0f} ms to resolve the object and run the "
            f"task); the rates measured (fetch {top['fetch_GBs']:.2f} GB/s, add {top['add_GBs']:.2f} GB/s) predict "
            f"{predicted:.1f}x once objects are big enough for the addition to dwarf it"
        )
    return goal(
        f"matrix addition of {top['object_bytes'] / MiB:.0f} MiB objects: volatile result >= 10x faster than "
        "non-active",
        top["non_active_vs_volatile"],
        GOAL["volatile"],
        peers=top["seconds"],
        noise=ratio_noise(top["samples"]["non-active"], top["samples"]["volatile"]),
        bound=bound,
    )


def fma_goal(report: Report) -> dict[str, Any]:
    """``C += A @ B`` into ``C`` on mapped against DRAM; bounded by making ``C`` durable each call."""
    fma = report.parts["results"]["fma"]
    write = _tier_rate(report, "mapped", "write_GBs")
    sync_ms = fma["c_bytes"] / (write * 1e9) * 1e3
    predicted = 1 + sync_ms / (fma["seconds"]["dram"] * 1e3)  # the product, then C made durable
    if predicted > GOAL["fma"]:
        bound = (
            f"the write-back: each call makes C's {fma['c_bytes'] / MiB:.0f} MiB durable at the mapped tier's "
            f"{write:.2f} GB/s (about {sync_ms:.0f} ms) against {fma['seconds']['dram'] * 1e3:.0f} ms of product "
            f"({predicted:.2f}x); the product grows as n^3 and the write-back as n^2, so bigger matrices amortise it"
        )
    else:
        bound = f"not the write-back, which predicts {predicted:.2f}x here: the run's figures do not say"
    return goal(
        f"matmul with in-place FMA into mapped ({fma['side']}^2) within 15 % of a DRAM result",
        fma["mapped_vs_dram"],
        GOAL["fma"],
        better="lower",
        peers={"C on mapped": fma["seconds"]["mapped"], "C in dram": fma["seconds"]["dram"]},
        noise=ratio_noise(fma["samples"]["mapped"], fma["samples"]["dram"]),
        bound=bound,
    )


def budget_bound(report: Report, app: str) -> dict[str, float] | None:
    """The best time any placement under the DRAM budget could give ``app`` (None where its data fits
    the budget, or ``mapped`` did not run): the budget's share of the data in DRAM at ``dram``'s time,
    the rest at ``mapped``'s, both measured in this run."""
    rows = report.rows
    dram, mapped = _row(rows, app, "dram"), _row(rows, app, "mapped")
    if not (dram and mapped):
        return None
    share = report.counts["dram_budget_per_worker"] * dram["workers"] / dram["data_bytes"]
    if share >= 1:
        return None
    seconds = share * dram["whole_s"] + (1 - share) * mapped["whole_s"]
    return {"share": share, "seconds": seconds}


def _compute_share(dynamic: dict[str, Any], best: dict[str, Any]) -> str:
    """What the placement decides of a run, in words: dynamic's compute tasks against the best static
    placement's, and their share of that placement's run (the rest is the same on every tier)."""
    if not (best["method_s"] > 0 and math.isfinite(dynamic["method_s"])):
        return ""
    return (
        f"; dynamic's compute tasks took {dynamic['method_s'] / best['method_s']:.2f}x {best['variant']}'s, "
        f"which are {best['method_s'] / best['whole_s']:.0%} of its run (the rest, results to the caller and "
        "scheduling, is the same work on every tier)"
    )


def dynamic_goals(report: Report) -> list[dict[str, Any]]:
    """Each application placed dynamically against its best static tier: within 10 % of it, or, where
    that is ``dram`` holding the whole dataset over the budget, within 10 % of the best the budget
    allows (:func:`budget_bound`); and, a count that holds on any machine, no tier moves in a
    measured run (the policy settles in the plan's making and its warm-up: same use, same places)."""
    rows, out = report.rows, []
    for app in sorted({r["app"] for r in rows}):
        dynamic = _row(rows, app, "dynamic")
        statics = [r for r in (_row(rows, app, v) for v in STATIC) if r]
        if not (dynamic and statics):
            continue
        best = min(statics, key=lambda r: r["whole_s"])
        bound = budget_bound(report, app) if best["variant"] == "dram" else None
        threshold = round(GOAL["dynamic"] * max(1.0, bound["seconds"] / best["whole_s"] if bound else 1.0), 2)
        peers = {"dynamic": dynamic["whole_s"], **{r["variant"]: r["whole_s"] for r in statics}}
        moved = (
            f"dynamic moved {dynamic['tier_moves_per_run']:.1f} objects "
            f"({dynamic['tier_moved_bytes_per_run'] / 1e6:.0f} MB) per measured run"
            if "tier_moves_per_run" in dynamic
            else "the run's figures do not say"
        )
        why = f"{moved}; the best static placement is {best['variant']}" + _compute_share(dynamic, best)
        if bound:
            peers["budget's best"] = bound["seconds"]
            why = (
                f"the DRAM budget: it holds {bound['share']:.0%} of the data, so at best that share runs at dram's "
                f"{best['whole_s']:.3f} s and the rest at mapped's {_row(rows, app, 'mapped')['whole_s']:.3f} s: "
                f"{bound['seconds']:.3f} s, and the goal is within 10 % of that ({threshold:.2f}x dram); {moved}"
            )
        out.append(
            goal(
                f"{app}: dynamic within 10 % of the best static placement, or of the best the DRAM budget "
                "allows where that placement is dram over the budget",
                dynamic["whole_s"] / best["whole_s"],
                threshold,
                better="lower",
                peers=peers,
                noise=ratio_noise(dynamic["samples_s"], best["samples_s"]),
                bound=why,
            )
        )
        if "runs_without_tier_moves" in dynamic:
            out.append(
                goal(
                    f"{app}: dynamic moves no object between tiers in any measured run, its use the same each "
                    "run (the share of runs without a move)",
                    dynamic["runs_without_tier_moves"],
                    1.0,
                    unit="",
                    peers={"objects moved": dynamic["tier_moves_per_run"]},
                    peer_unit="per run",
                    bound=f"the policy: {moved}",
                )
            )
    return out


def goals(report: Report) -> list[dict[str, Any]]:
    """Issues 13 and 29's goals against this run's figures (the report's rows, parts, counts, workers and
    machine), with what bounds each one not met."""
    mixed = report.parts["mixed"]
    out = [g for g in (histogram_goal(report), spill_goal(report)) if g]
    out += [volatile_goal(report), fma_goal(report), *dynamic_goals(report)]
    out.append(
        goal(
            "mixed workload: dynamic faster than every static placement",
            mixed["dynamic_vs_best_static"],
            1.0,
            better="lower",
            peers={name: c["round_s"] for name, c in mixed["configurations"].items()},
        )
    )
    return out


def _cold(row: dict[str, Any]) -> str:
    """Whether a tier's cold read was cold: ``real``, ``-`` (not asked), or why not."""
    return (
        " real" if row["cold_is_real"] else (" -" if row["cold_is_real"] is None else f" NOT cold: {row['cold_note']}")
    )


BANDWIDTH_COLUMNS = (
    Column("tier", "tier", "<8"),
    Column("read hot GB/s", "read_hot_GBs", ">14.2f"),
    Column("read cold GB/s", "read_cold_GBs", ">15.2f"),
    Column("write GB/s", "write_GBs", ">11.2f"),
    Column("hot/dram", "read_hot_vs_dram", ">9.2f"),
    Column("cold/dram", "read_cold_vs_dram", ">10.2f"),
    Column(" cold", _cold),
)
APPLICATION_COLUMNS = (
    Column("app", "app", "<12"),
    Column("objects", "objects", "<8"),
    Column("dataset", "dataset", "<8"),
    Column("variant", "variant", "<15"),
    Column("whole s", "whole_s", ">9.4f"),
    Column("whole/dram", "whole_vs_dram", ">11.2f"),
    Column("method/dram", "method_vs_dram", ">12.2f"),
    Column("tasks", "tasks_per_iteration", ">6.1f"),
    Column("deps", "dependencies_per_iteration", ">6.1f"),
    Column("msgs", "messages_per_iteration", ">7.1f"),
    Column("store", "store_messages_per_iteration", ">6.1f"),
    Column("MB", lambda r: r["bytes_moved_per_iteration"] / 1e6 if "bytes_moved_per_iteration" in r else None, ">7.2f"),
    Column("moves", "tier_moves_per_run", ">6.1f"),
)


MIXED_COLUMNS = (
    Column("configuration", "configuration", "<13"),
    Column("round ms", lambda r: r["round_s"] * 1e3, ">9.2f"),
    Column("hot in DRAM", lambda r: r["in_dram"]["hot"], ">11"),
    Column("cold in DRAM", lambda r: r["in_dram"]["cold"], ">12"),
    Column("tasks", lambda r: (r.get("counts") or {}).get("tasks_per"), ">6.0f"),
    Column("sched msgs", lambda r: (r.get("counts") or {}).get("messages_per"), ">10.0f"),
    Column("store msgs", lambda r: (r.get("counts") or {}).get("store_messages_per"), ">10.0f"),
)
PER_CALL_COLUMNS = (
    Column("MiB", "MiB", ">6.0f"),
    Column("mode", "mode", "<10"),
    Column("store msgs", "store_messages_per", ">10.0f"),
    Column("sched msgs", "messages_per", ">10.0f"),
    Column("tasks", "tasks_per", ">6.0f"),
)


def _mode_column(mode: str) -> Column:
    """A result mode's median time (ms) in :func:`matadd_columns`' table."""
    return Column(f"{mode} ms", lambda r: r["seconds"][mode] * 1e3, f">{max(9, len(mode) + 3)}.2f")


def matadd_columns(modes: Sequence[str]) -> tuple[Column, ...]:
    """The result modes' table: a row per object size, a time per mode (``modes``, as measured), the ratio
    non-active / volatile and what the fetch and addition rates predict of it."""
    return (
        Column("MiB", lambda r: r["object_bytes"] / MiB, ">6.0f"),
        *(_mode_column(mode) for mode in modes),
        Column("non-active/volatile", "non_active_vs_volatile", ">19.2f", "x"),
        Column("expected", "expected_ratio", ">8.1f", "x"),
        Column("fetch GB/s", "fetch_GBs", ">10.2f"),
        Column("add GB/s", "add_GBs", ">8.2f"),
    )


def format_report(report: Report) -> str:
    """The report as the text tables the command prints, goals last."""
    parts, counted = report.parts, report.counts
    lines = [
        f"{report.workers} workers; DRAM budget {counted['dram_budget_per_worker'] / MiB:.1f} MiB per worker; "
        f"small objects {counted['small_object_bytes'] / MiB:.2f} MiB (last-level cache "
        f"{counted['last_level_cache_bytes'] / MiB:.0f} MiB)",
        f"tier files: {parts['medium']}",
        "",
        f"bandwidth ({parts['bandwidth']['nbytes'] / MiB:.0f} MiB array)",
        *table(BANDWIDTH_COLUMNS, parts["bandwidth"]["rows"]),
        "",
        "applications (ratios to dram in the same run; whole = the run, method = its compute tasks; per "
        "iteration: tasks, dependencies, scheduler and store messages, MB moved between workers; tier moves "
        "per run)",
        *table(APPLICATION_COLUMNS, report.rows),
    ]
    matadd, f = parts["results"]["matadd"], parts["results"]["fma"]
    per_call = [
        {"MiB": m["object_bytes"] / MiB, "mode": mode, **c}
        for m in matadd
        for mode, c in (m.get("counts_per_call") or {}).items()
    ]
    lines += [
        "",
        "result modes of matrix addition on mapped objects (median ms; volatile: held where computed; returned: "
        "sent to the caller; store: kept on mapped; non-active: both objects fetched, added here; expected: what "
        "the fetch and addition rates predict of non-active/volatile)",
        *table(matadd_columns(list(matadd[0]["seconds"]) if matadd else []), matadd),
        *(["", "per call of each result mode", *table(PER_CALL_COLUMNS, per_call)] if per_call else []),
        "",
        f"in-place FMA C += A @ B ({f['side']}^2): C in dram {f['seconds']['dram'] * 1e3:.2f} ms, "
        f"C on mapped {f['seconds']['mapped'] * 1e3:.2f} ms ({f['mapped_vs_dram']:.2f}x)",
        "",
        "mixed workload (hot objects written, cold ones read once, 2.5x the budget): median round, where the "
        "objects ended, what a round gave the cluster",
        *table(
            MIXED_COLUMNS,
            [{"configuration": name, **c} for name, c in parts["mixed"]["configurations"].items()],
        ),
    ]
    return text(lines, report)
