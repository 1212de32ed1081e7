"""``workbench bench execution-models``: Process-in-Process's microbenchmarks from Python, and which
execution model each workbench application should run in, on this machine.

Every figure is a ratio within the run (a thread's spawn, one process's page tables, processes'
``mmap`` rate, an application's best configuration), printed beside PiP's published results
(``../shared/references/003_b930a90b83a05796.txt``), with a ``goals`` list as the other benchmarks.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from workbench import machine
from workbench.bench.goals import goal
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, table, text
from workbench.lab import execution_models as em

APPS = ("histogram", "kmeans")

# What PiP (HPDC 2018) published, for the side-by-side: its text and tables (its figures carry no
# printed numbers). Wallaby: Xeon E5-2650 v2, Linux (the paper's Table 3).
PIP_PUBLISHED = {
    "page_tables": "Figure 6 / Table 5: a 128 MiB region touched by every task; Pthread and PiP share one page "
    "table (M + D + sum S_i entries), Fork&Shmem and Fork&XPMEM need M x N entries: page-table memory grows "
    "linearly with processes and stays flat with threads",
    "first_touch": "Section 6.2: with POSIX shmem a page fault happened every time a new 4 KiB page was accessed; "
    "with 2 MiB HugeTLB pages the spikes vanish (one fault per 2 MiB)",
    "spawn": "Figure 7: Pthread creation fastest; PiP spawning about the same as creating processes "
    "(fork&exec, vfork&exec, posix_spawn): program loading is costly but rare",
    "mmap": "Figure 8: 10 tasks each mmap()ing and munmap()ing 10,000 times: PiP and Pthread alike, forked "
    "processes much faster (threads share one memory map and its lock)",
    "shm_setup_cycles": {
        "shm_open (sender)": 22294,
        "ftruncate": 4080,
        "mmap (sender)": 5553,
        "shm_open (receiver)": 13522,
        "mmap (receiver)": 16232,
    },  # Table 4, measured once
}


def run(
    size: str = "ci",
    dask: bool = True,
    apps: Sequence[str] | None = APPS,
    cores: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """Every measurement at ``size`` (``ci``, ``lab``, ``full``): spawn costs (``dask``: with Dask
    workers), first touch, page tables, ``mmap`` contention, and ``apps`` in each execution model
    (None or empty: skipped); with the goals and a recommendation per application. ``progress``
    shows a step per measurement. Each measurement is a part of the report (``parts["spawn"]``, ...)."""
    sizes = em._check_size(size)
    progress = progress or Progress.quiet()
    figures: dict[str, Any] = {
        "size": size,
        "machine": {
            "cpu": machine.cpu_model(),
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "thp": em.transparent_huge_pages(),
        },
        "pip_published": PIP_PUBLISHED,
    }
    steps = 1 + len(em.TOUCH_MODES) + 2 + 1 + (1 if apps else 0)
    with progress.phase("measurements", steps) as phase:
        figures["spawn"] = em.spawn_costs(sizes["spawn_repeats"], sizes["dask_repeats"], dask=dask)
        phase.step("spawn costs")
        figures["first_touch"] = []
        for mode in em.TOUCH_MODES:
            figures["first_touch"].append(em.first_touch(sizes["touch_bytes"], mode))
            phase.step(f"first touch, {mode}")
        figures["page_tables"] = []
        for model in ("processes", "threads"):
            figures["page_tables"] += em.page_tables(sizes["pte_bytes"], sizes["tasks"], model)
            phase.step(f"page tables, {model}")
        figures["mmap"] = em.mmap_contention(sizes["mmap_tasks"], sizes["mmap_iterations"])
        phase.step("mmap contention")
        if apps:
            rows = em.application_models(apps, size=size, cores=cores, repeats=sizes["app_repeats"])
            figures["applications"] = rows
            figures["recommendations"] = [em.recommendation(rows, app) for app in apps]
            phase.step("applications: " + ", ".join(apps))
    figures["pip_side_by_side"] = side_by_side(figures, figures["machine"]["cores"])
    parts = {key: value for key, value in figures.items() if key not in ("size", "machine")}
    report = Report("execution-models", size, parts=parts, machine=figures["machine"])
    return dataclasses.replace(report, goals=goals(report))


def page_table_goals(tables: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Page tables: flat with threads, linear with processes (VmPTE, KiB), from the page-table rows."""
    threads = sorted((r for r in tables if r["model"] == "threads"), key=lambda r: r["tasks"])
    processes = sorted((r for r in tables if r["model"] == "processes"), key=lambda r: r["tasks"])
    one, most = threads[0], threads[-1]
    flat = goal(
        f"threads add no page-table memory: VmPTE with {most['tasks']} threads / with 1",
        most["vmpte_kib"] / max(one["vmpte_kib"], 1),
        1.25,
        better="lower",
        peers={"1 thread": one["vmpte_kib"], f"{most['tasks']} threads": most["vmpte_kib"]},
        peer_unit="KiB",
    )
    one, most = processes[0], processes[-1]
    linear = most["vmpte_kib"] / max(one["vmpte_kib"] * most["tasks"], 1)
    grows = goal(
        f"processes add page tables linearly: VmPTE of {most['tasks']} processes against {most['tasks']} x one "
        "process's, off by at most 1.25x either way",
        max(linear, 1 / max(linear, 1e-9)),
        1.25,
        better="lower",
        peers={f"{most['tasks']} x one process": most["tasks"] * one["vmpte_kib"],
               f"{most['tasks']} processes": most["vmpte_kib"]},
        peer_unit="KiB",
    )  # fmt: skip
    return [flat, grows]


