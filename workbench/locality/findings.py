"""The locality problems an observation proves: each a :class:`Finding` with its evidence and remedy.

Each kind is one pure function of an observation's records (:class:`workbench.locality.report.Report`)
and reports nothing where its evidence is below the thresholds named here:

``repeated-argument``
    The same large literal object (at least :data:`ARGUMENT_MIN_BYTES`, found by its fingerprint
    on the scheduler) rode in at least :data:`REPEATED_ARGUMENT_MIN_COPIES` task messages and in more
    messages than there are workers: it travels again with every task instead of once per worker.
    Remedy: a broadcast (``client.scatter(value, broadcast=True)``) or read-only shared memory (RRO),
    lesson 02. Saves the bytes of all copies but one per worker.
``tiny-tasks``
    A task group of at least :data:`TINY_TASKS_MIN_COUNT` tasks whose median task computes for less
    than :data:`TINY_TASK_SECONDS`: Dask's own cost per task (about 1 ms of the scheduler's and the
    worker's time, :data:`TASK_OVERHEAD_SECONDS`) is then a tenth of the work or more. Remedy: fewer, bigger
    blocks, or one task per worker's partition (SplIter), lessons 00 and 03. Saves about
    :data:`TASK_OVERHEAD_SECONDS` per task beyond one per worker thread per graph. One finding names
    every such group (``evidence["groups"]``, the most tasks first): a pipeline of tiny blocks makes
    tiny tasks in each of its steps, and one remedy (bigger blocks) mends them all.
``gather-to-client``
    Workers sent at least :data:`GATHER_MIN_BYTES` to the client (its gathers and ``compute`` results).
    Remedy: reduce where the data is and bring back only the result, lessons 03 and 08. Saves
    the bytes and the seconds those transfers took.
``remote-reads``
    A task group read at least :data:`REMOTE_READS_MIN_BYTES` from other workers (or as copies from
    the active store) and that is at least :data:`REMOTE_READS_MIN_SHARE` of all it read: the data
    went to the code. Store copies no more than one per worker are a broadcast argument's pieces
    reaching each worker once (the remedy of ``repeated-argument``), not counted. Remedy: the code
    to the data: tasks where their blocks are, SplIter partitions (lesson 03) or active methods
    (lesson 04). Saves the bytes and the seconds of those transfers.
``spill``
    Workers wrote at least :data:`SPILL_MIN_BYTES` of their memory to disk. Remedy: hold less at once,
    more memory per worker, or place the data on a tier on purpose (lesson 05). Saves the seconds of
    the disk writes and reads.
``imbalance``
    With two workers or more, the busiest worker's compute seconds per thread are at least
    :data:`IMBALANCE_MIN_RATIO` times the mean and at least :data:`IMBALANCE_MIN_SECONDS` above it.
    Remedy: blocks spread over the workers, no placement that pins work to one, or a balancing
    strategy (``split-balanced``, lesson 03; ``workbench bench balance``). Saves up to the busiest
    worker's excess over the mean.

A finding's ``saves_seconds`` and ``saves_bytes`` estimate what its remedy would save (None where
there is no measure); ``evidence`` holds the numbers that prove it (plain JSON values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import pandas as pd

from workbench.runtime import trace
from workbench.units import size_text


class Observed(Protocol):
    """What the rules read of an observation: its records and tables (a
    :class:`~workbench.locality.report.Report` is one; the rules import nothing of it)."""

    records: pd.DataFrame
    arguments: pd.DataFrame
    reads: pd.DataFrame
    workers: pd.DataFrame
    counts: dict[str, int]


KINDS = ("repeated-argument", "tiny-tasks", "gather-to-client", "remote-reads", "spill", "imbalance")

ARGUMENT_MIN_BYTES = 1_000_000  # an argument smaller than 1 MB costs little to resend
REPEATED_ARGUMENT_MIN_COPIES = 4  # and seen in fewer task messages than this is not reported
TASK_OVERHEAD_SECONDS = 0.001  # what each task costs beyond its work (Dask's docs: 200 us to 1 ms), for the estimate
# A task shorter than this pays a tenth of its time or more in that overhead (Dask's docs ask for 100 ms);
# the capstone's k-means tasks take about 0.3 ms at size ci and 8 ms at lab (32 blocks per worker, 2 workers).
TINY_TASK_SECONDS = 0.01
TINY_TASKS_MIN_COUNT = 100  # fewer tiny tasks than this cost under a tenth of a second in all
GATHER_MIN_BYTES = 4_000_000  # bytes to the client (4 MB): below, a gather costs a few milliseconds
REMOTE_READS_MIN_BYTES = 4_000_000  # bytes a task group read from elsewhere (4 MB)
REMOTE_READS_MIN_SHARE = 0.5  # ... and at least this share of all it read
SPILL_MIN_BYTES = 1_000_000  # bytes written to disk by the workers' memory (1 MB)
IMBALANCE_MIN_RATIO = 1.5  # the busiest worker's compute seconds per thread over the mean
IMBALANCE_MIN_SECONDS = 0.25  # ... and its excess over the mean, in seconds
MESSAGE_BYTES_PER_SECOND = 1e9  # pickling, sending and unpickling a large argument, about (for the estimate)

THRESHOLDS: dict[str, dict[str, float]] = {
    "repeated-argument": {"argument bytes": ARGUMENT_MIN_BYTES, "task messages": REPEATED_ARGUMENT_MIN_COPIES},
    "tiny-tasks": {"median task seconds below": TINY_TASK_SECONDS, "tasks in the group": TINY_TASKS_MIN_COUNT},
    "gather-to-client": {"bytes to the client": GATHER_MIN_BYTES},
    "remote-reads": {"bytes read from elsewhere": REMOTE_READS_MIN_BYTES, "share of all read": REMOTE_READS_MIN_SHARE},
    "spill": {"bytes written to disk": SPILL_MIN_BYTES},
    "imbalance": {"busiest over mean": IMBALANCE_MIN_RATIO, "seconds above the mean": IMBALANCE_MIN_SECONDS},
}

REMEDIES = {
    "repeated-argument": (
        "Send it to each worker once: client.scatter(value, broadcast=True) and pass the future to the tasks "
        "(or share it read-only in the node's memory, RRO). Lesson 02.",
        ("02",),
    ),
    "tiny-tasks": (
        "Give each task more work: fewer, bigger blocks (larger chunks), or one task per worker's partition "
        "of its co-located blocks (SplIter). Lessons 00 and 03.",
        ("00", "03"),
    ),
    "gather-to-client": (
        "Reduce where the data is and bring back only the result: x.sum().compute() or "
        "client.submit(combine, partials), not client.gather(blocks) and a sum in the notebook. If you need "
        "all of it here, this is its price. Lessons 03 and 08.",
        ("03", "08"),
    ),
    "remote-reads": (
        "Move the code to the data: run each task where its blocks are (no workers= that fights the "
        "placement; persist the blocks where they are read), one task per worker's partition (SplIter, lesson "
        "03) or an active method where the object lives (lesson 04). A one-off rechunk or shuffle pays this "
        "once; the same blocks moved every iteration pay it again each time. Lessons 03 and 04.",
        ("03", "04"),
    ),
    "spill": (
        "Hold less at once (persist fewer blocks, release futures you no longer need), give each worker more "
        "memory, or place the data on a slower tier on purpose and compute where it lies. Lesson 05.",
        ("05",),
    ),
    "imbalance": (
        "Spread the work: blocks placed evenly over the workers, no workers= that pins the work to a few, or "
        "a strategy that steals chunks of partitions from the busy workers (split-balanced, lesson 03; "
        "'workbench bench balance' measures it).",
        ("03", "balance"),
    ),
}


@dataclass(frozen=True)
class Finding:
    """One locality problem an observation proves.

    ``kind``: one of :data:`KINDS`; ``summary``: what was found, in one sentence with its numbers;
    ``evidence``: the numbers (bytes, counts, seconds, task groups or keys); ``remedy``: what to do,
    naming the lesson (``lessons``); ``saves_seconds`` / ``saves_bytes``: what the remedy would save,
    estimated (None: no measure of it).
    """

    kind: str
    summary: str
    evidence: dict[str, Any]
    remedy: str
    lessons: tuple[str, ...]
    saves_seconds: float | None = None
    saves_bytes: int | None = None
    saves: str = field(default="")

    def as_dict(self) -> dict[str, Any]:
        """The finding as plain values (JSON)."""
        return {**asdict(self), "lessons": list(self.lessons)}

    def __str__(self) -> str:
        return f"[{self.kind}] {self.summary}\n  saves: {self.saves}\n  remedy: {self.remedy}"


def _finding(
    kind: str, summary: str, evidence: dict[str, Any], seconds: float | None, nbytes: int | None, how: str
) -> Finding:
    remedy, lessons = REMEDIES[kind]
    parts = [f"about {seconds:.3g} s" if seconds is not None else "", f"{size_text(nbytes)}" if nbytes else ""]
    saves = " and ".join(p for p in parts if p) + (f" ({how})" if how else "")
    return Finding(kind, summary, evidence, remedy, lessons, seconds, nbytes, saves or how)


def _workers(report: Observed) -> list[str]:
    if not report.workers.empty:
        return list(report.workers.index)
    frame = report.records
    return sorted(set(frame.loc[frame["worker"] != trace.CLIENT, "worker"])) if not frame.empty else []


def _threads(report: Observed) -> dict[str, int]:
    """Threads per worker: the observation's, else the threads seen computing in the records."""
    if not report.workers.empty and "threads" in report.workers:
        return {w: max(int(t), 1) for w, t in report.workers["threads"].items()}
    computing = _compute(report)
    return {w: max(int(n), 1) for w, n in computing.groupby("worker")["thread"].nunique().items()}


