"""Trace records: one schema for Dask's task stream and the workbench's own events.

A record says who did what, when, with how many bytes: ``worker`` (address, or "client"),
``thread`` (index within that worker), ``task`` (the task's name prefix), ``key``, ``action``
(compute, transfer, deserialize, disk-read, disk-write, and the workbench's own: shm-create,
shm-attach, table-hit, tier-read, ...), ``start``/``stop`` (epoch seconds), ``bytes``,
``source`` (the worker data came from, for transfers), ``node``.

Records first, figures second (as distributed's own diagnostics do): summaries and the
Chrome/Perfetto export are plain functions of a list of records.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

FIELDS = ("worker", "thread", "task", "key", "action", "start", "stop", "bytes", "source", "node")
EVENT_TOPIC = "workbench-trace"  # Dask event topic for records emitted on workers
CLIENT = "client"


def record(
    action: str,
    start: float,
    stop: float,
    *,
    worker: str = CLIENT,
    thread: int = 0,
    task: str = "",
    key: str = "",
    nbytes: int = 0,
    source: str = "",
    node: str = "",
) -> dict[str, Any]:
    """One trace record with every field of the schema."""
    return dict(
        worker=worker,
        thread=thread,
        task=task,
        key=key,
        action=action,
        start=float(start),
        stop=float(stop),
        bytes=int(nbytes),
        source=source,
        node=node,
    )


def emit(
    action: str, start: float, stop: float, *, task: str = "", key: str = "", nbytes: int = 0, source: str = ""
) -> None:
    """Record a workbench event from inside a task (shm-create, tier-read, ...).

    On a worker it goes to the scheduler's event log under ``EVENT_TOPIC`` (Dask's own
    ``log_event``), from which :func:`worker_events` collects it; elsewhere it is dropped.
    """
    import threading

    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return
    worker.log_event(
        EVENT_TOPIC,
        record(
            action,
            start,
            stop,
            worker=worker.address,
            thread=threading.get_ident(),
            task=task,
            key=key,
            nbytes=nbytes,
            source=source,
        ),
    )


def task_key(name: str) -> str:
    """A fresh task key whose prefix (what task streams and Gantt charts show, :func:`task_name`) is
    ``name``: strategies and the store name every task they submit with it."""
    return f"{name}-{uuid.uuid4().hex}"


def task_name(key: Any) -> str:
    """The task prefix of a Dask key (``('histogram-points-ab12', 3, 0)`` -> ``histogram-points``)."""
    from dask.utils import key_split

    return key_split(key)


def from_task_stream(
    stream: Iterable[dict[str, Any]], incoming_transfers: dict[str, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Records from Dask task-stream entries; transfer bytes from the workers' incoming-transfer logs.

    ``incoming_transfers`` maps a worker address to its ``transfer_incoming_log`` entries
    (``who``, ``start``, ``stop``, ``total``). A task stream's transfer span covers the fetches
    its task waited for; the bytes are those of the logged transfers from the same source
    whose middle falls inside that span.
    """
    incoming_transfers = incoming_transfers or {}
    records = []
    for entry in stream:
        worker = entry.get("worker", "")
        for span in entry.get("startstops", ()):
            nbytes = 0
            source = span.get("source", "")
            if span["action"] == "transfer":
                nbytes = sum(
                    t.get("total", 0)
                    for t in incoming_transfers.get(worker, ())
                    if t.get("who") == source
                    and span["start"] - 1e-3 <= (t["start"] + t["stop"]) / 2 <= span["stop"] + 1e-3
                )
            elif span["action"] == "compute":
                nbytes = int(entry.get("nbytes", 0) or 0)  # size of the result
            records.append(
                record(
                    span["action"],
                    span["start"],
                    span["stop"],
                    worker=worker,
                    thread=int(entry.get("thread", 0) or 0),
                    task=task_name(entry["key"]),
                    key=str(entry["key"]),
                    nbytes=nbytes,
                    source=source,
                )
            )
    return records


def incoming_transfer_logs(session: Any, since: float) -> dict[str, list[dict[str, Any]]]:
    """Each worker's incoming transfers that started after ``since`` (epoch seconds)."""
    return session.run(_incoming_transfers_since, since)


def _incoming_transfers_since(since: float, dask_worker: Any = None) -> list[dict[str, Any]]:
    from distributed import get_worker

    import workbench.runtime.dask_seam as dask_seam

    return dask_seam.incoming_transfers(dask_worker or get_worker(), since)


