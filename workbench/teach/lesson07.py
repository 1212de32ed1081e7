"""Checks of lesson 07 · Execution models: faults per page, page tables, mmap contention."""

from __future__ import annotations

from typing import Any

import pandas as pd

from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

SIZES_MIB = (4, 16, 64)


@exercise(
    "07.1",
    answers=("faults_per_page",),
    hint="faults_per_page = {n: em.first_touch(n * 2**20, '4k pages')['faults_per_page'] for n in (4, 16, 64)}",
)
def faults_per_page_check(faults_per_page: Any) -> tuple:
    """Faults per page at 4, 16 and 64 MiB with 4 KiB pages: about one each, whatever the size."""
    if not isinstance(faults_per_page, dict) or set(faults_per_page) != set(SIZES_MIB):
        return not_yet(f"faults_per_page should map 4, 16 and 64 (MiB) to a number, got {faults_per_page!r:.80}")
    values = {n: number(v, f"faults_per_page[{n}]") for n, v in faults_per_page.items()}
    off = {n: v for n, v in values.items() if not 0.8 <= v <= 1.3}
    if off:
        n, v = next(iter(off.items()))
        return not_yet(
            f"{fmt(v)} faults per page at {n} MiB: with 4 KiB pages each first touch faults once; was it "
            "measured with the '4k pages' mode, and is it faults / pages (not faults)?"
        )
    return passed(
        f"about one fault per page at every size ({', '.join(fmt(v) for v in values.values())}): the cost "
        "is per page, not per byte"
    )


@exercise(
    "07.2",
    answers=("processes_mib", "threads_mib"),
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
            return not_yet(
                f"{name} is {fmt(got)}, but {fmt(per_byte * 1e3)} bytes of page table per kB mapped (measured) "
                f"gives {fmt(expected[name])} MiB",
                "threads share one page table; every process builds its own",
            )
    return passed(
        f"16 processes: about {fmt(expected['processes_mib'])} MiB of page tables; 16 threads: "
        f"{fmt(expected['threads_mib'])} MiB (one shared set)"
    )


@exercise(
    "07.3",
    answers=("processes_over_threads",),
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
            f"processes_over_threads is {fmt(got)}, but at {most['tasks']} tasks processes make {fmt(expected)}x "
            "the calls of threads" + (" (you divided threads by processes)" if inverted else "")
        )
    return passed(
        f"at {most['tasks']} tasks processes make {fmt(expected)}x the calls of threads: the threads share one "
        "memory map and its lock (the loop runs without the GIL)"
    )
