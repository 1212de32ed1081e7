"""The tier directories a learner's files go to by default (issue 35, item 5): made 0700 whatever the
umask, every directory on the way checked, and a predictable per-user name someone else made first
(or a symlink there) refused with what to do. tests/test_two_users_tiers.py does it as another user.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import numpy as np
import pytest

from workbench.memory import tiers


@pytest.fixture
def tmpdir_only(tmp_path, monkeypatch):
    """The temporary directory is ``tmp_path/tmp`` (a sticky 1777 directory, as /tmp), and neither
    tier variable is set: the per-user default is used."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    temporary.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.delenv(tiers.TIER_DIR_ENV, raising=False)
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    return temporary


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _base(temporary: Path) -> Path:
    return temporary / f"workbench-tiers-{os.geteuid()}"


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077])
def test_default_directories_are_0700_whatever_the_umask(tmpdir_only, umask):
    old = os.umask(umask)
    try:
        placed = tiers.place("private", np.ones(3), "disk")
        tiers.place("private", np.ones(3), "mapped")
    finally:
        os.umask(old)
    base = _base(tmpdir_only)
    assert placed.path.parent == base / "disk"
    for path in (base, base / "disk", base / "mapped"):
        assert _mode(path) == 0o700, f"{path} is {oct(_mode(path))} under umask {oct(umask)}"
    for tier in ("disk", "mapped"):
        tiers.free("private", tier)


def test_every_directory_made_for_tier_dir_is_0700_under_umask_000(tmp_path, monkeypatch):
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(tmp_path / "a" / "b"))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    old = os.umask(0)
    try:
        where = tiers.default_directory("disk")
    finally:
        os.umask(old)
    assert where == tmp_path / "a" / "b" / "disk"
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", where)] == [0o700] * 3


def test_a_per_user_directory_made_world_writable_before_is_made_private(tmpdir_only):
    base = _base(tmpdir_only)
    base.mkdir()
    base.chmod(0o777)  # this user's, as an older workbench under umask 000 made it
    tiers.default_directory("disk")
    assert _mode(base) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_per_user_directory_another_user_made_first_is_refused(tmpdir_only):
    base = _base(tmpdir_only)
    base.mkdir()
    base.chmod(0o777)
    os.chown(base, 65534, 65534)  # another user got there first
    for call in (lambda: tiers.default_directory("disk"), lambda: tiers.place("x", np.ones(3), "mapped")):
        with pytest.raises(tiers.TierError, match=r"workbench-tiers-\d+ belongs to user 65534, not to you.*"):
            call()
    assert list(base.iterdir()) == []  # nothing of this user's went into it


def test_a_symlink_in_place_of_the_per_user_directory_is_refused(tmpdir_only, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)  # a directory of this user's, even: a link is never followed
    os.symlink(elsewhere, _base(tmpdir_only))
    with pytest.raises(tiers.TierError, match="exists and is not a directory \\(a symbolic link"):
        tiers.place("x", np.ones(3), "disk")
    assert list(elsewhere.iterdir()) == []


def test_a_symlink_in_place_of_a_tier_directory_is_refused(tmpdir_only, tmp_path):
    base = _base(tmpdir_only)
    base.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", base / "mapped")
    with pytest.raises(tiers.TierError, match="mapped exists and is not a directory \\(a symbolic link"):
        tiers.default_directory("cached")


def test_a_directory_others_can_write_is_not_where_private_ones_are_made(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may rename what is in it
    monkeypatch.setenv(tiers.TIER_DIR_ENV, str(shared / "mine"))
    monkeypatch.delenv(tiers.PMEM_ENV, raising=False)
    with pytest.raises(tiers.TierError, match="shared \\(drwxrwxrwx\\) lets other users move or replace"):
        tiers.default_directory("disk")
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot move this user's entries
    assert tiers.default_directory("disk") == shared / "mine" / "disk"


def test_a_pmem_directory_others_can_write_is_refused(tmp_path, monkeypatch):
    pmem = tmp_path / "pmem"
    pmem.mkdir()
    pmem.chmod(0o777)
    monkeypatch.setenv(tiers.PMEM_ENV, str(pmem))
    with pytest.raises(tiers.TierError, match="WORKBENCH_PMEM_DIR.*lets other users replace your tier files"):
        tiers.place("x", np.ones(3), "mapped")
    pmem.chmod(0o700)
    tiers.place("x", np.ones(3), "mapped")
    tiers.free("x", "mapped")


def test_private_from_must_be_above_the_path(tmp_path):
    with pytest.raises(ValueError, match="is not .* or a directory above it"):
        tiers.private_directory(tmp_path / "a", private_from=tmp_path / "b")
