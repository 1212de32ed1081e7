"""Checks of lesson 06 · Array channels: a fan-out, the payload where channels pay, reductions."""

from __future__ import annotations

from typing import Any

from workbench.runtime.channels import run_group
from workbench.teach.answers import fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

GROUP_TIMEOUT = 20.0  # seconds a rank waits for another; a deadlock ends as a "not yet" within about 90 s
RANKS = 3


@exercise(
    "06.1",
    answers=("fan_out",),
    hint="channel = rank.channel('fan', 1000, np.float64); rank 0 fills channel.buffer with ones and "
    "put()s to ranks 1..size-1; the others return float(channel.take(0).sum())",
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


@exercise(
    "06.2",
    answers=("smallest_2x_payload",),
    hint="divide channels' MBps by eager's MBps at each payload of curves both have; the smallest payload "
    "where the ratio is 2 or more (None if there is none)",
)
def where_channels_pay(smallest_2x_payload: Any, curves: Any) -> tuple:
    """The smallest payload (bytes) at which channels are at least twice eager's throughput."""
    channels = {r["nbytes"]: r["MBps"] for r in curves["channels"]}
    eager = {r["nbytes"]: r["MBps"] for r in curves["eager"]}
    ratios = {n: channels[n] / eager[n] for n in sorted(eager) if n in channels}
    expected = min((n for n, r in ratios.items() if r >= 2), default=None)
    if smallest_2x_payload is None or expected is None:
        if smallest_2x_payload is expected:
            return passed("right: channels never reach twice eager's throughput on this run")
        if expected is None:
            return not_yet(f"no payload reaches 2x here (best {fmt(max(ratios.values()))}x), so the answer is None")
        return not_yet(f"None, but at {expected} B channels are {fmt(ratios[expected])}x eager")
    value = number(smallest_2x_payload, "smallest_2x_payload")
    if value != int(value):
        return not_yet(f"smallest_2x_payload should be a whole number of bytes, got {value}")
    got = int(value)
    if got == expected:
        return passed(f"from {expected} B on, channels are at least twice eager ({fmt(ratios[expected])}x there)")
    if got in ratios and ratios[got] < 2:
        return not_yet(f"at {got} B channels are only {fmt(ratios[got])}x eager")
    if got in ratios:
        return not_yet(f"{got} B reaches 2x, but so does {expected} B, which is smaller")
    return not_yet(f"{got} B is not one of the payloads measured ({sorted(ratios)})")


@exercise(
    "06.3",
    answers=("extremes",),
    hint="put rank.rank in a 1-element int64 channel's buffer; allreduce('max')[0] on every rank; put it "
    "back, then reduce('min', root=1) returns the result on rank 1 and None elsewhere",
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
        "of the tree (it reduces in place on the way up)"
    )
