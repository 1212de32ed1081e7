"""``with observe(client) as seen:`` around any Dask work; ``seen.report`` afterwards.

The block may hold any Dask work: arrays, dataframes, delayed, futures, the workbench's applications
or the user's own code, on the cluster of a workbench session or of any ``distributed.Client``. While
it runs, a scheduler plugin (:class:`workbench.locality.watch.Watch`) notes each graph, the large
arguments inside task messages, each finished task and what it read; after it, the workers' transfer
logs (incoming: between workers; outgoing: to the client), the workbench's own events, the batched
streams' message and byte counters (those :mod:`workbench.runtime.counts` reads) and each worker's
memory and spill are read in one call to the scheduler and one to the workers (as they are at the
start), and :class:`~workbench.locality.report.Report` holds them with the findings they prove.

The watch is removed when the block ends, whether it raised or not, and removes itself when the
observing client leaves the scheduler (closed inside the block, or its kernel died); a block that
raised has no report (its exception goes on). Observations do not nest: one watch per cluster at a
time. The watch is on the scheduler, so it records every client's work there during the block; work
submitted in the block and not waited for (``persist``) is named in the report as still running.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pandas as pd
from distributed import Client

import workbench.locality.watch as watch
import workbench.runtime.dask_seam as dask_seam
from workbench.locality.report import ARGUMENT_COLUMNS, READ_COLUMNS, WORKER_COLUMNS, Report
from workbench.runtime import counts, trace


def _client_of(target: Any) -> Client:
    """The ``distributed.Client`` of a workbench session, or the client itself; a clear error for anything else."""
    client = target if isinstance(target, Client) else getattr(target, "client", None)
    if not isinstance(client, Client):
        cluster = hasattr(target, "scheduler_address")  # a LocalCluster or any other Dask cluster object
        raise TypeError(
            f"observe needs a workbench session (workbench.start(...)) or a distributed.Client, got "
            f"{type(target).__name__}: "
            + (
                "pass Client(cluster), the client your Dask work runs on"
                if cluster
                else "pass the client your Dask work runs on"
            )
        )
    if client.status in ("closing", "closed"):
        raise ValueError("observe was given a closed client: start a new session or Client first")
    return client


def _scheduler_now(dask_scheduler: Any = None) -> dict[str, Any]:
    """On the scheduler, in one call: what the watch recorded (None: no watch) and the batched streams'
    counters (messages and bytes it sent to workers)."""
    return {
        "watch": watch.collect_here(dask_scheduler),
        "messages": dask_seam.scheduler_messages_sent(dask_scheduler),
        "task_message_bytes": dask_seam.scheduler_bytes_sent(dask_scheduler),
    }


def _worker_now(since: float | None, dask_worker: Any = None) -> dict[str, Any]:
    """On a worker, in one call: its threads, memory limit, process memory, spill counters and messages
    sent; with ``since``, its incoming and outgoing transfers from then on."""
    import psutil

    return {
        "threads": dask_seam.worker_threads(dask_worker),
        "memory_limit": int(dask_seam.worker_memory_limit(dask_worker) or 0),
        "rss": int(psutil.Process().memory_info().rss),
        "messages": dask_seam.worker_messages_sent(dask_worker),
        **dask_seam.spill_counters(dask_worker),
        "incoming": dask_seam.incoming_transfers(dask_worker, since) if since is not None else [],
        "outgoing": dask_seam.outgoing_transfers(dask_worker, since) if since is not None else [],
    }


class Observation:
    """One observed block (what :func:`observe` returns): enter it once; ``report`` after it ends."""

    def __init__(self, target: Any) -> None:
        self.client = _client_of(target)
        self._report: Report | None = None
        self._state = "new"  # new -> open -> done (a report) or failed (the block raised)

    @property
    def report(self) -> Report:
        """The observed work's :class:`~workbench.locality.report.Report` (after the block)."""
        if self._report is None:
            raise RuntimeError(
                {
                    "new": "nothing observed yet: use it as `with observe(client) as seen: ...`, then seen.report",
                    "open": "the report is made when the with-block ends: read seen.report after it",
                    "failed": "the observed block raised, so there is no report: fix the work and observe it again",
                }.get(self._state, "no report")
            )
        return self._report

    def __enter__(self) -> Observation:
        if self._state != "new":
            raise RuntimeError("this observation was used already: call observe(client) again for another block")
        before = self.client.run_on_scheduler(_scheduler_now)
        if before["watch"] is not None:
            raise RuntimeError(
                "this cluster is being observed already (a nested observe, or another one still open): "
                "observe the outer block only, then read its report; if none is open (a kernel restarted inside "
                f"a block), remove the one left behind: client.unregister_scheduler_plugin({watch.PLUGIN_NAME!r})"
            )
        self.client.register_plugin(watch.Watch(owner=self.client.id), name=watch.PLUGIN_NAME)
        try:
            self._before = {**before, "workers": self.client.run(_worker_now, None)}
        except BaseException:
            self._unwatch()
            raise
        self._pending_before = _pending(self.client)
        self._state = "open"
        self._since = time.time()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        stop = time.time()
        try:
            if exc_type is None and self.client.status in ("closing", "closed"):
                raise RuntimeError(
                    "the client was closed inside the observed block, so there is no report: close it after the "
                    "with block (the watch went with the client)"
                )
            if exc_type is None:
                self._report = self._read(stop)
        finally:
            self._unwatch()
            self._state = "done" if self._report is not None else "failed"

    def _unwatch(self) -> None:
        try:
            self.client.unregister_scheduler_plugin(watch.PLUGIN_NAME)
        except Exception:  # noqa: BLE001 (a closed or lost scheduler has no watch left to remove)
            pass

    def _read(self, stop: float) -> Report:
        """Everything the block left in the watch, the workers' logs and the counters, as a report."""
        since, before = self._since, self._before
        now = self.client.run_on_scheduler(_scheduler_now)
        workers = self.client.run(_worker_now, since)
        seen = now["watch"] or {}
        incoming = {w: state["incoming"] for w, state in workers.items()}
        outgoing = {w: state["outgoing"] for w, state in workers.items()}
        records = trace.from_task_stream(seen.get("stream", []), incoming)
        records += trace.worker_events(self, since) + trace.to_client(outgoing)
        arrivals = Counter((key, worker) for worker, log in incoming.items() for t in log for key in t["keys"])
        sizes = {key: n for log in incoming.values() for t in log for key, n in t["keys"].items()}
        again = [(key, n - 1) for (key, _), n in arrivals.items() if n > 1]
        graphs = [counts.Graph(*g) for g in seen.get("graphs", [])]
        frame = trace.normalise(records)
        to_client = frame[(frame["worker"] == trace.CLIENT) & (frame["action"] == "transfer")] if len(frame) else frame
        report_counts = {
            "tasks": sum(g.tasks for g in graphs),
            "dependencies": sum(g.dependencies for g in graphs),
            "graphs": len(graphs),
            "messages": now["messages"]
            + sum(w["messages"] for w in workers.values())
            - before["messages"]
            - sum(w["messages"] for w in before["workers"].values()),
            "task_message_bytes": now["task_message_bytes"] - before["task_message_bytes"],
            "bytes_moved": int(sum(t["total"] for log in incoming.values() for t in log)),
            "bytes_to_client": int(to_client["bytes"].sum()) if len(to_client) else 0,
            "keys_moved_again": len(again),
            "bytes_moved_again": int(sum(sizes[key] * extra for key, extra in again)),
            "dropped_tasks": int(seen.get("dropped", 0)),
            "watch_microseconds": int(seen.get("spent", 0.0) * 1e6),
            "pending_at_end": len(_pending(self.client) - self._pending_before),
        }
        arguments = pd.DataFrame(
            [{"fingerprint": f, **a} for f, a in seen.get("arguments", {}).items()], columns=list(ARGUMENT_COLUMNS)
        )
        group_graphs = seen.get("group_graphs", {})
        reads = pd.DataFrame(
            [
                {"group": g, "tasks": r[0], "dependency_bytes": r[1], "graphs": group_graphs.get(g, 0)}
                for g, r in seen.get("reads", {}).items()
            ],
            columns=list(READ_COLUMNS),
        )
        return Report(
            records=frame if len(frame) else pd.DataFrame(columns=list(trace.FIELDS)),
            arguments=arguments,
            reads=reads,
            workers=_workers_table(before["workers"], workers),
            counts=report_counts,
            start=since,
            stop=stop,
        )


