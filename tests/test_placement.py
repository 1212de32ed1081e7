"""The dynamic placement policy (workbench.memory.placement), without a cluster: which objects take
DRAM given their sizes, the budget and their measured use, and that steady use moves nothing.

``replay`` drives the policy as a store backend does: a pass over every managed object whenever a
call changes one object's class (cold to hot), each decision applied at once."""

from __future__ import annotations

import pytest

from workbench.memory.placement import Decision, DynamicPolicy, Usage

MiB = 2**20


def usage(key: str, nbytes: int = 100, reads: int = 0, writes: int = 0, tier: str = "dram") -> Usage:
    return Usage(key, nbytes, reads=reads, writes=writes, tier=tier)


def tiers_after(usages: list[Usage], decisions: list[Decision]) -> dict[str, str]:
    tiers = {u.key: u.tier for u in usages}
    tiers.update({d.key: d.tier for d in decisions})
    return tiers


class Backend:
    """Objects with their use and tier, under ``policy``, passes run as a backend runs them."""

    def __init__(self, policy: DynamicPolicy, sizes: dict[str, int], tier: str = "dram") -> None:
        self.policy = policy
        self.objects = {key: {"nbytes": n, "reads": 0, "writes": 0, "tier": tier} for key, n in sizes.items()}
        self.moves: list[Decision] = []

    def usages(self) -> list[Usage]:
        return [Usage(k, o["nbytes"], o["reads"], o["writes"], o["tier"]) for k, o in self.objects.items()]

    def rebalance(self) -> int:
        """One pass, its decisions applied; how many objects moved."""
        decisions = self.policy.decide(self.usages())
        for d in decisions:
            self.objects[d.key]["tier"] = d.tier
        self.moves += decisions
        return len(decisions)

    def read(self, key: str) -> int:
        """A read call; a pass when it turned the object hot (the moves it made)."""
        o = self.objects[key]
        was_hot = self.policy.hot(o["reads"], o["writes"])
        o["reads"] += 1
        return self.rebalance() if self.policy.hot(o["reads"], o["writes"]) != was_hot else 0

    def in_dram(self) -> int:
        return sum(o["nbytes"] for o in self.objects.values() if o["tier"] == "dram")


def replay(backend: Backend, order: list[str], runs: int, reads_per_run: int) -> list[int]:
    """The objects moved in each of ``runs`` runs that read every object of ``order``, in that order,
    ``reads_per_run`` times (a histogram reads each block once a run, k-means once an iteration)."""
    return [sum(backend.read(key) for _ in range(reads_per_run) for key in order) for _ in range(runs)]


@pytest.mark.parametrize("reads_per_run", [1, 10])
def test_data_over_the_budget_settles_once_placed_and_then_never_moves(reads_per_run):
    # 20 blocks a little over 8 MiB each (an object's own bytes beside its array) under a 64 MiB
    # budget, all in DRAM when placed dynamic: the lab size of bench tiers, on one backend
    sizes = {f"block-{i:02d}": 8 * MiB + 96 for i in range(20)}
    backend = Backend(DynamicPolicy(64 * MiB), sizes)
    placed = backend.rebalance()  # at placement: what fits the budget stays, the rest goes to mapped
    assert placed == 13 and all(d.tier == "mapped" and "not used yet: cold" in d.reason for d in backend.moves)
    assert backend.in_dram() <= 64 * MiB
    for order in (sorted(sizes), sorted(sizes, reverse=True)):  # whichever blocks are read first
        # the warm-up and three measured runs: each block turns hot in one of them, none moves
        assert replay(backend, order, runs=4, reads_per_run=reads_per_run) == [0, 0, 0, 0]
    assert backend.in_dram() == 7 * (8 * MiB + 96)


def test_objects_placed_cold_on_mapped_are_promoted_as_they_turn_hot_while_the_budget_lasts():
    backend = Backend(DynamicPolicy(250), {"a": 100, "b": 100, "c": 100}, tier="mapped")
    assert backend.rebalance() == 0  # unused, on mapped: nothing to gain by copying them in
    assert replay(backend, ["a", "b", "c"], runs=1, reads_per_run=1) == [0]  # read once: cold
    assert replay(backend, ["a", "b", "c"], runs=2, reads_per_run=1) == [2, 0]  # two fit, then steady
    assert [o["tier"] for o in backend.objects.values()] == ["dram", "dram", "mapped"]
    assert all("reused: read 2x: hot, and it fits the DRAM budget" in d.reason for d in backend.moves)


def test_an_object_in_dram_keeps_its_place_until_another_is_read_hot_reads_times_more():
    policy = DynamicPolicy(budget=150)  # room for one
    resident, newcomer = usage("resident", reads=2), usage("newcomer", reads=3, tier="mapped")
    assert policy.decide([resident, newcomer]) == []  # one read more: the order of a pass, not heat
    newcomer = usage("newcomer", reads=4, tier="mapped")
    decisions = policy.decide([resident, newcomer])
    assert [(d.key, d.tier) for d in decisions] == [("resident", "mapped"), ("newcomer", "dram")]  # DRAM freed first
    assert "fill the DRAM budget" in decisions[0].reason and "read 4x" in decisions[1].reason


def test_written_objects_come_first_and_cold_ones_stay_in_dram_only_while_there_is_room():
    policy = DynamicPolicy(budget=250)
    usages = [
        usage("cold-in-dram", reads=1),
        usage("unused-in-dram", reads=0),
        usage("written", writes=1, tier="mapped"),
        usage("cold-on-mapped", reads=1, tier="mapped"),
    ]
    tiers = tiers_after(usages, policy.decide(usages))
    # written first (100), then the resident read once (200); the unused one no longer fits; a cold
    # object on mapped is never copied in, room or not
    assert tiers == {"cold-in-dram": "dram", "unused-in-dram": "mapped", "written": "dram", "cold-on-mapped": "mapped"}
    assert policy.decide([usage("cold-in-dram", reads=1), usage("cold-on-mapped", reads=1, tier="mapped")]) == []


def test_the_ranking_is_written_then_reads_then_residence_then_size():
    policy = DynamicPolicy(budget=0)
    ranked = sorted(
        [
            usage("big-hot", nbytes=500, reads=5, tier="mapped"),
            usage("small-hot", nbytes=100, reads=5, tier="mapped"),
            usage("resident", nbytes=500, reads=4),  # credited one read: level with the hot ones, and first
            usage("written-once", writes=1, tier="mapped"),
            usage("written-twice", writes=2, tier="mapped"),
        ],
        key=policy.rank,
    )
    assert [u.key for u in ranked] == ["written-twice", "written-once", "resident", "small-hot", "big-hot"]


def test_bad_policies_are_refused():
    with pytest.raises(ValueError, match="DRAM budget"):
        DynamicPolicy(budget=-1)
    with pytest.raises(ValueError, match="DRAM budget"):
        DynamicPolicy(budget=True)
    with pytest.raises(ValueError, match="hot_reads is a count >= 1"):
        DynamicPolicy(budget=10, hot_reads=0)
