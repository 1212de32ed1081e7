"""Named shared arrays: one copy of an array per node, mapped zero-copy by every process.

A segment is an ``.npy`` file in a directory: ``/dev/shm`` (POSIX shared memory: on Linux
``shm_open`` is exactly a file there, in RAM) or any other directory (``directory=...``: a file on
disk, a DAX or network mount). The ``.npy`` header carries the dtype (structured, byte order),
shape and C/Fortran order, so every fixed-size array round-trips exactly; dtypes that hold
pointers (object, numpy's variable-width strings) are refused.

Lifetimes belong to the project, not to a resource tracker: nothing is unlinked behind the owner's
back, ``delete`` removes a segment, ``list_segments`` shows all of them with owner and age, and
``clean`` removes what dead processes left (``workbench shm list|clean`` on the command line).
A segment made with ``owner=`` (:func:`this_process`: the session's process, a notebook's kernel)
lives as long as that process: after the ``.npy`` data it carries an owner record naming the owner
and the process that made it (a worker, for a copy made on a worker) so that the name survives
them: the host's boot id, the pid namespace, the pid and the process's start time
(``/proc/<pid>/stat`` field 22, so a later process given the same pid is not taken for it). When
every process the record names is dead (a kernel killed with SIGKILL, an OOM kill), ``reclaim``
(run by every ``workbench.start()``) and ``clean`` remove the segment, unless a live process still
maps or holds it open. A process the record names on another host or in another pid namespace is
never judged: an owner elsewhere (a session on a login node, its worker's copy on a compute node)
leaves it to the maker, here. Segments made without ``owner=`` (``share("lesson02-readings", ...)``)
are data kept by name until deleted (or ``clean --all``).
File names carry the prefix ``lwb-<uid>-`` (:data:`PREFIX`: the workbench's mark, then the user's id):
every user on a machine has a namespace of their own in the one shared ``/dev/shm``, so two
learners running the same lesson (``share("lesson02-readings", ...)``) never meet on a name, and
listing and cleaning see only the caller's own files.

Creating is race-tolerant: many processes asking for the same name at once yield exactly one
writer (an ``flock`` on ``<name>~lock`` that the kernel releases if the writer dies); the others
wait, bounded, then attach. The writer fills ``<name>~partial-<pid>`` and renames it into place, so
a segment that exists is always complete. Only a holder of the lock removes a lock file (the
writer, or ``clean``/``delete`` after taking it without waiting), so a second writer can never
start beside a live one. ``~`` is never part of a segment name, so no segment can be taken for a
lock or partial file, nor a lock or partial file for a segment.

Every file in the directory is untrusted input (anyone who can write to ``/dev/shm`` can plant
one). The trust model: a file is used (attached, listed as ours, locked, removed by ``clean``)
only if it is a regular file owned by this user, opened without following symlinks
(``O_NOFOLLOW``) and without blocking (a planted FIFO cannot hang us); anything else is "foreign":
listed, never opened, never removed. "This user" is the effective uid, root included: root trusts
only root's files. A segment of ours is attached only if its header is this module's own: ``.npy``
version 2.0, data on a page boundary, a fixed-size dtype without pointers, a sane shape whose
bytes fit in the file (mapping past the end would be SIGBUS on read), and only if no other user
may write it (they could truncate it under the mapping). The directory itself is the caller's
choice and is trusted. Space is reserved with ``posix_fallocate`` before mapping: a full
``/dev/shm`` then fails with a clear error instead of killing the process with SIGBUS. An owner
record is untrusted like the rest: it is used only if its size, magic, checksum and every field are
valid, and one that is not (or names a live process, or a process this host cannot see) keeps the
segment; it never makes anything of another user's, or anything a live process maps, removable.
"""

from __future__ import annotations

import errno
import fcntl
import io
import math
import mmap
import operator
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.lib import format as npy

from workbench.memory.owners import (
    RECORD_SIZE,
    Process,
    check_owner,
    judge,
    left_by_dead,
    parse_record,
    record_for,
)
from workbench.units import size_text

T = TypeVar("T")

FAMILY_PREFIX = "lwb-"  # every workbench file in a segment directory starts with this
# This user's files: a per-user part keeps learners sharing a machine (one /dev/shm) apart. The
# effective uid at import: the user whose files the module makes and trusts (see _this_user).
PREFIX = f"{FAMILY_PREFIX}{os.geteuid()}-"
SHM_DIR = Path("/dev/shm")
DEFAULT_TIMEOUT = 60.0  # seconds a process waits for another to finish writing a segment
_NAME_CHARS = r"[A-Za-z0-9_.=+-]"
_NAME = re.compile(_NAME_CHARS + r"{1,200}")  # always fullmatch: no "~" (helper files), no newline
LOCK_SUFFIX = "~lock"
PARTIAL_SUFFIX = "~partial-"
_HELPER = re.compile(  # a helper file of segment <name>: its lock, or a writer's partial file
    rf"(?P<name>{_NAME_CHARS}{{1,200}})(?:{re.escape(LOCK_SUFFIX)}|{re.escape(PARTIAL_SUFFIX)}(?P<pid>[1-9][0-9]{{0,9}}))"
)
_HEADER_ALIGN = 4096  # data starts on a page boundary: aligned views, page-granular faults
# numpy reads at most 10,000 bytes of header text by default (numpy.load too): the largest
# page-padded header under that is 8192 bytes, so every segment stays readable by numpy.load
_HEADER_MAX = 8192
_MAX_DIMS = 64  # numpy's limit on dimensions
_MAX_BYTES = 2**63 - 1  # numpy sizes an array in a signed 64-bit integer (its zero dimensions aside)
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no symlink, no hang on a planted FIFO
# numpy parses .npy header text with ast.literal_eval, and CPython 3.11 keeps the AST builder's
# recursion counter per interpreter, not per thread (gh-106905): two threads parsing at once can
# fail with "SystemError: AST constructor recursion depth mismatch". Our own readers take turns;
# a clash with another library's thread is retried (the counter is reset on every parse).
_HEADER_PARSE_LOCK = threading.Lock()
_HEADER_PARSE_TRIES = 5
_LEAF_KINDS = frozenset("biufcmMSUV")  # bool, ints, floats, complex, datetimes, bytes, str, void