def _compute(report: Observed) -> pd.DataFrame:
    frame = report.records
    if frame.empty:
        return frame
    return frame[(frame["action"] == "compute") & (frame["worker"] != trace.CLIENT)]


def repeated_argument(report: Observed) -> list[Finding]:
    """The same large object in many task messages (see the module)."""
    workers = max(len(_workers(report)), 1)
    found = []
    for row in report.arguments.itertuples(index=False):
        nbytes, copies = int(row.bytes), int(row.copies)
        if nbytes < ARGUMENT_MIN_BYTES or copies < REPEATED_ARGUMENT_MIN_COPIES or copies <= workers:
            continue
        groups = dict(row.groups)
        saved = (copies - workers) * nbytes
        found.append(
            _finding(
                "repeated-argument",
                f"the same {row.what} of {size_text(nbytes)} rode in {copies} task messages "
                f"({size_text(copies * nbytes)} in all) of the task groups {', '.join(sorted(groups))}, "
                f"for {workers} workers",
                {
                    "object": row.what,
                    "fingerprint": row.fingerprint,
                    "bytes": nbytes,
                    "task_messages": copies,
                    "bytes_in_task_messages": copies * nbytes,
                    "groups": groups,
                    "workers": workers,
                    "all_task_message_bytes": int(report.counts.get("task_message_bytes", 0)),
                },
                saved / MESSAGE_BYTES_PER_SECOND,
                saved,
                f"{copies - workers} copies not sent, at about {MESSAGE_BYTES_PER_SECOND / 1e9:g} GB/s",
            )
        )
    return found