def first_touch_goals(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """First touch: a fault per 4 KiB page, and huge pages cutting them (bounded by what the kernel gave),
    from the first-touch rows (one per mode)."""
    touch = {r["mode"]: r for r in rows}
    small, huge = touch["4k pages"], touch["huge pages"]
    per_page = small["faults_per_page"]
    one_each = goal(
        "first touch: one minor fault per 4 KiB page (faults per page, off by at most 1.1x either way)",
        max(per_page, 1 / max(per_page, 1e-9)),
        1.1,
        better="lower",
        peers={"faults": small["faults"], "pages": small["pages"]},
        peer_unit="count",
    )
    given = huge["huge_pages_kib"]
    cut = goal(
        f"huge pages cut first-touch faults >= 100x (transparent huge pages: {huge['thp']})",
        small["faults"] / max(huge["faults"], 1),
        100,
        peers={"4k pages": small["faults"], "huge pages": huge["faults"]},
        peer_unit="faults",
        bound=None
        if given
        else f"the kernel: it gave the region no huge pages (AnonHugePages 0 KiB, mode {huge['thp']})",
    )
    return [one_each, cut]


def goals(report: Report) -> list[dict[str, Any]]:
    """The issue's goals against this run's figures (the report's parts)."""
    parts = report.parts
    out = [*page_table_goals(parts["page_tables"]), *first_touch_goals(parts["first_touch"])]
    spawn = {r["model"]: r["seconds"] for r in parts["spawn"]}
    order = ["thread", "fork", "spawn"] + [m for m in ("dask worker",) if m in spawn]
    pairs = list(zip(order, order[1:], strict=False))
    ordered = sum(spawn[a] < spawn[b] for a, b in pairs)
    out.append(goal("spawn ordering " + " < ".join(order) + " (pairs in order)", ordered, len(pairs), unit="",
                    peers={m: spawn[m] for m in order}))  # fmt: skip
    most = max(parts["mmap"]["rows"], key=lambda r: r["tasks"])
    out.append(
        goal(
            f"mmap/munmap: {most['tasks']} threads slower than {most['tasks']} processes (threads' rate / processes')",
            most["threads_vs_processes"],
            1.0,
            better="lower",
            peers={"threads": most["threads_per_s"], "processes": most["processes_per_s"]},
            peer_unit="/s",
        )
    )
    if "recommendations" in parts:
        apps = {r["app"] for r in parts["applications"]}
        out.append(goal("a measured recommendation for each application (how many)", len(parts["recommendations"]),
                        len(apps), unit=""))  # fmt: skip
    return out


def side_by_side(parts: Mapping[str, Any], cores: int | None) -> list[dict[str, Any]]:
    """PiP's findings beside this run's figures, one row per finding: ``parts`` as a report's (page tables,
    first touch, spawn, mmap, by name), measured on ``cores`` cores."""
    tables = parts["page_tables"]
    by = {(r["model"], r["tasks"]): r["vmpte_kib"] for r in tables}
    most = max(r["tasks"] for r in tables)
    touch = {r["mode"]: r for r in parts["first_touch"]}
    spawn = {r["model"]: r["seconds"] for r in parts["spawn"]}
    contention = max(parts["mmap"]["rows"], key=lambda r: r["tasks"])
    return [
        {"finding (PiP)": "page tables grow linearly with processes (M x N entries)",
         "measured here": f"{most} processes: {by['processes', most] / max(by['processes', 1], 1):.2f}x one process's "
         f"VmPTE ({by['processes', most]} KiB)"},
        {"finding (PiP)": "threads share one page table (M entries)",
         "measured here": f"{most} threads: {by['threads', most] / max(by['threads', 1], 1):.2f}x one thread's VmPTE"},
        {"finding (PiP)": "a page fault every time a new 4 KiB page is touched",
         "measured here": f"{touch['4k pages']['faults_per_page']:.3f} faults per page, "
         f"{touch['4k pages']['ns_per_page']:.0f} ns per page"},
        {"finding (PiP)": "2 MiB pages: the per-page fault spikes vanish",
         "measured here": f"{touch['4k pages']['faults'] / max(touch['huge pages']['faults'], 1):.0f}x fewer faults "
         f"(transparent huge pages: {touch['huge pages']['thp']})"},
        {"finding (PiP)": "a thread spawns fastest; processes (fork&exec, posix_spawn) cost about the same",
         "measured here": f"thread {spawn['thread'] * 1e3:.3f} ms, fork {spawn['fork'] * 1e3:.2f} ms, posix_spawn of "
         f"Python {spawn['posix_spawn (python)'] * 1e3:.1f} ms"},
        {"finding (PiP)": "mmap/munmap: forked processes much faster than threads (10 tasks, 10 cores)",
         "measured here": f"{contention['tasks']} tasks on {cores} cores: processes "
         f"{1 / max(contention['threads_vs_processes'], 1e-9):.2f}x the threads' rate"},
    ]  # fmt: skip


SPAWN_COLUMNS = (
    Column("model", "model", "<28"),
    Column("ms", lambda r: r["seconds"] * 1e3, ">10.3f"),
    Column("x thread", "vs_thread", ">9.1f"),
    Column(" how", "how"),
)
TOUCH_COLUMNS = (
    Column("mode", "mode", "<14"),
    Column("faults", "faults", ">8"),
    Column("faults/page", "faults_per_page", ">11.3f"),
    Column("ns/page first", "ns_per_page", ">13.0f"),
    Column("ns/page mapped", "ns_per_page_mapped", ">14.0f"),
    Column("huge KiB", "huge_pages_kib", ">9"),
)
PAGE_TABLE_COLUMNS = (
    Column("model", "model", "<10"),
    Column("tasks", "tasks", ">5"),
    Column("VmPTE KiB", "vmpte_kib", ">9"),
    Column("x one task", "vs_one_task", ">10.2f"),
    Column("expected KiB", "expected_kib", ">12.0f"),
    Column("node PageTables KiB", "node_pagetables_kib", ">20"),
)
MMAP_COLUMNS = (
    Column("tasks", "tasks", ">5"),
    Column("threads /s", "threads_per_s", ">11.0f"),
    Column("processes /s", "processes_per_s", ">13.0f"),
    Column("threads/processes", "threads_vs_processes", ">17.2f"),
)
APPLICATION_COLUMNS = (
    Column("app", "app", "<10"),
    Column("configuration", "configuration", "<33"),
    Column("workers", lambda r: f"{r['workers']}x{r['threads']}", ">7"),
    Column("median s", "seconds", ">9.3f"),
    Column("x best", "time_vs_best", ">7.2f"),
    Column("PSS MiB", "peak_pss_mib", ">9.1f"),
    Column("x best", "memory_vs_best", ">7.2f"),
)
RECOMMENDATION_COLUMNS = (
    Column("recommended for", "app", "<15"),
    Column("configuration", "configuration", "<33"),
    Column(" why", "why"),
)
SIDE_BY_SIDE_COLUMNS = (Column("finding (PiP)", "finding (PiP)", "<82"), Column("measured here", "measured here"))


def format_report(report: Report) -> str:
    """The report as text: each measurement's table with its ratios, PiP's results beside, goals last."""
    m, p = report.machine or {}, report.parts
    one = {r["model"]: r["vmpte_kib"] for r in p["page_tables"] if r["tasks"] == 1}
    tables = [{**r, "vs_one_task": r["vmpte_kib"] / max(one[r["model"]], 1)} for r in p["page_tables"]]
    lines = [
        f"execution models, size {report.size}: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, "
        f"transparent huge pages: {m['thp']}",
        "",
        "spawn, to the first useful instruction",
        *table(SPAWN_COLUMNS, p["spawn"]),
        "PiP: " + PIP_PUBLISHED["spawn"],
        "",
        "first touch, one write per 4 KiB page",
        *table(TOUCH_COLUMNS, p["first_touch"]),
        "PiP: " + PIP_PUBLISHED["first_touch"],
        "",
        f"page tables for one shared segment of {p['page_tables'][0]['bytes'] // em.MiB} MiB read by every task "
        "(node PageTables: what the node's grew by)",
        *table(PAGE_TABLE_COLUMNS, tables),
        "PiP: " + PIP_PUBLISHED["page_tables"],
        "",
        f"mmap + first write + munmap of {p['mmap']['bytes']} B, {p['mmap']['iterations']} per task "
        f"(numba loop compiled in {p['mmap']['compile_s']:.2f} s, not timed)",
        *table(MMAP_COLUMNS, p["mmap"]["rows"]),
        "PiP: " + PIP_PUBLISHED["mmap"],
    ]
    if "applications" in p:
        lines += [
            "",
            "applications, per execution model (median s, peak PSS of the workers; x best: against the best "
            "configuration's)",
            *table(APPLICATION_COLUMNS, p["applications"]),
            "",
            *table(RECOMMENDATION_COLUMNS, p["recommendations"]),
        ]
    lines += ["", "PiP's findings, measured here", *table(SIDE_BY_SIDE_COLUMNS, p["pip_side_by_side"])]
    return text(lines, report)
