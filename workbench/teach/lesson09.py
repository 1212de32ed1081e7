"""Checks of lesson 09 · Node-level locality: the stride of a column walk, the best transpose tile,
workers pinned one core each.

Each check recomputes the answer from the lesson's own data (the tables the learner's notebook
measured, or the live workers), so a hand-typed number only passes if it is what was measured; a
"not yet" says what is wrong without the expected value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

TOLERANCE = 0.05  # a ratio read from the table, rounded by hand to two digits, is within 5 %


def _rows(table: Any, name: str, keys: Sequence[str]) -> list[Mapping[str, Any]]:
    """The records of a lesson table (a list of dicts, as the lab functions return them)."""
    if hasattr(table, "to_dict"):  # a DataFrame made from the records
        table = table.reset_index().to_dict("records") if table.index.name else table.to_dict("records")
    if not isinstance(table, Sequence) or not table or not all(isinstance(r, Mapping) for r in table):
        raise AnswerError(f"`{name}` should be the lesson's table (a list of records): run the lesson's cells first")
    missing = [k for k in keys if k not in table[0]]
    if missing:
        raise AnswerError(f"`{name}` has no {missing} column: pass the table the lesson measured")
    return list(table)


def _power_of_two(order: int) -> bool:
    return order > 0 and order & (order - 1) == 0


def _order(rows: Sequence[Mapping[str, Any]], power_of_two: bool) -> int:
    """The lesson's order of one kind (a power of two or not); the first order when it has none of it."""
    orders = list(dict.fromkeys(int(r["order"]) for r in rows))
    chosen = [o for o in orders if _power_of_two(o) == power_of_two]
    return chosen[0] if chosen else orders[0]


def _whole(value: Any, name: str) -> int:
    got = number(value, name)
    if got != int(got):
        raise AnswerError(f"`{name}` should be a whole number, got {value!r}")
    return int(got)


@exercise(
    "09.1",
    answers=("column_slowdown", "column_stride_bytes"),
    concept="a matrix stored by rows keeps the neighbours of a row next to each other in memory; walking down "
    "a column jumps a whole row between two loads, so every load needs a cache line of its own",
    hint="use the rows of the walks table for the order that is not a power of two: the seconds of the columns "
    "walk over those of the rows walk, and the stride as the distance in bytes between two consecutive loads "
    "(a float64 is 8 bytes; stride_bytes is a column of that table)",
)
def stride_slowdown(column_slowdown: Any, column_stride_bytes: Any, walks: Any) -> tuple:
    """The column walk's time over the row walk's at the lesson's first order, and its stride in bytes."""
    rows = _rows(walks, "walks", ("order", "walk", "seconds", "stride_bytes"))
    order = _order(rows, power_of_two=False)
    seconds = {(int(r["order"]), r["walk"]): float(r["seconds"]) for r in rows}
    if (order, "rows") not in seconds or (order, "columns") not in seconds:
        raise AnswerError(f"`walks` lacks the rows or the columns walk at order {order}: run the traversal cell again")
    expected = seconds[order, "columns"] / seconds[order, "rows"]
    got = number(column_slowdown, "column_slowdown")
    if not close(got, expected, TOLERANCE):
        others = [
            o
            for (o, w) in seconds
            if w == "rows" and o != order and close(got, seconds[o, "columns"] / seconds[o, "rows"], TOLERANCE)
        ]
        if got > 0 and close(1 / got, expected, TOLERANCE):
            return not_yet("column_slowdown is upside down: it is the row walk's time over the column walk's")
        if others:
            return not_yet(
                f"column_slowdown is the ratio at order {others[0]}; the exercise asks about order {order}, whose "
                "rows do not fall into the same few cache sets"
            )
        return not_yet(
            f"column_slowdown ({fmt(got)}) is not what the walks table gives at order {order}: divide the column "
            "walk's median seconds by the row walk's, both at that order"
        )
    stride = _whole(column_stride_bytes, "column_stride_bytes")
    if stride != order * 8:
        if stride == order:
            return not_yet("column_stride_bytes counts elements, not bytes: how many bytes is one float64?")
        if stride == 8:
            return not_yet("column_stride_bytes is the row walk's stride: the column walk moves down one row per load")
        return not_yet(
            f"column_stride_bytes ({stride}) is not the distance between two consecutive loads of the column walk "
            f"at order {order}: how many elements, and so bytes, lie between a[i, j] and a[i + 1, j]?"
        )
    lines = 64 // 8
    return passed(
        f"by columns the sum is {fmt(expected)}x slower: each load is {stride} bytes after the one before, on a "
        f"cache line of its own, so the core uses 8 bytes of every 64-byte line it fetches (the row walk uses all "
        f"{lines} elements of a line, and the compiler can add them with SIMD)"
    )


