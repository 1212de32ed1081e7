"""Dynamic placement across tiers (thesis §7.1.8, left there as future work).

Under a DRAM budget per backend, objects are ranked by what their use was measured to be:
written objects first (a write to a mapped file must be made durable, one to DRAM costs
nothing more), then by reuse (reads), then smaller first (more objects per byte of budget). The
ranked objects take DRAM while it lasts; every other object stays, or goes, to ``mapped``, where
code still runs in place on it. Each decision carries its reason in words, which the backend
writes into the trace with the move.

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
    cold ones (read once or never) in place on ``mapped``."""

    budget: int
    hot_reads: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0:
            raise ValueError(f"the DRAM budget is a number of bytes >= 0, got {self.budget!r}")
        if isinstance(self.hot_reads, bool) or not isinstance(self.hot_reads, int) or self.hot_reads < 1:
            raise ValueError(f"hot_reads is a count >= 1, got {self.hot_reads!r}")

    def hot(self, reads: int, writes: int) -> bool:
        """Whether an object used so is hot (written, or read at least ``hot_reads`` times)."""
        return writes > 0 or reads >= self.hot_reads

    def decide(self, usages: Sequence[Usage]) -> list[Decision]:
        """The moves that put every object where the policy wants it (objects already there: none)."""
        hot = [u for u in usages if self.hot(u.reads, u.writes)]
        hot.sort(key=lambda u: (-(u.writes > 0), -u.writes, -u.reads, u.nbytes, u.key))
        used = 0
        decisions = []
        wanted_dram = set()
        for usage in hot:
            why = f"written {usage.writes}x, read {usage.reads}x" if usage.writes else f"reused: read {usage.reads}x"
            if used + usage.nbytes <= self.budget:
                used += usage.nbytes
                wanted_dram.add(usage.key)
                if usage.tier != "dram":
                    decisions.append(
                        Decision(
                            usage.key, "dram", f"{why}: hot, and it fits the DRAM budget ({used} of {self.budget} B)"
                        )
                    )
            elif usage.tier == "dram":
                decisions.append(
                    Decision(usage.key, "mapped", f"{why}, but hotter objects fill the DRAM budget ({self.budget} B)")
                )
        for usage in usages:
            if usage.key in wanted_dram or usage.tier != "dram" or any(d.key == usage.key for d in decisions):
                continue
            decisions.append(Decision(usage.key, "mapped", f"read {usage.reads}x, never written: cold, in place"))
        return decisions
