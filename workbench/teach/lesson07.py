"""Checks of lesson 07 · Execution models: faults per page, page tables, mmap contention."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

SIZES_MIB = (4, 16, 64)


TOUCH_KEYS = {"mode", "bytes", "pages", "faults", "faults_per_page", "ns_per_page"}


def _touches(value: Any) -> dict[int, dict[str, Any]]:
    """The learner's first-touch records by size in MiB (records of em.first_touch, a list or a DataFrame)."""
    if isinstance(value, pd.DataFrame):
        value = value.reset_index().to_dict("records")
    if not isinstance(value, (list, tuple)) or not all(isinstance(r, dict) and TOUCH_KEYS <= set(r) for r in value):
        raise AnswerError(
            "`touches` should be the records that em.first_touch returns, one per size (a list of them, or a "
            f"DataFrame made from them), got {type(value).__name__}"
        )
    by_size = {int(r["bytes"]) // 2**20: r for r in value}
    if set(by_size) != set(SIZES_MIB) or any(int(r["bytes"]) != n * 2**20 for n, r in by_size.items()):
        raise AnswerError(f"`touches` should hold one record for each of 4, 16 and 64 MiB, got sizes {sorted(by_size)}")
    return by_size


@exercise(
    "07.1",
    answers=("touches", "faults_per_page"),
    concept="the first write to a page of fresh memory makes the kernel find and map a page: a page fault, one "
    "per page, not per byte",
    hint="em.first_touch takes a size in bytes and a mode (the modes are in em.TOUCH_MODES) and returns a record "
    "with the pages, the faults and the time per page; measure each size once and read faults_per_page off the "
    "records",
)
def faults_per_page_check(touches: Any, faults_per_page: Any) -> tuple:
    """Faults per page at 4, 16 and 64 MiB with 4 KiB pages, read off the learner's own measurements."""
    records = _touches(touches)
    modes = {r["mode"] for r in records.values()}
    if modes != {"4k pages"}:
        return not_yet(f"touches was measured in the mode(s) {sorted(modes)}: this exercise asks for '4k pages'")
    for n, r in records.items():
        if int(r["pages"]) != int(r["bytes"]) // 4096 or not np.isclose(r["faults_per_page"], r["faults"] / r["pages"]):
            return not_yet(f"the record for {n} MiB is not one that em.first_touch measured (its figures disagree)")
    if not isinstance(faults_per_page, dict) or set(faults_per_page) != set(SIZES_MIB):
        return not_yet(f"faults_per_page should map 4, 16 and 64 (MiB) to a number, got {faults_per_page!r:.80}")
    values = {n: number(v, f"faults_per_page[{n}]") for n, v in faults_per_page.items()}
    for n, v in values.items():
        measured = float(records[n]["faults_per_page"])
        if not np.isclose(v, measured, rtol=1e-6, atol=1e-9):
            counted = np.isclose(v, float(records[n]["faults"]))
            return not_yet(
                f"faults_per_page[{n}] is {fmt(v)}, which is not what your measurement of {n} MiB says"
                + (" (that is the faults, not faults per page)" if counted else "")
            )
    off = {n: v for n, v in values.items() if not 0.8 <= v <= 1.3}
    if off:
        n, v = next(iter(off.items()))
        return not_yet(
            f"{fmt(v)} faults per page at {n} MiB: far from one per page. Was something else touching memory? "
            "Measure again"
        )
    per_page = ", ".join(f"{n} MiB {float(records[n]['ns_per_page']):.0f} ns" for n in SIZES_MIB)
    return passed(
        f"about one fault per page at every size ({', '.join(fmt(v) for v in values.values())}) and a time per page "
        f"of {per_page}: the cost is per page, not per byte"
    )


@exercise(
    "07.2",
    answers=("processes_mib", "threads_mib"),
    concept="each process that maps memory needs its own page tables for it; threads of one process share one set",
    hint="from the one-process row of tables: page-table bytes per mapped byte = vmpte_kib * 1024 / bytes; "
    "16 processes each need that for 4 GiB, 16 threads share one set",
)
def page_table_estimate(processes_mib: Any, threads_mib: Any, tables: Any) -> tuple:
    """Page-table MiB for 16 processes and 16 threads mapping 4 GiB, scaled from the measured ratio."""
    frame = pd.DataFrame(tables)
    one = frame[(frame["model"] == "processes") & (frame["tasks"] == 1)]
    if one.empty:
        raise AnswerError("tables has no one-process row: run the page_tables cell of the lesson first")
    per_byte = float(one.iloc[0]["vmpte_kib"]) * 1024 / float(one.iloc[0]["bytes"])
    expected_threads = per_byte * 4 * 2**30 / 2**20
    expected = {"processes_mib": 16 * expected_threads, "threads_mib": expected_threads}
    for name, value in (("processes_mib", processes_mib), ("threads_mib", threads_mib)):
        got = number(value, name)
        if not close(got, expected[name], 0.15):
            shared = name == "processes_mib" and close(got, expected["threads_mib"], 0.15)
            return not_yet(
                f"{name} is {fmt(got)} MiB, which is not what the page-table bytes per mapped byte measured in tables "
                "give for 4 GiB" + (" (that is one shared set, as threads have)" if shared else ""),
                "threads share one page table; every process builds its own",
            )
    return passed(
        f"16 processes: about {fmt(expected['processes_mib'])} MiB of page tables; 16 threads: "
        f"{fmt(expected['threads_mib'])} MiB (one shared set)"
    )


@exercise(
    "07.3",
    answers=("processes_over_threads",),
    concept="compare the two execution models at the most tasks, as a ratio of calls per second",
    hint="take the row of contention['rows'] with the largest 'tasks' and divide processes_per_s by threads_per_s",
)
def mmap_contention_ratio(processes_over_threads: Any, contention: Any) -> tuple:
    """Processes' mmap/munmap rate over threads' at the most tasks measured."""
    most = max(contention["rows"], key=lambda r: r["tasks"])
    expected = most["processes_per_s"] / most["threads_per_s"]
    got = number(processes_over_threads, "processes_over_threads")
    if not close(got, expected, 0.05):
        inverted = close(1 / got, expected, 0.05) if got else False
        return not_yet(
            f"processes_over_threads is {fmt(got)}, which is not processes' calls per second over threads' at the "
            f"most tasks measured ({most['tasks']})" + (" (you divided threads by processes)" if inverted else "")
        )
    return passed(
        f"at {most['tasks']} tasks processes make {fmt(expected)}x the calls of threads: the threads share one "
        "memory map and its lock (the loop runs without the GIL)"
    )
