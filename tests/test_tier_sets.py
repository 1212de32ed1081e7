"""Tier sets (issue 50): whose ``dram`` arrays, DRAM cache and device arrays a tier operation uses.

Examples first, then a model-based test: several sets, activated, used, deactivated and closed in any
order, against a dict per set and a stack of what is in use."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from workbench.memory import tier_set, tiers
from workbench.memory.gpu import GPU_BYTES_ENV
from workbench.settings import DRAM_BUDGET, Settings


@pytest.fixture
def two_sets():
    """Two fresh sets, closed after the test; the set in use before (a session's) back after."""
    a, b = tiers.new_set("a"), tiers.new_set("b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_two_sets_hold_their_own_dram_arrays_and_the_one_in_use_is_the_default(two_sets):
    a, b = two_sets
    tiers.place("x", np.arange(3), "dram", held=a)
    with tier_set.using(b):
        assert tiers.current() is b and tiers.names("dram") == []
        with pytest.raises(tiers.TierError, match=r"no dram array 'x' in b's tiers.*another session's arrays"):
            tiers.open_array("x", "dram")
        tiers.place("x", np.zeros(5), "dram")  # the same name, another set: no clash
    with tier_set.using(a):
        assert tiers.open_array("x", "dram").array.tolist() == [0, 1, 2]
        assert tiers.free("x", "dram") and not tiers.free("x", "dram")
    assert tiers.names("dram", held=b) == ["x"] and tiers.names("dram", held=a) == []


def test_a_closed_set_frees_its_arrays_is_refused_by_name_and_never_in_use(two_sets):
    a, _ = two_sets
    view = tiers.place("kept", np.arange(4.0), "dram", held=a).array
    before = tiers.current()
    tier_set.activate(a)
    assert tiers.current() is a
    a.close()
    assert a.counters()["dram_arrays"] == 0 and view.tolist() == [0.0, 1.0, 2.0, 3.0]  # a view held stays valid
    assert tiers.current() is not a  # closed: not in use, whoever still names it
    with pytest.raises(tiers.TierError, match="is closed .* leave held= out"):
        tiers.place("y", np.ones(2), "dram", held=a)
    with pytest.raises(ValueError, match="is closed"), tier_set.using(a):
        pass
    with pytest.raises(ValueError, match="is closed"):
        tier_set.activate(a)
    tier_set.deactivate(a)
    assert tiers.current() is before


def test_deactivating_brings_back_the_set_in_use_before_if_still_open(two_sets):
    a, b = two_sets
    before = tiers.current()
    with contextlib.ExitStack() as undo:
        undo.callback(tier_set.deactivate, a)
        undo.callback(tier_set.deactivate, b)
        tier_set.activate(a)
        tier_set.activate(b)
        tier_set.deactivate(b)
        assert tiers.current() is a
        tier_set.activate(b)
        a.close()
        tier_set.deactivate(b)  # a closed meanwhile: what was in use before a comes back
        assert tiers.current() is before


def test_a_set_closed_in_another_thread_gives_way_to_the_one_it_was_activated_over(two_sets):
    a, b = two_sets  # two sessions started in a notebook, the later one closed at the kernel's shutdown or by a thread
    with contextlib.ExitStack() as undo:
        undo.callback(tier_set.deactivate, a)
        undo.callback(tier_set.deactivate, b)
        tier_set.activate(a)
        tier_set.activate(b)
        thread = threading.Thread(target=lambda: (b.close(), tier_set.deactivate(b)))
        thread.start()
        thread.join(timeout=30)
        assert tiers.current() is a  # not the process's: a is still open and was in use under b


def test_move_frees_the_array_in_its_own_set_not_one_of_the_same_name_in_another(two_sets, tmp_path):
    a, b = two_sets
    in_a = tiers.place("x", np.arange(3), "dram", held=a)
    tiers.place("x", np.full(3, 9), "dram", held=b)  # another session's array of the same name
    moved = tiers.move(in_a, "disk", directory=tmp_path, held=b)
    assert moved.array.tolist() == [0, 1, 2]
    assert tiers.names("dram", held=a) == []  # moved away from a
    assert tiers.open_array("x", "dram", held=b).array.tolist() == [9, 9, 9]  # b's own untouched


def test_a_thread_starts_with_the_process_set_and_a_wrong_held_is_a_type_error(two_sets):
    a, _ = two_sets
    seen = []
    with tier_set.using(a):
        thread = threading.Thread(target=lambda: seen.append(tiers.current()))
        thread.start()
        thread.join(timeout=30)
    assert seen == [tiers.PROCESS]
    with pytest.raises(TypeError, match="held= takes a TierSet .* got dict"):
        tiers.names("dram", held={})
    with pytest.raises(TypeError, match="using\\(\\) takes a TierSet"), tier_set.using("a"):
        pass


def test_the_cached_tier_reads_through_the_cache_of_its_set_and_counts_there(two_sets, tmp_path):
    a, b = two_sets
    tiers.place("c", np.arange(1000.0), "cached", directory=tmp_path, held=a)
    for _ in range(3):
        tiers.open_array("c", "cached", directory=tmp_path, held=a).array  # noqa: B018 - a read
    assert a.counters()["cache_misses"] == 1 and a.counters()["cache_hits"] >= 2  # the first read only missed
    assert b.counters()["cache_misses"] == b.counters()["cache_hits"] == 0
    tiers.free("c", "cached", directory=tmp_path, held=a)


def test_a_cached_copy_held_when_its_set_closes_is_written_back_by_its_handle_and_nothing_is_kept(tmp_path):
    held = tiers.new_set("a session closing")
    written = tiers.place("w", np.zeros(4), "cached", directory=tmp_path, held=held)
    dropped = tiers.place("d", np.zeros(4), "cached", directory=tmp_path, held=held)
    copy, other = written.array, dropped.array  # copies in the set's DRAM cache, held by the caller
    copy[:] = 7.0  # changed, not synced yet
    other[:] = 5.0
    held.cache.mark_dirty(dropped)  # changed and said so (as a store call that writes does)
    held.close()
    assert tiers.open_array("d", "mapped", directory=tmp_path).array.tolist() == [5.0] * 4  # written at close
    written.sync()  # the session is gone; the change still reaches the file
    assert tiers.open_array("w", "mapped", directory=tmp_path).array.tolist() == [7.0] * 4
    del other  # the last copy of an entry of a closed cache: the entry goes with it
    assert held.cache.entries == {} and held.cache.used == 0
    assert written.array.tolist() == [7.0] * 4 and held.cache.entries == {}  # read in place, no new copy kept
    del copy
    for name in ("w", "d"):
        tiers.free(name, "cached", directory=tmp_path)


def test_a_copy_that_cannot_be_written_back_at_close_stops_no_other(tmp_path):
    from workbench.memory import shm

    held = tiers.new_set("a session closing")
    handles = [tiers.place(name, np.zeros(4), "cached", directory=tmp_path, held=held) for name in ("s1", "s2")]
    for handle in handles:
        copy = handle.array
        copy[:] = 3.0
        held.cache.mark_dirty(handle)
        del copy
    shm.delete("s1", tmp_path)  # replaced behind the cache's back (another shape), as another process would
    view, _ = shm.copy_in("s1", np.zeros(8), directory=tmp_path)
    del view
    with pytest.raises(tiers.TierError, match=r"holds a \(8,\) float64 array, not \(4,\)"):
        held.close()
    assert tiers.open_array("s2", "mapped", directory=tmp_path).array.tolist() == [3.0] * 4  # written all the same
    assert held.cache.entries == {} and held.cache.used == 0
    for name in ("s1", "s2"):
        tiers.free(name, "cached", directory=tmp_path)


def test_a_set_reads_its_settings_from_its_snapshot_else_where_it_runs(monkeypatch):
    monkeypatch.setenv(GPU_BYTES_ENV, "3MiB")
    snapshot = tiers.new_set("a session", Settings({GPU_BYTES_ENV: "1MiB", DRAM_BUDGET: "99"}))
    live = tiers.new_set("a test")
    try:
        assert snapshot.device.limit() == 2**20 and live.device.limit() == 3 * 2**20
        assert snapshot.setting(DRAM_BUDGET) == "99" and live.setting(DRAM_BUDGET) == ""
    finally:
        snapshot.close()
        live.close()


def test_a_placement_that_reaches_a_set_closed_on_its_way_is_refused(two_sets):
    """A placement checks that its set is open before it places, and close() may come between: the tier
    checks again under the lock close() clears the arrays with, so nothing lands in a closed set."""
    from workbench.memory import gpu

    a, _ = two_sets
    a.close()
    with pytest.raises(tiers.TierError, match="is closed .* 'late' was not placed"):
        tiers.lookup("dram").put("late", np.ones(2), directory=None, cache=None, replace=False, owner=None, held=a)
    assert a.counters()["dram_arrays"] == 0
    device = gpu.DeviceMemory()
    device.close()
    with device.capped(2**20), pytest.raises(tiers.TierError, match="is closed .* 'late' was not kept"):
        device.adopt("late", np.ones(2))  # (a host array: the limit and the closed set are checked first)
    assert device.names() == []


def test_only_a_tier_kernels_make_arrays_on_adopts_them(two_sets):
    a, _ = two_sets
    with pytest.raises(tiers.TierError, match="the dram tier cannot adopt 'r'.*place\\(\\) a copy"):
        tiers.adopt("r", np.ones(3), "dram", held=a)


# -- the model ---------------------------------------------------------------------------------
NAMES = st.sampled_from(["tsm-p", "tsm-q", "tsm-r"])


class TierSetMachine(RuleBasedStateMachine):
    """Sets made, activated, deactivated, used for a block and closed in any order; dram arrays placed
    and freed in the one in use or one named; against a dict per set and a stack of what is in use."""

    sets = Bundle("sets")

    def __init__(self):
        super().__init__()
        self.base = tiers.current()  # what is in use when the machine starts (the process's or a session's)
        self.model: dict[int, dict[str, float]] = {}  # id(set) -> name -> the value placed
        self.made: list[tier_set.TierSet] = []
        self.stack: list[tier_set.TierSet] = []  # activated here and not taken out, the latest last

    def _expected_in_use(self) -> tier_set.TierSet:
        open_ones = [held for held in self.stack if not held.closed]  # a closed one gives way to the one below
        return open_ones[-1] if open_ones else self.base

    @rule(target=sets)
    def make(self):
        held = tiers.new_set(f"set {len(self.made)}")
        self.made.append(held)
        self.model[id(held)] = {}
        return held

    @rule(held=sets)
    def activate(self, held):
        if held.closed:
            with pytest.raises(ValueError, match="is closed"):
                tier_set.activate(held)
            return
        tier_set.activate(held)
        self.stack = [s for s in self.stack if s is not held] + [held]  # never below itself

    @rule(held=sets)
    def deactivate(self, held):
        tier_set.deactivate(held)
        if self.stack and self.stack[-1] is held:
            self.stack.pop()

    @rule(held=sets)
    def close(self, held):
        held.close()
        self.model[id(held)] = {}

    def _place(self, name, value, where, in_use=None):
        target = where or in_use or self._expected_in_use()
        if where is not None and where.closed:
            with pytest.raises(tiers.TierError, match="is closed"):
                tiers.place(name, np.full(2, value), "dram", held=where, replace=True)
            return
        tiers.place(name, np.full(2, value), "dram", held=where, replace=True)
        if target is not self.base:
            self.model[id(target)][name] = value

    @rule(name=NAMES, value=st.floats(-5, 5), where=st.one_of(st.none(), sets))
    def place(self, name, value, where):
        self._place(name, value, where)

    @rule(held=sets, name=NAMES, value=st.floats(-5, 5), close_inside=st.booleans())
    def use_for_a_block(self, held, name, value, close_inside):
        if held.closed:
            with pytest.raises(ValueError, match="is closed"), tier_set.using(held):
                pass
            return
        with tier_set.using(held):
            assert tiers.current() is held
            self._place(name, value, None, in_use=held)
            if close_inside:  # closed inside its block: the latest open one of those in use before it is
                self.close(held)
                assert tiers.current() is self._expected_in_use()
        assert tiers.current() is self._expected_in_use()

    @rule(name=NAMES, held=sets)
    def free(self, name, held):
        if held.closed:
            return
        assert tiers.free(name, "dram", held=held) == (name in self.model[id(held)])
        self.model[id(held)].pop(name, None)

    @invariant()
    def each_set_holds_what_was_placed_in_it_only(self):
        assert tiers.current() is self._expected_in_use()
        assert tier_set.in_use()[: len(self.stack)] == self.stack[::-1]
        for held in self.made:
            if not held.closed:
                assert tiers.names("dram", held=held) == sorted(self.model[id(held)])
                for name, value in self.model[id(held)].items():
                    assert tiers.open_array(name, "dram", held=held).array[0] == value

    def teardown(self):
        for held in self.made:
            held.close()
        while tier_set.in_use() and tier_set.in_use()[0] in self.made:  # this context as the machine found it
            tier_set.deactivate(tier_set.in_use()[0])
        for name in NAMES.elements:  # what the machine placed in the base set
            tiers.free(name, "dram", held=self.base)
        assert tiers.current() is self.base


TestTierSets = TierSetMachine.TestCase
TestTierSets.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
