"""Named shared arrays: one copy of an array per node, mapped zero-copy by every process.

A segment is an ``.npy`` file in a directory: ``/dev/shm`` (POSIX shared memory: on Linux
``shm_open`` is exactly a file there, in RAM) or any other directory (``directory=...``: a file on
disk, a DAX or network mount). The ``.npy`` header carries the dtype (structured, byte order),
shape and C/Fortran order, so every array round-trips exactly; object arrays are refused.

Lifetimes belong to the project, not to a resource tracker: nothing is unlinked behind the owner's
back, ``delete`` removes a segment, ``list_segments`` shows all of them with owner and age, and
``clean`` removes what dead processes left (``workbench shm list|clean`` on the command line).
Names carry the prefix ``lwb-`` so they can always be found.

Creating is race-tolerant: many processes asking for the same name at once yield exactly one
writer (an ``flock`` that the kernel releases if the writer dies); the others wait, bounded, then
attach. The writer fills ``<name>.partial-<pid>`` and renames it into place, so a segment that
exists is always complete. Space is reserved with ``posix_fallocate`` before mapping: a full
``/dev/shm`` then fails with a clear error instead of killing the process with SIGBUS.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

PREFIX = "lwb-"
SHM_DIR = Path("/dev/shm")
DEFAULT_TIMEOUT = 60.0  # seconds a process waits for another to finish writing a segment
_NAME = re.compile(r"^[A-Za-z0-9_.=+-]{1,200}$")
_HEADER_ALIGN = 4096  # data starts on a page boundary: aligned views, page-granular faults


class SharedMemoryError(RuntimeError):
    """A shared-memory operation that cannot be done as asked (says why and what to do)."""


@dataclass(frozen=True)
class SegmentInfo:
    """What ``list_segments`` reports for one segment."""

    name: str
    path: Path
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int
    owner_pid: int | None
    owner_alive: bool
    mapped_by: tuple[int, ...]
    age_s: float
    state: str  # "complete", "partial" (being written, or left by a dead writer), "lock"


# -- names and places --------------------------------------------------------------------------
def _directory(directory: str | Path | None) -> Path:
    path = SHM_DIR if directory is None else Path(directory)
    if not path.is_dir():
        if directory is None:
            raise SharedMemoryError(
                "POSIX shared memory needs /dev/shm (Linux); pass directory=... to back arrays with files instead"
            )
        raise SharedMemoryError(f"directory {path} does not exist: create it or choose another")
    return path


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"segment name must be 1-200 characters of letters, digits and _ . = + -, got {name!r}"
        )
    return name


def segment_path(name: str, directory: str | Path | None = None) -> Path:
    """Where segment ``name`` lives (the file name carries the ``lwb-`` prefix)."""
    return _directory(directory) / f"{PREFIX}{_check_name(name)}"


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
            f"a shared array of {nbytes / 2**20:.1f} MiB does not fit: {where} has {free / 2**20:.1f} MiB free. "
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


# -- header ------------------------------------------------------------------------------------
def _header(shape: tuple[int, ...], dtype: np.dtype, fortran: bool) -> bytes:
    """An .npy version-2 header padded so the data starts on a page boundary."""
    import io

    meta = {"descr": npy.dtype_to_descr(dtype), "fortran_order": fortran, "shape": tuple(shape)}
    buffer = io.BytesIO()
    npy.write_array_header_2_0(buffer, meta)
    raw = buffer.getvalue()
    total = -(-len(raw) // _HEADER_ALIGN) * _HEADER_ALIGN
    # keep it a valid .npy header: pad the dict text with spaces before its final newline
    body = raw[12:-1] + b" " * (total - len(raw)) + b"\n"
    return raw[:8] + (len(body)).to_bytes(4, "little") + body


def _read_header(fd: int) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    with os.fdopen(os.dup(fd), "rb") as stream:
        version = npy.read_magic(stream)
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read(stream)
        return shape, dtype, fortran, stream.tell()


def _check_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(
            f"arrays of dtype {dtype} hold Python object pointers, which mean nothing in another process: "
            "convert to a fixed-size dtype first (numbers, 'U20' for strings, a structured dtype for records)"
        )
    return dtype


# -- the mapped array --------------------------------------------------------------------------
def _map(path: Path, writable: bool, populate: bool) -> np.ndarray:
    """Map a complete segment; the array's base chain owns the mapping (no use-after-unmap)."""
    _require_mapping_slot()
    fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        shape, dtype, fortran, offset = _read_header(fd)
        size = os.fstat(fd).st_size
        if size == 0:
            raise SharedMemoryError(f"segment {path} is empty: it was not written completely; delete it")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
        mapping = mmap.mmap(fd, size, flags=flags, prot=prot)
    finally:
        os.close(fd)  # the mapping stays valid after the descriptor is closed
    view = np.ndarray(shape, dtype=dtype, buffer=mapping, offset=offset, order="F" if fortran else "C")
    if not writable:
        view.flags.writeable = False
    return view