def _pending(client: Client) -> set[Any]:
    """The keys of this client's futures not yet computed: work a block submitted (``persist``,
    ``submit``) and did not wait for goes on after it, unobserved."""
    return {key for key, state in list(client.futures.items()) if state.status == "pending"}


def _workers_table(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per worker at the block's end: threads, memory limit, memory before and after, what it spilled meanwhile."""
    rows = {}
    for worker, now in after.items():
        then = before.get(worker, {})
        row = {"threads": now["threads"], "memory_limit": now["memory_limit"]}
        row["rss_before"], row["rss_after"] = then.get("rss", now["rss"]), now["rss"]
        for way in ("write", "read"):
            for unit in ("bytes", "count", "seconds"):
                name = f"disk-{way}-{unit}"
                row[f"disk_{way}_{unit}"] = now[name] - then.get(name, 0.0)
        rows[worker] = row
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(WORKER_COLUMNS))
    table.index.name = "worker"
    return table.sort_index()


def observe(session_or_client: Any) -> Observation:
    """Observe the Dask work of a ``with`` block on this session's (or client's) cluster::

        with observe(client) as seen:
            x.sum().compute()          # any Dask work: arrays, dataframes, delayed, futures
        seen.report                    # shows its findings and figures in a notebook
        seen.report.findings           # [Finding(kind="tiny-tasks", summary=..., evidence={...}, ...)]

    ``session_or_client``: a workbench session or a ``distributed.Client``. See
    :mod:`workbench.locality` for what is recorded and :mod:`workbench.locality.findings` for the kinds.
    """
    return Observation(session_or_client)
