"""Owners: the process a shared segment lives for, named so that the name outlives it.

A kernel killed with SIGKILL cannot remove what it made, so a segment made for an owner (an RRO
copy: the session's process) ends with a record naming that owner and the segment's maker
(:func:`record_for`); :func:`left_by_dead` says from the record whether every process it names is
surely dead, which :mod:`workbench.memory.shm` checks before its ``reclaim`` and ``clean`` free the
segment. Records come from an untrusted directory: :func:`parse_record` accepts only the bytes this
module writes (magic, checksum, no flags, possible pids, boot ids and start times), and a process
that cannot be judged for sure counts as alive.
"""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
from pathlib import Path
from typing import NamedTuple


class Process(NamedTuple):
    """A process, named so that the name outlives it (picklable: a session hands its own to workers).

    ``boot`` (the kernel's 16-byte boot id) and ``pidns`` (the inode of the pid namespace) say where
    it ran: a pid means something only there. ``start`` is its start time in clock ticks after boot
    (``/proc/<pid>/stat`` field 22): a later process given the same pid has another start time, so
    it is never taken for this one.
    """

    boot: bytes
    pidns: int
    pid: int
    start: int


_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no pid is larger
_RECORD_MAGIC = b"LWBOWN\x00\x01"  # an owner record, version 1
_IDENTITY = struct.Struct("<16sQQQ")  # boot, pidns, pid, start
_RECORD = struct.Struct(f"<8s{_IDENTITY.size}s{_IDENTITY.size}sQ8s")  # magic, owner, maker, flags, checksum
RECORD_SIZE = _RECORD.size  # bytes an owner record adds after a segment's data (104)
_SELF: dict[int, Process | None] = {}  # os.getpid() -> this process's name (a fork gets its own)


def _stat_fields(raw: bytes) -> tuple[int, bytes, int]:
    """(pid, state, start time) from the text of ``/proc/<pid>/stat``; ValueError if it is not that.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses: the
    fields after it are counted from the last ``)``.
    """
    head, paren, tail = raw.rpartition(b")")
    fields = tail.split()
    if not paren or len(fields) < 20 or b" (" not in head:
        raise ValueError("not a /proc/<pid>/stat line")
    return int(head.split(b" (", 1)[0]), fields[0], int(fields[19])


def _name_self() -> Process | None:
    """This process's :class:`Process`, or None where it cannot be named (no /proc, no boot id, or
    a /proc of another pid namespace: its pids would not be ours)."""
    try:
        boot = uuid.UUID(Path("/proc/sys/kernel/random/boot_id").read_text().strip()).bytes
        pidns = os.stat("/proc/self/ns/pid").st_ino
        pid, _, start = _stat_fields(Path("/proc/self/stat").read_bytes())
    except (OSError, ValueError):
        return None
    if pid != os.getpid() or pidns <= 0:
        return None
    return Process(boot, pidns, pid, start)


def this_process() -> Process | None:
    """This process, as an owner record names it (see :class:`Process`); None where Linux's /proc
    cannot name it (a segment made with ``owner=None`` is then kept, never reclaimed). Read once
    per process (a forked child names itself again)."""
    pid = os.getpid()
    if pid not in _SELF:
        _SELF.clear()
        _SELF[pid] = _name_self()
    return _SELF[pid]


def _valid_process(process: object) -> bool:
    """Whether ``process`` is a :class:`Process` whose every field is possible."""
    return (
        isinstance(process, Process)
        and isinstance(process.boot, bytes)
        and len(process.boot) == 16
        and all(isinstance(v, int) and not isinstance(v, bool) for v in process[1:])
        and 0 < process.pidns < 1 << 64
        and 0 < process.pid <= _PID_MAX
        and 0 <= process.start < 1 << 63
    )


def check_owner(owner: object) -> Process | None:
    """``owner`` if it is None or a valid :class:`Process`; TypeError saying what to pass otherwise."""
    if owner is None or _valid_process(owner):
        return owner  # type: ignore[return-value]
    raise TypeError(
        f"owner must be an owners.Process (owners.this_process() of the owning process) or None, got {owner!r}"
    )


def _checksum(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=8, person=b"lwb-owner").digest()


def record_for(owner: Process | None) -> bytes:
    """The record a segment made for ``owner`` ends with (owner, then this process as its maker);
    no bytes for a segment kept by name (``owner`` None)."""
    if owner is None:
        return b""
    maker = this_process()
    made = _IDENTITY.pack(*maker) if maker is not None else bytes(_IDENTITY.size)
    body = _RECORD.pack(_RECORD_MAGIC, _IDENTITY.pack(*owner), made, 0, bytes(8))[:-8]
    return body + _checksum(body)


def parse_record(raw: bytes) -> tuple[Process, Process | None] | None:
    """(owner, maker) from an owner record, checked as untrusted input; None unless every byte is
    one this module writes (magic, checksum, no flags, possible pids, boot ids and start times)."""
    if len(raw) != _RECORD.size:
        return None
    magic, owner_raw, maker_raw, flags, check = _RECORD.unpack(raw)
    if magic != _RECORD_MAGIC or flags != 0 or check != _checksum(raw[:-8]):
        return None
    owner = Process(*_IDENTITY.unpack(owner_raw))
    maker = None if maker_raw == bytes(_IDENTITY.size) else Process(*_IDENTITY.unpack(maker_raw))
    if not _valid_process(owner) or (maker is not None and not _valid_process(maker)):
        return None
    return owner, maker


def judge(process: Process) -> str:
    """How ``process`` is: "alive", "dead", or "elsewhere" (another host or pid namespace, or this one cannot be
    named: its pids are not ours to look up). A process whose /proc entry cannot be read for
    another reason counts as alive: only a sure death frees a segment."""
    here = this_process()
    if here is None or process.boot != here.boot or process.pidns != here.pidns:
        return "elsewhere"
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as stat_file:
            raw = stat_file.read()
    except (FileNotFoundError, ProcessLookupError):
        return "dead"
    except OSError:
        return "alive"
    try:
        pid, state, start = _stat_fields(raw)
    except ValueError:
        return "alive"
    if pid != process.pid:
        return "alive"
    if start != process.start or state in (b"Z", b"X", b"x"):  # another process of that pid, or a zombie
        return "dead"
    return "alive"


def left_by_dead(record: tuple[Process, Process | None] | None, verdicts: dict[Process, str] | None = None) -> bool:
    """Whether a segment with this owner record was left by the dead: no process it names is alive,
    and at least one of them is surely dead (an owner on another host is judged by the maker).
    ``verdicts`` remembers each process judged (many segments have one owner)."""
    if record is None:
        return False
    verdicts = {} if verdicts is None else verdicts
    for process in record:
        if process is not None and process not in verdicts:
            verdicts[process] = judge(process)
    found = {verdicts[process] for process in record if process is not None}
    return "alive" not in found and "dead" in found