def _write_new(
    path: Path,
    shape: tuple[int, ...],
    dtype: np.dtype,
    fortran: bool,
    fill: Callable[[np.ndarray], None] | np.ndarray | None,
    directory: str | Path | None,
) -> None:
    """Write a complete segment at ``path`` through a partial file and an atomic rename.

    ``fill`` is a function that fills a writable view, or an array whose bytes are copied with
    ``pwrite``: no mapping and so no page fault per 4 KiB (measured 3x faster for 1 GB).
    """
    header = _header(shape, dtype, fortran)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    _require_space(len(header) + nbytes, directory)
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, header)
        if nbytes and isinstance(fill, np.ndarray):
            _pwrite_all(fd, fill, len(header), directory)
        elif nbytes:
            try:
                os.posix_fallocate(fd, 0, len(header) + nbytes)  # reserve now: no SIGBUS later
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                raise SharedMemoryError(
                    f"no space for {nbytes / 2**20:.1f} MiB in {partial.parent} ({free_bytes(directory) / 2**20:.1f} "
                    "MiB free): free space ('workbench shm clean'), use a smaller size or back with files"
                ) from None
            if fill is not None:
                mapping = mmap.mmap(fd, len(header) + nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
                try:
                    view = np.ndarray(shape, dtype=dtype, buffer=mapping, offset=len(header), order="F" if fortran else "C")
                    fill(view)
                    del view
                finally:
                    mapping.close()
        os.rename(partial, path)  # atomic: readers see nothing, or the whole segment
    except BaseException:
        try:
            os.unlink(partial)
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(fd)


def _pwrite_all(fd: int, array: np.ndarray, offset: int, directory: str | Path | None) -> None:
    """Copy the array's bytes (C or Fortran order, as stored) into the file at ``offset``."""
    data = memoryview(np.ravel(array, order="K")).cast("B")
    written = 0
    try:
        while written < len(data):
            written += os.pwrite(fd, data[written : written + (1 << 30)], offset + written)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise SharedMemoryError(
            f"no space for {len(data) / 2**20:.1f} MiB in {_directory(directory)} ({free_bytes(directory) / 2**20:.1f} "
            "MiB free): free space ('workbench shm clean'), use a smaller size or back with files"
        ) from None


def _layout(shape: object, dtype: object, order: str) -> tuple[tuple[int, ...], np.dtype, bool]:
    try:
        shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except (TypeError, ValueError):
        raise ValueError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"shape must not have negative sizes, got {shape}")
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    return shape, _check_dtype(dtype), order == "F" and len(shape) > 1


# -- public operations -------------------------------------------------------------------------
def create(
    name: str,
    shape: int | tuple[int, ...],
    dtype: object = np.float64,
    *,
    order: str = "C",
    directory: str | Path | None = None,
    populate: bool = False,
) -> np.ndarray:
    """Create a zeroed shared array and return a writable view of it.

    Fails if ``name`` exists (``delete`` it first, or ``attach`` to it).
    """
    shape, dtype, fortran = _layout(shape, dtype, order)
    path = segment_path(name, directory)
    with _writer_lock(path, DEFAULT_TIMEOUT):
        if path.exists():
            raise FileExistsError(f"shared array {name!r} exists at {path}: attach() to it, or delete() it first")
        _write_new(path, shape, dtype, fortran, None, directory)
    return _map(path, writable=True, populate=populate)


