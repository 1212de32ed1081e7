"""Memory tiers (workbench.memory.tiers): placing, reopening, moving, freeing, capacity, cold runs."""

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
import shm_helpers
from simulator import run_simulated

from workbench.memory import shm, tiers

FILE_TIERS = ["mapped", "disk", "cached"]


def _spawn(target, *args):
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


def _wait_for_file(path: str, process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert process.is_alive(), "the child died before it signalled"
        assert time.monotonic() < deadline, "the child did not signal in time"
        time.sleep(0.01)


@pytest.mark.parametrize("tier", tiers.HOST_TIERS)  # gpu: tests/gpu_sim_tier_cases.py
def test_round_trip_on_every_tier(tier, tmp_path):
    data = np.arange(12_345, dtype=">i4")[::3]  # big-endian, strided
    placed = tiers.place("round-trip", data, tier, directory=None if tier == "dram" else tmp_path)
    try:
        assert placed.tier == tier
        assert np.array_equal(placed.array, data) and placed.array.dtype == data.dtype
        again = tiers.open_array("round-trip", tier, directory=None if tier == "dram" else tmp_path)
        assert np.array_equal(again.array, data)
        assert "round-trip" in tiers.names(tier, directory=None if tier == "dram" else tmp_path)
    finally:
        assert tiers.free("round-trip", tier, directory=None if tier == "dram" else tmp_path)
    assert not tiers.free("round-trip", tier, directory=None if tier == "dram" else tmp_path)
    if tier != "dram":
        assert list(tmp_path.iterdir()) == []


def _device_here() -> bool:
    from workbench.kernels import gpu as device_kernels

    return device_kernels.available()


def test_the_tier_list_is_the_host_tiers_and_gpu():
    assert tiers.TIERS == (*tiers.HOST_TIERS, "gpu")
    with pytest.raises(tiers.UnknownTier, match="the tiers are dram, mapped, cached, disk, gpu"):
        tiers.check_tier("vram")


@pytest.mark.skipif(_device_here(), reason="a CUDA device is here: tests/gpu_sim_tier_cases.py runs the tier on it")
def test_the_gpu_tier_without_a_device_says_what_to_do_and_places_nothing():
    with pytest.raises(tiers.TierError, match="needs a CUDA device.*NUMBA_ENABLE_CUDASIM=1"):
        tiers.place("nowhere", np.zeros(3), "gpu")
    with pytest.raises(tiers.TierError, match="needs a CUDA device"):
        tiers.move(tiers.place("nowhere", np.zeros(3), "dram"), "gpu")
    assert tiers.names("dram").count("nowhere") == 1  # a refused move keeps the array where it was
    tiers.free("nowhere", "dram")
    assert tiers.names("gpu") == [] and not tiers.free("nowhere", "gpu")
    with pytest.raises(tiers.TierError, match="no gpu array 'nowhere'"):
        tiers.open_array("nowhere", "gpu")


def test_the_gpu_tier_and_the_store_on_it_in_the_simulator():
    """tests/gpu_sim_tier_cases.py in a pytest process of its own, under numba's CUDA simulator: the
    tier against a model, odd arrays, a full device, counted copies, store objects on the device, and
    ``workbench bench gpu`` at size ci."""
    run_simulated("gpu_sim_tier_cases.py")


@pytest.mark.parametrize("tier", FILE_TIERS)
def test_a_file_tier_reopens_after_a_restart(tier, tmp_path):
    data = np.linspace(0, 1, 10_001)
    tiers.place("survivor", data, tier, directory=tmp_path)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:  # a new process: nothing of this one's state
        total = pool.apply(shm_helpers.reopen_sum, ("survivor", tier, str(tmp_path)))
    assert total == pytest.approx(float(data.sum()))
    tiers.free("survivor", tier, directory=tmp_path)


def test_dram_does_not_survive_and_says_so(tmp_path):
    with pytest.raises(tiers.TierError, match="does not survive a restart"):
        tiers.open_array("never-placed", "dram")
    with pytest.raises(FileNotFoundError, match="no mapped array 'missing'"):
        tiers.open_array("missing", "mapped", directory=tmp_path)
    with pytest.raises(tiers.TierError, match="no tier 'nvm'.*dram, mapped, cached, disk"):
        tiers.place("x", np.ones(3), "nvm")
    with pytest.raises(ValueError, match="1-200 characters"):
        tiers.place("../escape", np.ones(3), "mapped", directory=tmp_path)
    with pytest.raises(tiers.TierError, match="does not exist"):
        tiers.place("x", np.ones(3), "mapped", directory=tmp_path / "nowhere")
    assert list(tmp_path.iterdir()) == []


def test_move_between_tiers_keeps_the_data(tmp_path):
    data = np.random.default_rng(1).random((300, 7))
    placed = tiers.place("mover", data, "dram")
    for tier in ["mapped", "disk", "cached", "dram"]:
        placed = tiers.move(placed, tier, directory=None if tier == "dram" else tmp_path)
        assert placed.tier == tier and np.array_equal(placed.array, data)
    tiers.free("mover", "dram")
    assert list(tmp_path.iterdir()) == []


def test_placing_twice_needs_replace(tmp_path):
    tiers.place("twice", np.ones(4), "mapped", directory=tmp_path)
    with pytest.raises(tiers.TierError, match="already.*replace=True"):
        tiers.place("twice", np.zeros(4), "mapped", directory=tmp_path)
    placed = tiers.place("twice", np.full(4, 2.0), "mapped", directory=tmp_path, replace=True)
    assert placed.array.tolist() == [2.0] * 4
    tiers.free("twice", "mapped", directory=tmp_path)


def test_a_full_file_system_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "free_bytes", lambda directory=None: 1024)
    for tier in FILE_TIERS:
        with pytest.raises(tiers.TierError, match=r"cannot place .big. on .*does not fit.*free"):
            tiers.place("big", np.ones(1_000_000), tier, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_mapped_writes_are_in_place_and_durable(tmp_path):
    placed = tiers.place("inplace", np.zeros((64, 64)), "mapped", directory=tmp_path)
    view = placed.array
    view += 3.0  # no copy: the file's pages
    placed.sync()
    assert tiers.read_file("inplace", tmp_path).sum() == 3.0 * 64 * 64
    tiers.free("inplace", "mapped", directory=tmp_path)


def test_disk_is_staged_and_written_back_on_sync(tmp_path):
    placed = tiers.place("staged", np.zeros(10), "disk", directory=tmp_path)
    placed.array[:] = 5.0  # the DRAM copy
    assert placed.dram_bytes == 80
    assert tiers.read_file("staged", tmp_path).sum() == 0.0  # not yet written back
    placed.sync()
    assert tiers.read_file("staged", tmp_path).sum() == 50.0
    tiers.free("staged", "disk", directory=tmp_path)


def test_the_dram_cache_keeps_its_budget_hits_misses_and_writes_back(tmp_path):
    cache = tiers.DramCache(budget=3 * 8_000)
    arrays = [
        tiers.place(f"c{i}", np.full(1_000, float(i)), "cached", directory=tmp_path, cache=cache) for i in range(4)
    ]
    for placed in arrays:
        assert placed.array[0] == float(placed.name[1:])
    assert cache.stats()["misses"] == 4 and cache.used <= cache.budget and cache.evictions == 1
    arrays[3].array  # noqa: B018 - the most recent: a hit
    assert cache.stats()["hits"] == 1
    copy = arrays[2].array
    copy[:] = 42.0
    cache.mark_dirty(arrays[2])
    cache.drop()  # written back on the way out
    assert tiers.read_file("c2", tmp_path)[0] == 42.0
    huge = tiers.place("huge", np.ones(10_000), "cached", directory=tmp_path, cache=cache)
    assert huge.array.base is not None and cache.stats()["bypasses"] == 1  # over the budget: used in place
    for name in ["c0", "c1", "c2", "c3", "huge"]:
        tiers.free(name, "cached", directory=tmp_path)
    with pytest.raises(ValueError, match="bytes >= 0"):
        tiers.DramCache(-1)


def test_eviction_makes_a_cold_run_for_real(tmp_path):
    where = tiers.medium(tmp_path)
    placed = tiers.place("cold", np.ones(4_000_000), "mapped", directory=tmp_path)
    placed.array.sum()
    eviction = placed.evict()
    if where.memory_backed:  # tmpfs: there is no device to be cold on, and it says so
        assert not eviction.evicted and "memory" in eviction.reason
    else:
        assert eviction.evicted, eviction
        assert eviction.resident_after <= eviction.nbytes // 20
        read_before = tiers.device_read_bytes()
        assert float(placed.array.sum()) == 4_000_000.0
        resident, size = tiers.resident_bytes(placed.path)
        assert resident >= size * 0.9  # touched: read back in
        if read_before is not None:
            assert tiers.device_read_bytes() - read_before >= 0.9 * 32_000_000  # from the device
    tiers.free("cold", "mapped", directory=tmp_path)


def test_tmpfs_cannot_be_cold_and_says_why():
    if not shm.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm")
    placed = tiers.place("tmpfs-cold", np.ones(1_000), "mapped", directory=shm.SHM_DIR)
    try:
        eviction = placed.evict()
        assert not eviction.evicted and "tmpfs keeps files in memory" in eviction.reason
        assert "never cold" in placed.medium().describe()
    finally:
        tiers.free("tmpfs-cold", "mapped", directory=shm.SHM_DIR)


def test_a_killed_writer_leaves_the_previous_version_readable(tmp_path):
    tiers.place("versioned", np.arange(1_000, dtype=np.float64), "mapped", directory=tmp_path)
    ready = str(tmp_path / "ready")
    child = _spawn(shm_helpers.hang_in_replace, "versioned", str(tmp_path), ready)
    try:
        _wait_for_file(ready, child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(30)
    os.unlink(ready)
    again = tiers.open_array("versioned", "mapped", directory=tmp_path)
    assert np.array_equal(again.array, np.arange(1_000, dtype=np.float64))  # not the half-written -1s
    assert shm.clean(tmp_path)  # the dead writer's partial file (and lock) go
    tiers.free("versioned", "mapped", directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_untrusted_files_in_a_tier_directory_are_refused(tmp_path):
    (tmp_path / f"{shm.PREFIX}planted").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(shm.SharedMemoryError, match="not a valid workbench shared array"):
        tiers.open_array("planted", "mapped", directory=tmp_path)
    with pytest.raises(shm.SharedMemoryError, match="not a valid workbench shared array"):
        tiers.read_file("planted", tmp_path)


def test_medium_names_the_file_system(tmp_path):
    where = tiers.medium(tmp_path)
    assert where.filesystem not in ("", "?") and str(tmp_path) in where.describe()


def test_default_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    assert tiers.default_directory("disk") == tmp_path / "disk"
    monkeypatch.setenv(tiers.PMEM_ENV, str(tmp_path / "pmem"))
    with pytest.raises(tiers.TierError, match="not a directory"):
        tiers.default_directory("mapped")
    (tmp_path / "pmem").mkdir()
    assert tiers.default_directory("mapped") == tmp_path / "pmem"


def test_map_sync_is_refused_off_dax_with_a_clear_error(tmp_path):
    shm.copy_in("nosync", np.ones(8), directory=tmp_path)
    if tiers.medium(tmp_path).dax:
        pytest.skip("this directory is a DAX mount: MAP_SYNC works here")
    with pytest.raises(shm.SharedMemoryError, match="MAP_SYNC.*DAX"):
        shm.attach("nosync", directory=tmp_path, writable=True, sync=True)
    shm.delete("nosync", tmp_path)


def test_a_dirty_cache_entry_written_back_is_seen_through_an_existing_mapping(tmp_path):
    cache = tiers.DramCache(budget=10**6)
    placed = tiers.place("shared-view", np.zeros(1_000), "cached", directory=tmp_path, cache=cache)
    reader = tiers.open_array("shared-view", "mapped", directory=tmp_path).array  # mapped before the write
    placed.array[:] = 7.0
    placed.sync()  # written back into the same file
    assert reader.sum() == 7_000.0
    with pytest.raises(tiers.TierError, match="place\\(\\) a new version"):
        tiers.write_file("shared-view", tmp_path, np.zeros(3))
    tiers.free("shared-view", "cached", directory=tmp_path)


def test_cache_copies_never_outlive_a_change_of_their_file(tmp_path):
    cache = tiers.DramCache(budget=10**6)
    first = tiers.place("stale", np.zeros(4), "cached", directory=tmp_path, cache=cache)
    assert first.array.sum() == 0.0  # cached now
    again = tiers.place("stale", np.ones(4), "cached", directory=tmp_path, cache=cache, replace=True)
    assert again.array.sum() == 4.0  # a new version: the old copy was dropped
    writer = tiers.open_array("stale", "mapped", directory=tmp_path, writable=True)
    writer.array[:] = 5.0
    writer.sync()  # a write through a mapping, made durable: cached copies are stale
    assert tiers.open_array("stale", "cached", directory=tmp_path, cache=cache).array.sum() == 20.0
    tiers.free("stale", "cached", directory=tmp_path)
    fresh = tiers.place("stale", np.full(4, 7.0), "cached", directory=tmp_path, cache=cache)
    assert fresh.array.sum() == 28.0  # freed and placed again: not the old copy
    dirty = tiers.place("dirty", np.zeros(4), "cached", directory=tmp_path, cache=cache)
    dirty.array[:] = 1.0
    cache.mark_dirty(dirty)
    tiers.free("dirty", "cached", directory=tmp_path)  # its dirty copy goes with it, bytes accounted
    assert cache.used == 32 and list(cache.entries) == [str(fresh.path)]
    tiers.free("stale", "cached", directory=tmp_path)


def test_move_never_overwrites_another_array_and_planted_names_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    tiers.place("taken", np.zeros(3), "disk", directory=tmp_path / "d")
    source = tiers.place("taken", np.ones(3), "mapped", directory=tmp_path)
    with pytest.raises(tiers.TierError, match="another array 'taken' is on disk already"):
        tiers.move(source, "disk", directory=tmp_path / "d")
    moved = tiers.move(source, "disk", directory=tmp_path / "d", replace=True)
    assert moved.array.sum() == 3.0
    tiers.free("taken", "disk", directory=tmp_path / "d")
    (tmp_path / f"{shm.PREFIX}a-directory").mkdir()
    with pytest.raises(tiers.TierError, match="exists and is not an array file"):
        tiers.place("a-directory", np.ones(2), "mapped", directory=tmp_path, replace=True)


def test_one_tier_list_and_one_check_for_arrays_and_the_store():
    from workbench.runtime.store import tiering

    assert tiering.check_tier("dynamic") == "dynamic" and tiering.check_tier("cached") == "cached"
    for check in (tiers.check_tier, tiering.check_tier):
        with pytest.raises(tiers.UnknownTier, match="no tier 'nvm'") as raised:
            check("nvm")
        assert isinstance(raised.value, ValueError)  # bad input: callers may catch either
    with pytest.raises(tiers.UnknownTier):  # "dynamic" is the store's policy, not a tier an array can be on
        tiers.check_tier("dynamic")


def test_the_tier_strategies_read_the_budget_of_the_tier_set_in_use(monkeypatch):
    from workbench.memory import tier_set
    from workbench.runtime.strategies import tiers as tier_strategies
    from workbench.settings import Settings

    with tier_set.using(tiers.new_set("a test")):  # the process's set: the environment, read when used
        monkeypatch.setenv(tier_strategies.BUDGET_ENV, "12345")
        assert tier_strategies.settings().dram_budget == 12345
        monkeypatch.setenv(tier_strategies.BUDGET_ENV, "")
        assert tier_strategies.settings().dram_budget == tier_strategies.DEFAULT_DRAM_BUDGET
        monkeypatch.setenv(tier_strategies.BUDGET_ENV, "lots")
        with pytest.raises(ValueError, match=r"\$WORKBENCH_DRAM_BUDGET is a whole number >= 0 .* got 'lots'"):
            tier_strategies.settings()
        assert tier_strategies.configure(4096).dram_budget == 4096  # configured: the environment is not read
        assert tier_strategies.settings().dram_budget == 4096
    snapshot = tiers.new_set("a session", Settings({tier_strategies.BUDGET_ENV: "777"}))
    with tier_set.using(snapshot):  # a session's set reads its own settings, not the environment now
        assert tier_strategies.settings().dram_budget == 777
    monkeypatch.setenv(tier_strategies.BUDGET_ENV, "")
    assert tier_strategies.settings().dram_budget != 4096  # what was configured stayed in its set


def test_a_device_cap_holds_within_its_block_nests_and_goes():
    from workbench.memory import gpu

    device = gpu.DeviceMemory()
    with pytest.raises(tiers.TierError, match="positive number of bytes"):
        with device.capped(0):
            pass
    with device.capped(100):
        with device.capped(50):
            assert device.limit() == device.cap() == 50
        assert device.limit() == 100
        with pytest.raises(tiers.TierError, match=r"needs 200 B .* or raise the cap of this block"):
            device.check_room("big", 200)
    assert device.cap() is None
