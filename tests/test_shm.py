import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.memory import shm

from shm_helpers import hang_in_fill, race, write_forever

ARRAYS = {
    "float64": np.random.default_rng(1).random((100, 7)),
    "structured": np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")], dtype=[("i", ">i4"), ("x", "<f8"), ("s", "S2")]),
    "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "empty": np.zeros((0, 5), np.float32),
    "big-endian": np.arange(10, dtype=">f8"),
    "scalar": np.array(3.5),
    "unicode": np.array(["ab", "cde"]),
    "complex": np.array([1 + 2j, 3 - 4j]),
    "bool-3d": np.random.default_rng(2).random((3, 4, 5)) > 0.5,
}


@pytest.fixture(params=["shm", "file"])
def where(request, tmp_path):
    """Both backings: /dev/shm (POSIX shared memory) and files in a directory."""
    return None if request.param == "shm" else tmp_path


@pytest.fixture
def name(request):
    """A unique segment name per test, deleted afterwards wherever it was made."""
    base = f"test-{os.getpid()}-{request.node.name}"[:150].replace("[", "-").replace("]", "")
    yield base
    shm.delete_prefix(base)


@pytest.mark.parametrize("kind", list(ARRAYS))
def test_dtype_fidelity(kind, where, name):
    original = ARRAYS[kind]
    shared = shm.share(name, original, directory=where)
    again = shm.attach(name, directory=where)
    for view in (shared, again):
        assert view.dtype == original.dtype and view.shape == original.shape
        np.testing.assert_array_equal(view, original)
        assert not view.flags.writeable
        if original.ndim > 1 and original.size:
            assert view.flags.f_contiguous == original.flags.f_contiguous


def test_create_attach_writable_and_readonly(where, name):
    array = shm.create(name, (4, 3), np.int32, directory=where)
    assert array.flags.writeable and not array.any()
    array[1, 2] = 7
    reader = shm.attach(name, directory=where)
    assert reader[1, 2] == 7
    with pytest.raises(ValueError, match="read-only"):
        reader[0, 0] = 1
    shm.attach(name, directory=where, writable=True)[0, 0] = 5
    assert reader[0, 0] == 5  # one copy: every view sees every write
    with pytest.raises(FileExistsError, match="attach\\(\\) to it, or delete\\(\\) it first"):
        shm.create(name, (4, 3), np.int32, directory=where)


def test_views_outlive_delete_and_their_creator(where, name):
    view = shm.share(name, np.arange(1000.0), directory=where)
    assert shm.delete(name, directory=where)
    assert not shm.exists(name, directory=where)
    assert view.sum() == np.arange(1000.0).sum()  # the mapping belongs to the view: still valid
    del view


def test_populate_prefaults(name):
    view = shm.share(name, np.ones(1 << 20), populate=True)
    assert view.sum() == 1 << 20


def test_bad_requests_are_clear(where, name):
    with pytest.raises(TypeError, match="Python object pointers"):
        shm.share(name, np.array([object(), 1]), directory=where)
    with pytest.raises(ValueError, match="segment name must be"):
        shm.create("has/slash", 3, directory=where)
    with pytest.raises(ValueError, match="negative"):
        shm.create(name, (-1, 2), directory=where)
    shm.share(name, np.zeros(3), directory=where)
    with pytest.raises(FileNotFoundError, match="did you mean"):
        shm.attach(name + "x", directory=where)
    with pytest.raises(shm.SharedMemoryError, match="exists with shape \\(3,\\)"):
        shm.attach_or_create(name, (4,), np.float64, lambda out: None, directory=where)
    with pytest.raises(shm.SharedMemoryError, match="directory .* does not exist"):
        shm.create(name, 3, directory="/nonexistent/dir")


def test_sixteen_processes_race_and_one_writes(tmp_path, name):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(16) as pool:
        outcomes = pool.starmap(race, [(name, str(tmp_path))] * 16, chunksize=1)
    assert len({pid for pid, _, _ in outcomes}) == 16
    assert sum(created for _, created, _ in outcomes) == 1  # exactly one writer
    expected = float(np.arange(10_000, dtype=np.float64).sum())
    assert {total for _, _, total in outcomes} == {expected}
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}{name}"]  # no partial, no lock left


def test_writer_killed_mid_write_is_taken_over_and_cleaned(tmp_path, name):
    ready = tmp_path / "ready"
    child = multiprocessing.get_context("spawn").Process(target=hang_in_fill, args=(name, str(tmp_path), str(ready)))
    child.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the child never started writing"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    states = {i.state for i in shm.list_segments(tmp_path)}
    assert states == {"partial", "lock"}  # the dead writer could not tidy up
    view, created = shm.attach_or_create(name, (100,), np.float64, lambda out: out.fill(2.0), directory=tmp_path, timeout=10)
    assert created and view.sum() == 200.0  # the kernel released the dead writer's lock
    removed = shm.clean(tmp_path)
    assert any(".partial-" in r for r in removed)
    assert {i.state for i in shm.list_segments(tmp_path)} == {"complete"}


def test_worker_killed_while_attached_leaves_nothing_clean_cannot_remove(name):
    with workbench.start(n_workers=1, timeout=60) as session:
        ready = Path(f"/tmp/{name}.ready")
        ready.unlink(missing_ok=True)
        session.client.submit(write_forever, name, None, str(ready), pure=False)
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, "the task never shared its array"
            time.sleep(0.05)
        (pid,) = session.run(os.getpid).values()
        segment = next(i for i in shm.list_segments() if i.name == name)
        assert pid in segment.mapped_by
        os.kill(pid, signal.SIGKILL)
        ready.unlink()
    leftovers = [i.name for i in shm.list_segments() if i.name.startswith(name)]
    assert leftovers == [name]  # a complete segment nobody maps any more
    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "clean", "--all", "--prefix", name],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0 and f"removed {name}" in result.stdout
    assert not [i for i in shm.list_segments() if i.name.startswith(name)]


def test_shm_list_command_shows_owner_and_size(name):
    view = shm.share(name, np.zeros((512, 512)))
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "shm", "list"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    line = next(line for line in result.stdout.splitlines() if line.startswith(name))
    assert "complete" in line and "2.00 MiB" in line and str(os.getpid()) in line
    del view


def test_small_dev_shm_gives_a_clear_error(name, monkeypatch):
    monkeypatch.setattr(shm, "free_bytes", lambda directory=None: 64 * 2**20)
    with pytest.raises(shm.SharedMemoryError) as info:
        shm.create(name, (100, 2**20), np.float64)  # 800 MiB
    text = str(info.value)
    assert "800.0 MiB does not fit" in text and "64.0 MiB free" in text and "--shm-size" in text
    assert not shm.exists(name)


def test_a_really_full_tmpfs_fails_cleanly(tmp_path, name):
    mount = tmp_path / "small-shm"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a 1 MiB tmpfs needs root: run as root to test a really full /dev/shm")
    try:
        shm.share(name + "-a", np.zeros(100_000), directory=mount)  # 0.8 MB of 1 MB
        with pytest.raises(shm.SharedMemoryError, match="does not fit|no space"):
            shm.share(name + "-b", np.zeros(100_000), directory=mount)
        assert sorted(p.name for p in mount.iterdir()) == [f"{shm.PREFIX}{name}-a"]  # no partial left
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_mapping_limit_is_known():
    used, limit = shm.mapping_limit()
    assert 0 < used < limit
