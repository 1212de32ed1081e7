"""Memory tiers under hostile use (issue 25, 2, 4-6, 11, 12): a write through a cache copy is never
lost, one file is one cache entry however its path is spelled, a name is placed once however many
callers race for it, subclasses are refused, and tier directories and odd files give clear errors."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from workbench.memory import shm, tiers


def test_a_cache_copy_in_use_is_pinned_until_synced(tmp_path):
    cache = tiers.DramCache(budget=10_000)  # one entry of 8 kB
    a = tiers.place("a", np.zeros(1000), "cached", directory=tmp_path, cache=cache)
    b = tiers.place("b", np.zeros(1000), "cached", directory=tmp_path, cache=cache)
    copy = a.array
    copy += 1.0
    assert b.array.sum() == 0.0  # no room beside a's copy in use: b is read in place
    a.sync()
    assert tiers.read_file("a", tmp_path).sum() == 1000.0
    del copy
    b_copy = b.array  # a's copy is free now: b's takes the room
    assert cache.used == 8_000 and b_copy.base is not None
    for name in "ab":
        tiers.free(name, "cached", directory=tmp_path)


def test_a_write_into_a_cache_copy_survives_another_thread_evicting(tmp_path):
    cache = tiers.DramCache(budget=10_000)
    a = tiers.place("a", np.zeros(1000), "cached", directory=tmp_path, cache=cache)
    others = [tiers.place(f"o{i}", np.ones(1000), "cached", directory=tmp_path, cache=cache) for i in range(4)]
    copy = a.array
    readers = [threading.Thread(target=lambda o=o: o.array.sum()) for o in others]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=60)
    copy[:] = 5.0  # after the other reads: the copy must still be a's entry
    a.sync()
    assert tiers.read_file("a", tmp_path).sum() == 5000.0
    for handle in [a, *others]:
        tiers.free(handle.name, "cached", directory=tmp_path)


def test_the_cache_knows_a_file_by_any_spelling_of_its_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    cache = tiers.DramCache(budget=10**6)
    relative = tiers.place("spelled", np.zeros(4), "cached", directory="d", cache=cache)
    assert relative.array.sum() == 0.0  # cached under the relative spelling
    writer = tiers.open_array("spelled", "mapped", directory=tmp_path / "d", writable=True)
    writer.array[:] = 2.0
    writer.sync()  # through the absolute path: the cached copy is stale
    assert relative.array.sum() == 8.0
    tiers.place("spelled", np.full(4, 3.0), "cached", directory=tmp_path / "d", replace=True)
    assert relative.array.sum() == 12.0
    tiers.free("spelled", "cached", directory="d")


def _place_racing(name, i, start, outcomes, directory) -> None:
    start.wait(timeout=60)
    try:
        outcomes[i] = tiers.place(name, np.full(1000, float(i)), "mapped", directory=directory)
    except tiers.TierError as error:
        outcomes[i] = error


def test_two_callers_placing_one_name_at_once_one_gets_the_exists_error(tmp_path):
    for round_ in range(10):
        start, outcomes = threading.Barrier(2), [None, None]
        threads = [
            threading.Thread(target=_place_racing, args=(f"r{round_}", i, start, outcomes, tmp_path)) for i in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        errors = [o for o in outcomes if isinstance(o, tiers.TierError)]
        (winner,) = [o for o in outcomes if isinstance(o, tiers.TierArray)]
        assert len(errors) == 1 and "is on mapped already" in str(errors[0])
        assert winner.array[0] == float(outcomes.index(winner))  # the handle holds its own data
        tiers.free(f"r{round_}", "mapped", directory=tmp_path)


@pytest.mark.filterwarnings("ignore:the matrix subclass")
@pytest.mark.parametrize("tier", ["mapped", "disk", "cached"])
def test_an_array_subclass_is_refused_on_a_file_tier(tmp_path, tier):
    masked = np.ma.MaskedArray([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(tiers.TierError, match="is a numpy.ma.*MaskedArray.*mask"):
        tiers.place("masked", masked, tier, directory=tmp_path)
    with pytest.raises(tiers.TierError, match="is a numpy.*matrix"):
        tiers.place("matrix", np.matrix([[1.0, 2.0]]), tier, directory=tmp_path)
    assert tiers.names(tier, directory=tmp_path) == []
    kept = tiers.place("masked-dram", masked, "dram")  # dram keeps the object as it is
    assert type(kept.array) is np.ma.MaskedArray and kept.array.sum() == 4.0
    tiers.free("masked-dram", "dram")


def test_default_tier_directories_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(tmp_path / "tiers"))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    (tmp_path / "tiers" / "mapped").mkdir(parents=True, mode=0o700)
    os.chmod(tmp_path / "tiers" / "mapped", 0o777)
    placed = tiers.place("private", np.ones(3), "mapped")
    assert os.stat(tmp_path / "tiers" / "mapped").st_mode & 0o777 == 0o700  # made 0700, as documented
    tiers.free("private", "mapped")
    assert placed.path.parent == tmp_path / "tiers" / "mapped"


def test_a_default_tier_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    if os.getuid() != 0:
        pytest.skip("making a directory of another user needs root")
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(tmp_path / "tiers"))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    (tmp_path / "tiers" / "disk").mkdir(parents=True)
    os.chown(tmp_path / "tiers" / "disk", 65534, 65534)
    with pytest.raises(tiers.TierError, match="belongs to user 65534, not to you"):
        tiers.place("theirs", np.ones(3), "disk")


def test_a_tier_directory_that_is_a_file_and_odd_files_give_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(tmp_path / "tiers"))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    (tmp_path / "tiers").mkdir()
    (tmp_path / "tiers" / "mapped").write_text("not a directory")
    for call in (
        lambda: tiers.place("x", np.ones(3), "mapped"),
        lambda: tiers.names("cached"),
        lambda: tiers.open_array("x", "mapped"),
    ):
        with pytest.raises(tiers.TierError, match="exists and is not a directory"):
            call()
    with pytest.raises(tiers.TierError, match="is not a directory: give a directory"):
        tiers.place("x", np.ones(3), "mapped", directory=tmp_path / "tiers" / "mapped")
    staged = tiers.place("freed", np.ones(3), "disk", directory=tmp_path)
    tiers.free("freed", "disk", directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="no tier array 'freed'.*freed"):
        staged.array  # noqa: B018
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(tiers.TierError, match="not a tier file \\(a symlink\\)"):
        tiers.evict_pages(tmp_path / "link")
    with pytest.raises(tiers.TierError, match="not a tier file"):
        tiers.evict_pages(tmp_path)
    shm.copy_in("kept", np.ones(3), directory=tmp_path)
    assert tiers.evict_pages(shm.segment_path("kept", tmp_path)).nbytes > 0
    shm.delete("kept", tmp_path)


def test_a_given_tier_directory_others_could_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # every user may replace files in it
    with pytest.raises(tiers.TierError, match="lets other users replace your tier files"):
        tiers.place("x", np.arange(4.0), "mapped", directory=shared)
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # sticky, as /tmp and /dev/shm: others cannot replace your files
    handle = tiers.place("x", np.arange(4.0), "mapped", directory=shared)
    try:
        assert handle.array.sum() == 6.0
    finally:
        tiers.free("x", "mapped", directory=shared)
