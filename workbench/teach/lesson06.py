"""Checks of lesson 06 · Array channels: a fan-out, the payload where channels pay, reductions."""

from __future__ import annotations

from typing import Any

from workbench.runtime.channels import run_group
from workbench.teach.answers import AnswerError, close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

GROUP_TIMEOUT = 20.0  # seconds a rank waits for another; a deadlock ends as a "not yet" within about 90 s
RANKS = 3


@exercise(
    "06.1",
    answers=("fan_out",),
    concept="a put into a rank's channel waits until that rank has taken it; every rank but the sender takes from"
    " the sender",
    hint="every rank makes the same channel with rank.channel (a name, 1000 elements, float64); rank 0 fills its "
    "buffer and calls put once per other rank (rank.size says how many); each other rank calls take with the "
    "sender's number and returns the sum of what it received, as a float",
)
def fan_out_group(fan_out: Any, session: Any) -> tuple:
    """Run the learner's ``fan_out`` on three ranks: ranks 1 and 2 return 1000.0."""
    if not callable(fan_out):
        return not_yet(f"fan_out should be a function of one rank, got {type(fan_out).__name__}")
    results = run_group(session, fan_out, ranks=RANKS, timeout=GROUP_TIMEOUT).results
    wrong = [r for r in range(1, RANKS) if results[r] is None or number(results[r], f"rank {r}'s result") != 1000.0]
    if wrong:
        return not_yet(
            f"ranks returned {results}; ranks 1 and 2 should each return 1000.0 (the sum of the 1000 ones they took)"
        )
    return passed(f"ranks returned {results}: rank 0's buffer reached every other rank")


def _ratios(curves: Any) -> dict[int, float]:
    """Channels' throughput over eager's at each payload both curves measured."""
    channels = {r["nbytes"]: r["MBps"] for r in curves["channels"]}
    eager = {r["nbytes"]: r["MBps"] for r in curves["eager"]}
    return {n: channels[n] / eager[n] for n in sorted(eager) if n in channels}


@exercise(
    "06.2",
    answers=("ratio_at_smallest", "ratio_at_largest"),
    concept="compare the two transports payload by payload, as a ratio of throughputs measured at the same "
    "payloads: where a fixed cost per message dominates, and where the cost per byte does",
    hint="curves holds one list of rows per transport, each row with nbytes and MBps; divide channels' MBps by "
    "eager's at the smallest and at the largest payload that both lists measured",
)
def gap_by_payload(ratio_at_smallest: Any, ratio_at_largest: Any, curves: Any) -> tuple:
    """Channels over eager at the smallest and at the largest payload both measured."""
    ratios = _ratios(curves)
    if not ratios:
        raise AnswerError("curves has no payload measured by both channels and eager: run the ping-pong cell first")
    ends = {"ratio_at_smallest": min(ratios), "ratio_at_largest": max(ratios)}
    channels = {r["nbytes"]: r["MBps"] for r in curves["channels"]}
    for name, value in (("ratio_at_smallest", ratio_at_smallest), ("ratio_at_largest", ratio_at_largest)):
        payload, got = ends[name], number(value, name)
        expected = ratios[payload]
        if close(got, expected, 0.05):
            continue
        if got and close(1 / got, expected, 0.05):
            why = " (upside down: channels over eager, not eager over channels)"
        elif close(got, channels[payload], 0.05):
            why = " (that is channels' throughput itself, not a ratio)"
        else:
            other = next((n for n, r in ratios.items() if n != payload and close(got, r, 0.05)), None)
            why = f" (that is the ratio at {other} B)" if other is not None else ""
        return not_yet(f"{name} is {fmt(got)}, which is not channels / eager at {payload} B in curves{why}")
    small, large = ratios[ends["ratio_at_smallest"]], ratios[ends["ratio_at_largest"]]
    return passed(
        f"channels are {fmt(small)}x eager at {ends['ratio_at_smallest']} B and {fmt(large)}x at "
        f"{ends['ratio_at_largest']} B: "
        + (
            "small messages cost a fixed price each (eager: a round trip through Dask's comm stack; channels: a flag "
            "in shared memory), large ones their copies (eager: serialize, a new array, copy in; channels: one copy)"
        )
    )


@exercise(
    "06.3",
    answers=("extremes",),
    concept="an allreduce leaves the result on every rank; a reduce returns it on the root alone, and reduces in "
    "place on its way there",
    hint="a channel of one int64 element per rank, its buffer set to the rank's number; the channel's allreduce "
    "and reduce take the operation's name ('max', 'min') and reduce a root; set the buffer again between the two "
    "collectives, since both work in place",
)
def reductions(extremes: Any, session: Any) -> tuple:
    """Run the learner's ``extremes``: every rank sees max 2; root 1 gets min 0, the others None."""
    if not callable(extremes):
        return not_yet(f"extremes should be a function of one rank, got {type(extremes).__name__}")
    results = run_group(session, extremes, ranks=RANKS, timeout=GROUP_TIMEOUT).results
    if not all(isinstance(r, (tuple, list)) and len(r) >= 2 for r in results):
        return not_yet(f"ranks returned {results}; each should return (largest, smallest or None, ...)")
    largest = [number(r[0], f"rank {i}'s largest") for i, r in enumerate(results)]
    if largest != [RANKS - 1] * RANKS:
        return not_yet(f"allreduce('max') gave {largest}; every rank should see the largest rank, {RANKS - 1}")
    smallest = [None if r[1] is None else number(r[1], f"rank {i}'s smallest") for i, r in enumerate(results)]
    if smallest[1] != 0 or smallest[0] is not None or smallest[2] is not None:
        return not_yet(f"reduce('min', root=1) gave {smallest}; rank 1 should get 0 and the others None")
    return passed(
        f"max {RANKS - 1} on every rank, min 0 on root 1 only; the other ranks' buffers hold partial results "
        "of the tree (it reduces in place on the way up), where MPI_Reduce leaves every send buffer untouched and "
        "writes the result into a separate receive buffer on the root"
    )