class SharedMemoryError(RuntimeError):
    """A shared-memory operation that cannot be done as asked (says why and what to do)."""


@dataclass(frozen=True)
class SegmentInfo:
    """What ``list_segments`` reports for one file.

    ``name`` is the segment name (for a lock or partial file, the whole file name after the
    prefix). For a "foreign" file whose name the workbench never makes, control and non-ASCII
    characters are escaped, so the name can be printed safely; ``path`` is always the real path.
    """

    name: str
    path: Path
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int
    owner_pid: int | None
    owner_alive: bool
    mapped_by: tuple[int, ...]
    age_s: float
    state: str  # "complete", "partial" (being written, or left by a dead writer), "lock", "unreadable", "foreign"
    lifetime: str = "kept"  # "kept" (until deleted) or "owner" (made with owner=: lives as long as its owner)
    reclaimable: bool = False  # lifetime "owner" and every process its record names is dead (see reclaim)


# -- names and places --------------------------------------------------------------------------
def _directory(directory: str | Path | None) -> Path:
    path = SHM_DIR if directory is None else Path(directory)
    if not path.is_dir():
        if directory is None:
            raise SharedMemoryError(
                "POSIX shared memory needs /dev/shm (Linux); pass directory=... to back arrays with files instead"
            )
        if path.exists():
            raise SharedMemoryError(
                f"{path} is not a directory: name the directory that holds (or will hold) the segments"
            )
        raise SharedMemoryError(f"directory {path} does not exist: create it or choose another")
    return path