def tiny_tasks(report: Observed) -> list[Finding]:
    """Task groups whose tasks are shorter than their overhead (see the module): one finding naming
    every such group, the most tasks first, each group's numbers in ``evidence["groups"]``."""
    compute = _compute(report)
    if compute.empty:
        return []
    threads = sum(_threads(report).values()) or 1
    graphs = dict(zip(report.reads["group"], report.reads["graphs"])) if not report.reads.empty else {}
    seconds = compute["stop"] - compute["start"]
    groups = {}
    for group, spans in seconds.groupby(compute["task"]):
        n, median = len(spans), float(spans.median())
        if n < TINY_TASKS_MIN_COUNT or median >= TINY_TASK_SECONDS:
            continue
        rounds = max(int(graphs.get(group, 1) or 1), 1)
        groups[str(group)] = {
            "tasks": n,
            "median_task_seconds": median,
            "compute_seconds": float(spans.sum()),
            "graphs": rounds,
            "tasks_per_graph": n / rounds,
            "fewer": max(n - rounds * threads, 0),
        }
    if not groups:
        return []
    groups = dict(sorted(groups.items(), key=lambda g: -g[1]["tasks"]))
    tasks, fewer = sum(g["tasks"] for g in groups.values()), sum(g["fewer"] for g in groups.values())
    named = ", ".join(
        f"{name!r} ({g['tasks']} tasks, {g['median_task_seconds'] * 1e3:.3g} ms median, {g['tasks_per_graph']:.0f} "
        "per graph)"
        for name, g in list(groups.items())[:3]
    ) + (f" and {len(groups) - 3} more groups" if len(groups) > 3 else "")
    return [
        _finding(
            "tiny-tasks",
            f"{tasks} tasks computed for less than {TINY_TASK_SECONDS * 1e3:g} ms each (median per group), "
            f"against the ~{TASK_OVERHEAD_SECONDS * 1e3:g} ms each task costs the scheduler and worker, for "
            f"{threads} worker threads: {named}",
            {
                "tasks": tasks,
                "median_task_seconds": float(seconds[compute["task"].astype(str).isin(groups)].median()),
                "compute_seconds": sum(g["compute_seconds"] for g in groups.values()),
                "worker_threads": threads,
                "groups": groups,
            },
            fewer * TASK_OVERHEAD_SECONDS,
            None,
            f"{fewer} tasks fewer (one per worker thread per graph) at ~{TASK_OVERHEAD_SECONDS * 1e3:g} ms each",
        )
    ]