def to_client(outgoing: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Transfer records of the bytes workers sent to a client (``outgoing``: worker address -> the entries
    of ``dask_seam.outgoing_transfers``): on the "client" row, ``source`` the worker that sent them,
    ``task`` the prefix of the first key sent. A send to a peer worker is left out (its receiver's
    incoming log records it)."""
    workers = set(outgoing)
    return [
        record(
            "transfer",
            t["start"],
            t["stop"],
            task=task_name(next(iter(t["keys"]))) if t.get("keys") else "gather",
            key=str(next(iter(t["keys"]))) if t.get("keys") else "",
            nbytes=int(t["total"]),
            source=worker,
        )
        for worker, sent in outgoing.items()
        for t in sent
        if t.get("who") not in workers
    ]


def worker_events(session: Any, since: float) -> list[dict[str, Any]]:
    """Workbench records emitted on workers (see :func:`emit`) since ``since``."""
    return [msg for stamp, msg in session.client.get_events(EVENT_TOPIC) if stamp >= since and isinstance(msg, dict)]


def normalise(records: Sequence[dict[str, Any]], nodes: dict[str, str] | None = None) -> pd.DataFrame:
    """A DataFrame with the schema's columns, thread ids replaced by small indexes per worker.

    Thread idents are large opaque numbers; the Gantt wants "thread 0, thread 1" of each worker.
    """
    frame = pd.DataFrame(list(records), columns=list(FIELDS))
    if frame.empty:
        return frame
    frame["thread"] = frame.groupby("worker")["thread"].rank(method="dense").astype(int) - 1
    if nodes:
        frame["node"] = frame["worker"].map(nodes).fillna(frame["node"])
    return frame.sort_values("start", kind="stable").reset_index(drop=True)


def summary_by_action(frame: pd.DataFrame) -> pd.DataFrame:
    """Per action: count, total seconds, bytes."""
    frame = frame.assign(seconds=frame["stop"] - frame["start"])
    return frame.groupby("action").agg(count=("action", "size"), seconds=("seconds", "sum"), bytes=("bytes", "sum"))


def bytes_moved(frame: pd.DataFrame) -> pd.DataFrame:
    """Matrix of bytes transferred: rows are sources, columns destinations (workers)."""
    moves = frame[(frame["action"] == "transfer") & (frame["source"] != "")]
    workers = sorted(set(frame["worker"]) | set(moves["source"]))
    matrix = moves.pivot_table(index="source", columns="worker", values="bytes", aggfunc="sum", fill_value=0)
    return matrix.reindex(index=workers, columns=workers, fill_value=0).astype(int)


def to_perfetto(frame: pd.DataFrame, name: str = "workbench run") -> dict[str, Any]:
    """The records as Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing).

    One process per worker, one thread per worker thread, complete events ("X") in microseconds
    from the first record.
    """
    events: list[dict[str, Any]] = []
    if frame.empty:
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"name": name}}
    origin = frame["start"].min()
    pids = {worker: i + 1 for i, worker in enumerate(sorted(frame["worker"].unique()))}
    for worker, pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": worker}})
    for row in frame.itertuples(index=False):
        events.append(
            {
                "ph": "X",
                "name": row.task or row.action,
                "cat": row.action,
                "pid": pids[row.worker],
                "tid": int(row.thread),
                "ts": (row.start - origin) * 1e6,
                "dur": max(row.stop - row.start, 0.0) * 1e6,
                "args": {"key": row.key, "bytes": int(row.bytes), "source": row.source, "node": row.node},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"name": name}}


def write(frame: pd.DataFrame, path: Path, name: str = "workbench run") -> tuple[Path, Path]:
    """Write ``path`` (records as JSON) and ``path.perfetto.json`` beside it; returns both paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    records_path = path.with_suffix(".json")
    perfetto_path = path.with_suffix(".perfetto.json")
    records_path.write_text(frame.to_json(orient="records"))
    perfetto_path.write_text(json.dumps(to_perfetto(frame, name)))
    return records_path, perfetto_path


def read(path: Path) -> pd.DataFrame:
    """Records written by :func:`write`."""
    return pd.DataFrame(json.loads(Path(path).read_text()), columns=list(FIELDS))


class Recorder:
    """Collects a run's client-side records: named phases and events (shown on the "client" row)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.phases: dict[str, float] = {}

    def event(
        self, action: str, start: float, stop: float, *, task: str = "", nbytes: int = 0, source: str = ""
    ) -> None:
        """Record one event that happened in the client (its start, end, bytes, task)."""
        self.records.append(record(action, start, stop, task=task, nbytes=nbytes, source=source))

    def phase(self, name: str) -> _Phase:
        """``with recorder.phase("reduce"):`` adds the block's wall time to the phase ``name``."""
        return _Phase(self, name)


class _Phase:
    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def __enter__(self) -> _Phase:
        self.start = time.time()
        return self

    def __exit__(self, *exc_info: object) -> None:
        stop = time.time()
        self.recorder.phases[self.name] = self.recorder.phases.get(self.name, 0.0) + stop - self.start
        self.recorder.event(f"phase:{self.name}", self.start, stop, task=self.name)
