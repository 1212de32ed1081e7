"""Segments that live as long as their owner (issue 35, item 4): the owner record after the data,
``shm.reclaim`` (run by every ``workbench.start()``) and ``shm clean`` freeing what dead owners
left, and never anything of a live owner, of a live mapper, of another user, or of a record that
is not exactly the workbench's own.

Every file here is in a test directory of its own (``directory=``), so nothing another test (or
another user) has in /dev/shm is involved; tests/test_class_server_kills.py does it in /dev/shm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from workbench.memory import owners, shm

WAIT_S = 60.0


def _child(code: str, directory: Path) -> subprocess.Popen[str]:
    """A Python child running ``code`` with ``D`` (the test directory) and ``shm`` defined."""
    prelude = (
        "import json, sys, numpy as np\nfrom pathlib import Path\nfrom workbench.memory import owners, shm\n"
        f"D = Path({str(directory)!r})\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", prelude + code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _identity(line: str) -> owners.Process:
    boot, pidns, pid, start = json.loads(line)
    return owners.Process(bytes.fromhex(boot), pidns, pid, start)


SAY_WHO = "me = owners.this_process(); print(json.dumps([me.boot.hex(), me.pidns, me.pid, me.start]), flush=True)\n"


def _made_by_the_dead(directory: Path, names: dict[str, str]) -> owners.Process:
    """Segments made by a process that then exits: ``names`` maps each name to "owner" (made for the
    child itself) or "kept" (no owner). Returns the dead child's name."""
    code = SAY_WHO + "".join(
        f"shm.share({n!r}, np.arange(1000.0), directory=D, owner=me if {kind == 'owner'} else None)\n"
        for n, kind in names.items()
    )
    child = _child(code, directory)
    out, _ = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0
    return _identity(out.splitlines()[0])