def gather_to_client(report: Observed) -> list[Finding]:
    """Bytes the workers sent to the client (see the module)."""
    frame = report.records
    if frame.empty:
        return []
    sent = frame[(frame["worker"] == trace.CLIENT) & (frame["action"] == "transfer")]
    nbytes = int(sent["bytes"].sum())
    if nbytes < GATHER_MIN_BYTES:
        return []
    seconds = float((sent["stop"] - sent["start"]).sum())
    groups = {str(g): int(b) for g, b in sent.groupby("task")["bytes"].sum().sort_values(ascending=False).items()}
    return [
        _finding(
            "gather-to-client",
            f"the workers sent {size_text(nbytes)} to the client in {len(sent)} transfers "
            f"({seconds:.3g} s), of {', '.join(list(groups)[:5])}",
            {
                "bytes": nbytes,
                "transfers": len(sent),
                "seconds": seconds,
                "groups": groups,
                "from_workers": sorted(set(sent["source"])),
            },
            seconds,
            nbytes,
            "the transfers' own time, all but the result's bytes",
        )
    ]


STORE_COPY = "store-get "  # the task of an active-store copy record begins so (workbench.runtime.store.table)


def remote_reads(report: Observed) -> list[Finding]:
    """Task groups that read most of their input from elsewhere (see the module)."""
    frame = report.records
    if frame.empty:
        return []
    moves = frame[(frame["action"] == "transfer") & (frame["worker"] != trace.CLIENT) & (frame["source"] != "")]
    store = moves["task"].str.startswith(STORE_COPY)
    remote = moves[store | (moves["source"] != moves["worker"])]
    copied = store[remote.index]
    remote = remote.assign(group=[t[len(STORE_COPY) :] if c else t for t, c in zip(remote["task"], copied)])
    reads = dict(zip(report.reads["group"], report.reads["dependency_bytes"])) if not report.reads.empty else {}
    workers = max(len(_workers(report)), 1)
    found = []
    for group, rows in remote.groupby("group"):
        copies = rows["task"].str.startswith(STORE_COPY)
        if 0 < copies.sum() <= workers:  # one store copy per worker: a broadcast argument's pieces, the remedy
            rows = rows[~copies]
        nbytes = int(rows["bytes"].sum())
        read = max(int(reads.get(group, 0)), nbytes)
        share = nbytes / read if read else 0.0
        if nbytes < REMOTE_READS_MIN_BYTES or share < REMOTE_READS_MIN_SHARE:
            continue
        seconds = float((rows["stop"] - rows["start"]).sum())
        copies = rows["task"].str.startswith(STORE_COPY)
        found.append(
            _finding(
                "remote-reads",
                f"the tasks of {group!r} read {size_text(nbytes)} ({share:.0%} of what they read) from "
                f"elsewhere in {len(rows)} transfers",
                {
                    "group": group,
                    "bytes": nbytes,
                    "share": share,
                    "read_bytes": read,
                    "transfers": len(rows),
                    "seconds": seconds,
                    "store_copy_bytes": int(rows.loc[copies, "bytes"].sum()),
                    "sources": sorted(set(rows["source"])),
                    "keys_moved_again": int(report.counts.get("keys_moved_again", 0)),
                    "bytes_moved_again": int(report.counts.get("bytes_moved_again", 0)),
                },
                seconds,
                nbytes,
                "the transfers' own time",
            )
        )
    return found


