"""``workbench bench store-scale``: the active store from 10^2 to 10^5 objects and 10^3 to 10^4 blocks.

At each count, in a fresh store: ``make_persistent_many`` of small objects (seconds per object),
``store.locations`` of all of them (one catalogue query), the latency of a direct ``.value()`` call (on
one object, with all the others held), reopening the store on its catalogue (a restart), and the
scheduler's memory per catalogued object; then ``persist_blocks`` of an already persisted Dask
array cut into 10^3 ... 10^4 blocks that do not move. Goals (issue 12) are printed next to the
figures, never asserted.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import dask.array as da
from distributed import futures_of

from workbench import machine
from workbench.bench.goals import goal
from workbench.bench.opening import bench_session, checked_size
from workbench.bench.progress import Progress
from workbench.bench.report import Column, Report, setting, table, text
from workbench.runtime.session import Session
from workbench.runtime.store import PersistentObject, Store, active

OBJECTS = {"ci": (100, 1_000), "lab": (100, 1_000, 10_000, 100_000), "full": (10, 100, 1_000, 10_000, 100_000)}
BLOCKS = {"ci": (100, 1_000), "lab": (1_000, 10_000), "full": (1_000, 10_000)}


class Tiny(PersistentObject):
    """A one-attribute object: what is measured is the store's cost per object, not the data."""

    def __init__(self, value: int):
        self.value = value

    @active
    def get(self) -> int:
        """The value (a null call that returns something)."""
        return self.value


def _scheduler_rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _latency_ms(call: Any, calls: int) -> float:
    for _ in range(20):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return 1e3 * (time.perf_counter() - start) / calls


def objects_at(session: Session, count: int, calls: int = 300) -> dict[str, Any]:
    """Registration, location, call latency, restart and memory at ``count`` objects, in a fresh store."""
    with tempfile.TemporaryDirectory(prefix="workbench-bench-scale-") as directory:
        store = Store(session, directory)
        try:
            gc.collect()
            before = session.run_on_scheduler(_scheduler_rss)
            start = time.perf_counter()
            proxies = store.make_persistent_many([Tiny(i) for i in range(count)])
            persist_s = time.perf_counter() - start
            memory = session.run_on_scheduler(_scheduler_rss) - before
            start = time.perf_counter()
            where = store.locations(proxies)
            locations_s = time.perf_counter() - start
            if len(where) != count or not all(where):
                raise AssertionError(f"store.locations found {sum(map(bool, where))} of {count} objects")
            probe = proxies[count // 2]
            latency = _latency_ms(probe.get.value, calls)
            if probe.get.value() != count // 2:
                raise AssertionError("the probe object answered another value")
        finally:
            store.close()
        start = time.perf_counter()
        reopened = Store(session, directory)  # the catalogue is read back from SQLite
        restart_s = time.perf_counter() - start
        try:
            catalogued = len(reopened.objects())
        finally:
            reopened.close()
    return {
        "objects": count,
        "make_persistent_many_s": persist_s,
        "per_object_ms": 1e3 * persist_s / count,
        "locations_s": locations_s,
        "value_latency_ms": latency,
        "restart_s": restart_s,
        "catalogued_after_restart": catalogued,
        "scheduler_bytes_per_object": memory / count,
    }


def blocks_at(session: Session, count: int) -> dict[str, Any]:
    """``persist_blocks`` of a persisted array of ``count`` blocks (they stay where they are)."""
    array = session.client.persist(da.ones((count * 8, 4), chunks=(8, 4)))
    session.wait(futures_of(array))
    with tempfile.TemporaryDirectory(prefix="workbench-bench-scale-") as directory, Store(session, directory) as store:
        start = time.perf_counter()
        collection = store.persist_blocks(array)
        seconds = time.perf_counter() - start
        if len(collection) != count:
            raise AssertionError(f"persist_blocks made {len(collection)} of {count} blocks")
        collection.delete()
    return {"blocks": count, "persist_blocks_s": seconds, "per_block_ms": 1e3 * seconds / count}


def scale_goals(object_rows: list[dict[str, Any]], block_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 12's goals at the counts that ran (each measured once: no noise); the 10^5-object and
    10^4-block goals are left out when those counts did not run."""
    goals = []
    by_objects = {r["objects"]: r for r in object_rows}
    by_blocks = {r["blocks"]: r for r in block_rows}
    if 10_000 in by_blocks:
        goals.append(
            goal(
                "persist_blocks of 10,000 blocks", by_blocks[10_000]["persist_blocks_s"], 0.5, better="lower", unit="s"
            )
        )
    if 100_000 in by_objects:
        top = by_objects[100_000]
        goals += [
            goal("make_persistent_many of 10^5 objects", top["make_persistent_many_s"], 5.0, better="lower", unit="s"),
            goal("locations of 10^5 objects", 1e3 * top["locations_s"], 100.0, better="lower", unit="ms"),
            goal("restart with 10^5 catalogued objects", top["restart_s"], 2.0, better="lower", unit="s"),
        ]
    if len(object_rows) > 1:
        smallest, top = object_rows[0], object_rows[-1]
        goals.append(
            goal(
                f".value() latency at {top['objects']} objects within 20 % of {smallest['objects']} (ratio)",
                top["value_latency_ms"] / smallest["value_latency_ms"],
                1.2,
                better="lower",
                peers={
                    f"{smallest['objects']} objects": smallest["value_latency_ms"],
                    f"{top['objects']} objects": top["value_latency_ms"],
                },
                peer_unit="ms",
            )
        )
    return goals


def run(
    size: str = "lab",
    objects: Sequence[int] | None = None,
    blocks: Sequence[int] | None = None,
    session: Session | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """The whole benchmark: a row per count of objects, the blocks' rows in ``parts["blocks"]``, the goals."""
    checked_size(size, OBJECTS)
    progress = progress or Progress.quiet()
    objects = tuple(objects or OBJECTS[size])
    blocks = tuple(blocks or BLOCKS[size])
    with bench_session(session, workers, timeout=600) as session:
        object_rows, block_rows = [], []
        with progress.phase("objects", len(objects)) as phase:
            for n in objects:
                object_rows.append(objects_at(session, n))
                phase.step(f"{n} objects")
        with progress.phase("blocks", len(blocks)) as phase:
            for n in blocks:
                block_rows.append(blocks_at(session, n))
                phase.step(f"{n} blocks")
        workers = len(session.workers())
    goals = scale_goals(object_rows, block_rows)
    return Report(
        "store-scale", size, goals, object_rows, {"blocks": block_rows}, workers=workers, machine=machine.describe()
    )


OBJECT_COLUMNS = (
    Column("objects", "objects", ">8"),
    Column("persist s", "make_persistent_many_s", ">10.3f"),
    Column("ms/object", "per_object_ms", ">10.3f"),
    Column("locations ms", lambda r: 1e3 * r["locations_s"], ">12.2f"),
    Column(".value() ms", "value_latency_ms", ">12.3f"),
    Column("restart s", "restart_s", ">10.3f"),
    Column("B/object", "scheduler_bytes_per_object", ">9.0f"),
)
BLOCK_COLUMNS = (
    Column("blocks", "blocks", ">8"),
    Column("persist_blocks s", "persist_blocks_s", ">17.3f"),
    Column("ms/block", "per_block_ms", ">9.3f"),
)


def format_report(report: Report) -> str:
    """The report as the text tables the command prints, goals last."""
    lines = [setting(report), *table(OBJECT_COLUMNS, report.rows), "", *table(BLOCK_COLUMNS, report.parts["blocks"])]
    return text(lines, report)