def _live_child(directory: Path, code: str = "") -> tuple[subprocess.Popen[str], owners.Process]:
    """A child that says who it is, runs ``code``, says "ready" and lives until its stdin closes."""
    child = _child(SAY_WHO + code + "print('ready', flush=True)\nsys.stdin.read()\n", directory)
    assert child.stdout is not None
    who = _identity(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    return child, who


def _stop(child: subprocess.Popen[str]) -> None:
    if child.stdin is not None:
        child.stdin.close()
    child.wait(timeout=WAIT_S)
    if child.stdout is not None:
        child.stdout.close()


def _names(directory: Path) -> set[str]:
    return {info.name for info in shm.list_segments(directory)}


def test_a_dead_owners_segment_is_reclaimed_and_one_shared_by_name_is_kept(tmp_path):
    _made_by_the_dead(tmp_path, {"rro-x-table": "owner", "lesson02-readings": "kept"})
    listed = {info.name: info for info in shm.list_segments(tmp_path)}
    assert listed["rro-x-table"].lifetime == "owner" and listed["rro-x-table"].reclaimable
    assert listed["lesson02-readings"].lifetime == "kept" and not listed["lesson02-readings"].reclaimable
    assert not listed["rro-x-table"].owner_alive
    np.testing.assert_array_equal(shm.attach("rro-x-table", directory=tmp_path), np.arange(1000.0))  # data intact
    assert np.load(shm.segment_path("rro-x-table", tmp_path)).sum() == np.arange(1000.0).sum()  # still an .npy
    assert shm.reclaim(tmp_path) == ["rro-x-table"]  # the view above was dropped: nothing maps it
    assert _names(tmp_path) == {"lesson02-readings"}
    assert shm.clean(tmp_path) == []  # kept by name: only --all
    assert shm.clean(tmp_path, everything=True) == ["lesson02-readings"]


def test_a_copy_outlives_its_dead_maker_while_its_owner_lives(tmp_path):
    owner, who = _live_child(tmp_path)  # the session's process
    try:  # a worker makes the copy for the session, then dies (an OOM kill)
        made_for = f"owner=owners.Process(*{tuple(who)!r})"
        maker = _child(f"shm.share('rro-y-t', np.ones(10), directory=D, {made_for})\n", tmp_path)
        maker.communicate(timeout=WAIT_S)
        assert maker.returncode == 0
        (info,) = shm.list_segments(tmp_path)
        assert info.owner_pid == owner.pid and info.owner_alive and not info.reclaimable
        assert shm.reclaim(tmp_path) == [] and shm.clean(tmp_path) == []
    finally:
        owner.kill()
        owner.wait(timeout=WAIT_S)
    assert shm.reclaim(tmp_path) == ["rro-y-t"]  # both dead now


def test_a_live_owners_segment_and_a_mapped_one_are_kept(tmp_path):
    child, who = _live_child(tmp_path, "v = shm.share('mine', np.ones(10), directory=D, owner=me)\n")
    try:
        _made_by_the_dead(tmp_path, {"dead-but-mapped": "owner"})
        view = shm.attach("dead-but-mapped", directory=tmp_path)
        assert shm.reclaim(tmp_path) == [] and shm.clean(tmp_path) == []  # alive / mapped by this process
        del view
        assert shm.reclaim(tmp_path) == ["dead-but-mapped"]
        assert _names(tmp_path) == {"mine"}
    finally:
        _stop(child)
    assert shm.reclaim(tmp_path) == ["mine"]


def _record_of(path: Path) -> tuple[bytes, int]:
    """The owner record's bytes and where it starts (the file's last RECORD_SIZE bytes)."""
    data = path.read_bytes()
    return data[-owners.RECORD_SIZE :], len(data) - owners.RECORD_SIZE


def _record(
    owner: owners.Process, maker: owners.Process | None, flags: int = 0, magic: bytes = b"LWBOWN\x00\x01"
) -> bytes:
    """A record as the module writes it, from any fields (the checksum made right)."""
    body = owners._RECORD.pack(
        magic,
        owners._IDENTITY.pack(*owner),
        owners._IDENTITY.pack(*maker) if maker else bytes(owners._IDENTITY.size),
        flags,
        bytes(8),
    )[:-8]
    return body + owners._checksum(body)


def _forge(directory: Path, name: str, template: Path, record: bytes, cut: int = 0, extra: bytes = b"") -> None:
    """A copy of segment ``template`` under ``name`` with ``record`` in place of its own."""
    data = template.read_bytes()
    data = data[: len(data) - owners.RECORD_SIZE] + record
    path = shm.segment_path(name, directory)
    path.write_bytes(data[: len(data) - cut] + extra)
    path.chmod(0o600)


def test_forged_or_corrupt_records_never_free_a_segment_and_a_dead_one_does(tmp_path):
    dead = _made_by_the_dead(tmp_path, {"template": "owner"})
    template = shm.segment_path("template", tmp_path)
    record, _ = _record_of(template)
    assert owners.parse_record(record) == (dead, dead)
    here = owners.this_process()
    assert here is not None
    elsewhere = dead._replace(boot=bytes(16))  # another host (another boot id)
    reused = here._replace(start=here.start + 1)  # a live process's pid, another start time: pid reuse
    flipped = bytearray(record)
    flipped[20] ^= 1
    kept = {
        "flipped-bit": bytes(flipped),
        "bad-magic": _record(dead, dead, magic=b"LWBOWN\x00\x02"),
        "flags": _record(dead, dead, flags=1),
        "pid-zero": _record(dead._replace(pid=0), dead),
        "pid-huge": _record(dead._replace(pid=1 << 40), dead),
        "start-huge": _record(dead._replace(start=1 << 63), dead),
        "live-owner": _record(here, dead),  # this process owns it
        "live-maker": _record(dead, here),
        "all-elsewhere": _record(elsewhere, elsewhere._replace(pid=dead.pid)),
    }
    freed = {
        "dead": record,
        "reused-pid": _record(reused, dead),  # a pid now someone else's is no owner
        "owner-on-another-host": _record(elsewhere, dead),  # judged by its maker, here and dead
    }
    for name, forged in {**kept, **freed}.items():
        _forge(tmp_path, name, template, forged)
    _forge(tmp_path, "cut-short", template, record, cut=1)  # the record is not where the header says
    _forge(tmp_path, "one-more-byte", template, record, extra=b"\x00")
    (tmp_path / f"{shm.PREFIX}not-npy").write_bytes(b"\x00" * 8192 + record)
    os.chmod(tmp_path / f"{shm.PREFIX}not-npy", 0o600)
    template.unlink()
    assert sorted(shm.reclaim(tmp_path)) == sorted(freed)
    assert _names(tmp_path) == {*kept, "cut-short", "one-more-byte", "not-npy"}
    assert shm.clean(tmp_path) == []  # clean judges records the same way
    for name in kept:  # a forged record never stops a valid segment from being attached
        assert shm.attach(name, directory=tmp_path).sum() == np.arange(1000.0).sum()


def test_a_zombie_owner_is_dead(tmp_path):
    child, who = _live_child(tmp_path, "shm.share('zombie', np.ones(10), directory=D, owner=me)\n")
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while owners.judge(who) == "alive":  # a zombie until reaped below: dead already
        assert time.monotonic() < deadline, "the killed child never became a zombie"
        time.sleep(0.01)
    assert Path(f"/proc/{child.pid}/stat").exists()  # not reaped yet
    assert shm.reclaim(tmp_path) == ["zombie"]
    child.wait(timeout=WAIT_S)
    for stream in (child.stdin, child.stdout):
        stream.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
def test_another_users_file_links_and_fifos_are_never_touched(tmp_path):
    _made_by_the_dead(tmp_path, {"theirs": "owner", "target": "owner"})
    theirs = shm.segment_path("theirs", tmp_path)
    os.chown(theirs, 65534, 65534)  # another user's, with a record that says its owner is dead
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shm.segment_path("target", tmp_path).rename(elsewhere / "target")
    os.symlink(elsewhere / "target", shm.segment_path("link", tmp_path))
    os.mkfifo(shm.segment_path("fifo", tmp_path), 0o600)
    assert shm.reclaim(tmp_path) == [] and shm.clean(tmp_path) == []
    assert theirs.exists() and (elsewhere / "target").exists() and shm.segment_path("link", tmp_path).is_symlink()
    assert {i.name: i.state for i in shm.list_segments(tmp_path)} == {"theirs": "foreign", "link": "foreign",
                                                                      "fifo": "foreign"}  # fmt: skip


def test_a_killed_writers_partial_file_and_lock_are_reclaimed(tmp_path):
    code = (
        "def fill(out):\n    print('filling', flush=True)\n    sys.stdin.read()\n"
        "shm.attach_or_create('half', (1 << 16,), np.float64, fill, directory=D, owner=owners.this_process())\n"
    )
    writer = _child(code, tmp_path)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "filling"
    states = {i.name: i for i in shm.list_segments(tmp_path)}
    partial = f"half{shm.PARTIAL_SUFFIX}{writer.pid}"
    assert states[partial].lifetime == "owner" and not states[partial].reclaimable
    assert shm.reclaim(tmp_path) == []  # its writer lives
    writer.kill()
    writer.wait(timeout=WAIT_S)
    assert sorted(shm.reclaim(tmp_path)) == sorted([partial])
    assert _names(tmp_path) == {f"half{shm.LOCK_SUFFIX}"}  # its lock is free: clean removes it
    assert shm.clean(tmp_path) == [f"half{shm.LOCK_SUFFIX}"]
    for stream in (writer.stdin, writer.stdout):
        stream.close()


def test_the_cli_clean_reclaims_and_says_what(tmp_path):
    _made_by_the_dead(tmp_path, {"rro-cli-a": "owner", "kept": "kept"})
    listed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "list", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "owner dead: clean removes it" in lines["rro-cli-a"] and "owner" not in lines["kept"]
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "clean", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "removed rro-cli-a"
    assert _names(tmp_path) == {"kept"}


def test_owner_must_be_a_process_name():
    with pytest.raises(TypeError, match="owner must be an owners.Process"):
        shm.share("bad-owner", np.ones(3), owner=os.getpid())  # type: ignore[arg-type]
    assert not shm.exists("bad-owner")
