"""Dynamic placement across tiers (thesis §7.1.8, left there as future work).

Under a DRAM budget per backend, objects are ranked by what their use was measured to be:
written objects first (a write to a mapped file must be made durable, one to DRAM costs
nothing more), then by reuse (reads), then smaller first (more objects per byte of budget). The
ranked objects take DRAM while it lasts; every other object stays, or goes, to ``mapped``, where
code still runs in place on it. Each decision carries its reason in words, which the backend
writes into the trace with the move.

Moves cost a copy of the object, so the policy makes none that its counts do not justify:

* an object already in DRAM keeps its place against one on ``mapped`` read fewer than
  ``hot_reads`` times more (objects used alike differ by a read or so in the middle of a pass
  over them: without this, each one turning hot would push out another, a copy each way, and
  nothing gained once the pass ends);
* a cold object already in DRAM (not used yet, or read less than ``hot_reads`` times) stays while
  the budget has room for it: moving it to ``mapped`` gains nothing until a hotter object needs
  the room;
* a cold object on ``mapped`` is never copied into DRAM: read once, it streams from ``mapped`` at
  the cost of that copy.

Pure: usages in, decisions out, so it is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """What one object's use was measured to be on its backend."""

    key: str
    nbytes: int
    reads: int
    writes: int
    tier: str


@dataclass(frozen=True)
class Decision:
    """Move ``key`` to ``tier``, because ``reason``."""

    key: str
    tier: str
    reason: str


@dataclass(frozen=True)
class DynamicPolicy:
    """Hot (read at least ``hot_reads`` times, or written) objects in DRAM within ``budget`` bytes;
    cold ones (read fewer times, never written) in place on ``mapped``, unless already in DRAM with
    room to spare. See the module for why an object in DRAM keeps its place against near-equals.
    ``hot_tier`` and ``cold_tier`` name the two tiers (``dram`` and ``mapped``)."""

    budget: int
    hot_reads: int = 2
    hot_tier: str = "dram"  # where hot objects go, within the budget
    cold_tier: str = "mapped"  # where cold ones stay, used in place

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0:
            raise ValueError(f"the DRAM budget is a number of bytes >= 0, got {self.budget!r}")
        if isinstance(self.hot_reads, bool) or not isinstance(self.hot_reads, int) or self.hot_reads < 1:
            raise ValueError(f"hot_reads is a count >= 1, got {self.hot_reads!r}")

    def hot(self, reads: int, writes: int) -> bool:
        """Whether an object used so is hot (written, or read at least ``hot_reads`` times)."""
        return writes > 0 or reads >= self.hot_reads

    def rank(self, usage: Usage) -> tuple[int, int, int, int, int, str]:
        """``usage``'s place in the queue for DRAM (smallest first): written ones first, more writes,
        then more reads, an object in DRAM credited ``hot_reads - 1`` reads (so another must be read
        ``hot_reads`` times more to take its place, and wins no tie), then smaller, then by key."""
        resident = usage.tier == self.hot_tier
        credited = usage.reads + (self.hot_reads - 1 if resident else 0)
        return (-(usage.writes > 0), -usage.writes, -credited, -resident, usage.nbytes, usage.key)

    def decide(self, usages: Sequence[Usage]) -> list[Decision]:
        """The moves that put every object where the policy wants it (objects already there: none);
        demotions first, so DRAM is freed before it is filled."""
        wanting = [u for u in usages if self.hot(u.reads, u.writes) or u.tier == self.hot_tier]
        used = 0
        demotions, promotions = [], []
        for usage in sorted(wanting, key=self.rank):
            if used + usage.nbytes <= self.budget:
                used += usage.nbytes
                if usage.tier != self.hot_tier:
                    promotions.append(
                        Decision(
                            usage.key,
                            self.hot_tier,
                            f"{self._use(usage)}: hot, and it fits the DRAM budget ({used} of {self.budget} B)",
                        )
                    )
            elif usage.tier == self.hot_tier:
                demotions.append(Decision(usage.key, self.cold_tier, self._leaves(usage)))
        return demotions + promotions

    def _use(self, usage: Usage) -> str:
        """The measured use of ``usage`` in words, for a decision's reason."""
        if usage.writes:
            return f"written {usage.writes}x, read {usage.reads}x"
        if self.hot(usage.reads, usage.writes):
            return f"reused: read {usage.reads}x"
        return "not used yet" if usage.reads == 0 else f"read {usage.reads}x, never written"

    def _leaves(self, usage: Usage) -> str:
        """Why an object in DRAM goes to ``mapped``: objects ranked before it fill the budget."""
        if self.hot(usage.reads, usage.writes):
            return f"{self._use(usage)}, but objects ranked before it fill the DRAM budget ({self.budget} B)"
        return f"{self._use(usage)}: cold, and the DRAM budget ({self.budget} B) is full: in place"
