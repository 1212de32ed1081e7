"""``workbench bench store``: the active store's call cost and active vs non-active applications.

1. A null method (no arguments, returns ``None``), called sequentially (latency) and with many
   calls in flight (throughput: futures submitted together, or synchronous calls from 8 threads),
   through every path side by side:
   - the store, plain value: one direct message to the backend holding the object;
   - the store, future: a Dask task pinned to that backend (composable with other tasks);
   - a plain ``client.submit`` of a null function (Dask's own task cost, no object);
   - a Dask actor method call (Dask's built-in stateful workers);
   - dataClay 4.3.1, when installed with Redis (see :mod:`workbench.bench.dataclay_peer`).
2. histogram and k-means, ``active`` vs ``non-active``, through the experiment runner (same
   answers checked); the ratio is non-active time / active time.
Goals from the issue are printed next to the figures, never asserted.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from workbench import machine
from workbench.bench.goals import goal_lines
from workbench.lab.runner import run_experiment
from workbench.runtime.session import Session, start
from workbench.runtime.store import PersistentObject, Store, active
from workbench.runtime.store.handles import submit_active


class Null(PersistentObject):
    """An object whose method does nothing: what is left is the cost of the call."""

    @active
    def nothing(self) -> None:
        """Nothing: what is left is the cost of the call."""
        return None


def null_function() -> None:
    """A task that does nothing (Dask's own cost per task)."""
    return None


class NullActor:
    """A Dask actor with a method that does nothing (Dask's stateful-worker path)."""

    def nothing(self) -> None:
        """Nothing: what is left is the cost of the call."""
        return None


def _per_call(calls: int, run: Callable[[], Any]) -> float:
    """Seconds per call of ``run`` repeated ``calls`` times (after 20 warm-up calls)."""
    for _ in range(20):
        run()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def _in_flight(calls: int, submit_all: Callable[[int], list[Any]], wait: Callable[[list[Any]], Any]) -> float:
    wait(submit_all(20))
    start = time.perf_counter()
    wait(submit_all(calls))
    return (time.perf_counter() - start) / calls


def null_calls(session: Session, store: Store, calls: int = 2000) -> list[dict[str, Any]]:
    """Latency and throughput of a null call through each path, in ms per call."""
    client = session.client
    proxy = store.make_persistent(Null())
    worker = proxy.locations()[0]
    rows = []
    try:
        (resolved,) = store.resolve([proxy.ref])
        with ThreadPoolExecutor(8) as pool:  # value calls are synchronous: threads keep 8 in flight, as for dataClay
            rows.append(
                {
                    "path": "store: value (direct to the backend)",
                    "latency_ms": 1e3 * _per_call(calls, proxy.nothing.value),
                    "throughput_ms": 1e3
                    * _in_flight(
                        calls,
                        lambda n: [pool.submit(proxy.nothing.value) for _ in range(n)],
                        lambda fs: [f.result(timeout=session.timeout) for f in fs],
                    ),
                }
            )
        rows.append(
            {
                "path": "store: future (task pinned to the backend)",
                "latency_ms": 1e3
                * _per_call(max(calls // 10, 50), lambda: proxy.nothing().result(timeout=session.timeout)),
                "throughput_ms": 1e3
                * _in_flight(
                    calls,
                    lambda n: [
                        submit_active(store, resolved.ref, resolved.workers, "nothing", False, (), {}) for _ in range(n)
                    ],
                    session.gather,
                ),
            }
        )
        rows.append(
            {
                "path": "dask: client.submit (null task)",
                "latency_ms": 1e3
                * _per_call(
                    max(calls // 10, 50),
                    lambda: client.submit(null_function, pure=False, workers=[worker]).result(timeout=session.timeout),
                ),
                "throughput_ms": 1e3
                * _in_flight(
                    calls,
                    lambda n: [client.submit(null_function, pure=False, workers=[worker]) for _ in range(n)],
                    session.gather,
                ),
            }
        )
        actor = client.submit(NullActor, actor=True, workers=[worker]).result(timeout=session.timeout)
        rows.append(
            {
                "path": "dask: actor method",
                "latency_ms": 1e3 * _per_call(calls, lambda: actor.nothing().result(timeout=session.timeout)),
                "throughput_ms": 1e3
                * _in_flight(
                    calls,
                    lambda n: [actor.nothing() for _ in range(n)],
                    lambda fs: [f.result(timeout=session.timeout) for f in fs],
                ),
            }
        )
    finally:
        proxy.delete()
    return rows


def active_vs_non_active(session: Session, apps: Sequence[str], size: str, repeats: int) -> list[dict[str, Any]]:
    """Mean time of ``active`` and ``non-active`` per app and parameter point, and their ratio."""
    rows = []
    for app in apps:
        experiment = run_experiment(
            session, app, ["active", "non-active"], size=size, repeats=repeats, progress=False, baseline="active"
        )
        for point in experiment.points():
            means = experiment.summary(point).set_index("variant")
            a, n = means.loc["active"], means.loc["non-active"]
            rows.append(
                {
                    "app": app,
                    "parameters": {k: (v.item() if hasattr(v, "item") else v) for k, v in point.items()},
                    "active_s": float(a["mean_s"]),
                    "non_active_s": float(n["mean_s"]),
                    "ratio": float(n["mean_s"] / a["mean_s"]),
                    "active_bytes_moved": int(round(a["MB_moved"] * 1e6)),
                    "non_active_bytes_moved": int(round(n["MB_moved"] * 1e6)),
                }
            )
    return rows


def run(
    size: str = "lab",
    repeats: int = 3,
    calls: int = 2000,
    apps: Sequence[str] = ("histogram", "kmeans"),
    dataclay: bool = True,
    session: Session | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """The whole benchmark; a dict for ``--json`` and :func:`format_report`.

    ``workers``: local worker processes when no ``session`` is given (default: one per core).
    """
    owned = session is None
    with (
        contextlib.nullcontext(session) if session is not None else start(n_workers=workers, timeout=300) as session,
        tempfile.TemporaryDirectory(prefix="workbench-bench-store-") as directory,
    ):
        with Store(session, directory if owned else None) as store:  # a given session keeps its own store
            calls_rows = null_calls(session, store, calls)
            app_rows = active_vs_non_active(session, apps, size, repeats)
        workers = len(session.workers())
    peer: dict[str, Any] = {"available": False, "reason": "not asked for (--no-dataclay)"}
    if dataclay:
        from workbench.bench import dataclay_peer

        peer = dataclay_peer.measure(calls=calls)
    if peer.get("available"):
        calls_rows.append(
            {
                "path": "dataClay 4.3.1: active method",
                "latency_ms": peer["latency_ms"],
                "throughput_ms": peer.get("throughput_ms"),
            }
        )
    value = calls_rows[0]["latency_ms"]
    goals = [{"goal": "store null call latency <= 1 ms", "measured": value, "met": value <= 1.0}]
    if peer.get("available"):
        goals.append(
            {
                "goal": "store latency below dataClay's",
                "measured": value / peer["latency_ms"],
                "met": value < peer["latency_ms"],
            }
        )
    for row in app_rows:
        if row["app"] == "kmeans":
            goals.append(
                {
                    "goal": f"kmeans active >= 2x non-active at {row['parameters']}",
                    "measured": row["ratio"],
                    "met": row["ratio"] >= 2.0,
                }
            )
    return {
        "benchmark": "store",
        "size": size,
        "repeats": repeats,
        "calls": calls,
        "workers": workers,
        "null_calls": calls_rows,
        "applications": app_rows,
        "dataclay": peer,
        "goals": goals,
        "machine": machine.describe(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as the text tables the command prints, goals last."""
    lines = [
        f"{report['workers']} workers; null calls: {report['calls']} per path",
        "",
        f"{'path':<46} {'latency ms':>11} {'throughput ms/call':>19}",
    ]
    for r in report["null_calls"]:
        through = f"{r['throughput_ms']:.3f}" if r["throughput_ms"] is not None else "-"
        lines.append(f"{r['path']:<46} {r['latency_ms']:>11.3f} {through:>19}")
    if not report["dataclay"].get("available"):
        lines.append(f"dataClay: skipped ({report['dataclay'].get('reason')})")
    lines += [
        "",
        f"active vs non-active, size {report['size']}, mean of {report['repeats']} runs",
        f"{'app':<10} {'parameters':<32} {'active s':>9} {'non-active s':>13} {'non/active':>11} "
        f"{'MB moved active':>16} {'non-active':>11}",
    ]
    for r in report["applications"]:
        lines.append(
            f"{r['app']:<10} {str(r['parameters']):<32} {r['active_s']:>9.4f} {r['non_active_s']:>13.4f} "
            f"{r['ratio']:>11.2f} "
            f"{r['active_bytes_moved'] / 1e6:>16.2f} {r['non_active_bytes_moved'] / 1e6:>11.2f}"
        )
    lines.append("")
    lines += goal_lines(report["goals"])
    return "\n".join(lines)