@exercise(
    "09.2",
    answers=("best_tile", "tiled_speedup"),
    concept="a tile small enough that the lines it touches in both matrices stay in the fastest cache lets each "
    "fetched line be used fully before it is evicted; too small a tile pays the loop overhead, too big a tile "
    "no longer fits",
    hint="in the tiles table keep the rows of the power-of-two order; the tiled ones have a tile below that "
    "order; compare their seconds, and divide the untiled row's seconds by the fastest tiled row's (the "
    "vs_untiled column holds that ratio for every row)",
)
def best_tile_check(best_tile: Any, tiled_speedup: Any, tiles: Any) -> tuple:
    """The fastest tile at the lesson's power-of-two order, and how much faster than untiled it is."""
    rows = _rows(tiles, "tiles", ("order", "tile", "seconds"))
    order = _order(rows, power_of_two=True)
    at_order = {int(r["tile"]): float(r["seconds"]) for r in rows if r["order"] == order}
    tiled = {t: s for t, s in at_order.items() if t < order}
    if order not in at_order or not tiled:
        raise AnswerError(f"`tiles` lacks the untiled or the tiled runs at order {order}: run the transpose cell again")
    fastest = min(tiled, key=tiled.get)
    tile = _whole(best_tile, "best_tile")
    if tile == order:
        return not_yet(f"a tile of {order} is the whole matrix at order {order}: that is the untiled transpose")
    if tile not in tiled:
        return not_yet(f"no run at order {order} used tile {tile}: pick one of the tiles the table holds")
    if tile != fastest:
        slower = "slower" if tiled[tile] > tiled[fastest] else "not the fastest"
        return not_yet(
            f"tile {tile} is {slower} than another tile at order {order} in your table: compare the seconds of "
            "every tiled row at that order"
        )
    expected = at_order[order] / tiled[fastest]
    got = number(tiled_speedup, "tiled_speedup")
    if not close(got, expected, TOLERANCE):
        if got > 0 and close(1 / got, expected, TOLERANCE):
            return not_yet("tiled_speedup is upside down: it is the tiled time over the untiled time")
        return not_yet(
            f"tiled_speedup ({fmt(got)}) is not what the tiles table gives: the untiled transpose's seconds over "
            f"those of tile {tile}, both at order {order}"
        )
    return passed(
        f"tile {fastest} is fastest at order {order}, {fmt(expected)}x the untiled speed: the untiled walk needs "
        f"{order} lines of A at once, and at a power of two they fall into the same few cache sets; a tile's "
        f"{fastest} rows of A share one L1 set too, which holds as many lines as L1 has ways (the caches table): "
        "a tile with no more rows than that keeps its lines in L1 while their elements are used"
    )


def _cores(value: Any, where: str) -> set[int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise AnswerError(f"{where} should be a set of core numbers, got {value!r:.60}")
    cores = set()
    for core in value:
        if isinstance(core, bool) or number(core, where) != int(core):
            raise AnswerError(f"{where} should hold whole core numbers, got {core!r}")
        cores.add(int(core))
    return cores


@exercise(
    "09.3",
    answers=("worker_cores",),
    concept="pinning restricts the cores a process may run on; workers that each run one task at a time are "
    "kept apart, and in place, by one core each",
    hint="map each address of session.workers() to a set of one core from os.sched_getaffinity(0), a "
    "different core per worker, give that dict to nl.CoreAffinity and register it with "
    "session.client.register_plugin; then read the cores back with nl.worker_affinity(session)",
)
def pinned_workers(worker_cores: Any, session: Any) -> tuple:
    """Each worker pinned to one core of its own, as the learner read it back from the workers."""
    from workbench.lab import node_locality

    if not isinstance(worker_cores, Mapping):
        raise AnswerError(
            f"`worker_cores` should be a dict from worker address to cores, got {type(worker_cores).__name__}"
        )
    workers = session.workers()
    if sorted(map(str, worker_cores)) != sorted(workers):
        return not_yet("worker_cores should name every worker of the session by its address, and no other")
    answer = {str(w): _cores(c, f"worker_cores[{w!r}]") for w, c in worker_cores.items()}
    live = node_locality.worker_affinity(session)
    differ = [w for w in workers if answer[w] != set(live[w])]
    if differ:
        return not_yet(
            f"worker {differ[0]} reports other cores than yours: read the cores back from the workers after "
            "pinning them"
        )
    wide = [w for w in workers if len(live[w]) > 1]
    if wide:
        return not_yet(f"worker {wide[0]} may still run on more than one core: each worker should get one core")
    distinct = {frozenset(live[w]) for w in workers}
    available = len({c for w in workers for c in live[w]} | os.sched_getaffinity(0))
    if len(distinct) < len(workers) and available >= len(workers):
        return not_yet("two workers share one core while another core is free: give each worker a core of its own")
    return passed(
        "each worker runs on one core of its own ("
        + ", ".join(f"{w.rsplit(':', 1)[-1]}: {sorted(live[w])[0]}" for w in workers)
        + "): the kernel will not move them, and they do not compete for a core"
    )