def _check_name(name: str, what: str = "segment name") -> str:
    """``name`` if it is 1-200 of the allowed characters (whole string: no newline, no ``~``)."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__} {name!r}")
    if not _NAME.fullmatch(name):
        raise ValueError(f"{what} must be 1-200 characters of letters, digits and _ . = + -, got {name!r}")
    return name


def segment_path(name: str, directory: str | Path | None = None) -> Path:
    """Where segment ``name`` lives (the file name carries this user's prefix, :data:`PREFIX`)."""
    return _directory(directory) / f"{PREFIX}{_check_name(name)}"


def _present(path: Path) -> bool:
    """Whether anything (a symlink too, dangling or not) has this name: the name is taken."""
    return os.path.lexists(path)


# -- capacity ----------------------------------------------------------------------------------
def free_bytes(directory: str | Path | None = None) -> int:
    """Bytes an unprivileged process can still write in ``directory`` (default /dev/shm)."""
    stats = os.statvfs(_directory(directory))
    return stats.f_bavail * stats.f_frsize


def _require_space(nbytes: int, directory: str | Path | None) -> None:
    free = free_bytes(directory)
    if nbytes > free:
        where = _directory(directory)
        raise SharedMemoryError(
            f"a shared array of {size_text(nbytes)} does not fit: {where} has {size_text(free)} free. "
            f"Free space ('workbench shm clean' removes leftovers), use a smaller size, back the array with "
            f"files (directory=...), or give the container more shared memory (docker run --shm-size=4g)."
        )


def mapping_limit() -> tuple[int, int]:
    """(mappings this process has now, the kernel's per-process limit vm.max_map_count)."""
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
        with open("/proc/self/maps") as maps:
            used = sum(1 for _ in maps)
    except OSError:
        return 0, 1 << 31
    return used, limit


def _require_mapping_slot() -> None:
    used, limit = mapping_limit()
    if used >= limit - 16:  # leave room for the allocator and libraries
        raise SharedMemoryError(
            f"this process has {used} memory mappings, the kernel allows {limit} (vm.max_map_count): "
            "delete arrays no longer needed, or raise the limit (sysctl -w vm.max_map_count=262144)"
        )


# -- dtypes and the header ---------------------------------------------------------------------
def _dtype_problem(dtype: np.dtype) -> str | None:
    """Why arrays of ``dtype`` cannot live in shared memory (it holds pointers), or None.

    An allow-list, walked through fields and subarrays: only numpy's fixed-size kinds (bool,
    numbers, datetimes, bytes, str, raw void). A pointer mapped from another process (an object,
    a variable-width string) would be dereferenced: a crash at best.
    """
    if dtype.hasobject:
        return f"dtype {dtype} holds Python object pointers, which mean nothing in another process"
    if dtype.fields is not None:
        for field_dtype, *_ in dtype.fields.values():
            if problem := _dtype_problem(field_dtype):
                return problem
        return None
    if dtype.subdtype is not None:
        return _dtype_problem(dtype.subdtype[0])
    if dtype.kind not in _LEAF_KINDS or (dtype.kind == "V" and dtype.type is not np.void):
        return f"dtype {dtype} is not one of numpy's fixed-size types (it may hold pointers)"
    return None


def _check_dtype(dtype: object) -> np.dtype:
    """``dtype`` as a numpy dtype a segment can hold; TypeError naming the problem otherwise."""
    try:
        checked = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype {dtype!r} is not a numpy dtype ({error})") from None
    if problem := _dtype_problem(checked):
        raise TypeError(
            f"cannot share arrays of {problem}: convert to a fixed-size dtype first "
            "(numbers, 'U20' for strings, a structured dtype for records)"
        )
    return checked


def _short(dtype: np.dtype) -> str:
    """``dtype`` for an error message: a record of hundreds of fields is cut, with its field count."""
    text = str(dtype)
    return text if len(text) <= 160 else f"{text[:120]}... ({len(dtype.names or ())} fields)"


def _header(shape: tuple[int, ...], dtype: np.dtype, fortran: bool) -> bytes:
    """An .npy version-2 header padded so the data starts on a page boundary.

    Refuses (ValueError) a dtype the header cannot carry exactly, or whose header would be too
    long for numpy to read back: such a segment could be written but never attached.
    """
    try:
        descr = npy.dtype_to_descr(dtype)
    except ValueError as error:
        raise ValueError(
            f"dtype {_short(dtype)} cannot be described in an .npy header ({error}): "
            "use a structured dtype whose fields "
            "neither overlap nor go out of order"
        ) from None
    back = npy.descr_to_dtype(descr)
    if back != dtype:
        raise ValueError(
            f"dtype {dtype} would come back from an .npy header as {back}, not exactly as it is: share it as {back}"
        )
    buffer = io.BytesIO()
    try:
        npy.write_array_header_2_0(buffer, {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)})
    except UnicodeEncodeError:
        raise ValueError(
            f"the field names of dtype {_short(dtype)} are not all Latin-1 characters, which an .npy version-2 header "
            "needs: rename the fields"
        ) from None
    raw = buffer.getvalue()
    if len(raw) > _HEADER_MAX:
        raise ValueError(
            f"dtype {_short(dtype)} needs a {len(raw)}-byte .npy header; "
            f"the workbench allows {_HEADER_MAX} bytes (numpy reads "
            "at most 10,000), so the segment could not be attached: use fewer or shorter fields (or several arrays)"
        )
    total = -(-len(raw) // _HEADER_ALIGN) * _HEADER_ALIGN
    # keep it a valid .npy header: pad the dict text with spaces before its final newline
    body = raw[12:-1] + b" " * (total - len(raw)) + b"\n"
    return raw[:8] + (len(body)).to_bytes(4, "little") + body


def _read_header(fd: int, path: Path) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Shape, dtype, order and data offset from a segment's header, checked as untrusted input.

    Refused (``SharedMemoryError``) unless the header is one this module writes: ``.npy`` 2.0 with
    the data on a page boundary within the first ``_HEADER_MAX`` bytes (checked before numpy reads
    the text, so a lying length cannot make us read a huge file), a fixed-size dtype without
    pointers and not a subarray, at most 64 dimensions, no negative sizes, and data that fits in
    the file (mapping past the end: SIGBUS on read).
    """
    size = os.fstat(fd).st_size
    prefix = os.pread(fd, 12, 0)
    if len(prefix) < 12 or prefix[:6] != npy.MAGIC_PREFIX:
        problem = "it does not start with an .npy header"
    elif prefix[6:8] != b"\x02\x00":
        problem = f"its .npy format version is {prefix[6]}.{prefix[7]}, the workbench writes 2.0"
    else:
        offset = 12 + int.from_bytes(prefix[8:12], "little")
        if offset % _HEADER_ALIGN or offset > _HEADER_MAX:
            problem = (
                f"its data starts at byte {offset}, not on a page boundary within {_HEADER_MAX} bytes "
                "as the workbench writes it"
            )
        else:
            text = os.pread(fd, offset - 12, 12)
            try:
                shape, fortran, dtype = _parse_header(prefix[8:] + text)
            except Exception as error:  # untrusted text: whatever numpy's parser raises on it
                problem = f"its header cannot be read ({type(error).__name__}: {error})"
            else:
                problem = _header_problem(shape, dtype, offset, size)
    if problem:
        raise SharedMemoryError(
            f"{path} is not a valid workbench shared array: {problem}. Delete it if it is not yours"
        )
    return shape, dtype, fortran, offset


def _past_ast_race(call: Callable[[], T]) -> T:
    """``call()``, tried again when it meets CPython 3.11's AST race (gh-106905); any other error is raised."""
    for attempt in range(_HEADER_PARSE_TRIES):
        try:
            return call()
        except SystemError as error:  # another thread was building an AST meanwhile
            if "recursion depth mismatch" not in str(error) or attempt == _HEADER_PARSE_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _parse_header(raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """numpy's own .npy 2.0 header parser, safe to call from several threads at once."""

    def parse() -> tuple[tuple[int, ...], bool, np.dtype]:
        with _HEADER_PARSE_LOCK:
            return npy.read_array_header_2_0(io.BytesIO(raw))

    return _past_ast_race(parse)


def load_npy(path: str | os.PathLike[str], mmap_mode: str | None = None) -> np.ndarray:
    """``np.load`` of a plain .npy file (no pickles), retried on CPython 3.11's AST race (gh-106905).

    For callers that read .npy files in worker threads (the file and page-cache baselines): numpy
    parses the header with ``ast.literal_eval``, which can fail spuriously while another thread
    builds an AST; the failure is retried, any other error is raised as it is. (No lock: a full
    read must not hold up the other threads.)
    """
    return _past_ast_race(lambda: np.load(path, mmap_mode=mmap_mode, allow_pickle=False))


def _shape_problem(shape: tuple[int, ...], itemsize: int) -> str | None:
    """Why numpy cannot make an array of this shape and item size, or None.

    The same rules as numpy's own (checked before it is asked, so every caller gets one clear
    message): at most 64 dimensions, none negative, and the bytes of the non-zero dimensions
    countable in a signed 64-bit integer, even when another dimension is zero.
    """
    if len(shape) > _MAX_DIMS:
        return f"shape has {len(shape)} dimensions, more than numpy's {_MAX_DIMS}"
    if any(n < 0 for n in shape):
        return f"shape {shape} has negative sizes"
    if math.prod(n for n in shape if n) * itemsize > _MAX_BYTES:
        return f"shape {shape} of {itemsize}-byte items has more bytes than numpy can count"
    return None


def _header_problem(shape: tuple[int, ...], dtype: np.dtype, offset: int, size: int) -> str | None:
    """What is wrong with a parsed header that this module would never have written, or None."""
    if dtype.subdtype is not None:
        return f"its dtype {dtype} is a subarray dtype, which the workbench never writes"
    if problem := _dtype_problem(dtype):
        return f"its {problem}"
    if dtype.itemsize == 0:
        return f"its dtype {dtype} holds no bytes"
    if problem := _shape_problem(shape, dtype.itemsize):
        return f"its {problem}"
    count = math.prod(shape)
    if offset + count * dtype.itemsize > size:
        return (
            f"its header promises {count * dtype.itemsize} bytes of data "
            f"but the file holds {max(0, size - offset)} (truncated?)"
        )
    return None


# -- files in an untrusted directory ----------------------------------------------------------
def _not_ours(info: os.stat_result) -> str | None:
    """Why a file with this (l)stat is not one the workbench may use, or None if it may."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != _this_user():
        return f"belongs to user {info.st_uid}, not to this user ({_this_user()})"
    return None


def _this_user() -> int:
    """The user whose files the workbench trusts: the effective uid, which owns the files it creates."""
    return os.geteuid()


def _refusal(path: Path, reason: str) -> SharedMemoryError:
    """The error for a file the workbench will not use: what it is, and what to do."""
    return SharedMemoryError(
        f"{path} {reason}: refused (the workbench uses only regular files of its own user, and never follows links). "
        "Remove it if it is yours, ask its owner to, or use another name or directory"
    )


def _open_own(path: Path, flags: int) -> int:
    """A descriptor of ``path`` if it is a regular file of this user, opened with ``flags``.

    Symlinks are not followed (``O_NOFOLLOW``) and the open does not block (``O_NONBLOCK``: a
    FIFO planted under the name cannot hang us). ``FileNotFoundError`` and (with ``O_EXCL``)
    ``FileExistsError`` pass through for the caller to handle; anything else is refused. A file
    this call created (``O_EXCL``) but cannot use, because the directory gives new files another
    owner (a root-squashed network mount), is removed again: nothing is left behind.
    """
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, 0o600)
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refusal(path, "is a symbolic link") from None
        if error.errno == errno.EISDIR:
            raise _refusal(path, "is a directory") from None
        raise _refusal(path, f"cannot be opened ({error.strerror})") from None
    reason = _not_ours(os.fstat(fd))
    if reason:
        os.close(fd)
        if flags & os.O_EXCL:
            path.unlink(missing_ok=True)
            reason += " although this process has just created it (does the directory give new files another owner?)"
        raise _refusal(path, reason)
    return fd


def _open_lock(path: Path) -> int:
    """Open lock file ``path``, creating it if there is none; ``FileNotFoundError`` if its holder
    removed it between the two tries (the caller tries again)."""
    try:
        return _open_own(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return _open_own(path, os.O_RDWR)


def _create_partial(partial: Path) -> int:
    """Create this writer's partial file. One already there with this process's id was left by an
    earlier process of the same id (ids are reused): the caller holds the segment's lock, so it is
    stale, and replaced if it is ours. Anything else under that name is refused."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
    try:
        return _open_own(partial, flags)
    except FileExistsError:
        pass
    try:
        reason = _not_ours(os.lstat(partial))
    except FileNotFoundError:
        reason = None
    if reason:
        raise _refusal(partial, reason)
    partial.unlink(missing_ok=True)
    return _open_own(partial, flags)


# -- owners: the record a segment made for an owner ends with ------------------------------
def _read_record(fd: int, path: Path) -> tuple[Process, Process | None] | None:
    """The owner record of the open segment (or partial file) ``fd``, or None: no record (a segment
    kept by name), or anything not exactly a valid header, data and a valid record after it."""
    try:
        shape, dtype, _, offset = _read_header(fd, path)
    except SharedMemoryError:
        return None
    end = offset + math.prod(shape) * dtype.itemsize
    if os.fstat(fd).st_size != end + RECORD_SIZE:
        return None
    return parse_record(os.pread(fd, RECORD_SIZE, end))


# -- the mapped array --------------------------------------------------------------------------
MAP_SHARED_VALIDATE = 0x03  # Linux; Python's mmap module does not name these two
MAP_SYNC = 0x80000  # writes reach persistent memory without msync (DAX mounts only)


def _map(path: Path, writable: bool, populate: bool, sync: bool = False) -> np.ndarray:
    """Map a complete segment; the array's base chain owns the mapping (no use-after-unmap).

    A file other users may write is refused too: they could truncate it under the mapping, and
    reading the lost pages would kill this process with SIGBUS (the workbench makes its files 0600).
    ``sync``: map with ``MAP_SYNC`` (a DAX file system: stores are persistent once flushed from
    the CPU caches, no ``msync``); the kernel refuses it elsewhere, which raises a clear error.
    """
    _require_mapping_slot()
    fd = _open_own(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        mode = os.fstat(fd).st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SharedMemoryError(
                f"{path} is writable by other users ({stat.filemode(mode)}): they could truncate it while it is "
                "mapped, and reading it would then crash this process. The workbench makes its segments 0600: "
                "'chmod go-w' it if you trust them, or delete it"
            )
        shape, dtype, fortran, offset = _read_header(fd, path)
        length = offset + math.prod(shape) * dtype.itemsize  # never more than the header says (checked to fit)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = (MAP_SHARED_VALIDATE | MAP_SYNC if sync else mmap.MAP_SHARED) | (mmap.MAP_POPULATE if populate else 0)
        try:
            mapping = mmap.mmap(fd, length, flags=flags, prot=prot)
        except OSError as error:
            if not sync or error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            raise SharedMemoryError(
                f"{path} cannot be mapped with MAP_SYNC ({error.strerror}): only a DAX mount (persistent memory) "
                "supports it; map it without sync=True"
            ) from None
    finally:
        os.close(fd)  # the mapping stays valid after the descriptor is closed
    try:
        view = np.ndarray(shape, dtype=dtype, buffer=mapping, offset=offset, order="F" if fortran else "C")
    except BaseException:
        mapping.close()
        raise
    if not writable:
        view.flags.writeable = False
    return view


def _map_new(path: Path, writable: bool, populate: bool) -> np.ndarray:
    """Map a segment this process has just written; if that fails, remove it (nothing is left)."""
    try:
        return _map(path, writable=writable, populate=populate)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


class _Layout(NamedTuple):
    """A new segment's checked shape, dtype and order, and the header that describes them."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    header: bytes

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _layout(shape: object, dtype: object, order: str) -> _Layout:
    """Check a new segment's shape, dtype and order before any file is made.

    A subarray dtype's dimensions move into the shape, as numpy does for its own arrays (the
    header could not carry the subarray otherwise).
    """
    try:
        dims = tuple(operator.index(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    checked = _check_dtype(dtype)
    while checked.subdtype is not None:
        checked, inner = checked.subdtype
        dims += inner
    if checked.itemsize == 0:
        raise TypeError(f"dtype {checked} holds no bytes: there is nothing to share")
    if problem := _shape_problem(dims, checked.itemsize):
        raise ValueError(f"cannot make a shared array: its {problem}; use a smaller shape")
    fortran = order == "F" and len(dims) > 1
    return _Layout(dims, checked, fortran, _header(dims, checked, fortran))


def _write_new(
    path: Path,
    layout: _Layout,
    fill: Callable[[np.ndarray], None] | np.ndarray | None,
    directory: str | Path | None,
    owner: Process | None = None,
) -> None:
    """Write a complete segment at ``path`` through a partial file and an atomic rename.

    ``fill`` is a function that fills a writable view, or an array whose bytes are copied with
    ``pwrite``: no mapping and so no page fault per 4 KiB (measured 3x faster for 1 GB). On any
    failure the partial file is removed. With ``owner``, the owner record goes after the data,
    written before the data: a partial file a killed writer left says whose it was too.
    """
    header, nbytes, record = layout.header, layout.nbytes, record_for(owner)
    _require_space(len(header) + nbytes + len(record), directory)
    partial = path.with_name(f"{path.name}{PARTIAL_SUFFIX}{os.getpid()}")
    fd = _create_partial(partial)
    try:
        os.write(fd, header)
        if record:
            os.pwrite(fd, record, len(header) + nbytes)
        if nbytes and isinstance(fill, np.ndarray):
            _pwrite_all(fd, fill, len(header), directory)
        elif nbytes:
            try:
                os.posix_fallocate(fd, 0, len(header) + nbytes)  # reserve now: no SIGBUS later
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                raise SharedMemoryError(
                    f"no space for {size_text(nbytes)} in {partial.parent} ({size_text(free_bytes(directory))} free): "
                    "free space ('workbench shm clean'), use a smaller size or back with files"
                ) from None
            if fill is not None:
                _fill_through_mapping(fd, layout, fill)
        os.rename(partial, path)  # atomic: readers see nothing, or the whole segment
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def _fill_through_mapping(fd: int, layout: _Layout, fill: Callable[[np.ndarray], None]) -> None:
    """Call ``fill`` on a writable view of the new file's data.

    The mapping is never closed here: numpy does not count its views as users of the mapping, so
    closing it while ``fill`` kept the view (or a slice of it) would leave that view on unmapped
    memory, a crash on its next access. The view owns the mapping instead, which is unmapped when
    the last view of it goes (at once, when ``fill`` kept none).
    """
    view = np.ndarray(
        layout.shape,
        dtype=layout.dtype,
        offset=len(layout.header),
        order="F" if layout.fortran else "C",
        buffer=mmap.mmap(
            fd, len(layout.header) + layout.nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
        ),
    )
    fill(view)


def _pwrite_all(fd: int, array: np.ndarray, offset: int, directory: str | Path | None) -> None:
    """Copy the array's bytes (C or Fortran order, as stored) into the file at ``offset``."""
    # bytes in storage order; a uint8 view, since memoryview refuses some dtypes (datetime64, ...)
    data = memoryview(np.ravel(array, order="K").view(np.uint8))
    written = 0
    try:
        while written < len(data):
            written += os.pwrite(fd, data[written : written + (1 << 30)], offset + written)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise SharedMemoryError(
            f"no space for {size_text(len(data))} in {_directory(directory)} ({size_text(free_bytes(directory))} "
            "free): free space ('workbench shm clean'), use a smaller size or back with files"
        ) from None


def _check_fill(fill: object, layout: _Layout) -> None:
    """A fill is a function, None (zeros), or an array exactly like the segment, stored in its order."""
    if fill is None or (callable(fill) and not isinstance(fill, np.ndarray)):
        return
    if not isinstance(fill, np.ndarray):
        raise TypeError(f"fill must be a function that fills a view, or a numpy array, got {type(fill).__name__}")
    if fill.shape != layout.shape or fill.dtype != layout.dtype:
        raise ValueError(
            f"the fill array has shape {fill.shape} and dtype {fill.dtype}, the segment {layout.shape} and "
            f"{layout.dtype}: pass matching shape and dtype (copy_in/share take them from the array)"
        )
    if not (fill.flags.f_contiguous if layout.fortran else fill.flags.c_contiguous):
        order = "F" if layout.fortran else "C"
        raise ValueError(
            f"the fill array must be {order}-contiguous, like the segment: np.require(fill, requirements='{order}')"
        )


def _check_timeout(timeout: object) -> float:
    """``timeout`` as seconds >= 0 (a NaN or negative wait would never end, or never start)."""
    try:
        seconds = float(timeout)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not seconds >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return seconds


# -- public operations -------------------------------------------------------------------------
def create(
    name: str,
    shape: int | tuple[int, ...],
    dtype: object = np.float64,
    *,
    order: str = "C",
    directory: str | Path | None = None,
    populate: bool = False,
    owner: Process | None = None,
) -> np.ndarray:
    """Create a zeroed shared array and return a writable view of it.

    Fails if ``name`` exists (``delete`` it first, or ``attach`` to it). A failed create leaves
    nothing behind: no segment, lock or partial file. ``owner``: the process it lives for (see the
    module's text; None: kept until deleted).
    """
    layout = _layout(shape, dtype, order)
    owner = check_owner(owner)
    path = segment_path(name, directory)
    with _writer_lock(path, DEFAULT_TIMEOUT):
        if _present(path):
            raise FileExistsError(f"shared array {name!r} exists at {path}: attach() to it, or delete() it first")
        _write_new(path, layout, None, directory, owner)
        return _map_new(path, writable=True, populate=populate)


def share(
    name: str,
    array: np.ndarray,
    *,
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    owner: Process | None = None,
) -> np.ndarray:
    """Copy ``array`` into shared array ``name`` (once per node) and return a view of the shared copy.

    The paper's copy constructor. If ``name`` already exists (another process shared it first,
    with the same bytes by construction), the existing copy is attached instead. ``owner``: the
    process a new copy lives for (None: kept until deleted).
    """
    view, _ = copy_in(
        name, array, directory=directory, writable=writable, populate=populate, timeout=timeout, owner=owner
    )
    return view


def copy_in(
    name: str,
    array: np.ndarray,
    *,
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    owner: Process | None = None,
) -> tuple[np.ndarray, bool]:
    """``share``, also saying whether this call made the segment: ``(view, created)``.

    C- and Fortran-ordered arrays are copied as they are stored; any other layout is made
    C-contiguous first. Every fixed-size dtype round-trips exactly (dtype, byte order, shape).
    """
    array = np.asarray(array)
    fortran = array.flags.f_contiguous and not array.flags.c_contiguous
    source = array if (fortran or array.flags.c_contiguous) else np.ascontiguousarray(array)
    return attach_or_create(
        name,
        array.shape,
        array.dtype,
        source,
        order="F" if fortran else "C",
        directory=directory,
        writable=writable,
        populate=populate,
        timeout=timeout,
        owner=owner,
    )


def attach(
    name: str,
    *,
    writable: bool = False,
    directory: str | Path | None = None,
    populate: bool = False,
    sync: bool = False,
) -> np.ndarray:
    """Map an existing shared array: read-only by default (writes raise), writable on request.

    Only a regular file of this user whose header is the workbench's own is mapped (see the
    module's trust model); anything else raises ``SharedMemoryError`` saying what is wrong.
    """
    path = segment_path(name, directory)
    if not _present(path):
        hint = _similar(name, directory)
        raise FileNotFoundError(f"no shared array {name!r} in {path.parent}{hint}; 'workbench shm list' shows them all")
    return _map(path, writable=writable, populate=populate, sync=sync)


def replace(
    name: str,
    array: np.ndarray | None = None,
    *,
    fill: Callable[[np.ndarray], None] | None = None,
    shape: int | tuple[int, ...] | None = None,
    dtype: object = None,
    directory: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    owner: Process | None = None,
) -> None:
    """Write a new version of segment ``name`` (made if missing), atomically.

    The new bytes go to a partial file renamed over the old segment only once complete: a writer
    killed half-way leaves the previous version whole and readable (its partial file is what
    ``clean`` removes). Mappings of the previous version stay valid (they keep its old file).
    Give ``array`` (copied in, its shape and dtype), or ``fill`` with ``shape`` and ``dtype``.
    ``owner``: the process the new version lives for (see :func:`create`; a store backend's tier files).
    """
    owner = check_owner(owner)
    if (array is None) == (fill is None):
        raise TypeError("replace takes an array, or a fill function with shape and dtype (one of them)")
    if array is not None:
        array = np.asarray(array)
        source = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        layout, content = _layout(array.shape, array.dtype, "C"), source
    else:
        if shape is None or dtype is None:
            raise TypeError("replace with a fill function needs shape= and dtype=")
        layout, content = _layout(shape, dtype, "C"), fill
    _check_fill(content, layout)
    path = segment_path(name, directory)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise SharedMemoryError(
            f"{path} exists and is not an array file ({stat.filemode(info.st_mode)}: a directory, link or device): "
            "the workbench never makes one; remove it yourself, or choose another name"
        )
    if info is not None and (reason := _not_ours(info)) is not None:
        raise _refusal(path, reason)  # another user's file: never replaced (a sticky /dev/shm refuses it anyway)
    with _writer_lock(path, _check_timeout(timeout)):
        _write_new(path, layout, content, directory, owner)


def attach_or_create(
    name: str,
    shape: int | tuple[int, ...],
    dtype: object,
    fill: Callable[[np.ndarray], None] | np.ndarray | None,
    *,
    order: str = "C",
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    owner: Process | None = None,
) -> tuple[np.ndarray, bool]:
    """Attach ``name``, creating it if nobody has: ``(view, created)``.

    ``fill`` fills a writable view of the new segment, or is an array (of this shape and dtype, in
    the given ``order``) whose bytes are copied in; None leaves zeros. ``owner``: the process a new
    segment lives for (see the module's text; None: kept until deleted).

    Any number of processes may call this at once: exactly one writes, the others wait (at most
    ``timeout`` seconds) until the segment is complete and attach it. If the writer dies, the next
    waiter takes over. If this call fails while creating (``fill`` raised, no space), nothing of
    it is left in the directory.
    """
    layout = _layout(shape, dtype, order)
    _check_fill(fill, layout)
    timeout = _check_timeout(timeout)
    owner = check_owner(owner)
    path = segment_path(name, directory)
    if not _present(path):
        with _writer_lock(path, timeout):
            if not _present(path):  # nobody finished it while we waited for the lock
                _write_new(path, layout, fill, directory, owner)
                return _map_new(path, writable=writable, populate=populate), True
    view = _map(path, writable=writable, populate=populate)
    if view.shape != layout.shape or view.dtype != layout.dtype:
        raise SharedMemoryError(
            f"shared array {name!r} exists with shape {view.shape} and dtype {view.dtype}, "
            f"not {layout.shape} and {layout.dtype}: use another name (or version) for different data"
        )
    return view, False


def exists(name: str, directory: str | Path | None = None) -> bool:
    """Whether the name is taken: a segment, or something planted under its name (which ``attach`` refuses)."""
    return _present(segment_path(name, directory))


def delete(name: str, directory: str | Path | None = None) -> bool:
    """Remove segment ``name`` and a lock file a dead writer left (existing views stay valid until dropped).

    True if the segment existed. Only directory entries are removed: a symlink under the name is
    removed itself, its target never. A lock a live writer holds is left to it.
    """
    path = segment_path(name, directory)
    try:
        os.unlink(path)
        removed = True
    except FileNotFoundError:
        removed = False
    except PermissionError:
        raise SharedMemoryError(
            f"{path} cannot be removed (permission denied): it belongs to another user, who must remove it, "
            "or the directory is not writable by you"
        ) from None
    except IsADirectoryError:
        raise SharedMemoryError(
            f"{path} is a directory, not a shared array (the workbench never makes one): remove it yourself"
        ) from None
    _remove_free_lock(path.with_name(path.name + LOCK_SUFFIX))
    return removed


def _try_lock(fd: int) -> bool:
    """Take the exclusive ``flock`` on ``fd`` if nobody holds it; False at once if someone does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a lock holder may have removed it meanwhile)."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _remove_free_lock(path: Path) -> bool:
    """Remove the lock file ``path`` if it is ours and no writer holds it; True if removed.

    Only a holder of the lock ever removes a lock file (a writer leaving, or this, after taking the
    lock without waiting): removing a lock a writer holds would let a second writer start beside it.
    """
    try:
        fd = _open_own(path, os.O_RDWR)
    except (FileNotFoundError, SharedMemoryError):  # gone, or not ours: never removed
        return False
    try:
        if not (_try_lock(fd) and _still_named(fd, path)):
            return False
        os.unlink(path)
    except PermissionError:
        return False
    finally:
        os.close(fd)
    return True


class _writer_lock:
    """An exclusive ``flock`` on ``<segment>~lock``, polled until ``timeout``.

    The kernel drops the lock if its holder dies. The holder removes the lock file on leaving,
    success or failure; a process that locked a file which was removed meanwhile (it checks the
    inode after locking) opens the new one and tries again, so there is never more than one writer.
    The lock file is untrusted like any other: a symlink, a FIFO or another user's file under its
    name is refused, never followed.
    """

    def __init__(self, path: Path, timeout: float):
        self.lock_path = path.with_name(path.name + LOCK_SUFFIX)
        self.timeout = timeout

    def __enter__(self) -> _writer_lock:
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                fd = _open_lock(self.lock_path)
            except FileNotFoundError:
                continue  # its holder removed it just now: create a new one
            try:
                while not _try_lock(fd):
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"waited {self.timeout} s for another process to finish writing "
                            f"{self.lock_path.name.removesuffix(LOCK_SUFFIX)}: it is still writing (a large array?) "
                            "or stuck; raise timeout=, or 'workbench shm list' to see it"
                        )
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                if _still_named(fd, self.lock_path):
                    self.fd = fd
                    return self
            except BaseException:  # timed out, interrupted: never keep the descriptor
                os.close(fd)
                raise
            os.close(fd)  # we locked a lock file its holder had already removed: try the new one

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.lock_path.unlink()  # still ours: only the holder of this inode's lock removes it
        except FileNotFoundError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# -- listing and cleaning ----------------------------------------------------------------------
def _pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (None, 0, negative or impossibly large ids do not)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _mappers(paths: list[Path]) -> dict[Path, set[int]]:
    """Which live processes map or hold open each path (from /proc: who still uses a segment)."""
    wanted = {str(p): p for p in paths}
    users: dict[Path, set[int]] = {p: set() for p in paths}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        try:
            with open(proc / "maps") as maps:
                for line in maps:
                    target = line.rstrip("\n").split(maxsplit=5)[-1].removesuffix(" (deleted)")
                    if target in wanted:
                        users[wanted[target]].add(pid)
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target in wanted:
                    users[wanted[target]].add(pid)
        except OSError:  # the process ended, or is not ours to read
            continue
    return users


def _classify(name: str, info: os.stat_result) -> tuple[str, int | None]:
    """The state of the file ``lwb-<name>`` from its name and lstat (before its header is read),
    and the writer's pid for a partial file.

    A file is ours only if it is a regular file of this user whose name the workbench makes: a
    segment name, or a segment name with ``~lock`` or ``~partial-<pid>``. The two sets of names
    are disjoint (``~`` is not allowed in segment names). Anything else is "foreign".
    """
    if _not_ours(info) is not None:
        return "foreign", None
    if _NAME.fullmatch(name):
        return "complete", None
    helper = _HELPER.fullmatch(name)
    if helper is None:
        return "foreign", None
    if helper["pid"] is None:
        return "lock", None
    return "partial", int(helper["pid"])


def _printable(name: str) -> str:
    """``name`` as is if the workbench could have made it, else with control and non-ASCII characters escaped."""
    return name if _NAME.fullmatch(name) or _HELPER.fullmatch(name) else ascii(name)[1:-1]


def _scan(base: Path) -> list[os.DirEntry[str]]:
    """This user's entries (names starting with :data:`PREFIX`) of directory ``base``; a clear error if it
    cannot be read. Other users' workbench files have another prefix: never listed, never touched."""
    try:
        with os.scandir(base) as entries:
            return [entry for entry in entries if entry.name.startswith(PREFIX)]
    except PermissionError:
        raise SharedMemoryError(f"{base} cannot be read (permission denied): choose a directory you can list") from None


def list_segments(directory: str | Path | None = None) -> list[SegmentInfo]:
    """Every file of this user's prefix in ``directory`` (default /dev/shm), with owner, users and age.

    ``state``: "complete" (a segment), "partial" (being written, or left by a dead writer),
    "lock", "unreadable" (a file of ours whose header is not valid) or "foreign" (a symlink,
    something not a regular file, a file of another user, or a name the workbench never makes:
    listed, never opened, never removed). Planted files cannot make it fail or hang.
    """
    base = _directory(directory)
    found = sorted(((entry.name, entry) for entry in _scan(base)), key=lambda pair: pair[0])
    paths = [base / file_name for file_name, _ in found]
    users = _mappers(paths)
    now = time.time()
    infos = []
    for (file_name, entry), path in zip(found, paths):
        name = file_name[len(PREFIX) :]
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed while we looked
            continue
        state, owner = _classify(name, info)
        shape = dtype = record = None
        if state in ("complete", "partial"):
            try:
                fd = _open_own(path, os.O_RDONLY)
                try:
                    record = _read_record(fd, path)
                    if state == "complete":
                        shape, np_dtype, _, _ = _read_header(fd, path)
                        dtype = str(np_dtype)
                finally:
                    os.close(fd)
            except (OSError, SharedMemoryError):
                state = "unreadable" if state == "complete" else state
        holders = tuple(sorted(users[path]))
        alive = _pid_alive(owner) if owner else bool(holders)
        if record is not None and state == "complete":  # a partial file's owner stays its writer (by name)
            verdict = judge(record[0])
            owner, alive = (None, bool(holders)) if verdict == "elsewhere" else (record[0].pid, verdict == "alive")
        infos.append(
            SegmentInfo(
                name=_printable(name),
                path=path,
                shape=shape,
                dtype=dtype,
                nbytes=info.st_size,
                owner_pid=owner,
                owner_alive=alive,
                mapped_by=holders,
                age_s=now - info.st_mtime,
                state=state,
                lifetime="kept" if record is None else "owner",
                reclaimable=left_by_dead(record),
            )
        )
    return infos


def reclaim(directory: str | Path | None = None) -> list[str]:
    """Remove what dead owners left, and nothing else: every segment and partial file of this user
    whose owner record (see :class:`Process`) names only dead processes (a kernel killed with
    SIGKILL, and its workers), with its lock if no writer holds it. A file a live process maps or
    holds open is kept, and so is one whose record is missing, invalid, or names a live process or
    one this host cannot judge. Returns removed names.

    Every ``workbench.start()`` runs it, so a learner's next session frees what a killed kernel
    left; it costs a directory scan, an open and a 104-byte read per file of this user (the header
    is parsed only for a record of the dead), and a walk of /proc only when something is to be
    removed. No segment directory (not Linux): nothing to do.
    """
    try:
        base = _directory(directory)
        entries = _scan(base)
    except SharedMemoryError:
        return []
    judged: list[tuple[str, Path, tuple[int, int]]] = []
    verdicts: dict[Process, str] = {}
    for entry in entries:
        name = entry.name[len(PREFIX) :]
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if _classify(name, info)[0] not in ("complete", "partial") or info.st_size < _HEADER_ALIGN + RECORD_SIZE:
            continue  # not a file a record can be in
        path = base / entry.name
        try:
            fd = _open_own(path, os.O_RDONLY)
        except (OSError, SharedMemoryError):
            continue
        try:  # the record first (one read at the end), the header only for a record of the dead
            held = os.fstat(fd)
            if (held.st_dev, held.st_ino) != (info.st_dev, info.st_ino) or held.st_size < RECORD_SIZE:
                continue
            record = parse_record(os.pread(fd, RECORD_SIZE, held.st_size - RECORD_SIZE))
            if left_by_dead(record, verdicts) and _read_record(fd, path) == record:
                judged.append((name, path, (info.st_dev, info.st_ino)))
        except OSError:
            continue
        finally:
            os.close(fd)
    if not judged:
        return []
    users = _mappers([path for _, path, _ in judged])
    removed = []
    for name, path, inode in judged:
        if users[path] or not _remove_own(path, inode):
            continue
        removed.append(name)
        if _NAME.fullmatch(name):
            lock = path.with_name(path.name + LOCK_SUFFIX)
            if _remove_free_lock(lock):
                removed.append(name + LOCK_SUFFIX)
    return removed


def _remove_own(path: Path, inode: tuple[int, int] | None = None) -> bool:
    """Unlink ``path`` if it is still a regular file of this user (checked again just before:
    it may have been replaced since it was listed) and, given ``inode`` (device, inode), still the
    file that was judged. Never follows a link; True if removed."""
    try:
        info = os.lstat(path)
        if _not_ours(info) is not None or (inode is not None and (info.st_dev, info.st_ino) != inode):
            return False
        os.unlink(path)
    except (FileNotFoundError, PermissionError):
        return False
    return True


TRANSIENT_PREFIXES = ("ch-",)  # names of segments that never outlive their makers: a channel group's mailboxes


def clean(directory: str | Path | None = None, *, everything: bool = False, prefix: str = "") -> list[str]:
    """Remove what no live process uses: partial files of dead writers, locks no writer holds,
    transient segments no live process maps (names starting with one of ``TRANSIENT_PREFIXES``: a
    channel group's mailboxes, left when its workers were killed) and, with ``everything=True``,
    every complete (or unreadable) segment no live process maps. Returns removed names.

    Segments (and partial files) made for an owner whose processes are all dead (``reclaimable``:
    a killed kernel's shared copies, see :func:`reclaim`) go too. Without ``everything``, other
    complete segments are kept: an unused segment may be data someone will attach later (``delete``
    it by name, or ``clean --all``). ``prefix`` limits the sweep. Foreign files (symlinks, other
    users' files, names the workbench never makes) are never removed.
    """
    removed = []
    for info in list_segments(directory):
        if not info.name.startswith(prefix) or info.state == "foreign" or info.mapped_by:
            continue
        if info.state == "lock":
            gone = _remove_free_lock(info.path)  # never a lock a writer holds, even one /proc does not show
        elif info.state == "partial":
            gone = (info.reclaimable or not _pid_alive(info.owner_pid)) and _remove_own(info.path)
        else:
            transient = info.name.startswith(TRANSIENT_PREFIXES)
            gone = (everything or transient or info.reclaimable) and _remove_own(info.path)
        if gone:
            removed.append(info.name)
    return removed


def delete_prefix(prefix: str, directory: str | Path | None = None) -> list[str]:
    """Remove every segment (and lock or partial file) whose name starts with ``prefix``: a
    session's own segments. Only regular files of this user are removed, and a lock only if no
    writer holds it (a writer still writing then fails at its rename). Returns removed names."""
    _check_name(prefix, "segment name prefix")
    base = _directory(directory)
    removed = []
    for entry in _scan(base):
        name = entry.name[len(PREFIX) :]
        if not name.startswith(prefix):
            continue
        helper = _HELPER.fullmatch(name)
        remove = _remove_free_lock if helper and helper["pid"] is None else _remove_own
        if remove(base / entry.name):
            removed.append(name)
    return removed


def _similar(name: str, directory: str | Path | None) -> str:
    from workbench.names import did_you_mean

    names = [e.name[len(PREFIX) :] for e in _scan(_directory(directory)) if _NAME.fullmatch(e.name[len(PREFIX) :])]
    hint = did_you_mean(name, names)
    return f" ({hint})" if hint else ""