def share(
    name: str,
    array: np.ndarray,
    *,
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> np.ndarray:
    """Copy ``array`` into shared array ``name`` (once per node) and return a view of the shared copy.

    The paper's copy constructor. If ``name`` already exists (another process shared it first,
    with the same bytes by construction), the existing copy is attached instead.
    """
    view, _ = copy_in(name, array, directory=directory, writable=writable, populate=populate, timeout=timeout)
    return view


def copy_in(
    name: str,
    array: np.ndarray,
    *,
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[np.ndarray, bool]:
    """``share``, also saying whether this call made the segment: ``(view, created)``.

    C- and Fortran-ordered arrays are copied as they are stored; any other layout is made
    C-contiguous first.
    """
    array = np.asarray(array)
    fortran = array.flags.f_contiguous and not array.flags.c_contiguous
    source = array if (fortran or array.flags.c_contiguous) else np.ascontiguousarray(array)
    return attach_or_create(
        name, array.shape, array.dtype, source, order="F" if fortran else "C",
        directory=directory, writable=writable, populate=populate, timeout=timeout,
    )


def attach(
    name: str, *, writable: bool = False, directory: str | Path | None = None, populate: bool = False
) -> np.ndarray:
    """Map an existing shared array: read-only by default (writes raise), writable on request."""
    path = segment_path(name, directory)
    if not path.exists():
        hint = _similar(name, directory)
        raise FileNotFoundError(f"no shared array {name!r} in {path.parent}{hint}; 'workbench shm list' shows them all")
    return _map(path, writable=writable, populate=populate)


def attach_or_create(
    name: str,
    shape: int | tuple[int, ...],
    dtype: object,
    fill: Callable[[np.ndarray], None] | np.ndarray,
    *,
    order: str = "C",
    directory: str | Path | None = None,
    writable: bool = False,
    populate: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[np.ndarray, bool]:
    """Attach ``name``, creating it if nobody has: ``(view, created)``.

    ``fill`` fills a writable view of the new segment, or is an array (in the given ``order``)
    whose bytes are copied in.

    Any number of processes may call this at once: exactly one writes, the others wait (at most
    ``timeout`` seconds) until the segment is complete and attach it. If the writer dies, the next
    waiter takes over.
    """
    shape, dtype, fortran = _layout(shape, dtype, order)
    path = segment_path(name, directory)
    created = False
    if not path.exists():
        with _writer_lock(path, timeout):
            if not path.exists():  # nobody finished it while we waited for the lock
                _write_new(path, shape, dtype, fortran, fill, directory)
                created = True
    view = _map(path, writable=writable, populate=populate)
    if view.shape != shape or view.dtype != dtype:
        raise SharedMemoryError(
            f"shared array {name!r} exists with shape {view.shape} and dtype {view.dtype}, "
            f"not {shape} and {dtype}: use another name (or version) for different data"
        )
    return view, created


def exists(name: str, directory: str | Path | None = None) -> bool:
    return segment_path(name, directory).exists()


def delete(name: str, directory: str | Path | None = None) -> bool:
    """Remove segment ``name`` (existing views stay valid until dropped); True if it existed."""
    path = segment_path(name, directory)
    removed = False
    for candidate in (path, path.with_name(path.name + ".lock")):
        try:
            candidate.unlink()
            removed = removed or candidate == path
        except FileNotFoundError:
            pass
    return removed


class _writer_lock:
    """An exclusive ``flock`` on ``<segment>.lock``, polled until ``timeout``.

    The kernel drops the lock if its holder dies. The holder removes the lock file on leaving,
    success or failure; a process that locked a file which was removed meanwhile (it checks the
    inode after locking) opens the new one and tries again, so there is never more than one writer.
    """

    def __init__(self, path: Path, timeout: float):
        self.lock_path = path.with_name(path.name + ".lock")
        self.timeout = timeout

    def __enter__(self) -> _writer_lock:
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        os.close(fd)
                        raise TimeoutError(
                            f"waited {self.timeout} s for another process to finish writing {self.lock_path.name[:-5]}: "
                            "it is still writing (a large array?) or stuck; raise timeout=, or 'workbench shm list' to see it"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
            try:
                current = os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                self.fd = fd
                return self
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
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
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


_PARTIAL = re.compile(r"\.partial-(\d+)$")


def list_segments(directory: str | Path | None = None) -> list[SegmentInfo]:
    """Every workbench segment in ``directory`` (default /dev/shm), with owner, users and age."""
    base = _directory(directory)
    paths = sorted(p for p in base.glob(f"{PREFIX}*") if p.is_file())
    users = _mappers(paths)
    now = time.time()
    infos = []
    for path in paths:
        name = path.name[len(PREFIX):]
        stat = path.stat()
        shape = dtype = owner = None
        if (match := _PARTIAL.search(name)) is not None:
            state, owner = "partial", int(match.group(1))
        elif name.endswith(".lock"):
            state = "lock"
        else:
            state = "complete"
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    shape, np_dtype, _, _ = _read_header(fd)
                    dtype = str(np_dtype)
                finally:
                    os.close(fd)
            except (OSError, ValueError):
                state = "unreadable"
        holders = tuple(sorted(users[path]))
        infos.append(SegmentInfo(
            name=name, path=path, shape=shape, dtype=dtype, nbytes=stat.st_size,
            owner_pid=owner, owner_alive=_pid_alive(owner) if owner else bool(holders),
            mapped_by=holders, age_s=now - stat.st_mtime, state=state,
        ))
    return infos


def clean(directory: str | Path | None = None, *, everything: bool = False, prefix: str = "") -> list[str]:
    """Remove what no live process uses: partial files of dead writers, unused locks and, with
    ``everything=True``, every complete segment no live process maps. Returns removed names.

    Without ``everything``, complete segments are kept: an unused segment may be data someone
    will attach later (``delete`` it by name, or ``clean --all``). ``prefix`` limits the sweep.
    """
    removed = []
    for info in list_segments(directory):
        if not info.name.startswith(prefix):
            continue
        unused = not info.mapped_by
        stale_partial = info.state == "partial" and not _pid_alive(info.owner_pid)
        if stale_partial or (info.state == "lock" and unused) or (everything and unused):
            try:
                info.path.unlink()
                removed.append(info.name)
            except FileNotFoundError:
                pass
    return removed


def delete_prefix(prefix: str, directory: str | Path | None = None) -> list[str]:
    """Remove every segment whose name starts with ``prefix`` (a session's own segments)."""
    base = _directory(directory)
    removed = []
    for path in base.glob(f"{PREFIX}{prefix}*"):
        try:
            path.unlink()
            removed.append(path.name[len(PREFIX):])
        except FileNotFoundError:
            pass
    return removed


def _similar(name: str, directory: str | Path | None) -> str:
    import difflib

    names = [p.name[len(PREFIX):] for p in _directory(directory).glob(f"{PREFIX}*")]
    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
