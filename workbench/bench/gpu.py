"""``workbench bench gpu``: the GPU's memory as a locality tier (issue 39), with goals.

Measured with :mod:`workbench.lab.gpu_experiments` (the functions lesson 10 runs), each figure
against its peer in the same run:

* the bus: host to device from pinned memory against pageable memory, and device to host;
* the device memory bandwidth (STREAM's triad), the floor every other rate is read against;
* the histogram kernel's read rate as a share of that floor;
* k-means with the points kept on the ``gpu`` tier against copied in every iteration;
* a store object on the ``gpu`` tier: an active histogram on the device against a non-active fetch,
  and the bytes each copied off the device.

It measures a real device only: where numba sees none, or runs its simulator, ``run`` returns a
report whose ``skipped`` says why (one line) and ``bench all`` leaves it out with that line;
``allow_simulated=True`` runs it in the simulator anyway (how the suite checks the code: the
figures then mean nothing). Not measured here: dask-cuda's device-to-host spilling beside the
tier's explicit placement (``not_measured`` in the report says why).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from typing import Any

from workbench.bench.goals import goal
from workbench.bench.opening import bench_session
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.lab import gpu_experiments as experiments
from workbench.memory import tiers
from workbench.runtime.session import Session
from workbench.runtime.store import Store, registered_directory

NOT_MEASURED = {
    "dask-cuda spilling": "dask-cuda's device-to-host spilling beside the tier's placement is not built: dask-cuda "
    "26.10 pins Dask 2026.7.1 (rapids-dask-dependency), older than the project's, and its LocalCUDACluster needs a "
    "GPU, which no session that built this had to check a comparison on"
}


def why_not() -> str | None:
    """Why this machine cannot measure the benchmark (one line), or None where a real device runs it."""
    from workbench.kernels import gpu as device_kernels

    if device_kernels.simulated():
        return "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): its times mean nothing"
    if not device_kernels.available():
        return "no CUDA device here (numba sees no GPU or no driver): run it on a GPU node"
    return None


def run(
    size: str = "lab",
    session: Session | None = None,
    workers: int | None = None,
    allow_simulated: bool = False,
    progress: Progress | None = None,
) -> Report:
    """The whole benchmark at ``size``: each part in ``parts`` (device, bus, floor, histogram, kmeans, store),
    the goals; skipped, saying why, where this machine has no device to measure. The store part
    runs on ``session`` when given, else on a local cluster of ``workers`` started for it."""
    experiments.size_named(size)
    progress = progress or Progress.quiet()
    reason = why_not()
    if reason and not (allow_simulated and reason.startswith("numba's CUDA simulator")):
        return Report("gpu", size, skipped=reason)
    try:
        device = experiments.device()
    except tiers.TierError as error:
        return Report("gpu", size, skipped=str(error))
    with progress.phase("device", 4) as phase:
        bus = experiments.bus(size)
        phase.step("bus")
        floor = experiments.device_floor(size)
        phase.step("triad")
        histogram = experiments.histogram_rate(size, floor_gbs=floor["gbs"])
        phase.step("histogram")
        kmeans = experiments.kmeans_placement(size)
        phase.step("k-means")
    with progress.phase("store", 1) as phase, bench_session(session, workers, timeout=600) as running:
        with tempfile.TemporaryDirectory(prefix="workbench-bench-gpu-") as directory:
            # a throwaway store of this benchmark's, unless the cluster has one (then joined, and left as found)
            store = Store(running, directory if registered_directory(running) is None else None)
            try:
                on_store = experiments.store_active_vs_non_active(running, size)
            finally:
                store.close()
        phase.step("active vs non-active")
    parts = {
        "device": device,
        "bus": bus,
        "floor": floor,
        "histogram": histogram,
        "kmeans": kmeans,
        "store": on_store,
        "not_measured": NOT_MEASURED,
    }
    report = Report("gpu", size, parts=parts)
    return dataclasses.replace(report, goals=goals(report))


def goals(report: Report) -> list[dict[str, Any]]:
    """The issue's goals, each a ratio of two figures of this run (or a byte count), from the report's
    parts (bus, histogram, kmeans, store) and its size."""
    bus, histogram, kmeans, store = (report.parts[key] for key in ("bus", "histogram", "kmeans", "store"))
    return [
        goal(
            "host to device from pinned memory >= 1.2x from pageable memory",
            bus["pinned_to_device_gbs"] / bus["pageable_to_device_gbs"],
            1.2,
            peers={"pinned": bus["pinned_to_device_gbs"], "pageable": bus["pageable_to_device_gbs"]},
            peer_unit="GB/s",
        ),
        goal(
            "histogram on the device >= 50 % of the device memory bandwidth (STREAM triad)",
            histogram["share_of_floor"],
            0.5,
            peers={"histogram": histogram["gbs"], "triad": histogram["floor_gbs"]},
            peer_unit="GB/s",
        ),
        goal(
            f"k-means with the points kept on the device >= 10x copied every iteration (size {report.size})",
            kmeans["speedup"],
            10.0,
            peers={"resident": kmeans["resident_s_per_iteration"], "copied": kmeans["copied_s_per_iteration"]},
        ),
        goal(
            "store object on the gpu tier: active histogram >= 5x a non-active fetch",
            store["speedup"],
            5.0,
            peers={"active": store["active_s"], "non-active": store["non_active_s"]},
        ),
        goal(
            "active calls copy no value off the device",
            store["active_bytes_off_device"],
            0.0,
            better="lower",
            unit="B",
            peers={"active": store["active_bytes_off_device"], "non-active": store["non_active_bytes_off_device"]},
            peer_unit="B",
        ),
    ]


MiB = 2**20

# a row per comparison: ``first`` against ``second`` (in ``unit``), ``ratio`` how many times better the first is
COLUMNS = (
    Column("measured", "what", "<64"),
    Column("first", "first", ">9.2f"),
    Column("second", "second", ">9.2f"),
    Column("unit", "unit", "<9"),
    Column("ratio", "ratio", ">6.2f", "x"),
    Column(" notes", "notes"),
)


def comparison_rows(parts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's parts as :data:`COLUMNS`' rows: each figure beside its peer in the same run."""
    b, f, h, k, s = (parts[key] for key in ("bus", "floor", "histogram", "kmeans", "store"))
    return [
        {"what": f"bus ({b['bytes'] / MiB:.0f} MiB) to device: pinned / pageable", "first": b["pinned_to_device_gbs"],
         "second": b["pageable_to_device_gbs"], "unit": "GB/s",
         "ratio": b["pinned_to_device_gbs"] / b["pageable_to_device_gbs"], "notes": ""},
        {"what": f"bus ({b['bytes'] / MiB:.0f} MiB) to host", "first": b["to_host_gbs"], "unit": "GB/s", "notes": ""},
        {"what": f"device memory (STREAM triad, {f['bytes'] / MiB:.0f} MiB moved)", "first": f["gbs"], "unit": "GB/s",
         "notes": ""},
        {"what": "histogram / the triad", "first": h["gbs"], "second": h["floor_gbs"], "unit": "GB/s",
         "ratio": h["share_of_floor"], "notes": f"counts exact: {h['exact']}"},
        {"what": f"k-means, {k['iterations']} iterations of {k['points_bytes'] / MiB:.1f} MiB: kept on the device / "
         "copied", "first": k["resident_s_per_iteration"] * 1e3, "second": k["copied_s_per_iteration"] * 1e3,
         "unit": "ms/it", "ratio": k["speedup"],
         "notes": f"{k['resident_bytes_to_device'] / MiB:.1f} / {k['copied_bytes_to_device'] / MiB:.1f} MiB in; "
         f"same centres: {k['same_centres']}"},
        {"what": f"store object on {s['tier']} ({s['values_bytes'] / MiB:.1f} MiB): active / non-active fetch",
         "first": s["active_s"] * 1e3, "second": s["non_active_s"] * 1e3, "unit": "ms", "ratio": s["speedup"],
         "notes": f"{s['active_bytes_off_device']} / {s['non_active_bytes_off_device']} B off the device; "
         f"same counts: {s['same_counts']}"},
    ]  # fmt: skip


def format_report(report: Report) -> str:
    """The report as the text the command prints: the device, a table of each figure beside its peer, goals last."""
    if report.skipped:
        return f"bench gpu: skipped: {report.skipped}"
    d = report.parts["device"]
    memory = f", {d['bytes'] / 2**30:.0f} GiB" if d["bytes"] else ""
    lines = [
        f"device: {d['name']}{memory}" + ("  -- SIMULATED: the times below mean nothing" if d["simulated"] else ""),
        "ratio: how many times better the first figure is than the second (rates first / second, times second / first)",
        "",
        *table(COLUMNS, comparison_rows(report.parts)),
        "",
        *(f"not measured: {what}: {why}" for what, why in report.parts["not_measured"].items()),
    ]
    return text(lines, report)