def spill(report: Observed) -> list[Finding]:
    """Memory the workers spilled to disk (see the module)."""
    workers = report.workers
    if workers.empty or "disk_write_bytes" not in workers:
        return []
    written = int(workers["disk_write_bytes"].sum())
    if written < SPILL_MIN_BYTES:
        return []
    seconds = float(workers["disk_write_seconds"].sum() + workers["disk_read_seconds"].sum())
    read = int(workers["disk_read_bytes"].sum())
    return [
        _finding(
            "spill",
            f"the workers spilled {size_text(written)} of their memory to disk "
            f"({int(workers['disk_write_count'].sum())} writes) and read {size_text(read)} back",
            {
                "bytes_written": written,
                "writes": int(workers["disk_write_count"].sum()),
                "bytes_read": read,
                "reads": int(workers["disk_read_count"].sum()),
                "seconds": seconds,
                "per_worker_bytes_written": {w: int(b) for w, b in workers["disk_write_bytes"].items() if b},
                "memory_limits": {w: int(b) for w, b in workers["memory_limit"].items()},
            },
            seconds,
            written + read,
            "the disk writes' and reads' own time",
        )
    ]


def imbalance(report: Observed) -> list[Finding]:
    """Workers' busy time spread (see the module)."""
    threads = _threads(report)
    if len(threads) < 2:
        return []
    compute = _compute(report)
    busy = (compute["stop"] - compute["start"]).groupby(compute["worker"]).sum() if not compute.empty else pd.Series()
    per_thread = {w: float(busy.get(w, 0.0)) / n for w, n in threads.items()}
    mean = sum(per_thread.values()) / len(per_thread)
    busiest = max(per_thread, key=per_thread.__getitem__)
    top = per_thread[busiest]
    if top < IMBALANCE_MIN_RATIO * mean or top - mean < IMBALANCE_MIN_SECONDS:
        return []
    return [
        _finding(
            "imbalance",
            f"worker {busiest} computed for {top:.3g} s per thread, {top / mean:.3g}x the mean of "
            f"{mean:.3g} s over {len(per_thread)} workers",
            {
                "busy_seconds_per_thread": per_thread,
                "busiest": busiest,
                "ratio": top / mean,
                "mean_seconds": mean,
            },
            top - mean,
            None,
            "the busiest worker's excess over the mean, at most",
        )
    ]


RULES: dict[str, Callable[[Observed], list[Finding]]] = {
    "repeated-argument": repeated_argument,
    "tiny-tasks": tiny_tasks,
    "gather-to-client": gather_to_client,
    "remote-reads": remote_reads,
    "spill": spill,
    "imbalance": imbalance,
}


def find(report: Observed) -> list[Finding]:
    """Every finding of ``report``, the largest estimated saving first (seconds, then bytes)."""
    found = [f for kind in KINDS for f in RULES[kind](report)]
    return sorted(found, key=lambda f: (-(f.saves_seconds or 0.0), -(f.saves_bytes or 0)))
