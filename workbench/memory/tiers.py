"""Memory tiers: where an array's bytes live, and what using them costs.

Five named tiers: four of the node (thesis ch. 6, with what this machine has instead of Optane),
:data:`HOST_TIERS`, and the GPU's memory. Each is a :class:`~workbench.memory.tier_base.Tier` (its
flags and its put, open, free and names), one class per tier, registered once in :data:`REGISTRY`;
:func:`place`, :func:`open_array`, :func:`move`, :func:`free` and :func:`names` look the tier up by
its name (the public string) and ask it:

* ``dram``: process memory. Fastest, volatile, and what a DRAM budget counts.
* ``mapped``: a file mapped ``MAP_SHARED`` and used *in place* (no copy into DRAM): the
  software form of byte-addressable persistent memory (App Direct). It lives in
  ``$WORKBENCH_PMEM_DIR`` when set (a DAX mount maps with ``MAP_SYNC``), otherwise in a local
  disk directory, where the page cache stands between the code and the device. It survives a
  restart: data and ``.npy`` header are the file.
* ``disk``: staged. The file is read into DRAM when used and written back (atomically) when
  changed: the disk tier of an object store, and the way most codes use files.
* ``cached``: a transparent DRAM cache with a byte budget in front of a ``mapped`` file (the
  software analogue of Optane's Memory Mode): a hit reads DRAM, a miss copies the file in and
  evicts the least recently used entries (writing dirty ones back).
* ``gpu``: a CUDA device's memory (:mod:`workbench.memory.gpu`): device kernels compute on the array
  where it lies, every copy across the bus is counted, and a full device is a clear error.

The files are ``workbench.memory.shm`` segments (one code for a file in a directory: header
checks, untrusted-file rules, space reserved before mapping, atomic partial-and-rename writes), so
a full file system is a clear error, never SIGBUS, and a killed writer leaves the previous
version readable. What a file sits on (file system, device, DAX or not, memory-backed or not) is
:func:`medium`, reported with every measurement. :func:`evict_pages` makes a file cold for real
(``fsync`` then ``posix_fadvise(DONTNEED)``, checked with ``mincore``) or says why it cannot.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import os
import stat
import tempfile
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import workbench.settings as settings_names
from workbench.memory import gpu, shm, tier_set
from workbench.memory.tier_base import PLAIN_TYPES as PLAIN_TYPES  # what a tier file holds, as it always was here
from workbench.memory.tier_base import Tier, TierArray, TierError, UnknownTier, check_plain, medium
from workbench.memory.tier_set import TierSet
from workbench.settings import Settings

PMEM_ENV = settings_names.PMEM_DIR
TIER_DIR_ENV = settings_names.TIER_DIR


# -- where files live --------------------------------------------------------------------------
def default_directory(tier: str) -> Path:
    """Where ``tier``'s files go unless told: ``$WORKBENCH_PMEM_DIR`` for ``mapped`` and ``cached``
    when set, else ``$WORKBENCH_TIER_DIR/<tier>``, else ``<temporary directory>/workbench-tiers-<uid>/<tier>``
    (a local disk on most machines; :func:`medium` says what it is).

    The per-user directory has a name anyone can predict, in a directory everyone may write: it is
    used only if it is this user's own real directory (made 0700 here, whatever the umask), as is
    every directory made on the way (:func:`private_directory`); one another user made first, or a
    symlink, is refused with what to do. ``$WORKBENCH_PMEM_DIR`` is refused like a ``directory=``
    others could replace files in. A tier that keeps no files (dram, gpu) has no directory: a ``TierError``."""
    kind = lookup(tier)
    if not isinstance(kind, FileTier):
        files = ", ".join(FILE_TIERS)
        raise TierError(f"the {tier} tier keeps no files, so it has no directory: ask a file tier's ({files})")
    if kind.on_pmem and settings_names.now(PMEM_ENV):
        path = Path(settings_names.now(PMEM_ENV))
        if not path.is_dir():
            raise TierError(f"${PMEM_ENV} names {path}, which is not a directory: create it or unset the variable")
        _refuse_shared(path, f"${PMEM_ENV}={path}", "unset it or point it at a directory of your own")
        return path
    if settings_names.now(TIER_DIR_ENV):
        return private_directory(Path(settings_names.now(TIER_DIR_ENV)) / kind.leaf)
    base = Path(tempfile.gettempdir()) / f"workbench-tiers-{os.geteuid()}"
    return private_directory(base / kind.leaf, private_from=base)


def _refuse_shared(path: Path, what: str, instead: str) -> None:
    """A ``TierError`` if other users could replace this user's files in directory ``path``: it is
    writable by others, or another user's, and has no sticky bit (``/tmp`` and ``/dev/shm`` have it)."""
    info = path.stat()
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid != os.geteuid()
    if shared and not info.st_mode & stat.S_ISVTX:
        raise TierError(
            f"tier directory {what} ({stat.filemode(info.st_mode)}, owner {info.st_uid}) lets other users "
            f"replace your tier files: chmod go-w {str(path)!r}, or {instead}"
        )


def others_could_swap(path: str | os.PathLike[str]) -> str | None:
    """Why another user could rename or replace entries of directory ``path`` (or of a directory
    above it), or None: every directory on the way, lexical and real, must be root's or this user's,
    and writable by nobody else unless sticky (as ``/tmp``); a symlink on the way must be root's or
    this user's (only they can change it)."""
    me = os.geteuid()
    seen = set()
    lexical, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    for walk in (lexical,) if real == lexical else (lexical, real):
        for step in (walk, *walk.parents):
            if step in seen:
                continue
            seen.add(step)
            try:
                info = os.lstat(step)
            except OSError as error:
                return f"{step} cannot be examined ({error.strerror})"
            if info.st_uid not in (0, me):
                return f"{step} belongs to user {info.st_uid}, who can move or replace what is in it"
            if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
                return f"{step} ({stat.filemode(info.st_mode)}) lets other users move or replace what is in it"
    return None


def private_directory(path: Path, private_from: Path | None = None) -> Path:
    """``path`` as a directory of this user's only: made if missing, with every missing directory
    on the way, each ``os.mkdir(..., 0o700)`` (so the umask cannot open it up), and checked.

    Every directory from ``private_from`` (default ``path`` itself: an ancestor of it, such as a
    per-user directory with a predictable name) down to ``path``, and every directory made here,
    must be a real directory (not a symlink: checked through ``O_NOFOLLOW``) of this user; one of
    this user's that others may read or write is made 0700. The directory that holds the first of
    them, and every one above it, must be root's or this user's, and writable by nobody else unless
    sticky. Anything else is a ``TierError`` saying what and what to do: others could plant, swap or
    move away files there."""
    path = Path(path)
    top = path if private_from is None else Path(private_from)
    if top != path and top not in path.parents:
        raise ValueError(f"private_from={top} is not {path} or a directory above it")
    while not os.path.lexists(top.parent) and top.parent != top:
        top = top.parent  # missing directories above are made here too, and so checked
    between = [p for p in reversed(path.parents) if top in p.parents]
    chain = [top, *between, path] if path != top else [top]
    if problem := others_could_swap(top.parent):
        raise TierError(
            f"cannot keep tier files under {top.parent}: {problem}. Set $WORKBENCH_TIER_DIR (or TMPDIR) "
            "to a directory of your own that only you can write"
        )
    for step in chain:
        try:
            os.mkdir(step, 0o700)
        except FileExistsError:
            pass  # made already (by this user, or by someone else: checked below)
        except OSError as error:
            raise TierError(f"cannot make the tier directory {step}: {error.strerror}") from None
        _check_private(step)
    return path


def _check_private(path: Path) -> None:
    """Make sure ``path`` is a real directory of this user, mode 0700 (set on the very directory
    checked: opened without following a symlink); ``TierError`` saying what it is otherwise."""
    me = os.geteuid()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        try:
            info = os.lstat(path)
        except OSError:
            raise TierError(f"cannot use the tier directory {path}: {error.strerror}") from None
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else stat.filemode(info.st_mode)
        raise TierError(
            f"the tier directory {path} exists and is not a directory ({kind}, owner {info.st_uid}): "
            "remove or rename it if it is yours, or set $WORKBENCH_TIER_DIR to a directory of your own"
        ) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != me:
            raise TierError(
                f"the tier directory {path} belongs to user {info.st_uid}, not to you ({me}): they could move "
                "or replace your files there; ask them (or an administrator) to remove it, or set "
                "$WORKBENCH_TIER_DIR to a directory of your own"
            )
        if stat.S_IMODE(info.st_mode) & 0o777 != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def check_tier(tier: object, policies: tuple[str, ...] = ()) -> str:
    """``tier`` if it names a tier of :data:`REGISTRY` (or is one of ``policies``, such as the store's
    "dynamic"); :class:`UnknownTier` naming the choices otherwise. The one tier check of the workbench."""
    if not (isinstance(tier, str) and tier in REGISTRY) and tier not in policies:
        choices = ", ".join(REGISTRY) + "".join(f", or the {p!r} placement" for p in policies)
        raise UnknownTier(f"no tier {tier!r}: the tiers are {choices}")
    return str(tier)


# -- residency and cold runs -------------------------------------------------------------------
PAGE = mmap.PAGESIZE


@functools.cache
def _mincore() -> Any:
    """libc's ``mincore``, loaded on first use (nothing is loaded when the module is imported)."""
    function = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).mincore
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return function


def _open_regular(path: str | Path) -> int:
    """A read-only descriptor of the regular file ``path`` (not followed if a symlink); a missing file
    is ``FileNotFoundError``, anything else there a ``TierError`` saying what it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"no file {path}: it was freed or never placed") from None
    except OSError as error:
        kind = "a symlink" if os.path.islink(path) else error.strerror
        raise TierError(f"{path} is not a tier file ({kind}): only regular files can be made cold") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TierError(f"{path} is not a tier file (not a regular file): only regular files can be made cold")
    return fd


def resident_bytes(path: str | Path) -> tuple[int, int]:
    """``(bytes of the file in the page cache, file bytes)``, from ``mincore`` on a fresh mapping
    (which faults nothing in)."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        mapping = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        pages = -(-size // PAGE)
        vector = (ctypes.c_ubyte * pages)()
        view = np.frombuffer(mapping, dtype=np.uint8)
        try:
            if _mincore()(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
        finally:
            del view
        resident = int(np.count_nonzero(np.frombuffer(vector, dtype=np.uint8) & 1))
    finally:
        mapping.close()
    return min(size, resident * PAGE), size


@dataclass(frozen=True)
class Eviction:
    """What :func:`evict_pages` did: the file's resident bytes before and after, or why not."""

    path: str
    evicted: bool
    resident_before: int
    resident_after: int
    nbytes: int
    reason: str = ""


def evict_pages(path: str | Path) -> Eviction:
    """Make ``path`` cold: ``fsync`` it, then ``posix_fadvise(POSIX_FADV_DONTNEED)``, and check with
    ``mincore`` how much stayed in memory. On a memory-backed file system (tmpfs) there is no
    device to be cold on: ``evicted`` is False and ``reason`` says so. Pages that a live mapping
    has in its page tables stay (the kernel drops only unmapped ones): drop views first."""
    before, size = resident_bytes(path)
    where = medium(Path(path).parent)
    if where.memory_backed:
        return Eviction(str(path), False, before, before, size, f"{where.filesystem} keeps files in memory")
    fd = _open_regular(path)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    after, _ = resident_bytes(path)
    evicted = after <= max(PAGE * 2, size // 20)
    reason = "" if evicted else f"{after} of {size} bytes stayed resident (mapped by a live process?)"
    return Eviction(str(path), evicted, before, after, size, reason)


def device_read_bytes() -> int | None:
    """Bytes this process has read from block devices (``/proc/self/io``), or None where not counted."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# -- arrays on tiers ---------------------------------------------------------------------------


class DramArray(TierArray):
    """In process memory, named in one tier set of this process only; not persistent."""

    tier = "dram"

    def __init__(self, name: str, array: np.ndarray, held: TierSet | None = None):
        super().__init__(name, None)
        self._array = array
        self.held = held

    @property
    def array(self) -> np.ndarray:
        """The array itself."""
        return self._array

    @property
    def dram_bytes(self) -> int:
        """All of it."""
        return int(self._array.nbytes)


class MappedArray(TierArray):
    """A file mapped ``MAP_SHARED``; code runs on the mapping in place."""

    tier = "mapped"

    def __init__(self, name: str, directory: Path, writable: bool, view: np.ndarray | None = None):
        super().__init__(name, directory)
        self.writable = writable
        self.sync_mapped = medium(directory).dax
        self._view = view

    @property
    def array(self) -> np.ndarray:
        """The mapping (made on first use: no page is read before code touches it)."""
        if self._view is None:
            self._view = shm.attach(self.name, writable=self.writable, directory=self.directory, sync=self.sync_mapped)
        return self._view

    def sync(self) -> None:
        """``msync`` the mapping (a no-op on a ``MAP_SYNC`` DAX mapping beyond the cache flush); DRAM
        cache copies of the file are dropped (they no longer hold its bytes). Writes not synced are
        not seen by cached readers."""
        if self._view is not None and self.writable:
            base = self._view.base
            while base is not None and not isinstance(base, mmap.mmap):
                base = getattr(base, "base", None)
            if isinstance(base, mmap.mmap):
                base.flush()
            forget_cached(self.path)

    def unmap(self) -> None:
        """Drop this handle's mapping (views others hold keep theirs); the next use maps again."""
        self._view = None

    @property
    def file_bytes(self) -> int:
        """Bytes of the file's array (mapped: nothing read)."""
        return int(self.array.nbytes)

    @property
    def mapping(self) -> np.ndarray:
        """The mapping (made on first use)."""
        return self.array

    def is_mapping(self, value: object) -> bool:
        """Whether ``value`` is this handle's mapping itself."""
        return self._view is not None and value is self._view

    def remap(self) -> np.ndarray:
        """Sync, unmap, and map the file again (reading nothing: no page comes back until code touches
        it): the fresh mapping, so the old one can go with its last view before the pages are evicted."""
        self.sync()
        self.unmap()
        return self.array

    def evict(self) -> Eviction:
        """Unmap and make the file cold (see :func:`evict_pages`)."""
        self.sync()
        self.unmap()
        return evict_pages(self.path)


class DiskArray(TierArray):
    """Staged: read into DRAM on use, written back (a new version, atomically) by ``sync``."""

    tier = "disk"

    def __init__(self, name: str, directory: Path):
        super().__init__(name, directory)
        self._copy: np.ndarray | None = None

    @property
    def array(self) -> np.ndarray:
        """The DRAM copy, read from the file on first use."""
        if self._copy is None:
            self._copy = read_file(self.name, self.directory)
        return self._copy

    @property
    def dram_bytes(self) -> int:
        """The staged copy's bytes (0 before first use)."""
        return 0 if self._copy is None else int(self._copy.nbytes)

    def sync(self) -> None:
        """Write the DRAM copy back as the file's new version."""
        if self._copy is not None:
            try:
                shm.replace(self.name, self._copy, directory=self.directory)
            except shm.SharedMemoryError as error:
                raise TierError(f"cannot write {self.name!r} back to disk: {error}") from None
            forget_cached(self.path)

    def drop(self) -> None:
        """Forget the DRAM copy (unsynced changes are lost); the next use reads the file again."""
        self._copy = None


def read_file(name: str, directory: Path) -> np.ndarray:
    """A DRAM copy of tier file ``name``, read into a new array (one copy, no mapping); the file is
    checked as untrusted input first (owner, header, size), as ``shm.attach`` checks it."""
    path = shm.segment_path(name, directory)
    try:
        fd = shm._open_own(path, os.O_RDONLY)
    except TierError:
        raise
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no tier array {name!r} in {directory}: it was freed (or never placed); tiers.names() lists them"
        ) from None
    except shm.SharedMemoryError as error:
        raise TierError(str(error)) from None
    try:
        try:
            shape, dtype, fortran, offset = shm._read_header(fd, path)
        except shm.SharedMemoryError as error:
            raise TierError(str(error)) from None
        out = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        target = memoryview(out.ravel(order="F" if fortran else "C").view(np.uint8))  # a view: out is contiguous
        done = 0
        while done < len(target):
            got = os.preadv(fd, [target[done : done + (1 << 30)]], offset + done)
            if not got:
                raise TierError(
                    f"{path} ended after {done} of {len(target)} data bytes (truncated by another process?)"
                )
            done += got
    finally:
        os.close(fd)
    return out


def write_file(name: str, directory: Path, array: np.ndarray) -> None:
    """Write ``array`` into tier file ``name`` in place (the same file: its mappings see the new bytes,
    as the page cache is shared), then ``fsync`` it. The file must hold an array of this shape and dtype."""
    path = shm.segment_path(name, directory)
    fd = shm._open_own(path, os.O_RDWR)
    try:
        shape, dtype, fortran, offset = shm._read_header(fd, path)
        if shape != array.shape or dtype != array.dtype:
            raise TierError(
                f"{path} holds a {shape} {dtype} array, not {array.shape} {array.dtype}: place() a new version instead"
            )
        source = memoryview(np.ravel(array, order="F" if fortran else "C").view(np.uint8))
        done = 0
        while done < len(source):
            done += os.pwrite(fd, source[done : done + (1 << 30)], offset + done)
        os.fsync(fd)
    finally:
        os.close(fd)


def _key(path: str | Path) -> str:
    """A cache key naming the file, not the path's spelling (relative or absolute, through symlinks)."""
    return os.path.realpath(path)


class DramCache:
    """A transparent DRAM cache with a byte budget over mapped files (Memory Mode, in software).

    ``get(placed)`` returns a DRAM copy of the file's array (a view of the cache's entry): a hit if
    cached, else the file is read in and the least recently used entries go (written back first if
    marked dirty). An entry is pinned while a copy handed out is alive: a caller may still write
    into it, so it stays until its handle syncs it (or the caller drops it); when the pinned entries
    leave no room, the array is used through its mapping in place, as one larger than the whole
    budget always is. Entries are keyed by the file itself (its real path), whatever the spelling.
    """

    def __init__(self, budget: int):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"a cache budget is a number of bytes >= 0, got {budget!r}")
        self.budget = budget
        self.entries: OrderedDict[str, tuple[CachedArray, np.ndarray]] = OrderedDict()
        self.dirty: set[str] = set()
        self.handed: dict[str, list[weakref.ref[np.ndarray]]] = {}  # copies handed out, per entry
        self.used = 0
        self.hits = self.misses = self.bypasses = self.evictions = 0
        self.lock = threading.RLock()
        self.closed = False  # closed with its tier set: keeps no new copies (see close)
        _CACHES.add(self)

    def get(self, placed: CachedArray) -> np.ndarray:
        """The DRAM copy of ``placed`` (a hit, or read in now), pinned while the caller holds it."""
        key = _key(placed.path)
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                self.hits += 1
                return self._hand_out(key)
            nbytes = placed.file_nbytes
            if nbytes > self.budget or self.closed:
                self.bypasses += 1
                return placed.mapped.array
            while self.used + nbytes > self.budget and self._evict_oldest(skip_pinned=True):
                pass
            if self.used + nbytes > self.budget:  # the rest is pinned by callers: use the file in place
                self.bypasses += 1
                return placed.mapped.array
            self.misses += 1
            copy = read_file(placed.name, placed.directory)
            self.entries[key] = (placed, copy)
            self.used += copy.nbytes
            return self._hand_out(key)

    def _hand_out(self, key: str) -> np.ndarray:
        view = self.entries[key][1].view()
        refs = [r for r in self.handed.get(key, ()) if r() is not None]
        refs.append(weakref.ref(view))
        self.handed[key] = refs
        if self.closed:
            weakref.finalize(view, self._release, key)
        return view

    def _release(self, key: str) -> None:
        """A copy of entry ``key`` of the closed cache went: the entry goes too once none is left
        (written back if marked dirty; changes never synced are lost, as on any eviction)."""
        with self.lock:
            if key in self.entries and not self.pinned(key):
                self._remove(key)

    def pinned(self, key: str) -> bool:
        """Whether a copy of entry ``key`` handed out is still alive (a caller may write into it)."""
        refs = [r for r in self.handed.get(key, ()) if r() is not None]
        if refs:
            self.handed[key] = refs
        else:
            self.handed.pop(key, None)
        return bool(refs)

    def mark_dirty(self, placed: CachedArray) -> None:
        """``placed``'s DRAM copy was changed: write it back before it leaves the cache."""
        with self.lock:
            if _key(placed.path) in self.entries:
                self.dirty.add(_key(placed.path))

    def evict_oldest(self) -> bool:
        """Drop the least recently used entry that no caller holds (written back first if dirty);
        whether there was one."""
        with self.lock:
            return self._evict_oldest(skip_pinned=True)

    def _evict_oldest(self, skip_pinned: bool) -> bool:
        key = next((k for k in self.entries if not (skip_pinned and self.pinned(k))), None)
        if key is None:
            return False
        self._remove(key)
        return True

    def _remove(self, key: str) -> None:
        placed, copy = self.entries.pop(key)
        self.handed.pop(key, None)
        self.used -= copy.nbytes
        self.evictions += 1
        self._write_back(key, placed, copy)

    def _write_back(self, key: str, placed: CachedArray, copy: np.ndarray) -> None:
        """Write entry ``key``'s ``copy`` into its file if it is marked dirty (into the same file: every
        mapping of it sees the change), and unmark it."""
        if key in self.dirty:
            self.dirty.discard(key)
            try:
                write_file(placed.name, placed.directory, copy)
            except FileNotFoundError:
                pass  # the file was freed meanwhile: there is nothing left to write back to

    def forget(self, path: str | Path) -> bool:
        """Drop the copy of ``path`` without writing it back (its file was replaced, freed or written
        through a mapping: the copy is stale). True if there was one."""
        key = _key(path)
        with self.lock:
            entry = self.entries.pop(key, None)
            self.dirty.discard(key)
            self.handed.pop(key, None)
            if entry is not None:
                self.used -= entry[1].nbytes
            return entry is not None

    def drop(self, placed: CachedArray | None = None) -> None:
        """Empty the cache (or drop one array), writing dirty entries back, pinned ones too: the
        next use is a miss."""
        with self.lock:
            keys = list(self.entries) if placed is None else [_key(placed.path)]
            for key in keys:
                if key in self.entries:
                    self._remove(key)

    def close(self) -> None:
        """Empty the cache for good (its tier set is closing): dirty entries are written back now, and
        those no caller holds go; one whose copy a caller still holds (and may write) stays until its
        handle syncs it (written back) or the last copy is dropped. From now on arrays are used
        through their mappings in place: no new copy is kept. A copy that cannot be written back (its
        file replaced by another shape) stays unwritten, and its error is raised once the others are done."""
        failed: list[Exception] = []
        with self.lock:
            self.closed = True
            for key in list(self.entries):
                refs = [r for r in self.handed.get(key, ()) if r() is not None]
                try:
                    if not refs:
                        self._remove(key)
                    else:  # held: written back now if marked changed, as when it leaves the cache
                        self._write_back(key, *self.entries[key])
                except (TierError, OSError, shm.SharedMemoryError) as error:  # the others are still written
                    failed.append(error)
                for ref in refs:
                    view = ref()
                    if view is not None:
                        weakref.finalize(view, self._release, key)
        if failed:
            raise failed[0]

    def stats(self) -> dict[str, int]:
        """Hits, misses, bypasses, evictions and bytes held."""
        return dict(
            hits=self.hits, misses=self.misses, bypasses=self.bypasses, evictions=self.evictions, used=self.used
        )


_CACHES: weakref.WeakSet[DramCache] = weakref.WeakSet()


def forget_cached(path: str | Path | None) -> None:
    """Drop every DRAM cache's copy of the file at ``path`` (it changed under them)."""
    if path is not None:
        for cache in list(_CACHES):
            cache.forget(path)


class CachedArray(TierArray):
    """A mapped file used through a :class:`DramCache` (a tier set's, unless given one)."""

    tier = "cached"

    def __init__(self, name: str, directory: Path, cache: DramCache):
        super().__init__(name, directory)
        self.cache = cache
        self.mapped = MappedArray(name, directory, writable=True)

    @property
    def file_nbytes(self) -> int:
        """Bytes of the file's array (from its header; nothing read)."""
        return int(self.mapped.array.nbytes)

    @property
    def array(self) -> np.ndarray:
        """The cached DRAM copy (a hit or a miss), or the mapping for an array over the budget."""
        return self.cache.get(self)

    def sync(self) -> None:
        """Write a changed cached copy back now (or ``msync`` the mapping an array over the budget is
        used through)."""
        with self.cache.lock:
            if _key(self.path) in self.cache.entries:
                self.cache.mark_dirty(self)
                self.cache.drop(self)
            else:
                self.mapped.sync()

    def evict(self) -> Eviction:
        """Out of the cache and out of the page cache: the next use is cold."""
        self.cache.drop(self)
        return self.mapped.evict()

    @property
    def file_bytes(self) -> int:
        """Bytes of the file's array (from its header; nothing read)."""
        return self.file_nbytes

    @property
    def mapping(self) -> np.ndarray:
        """The mapping of the file, not the cache's copy (what a store object's attribute is at rest)."""
        return self.mapped.array

    def is_mapping(self, value: object) -> bool:
        """Whether ``value`` is the mapping of the file (what the array is at rest)."""
        return self.mapped.is_mapping(value)

    def in_call(self, writes: bool) -> np.ndarray:
        """The cache's DRAM copy (a hit or a miss), pinned while held, writeable if ``writes``."""
        copy = self.array
        copy.flags.writeable = writes
        return copy

    def remap(self) -> np.ndarray:
        """Out of the cache (written back first if changed), then :meth:`MappedArray.remap`."""
        self.cache.drop(self)
        return self.mapped.remap()


# -- the tiers ---------------------------------------------------------------------------------
def _on_host(array: Any, held: TierSet) -> Any:
    """``array``, or a counted host copy of it if it is a device array (a host tier holds host bytes)."""
    return held.device.to_host(array) if gpu.is_device_array(array) else array


class DramTier(Tier):
    """``dram``: process memory, named in one tier set of this process; volatile, and what a DRAM budget counts."""

    name = "dram"
    process_local = True
    counts_against_dram_budget = True

    def put(
        self,
        name: str,
        array: Any,
        *,
        directory: Path | None,
        cache: Any,
        replace: bool,
        owner: shm.Process | None,
        held: TierSet,
    ) -> DramArray:
        """A copy of ``array`` in this process's memory under ``name``, in ``held``."""
        array = _on_host(array, held)
        with held.dram_lock:
            if held.closed:  # closed while this call was on its way: checked where close() clears
                raise TierError(f"{held!r} is closed (its session ended, its arrays freed): {name!r} was not placed")
            if name in held.dram and not replace:
                raise TierError(f"{name!r} is on dram already: free() it, or place(..., replace=True)")
            held.dram[name] = np.array(array, copy=True, subok=True)
            return DramArray(name, held.dram[name], held)

    def open(self, name: str, *, directory: Path | None, cache: Any, writable: bool, held: TierSet) -> DramArray:
        """The placement ``name`` in ``held`` (dram does not survive a restart)."""
        with held.dram_lock:
            if name not in held.dram:
                raise TierError(
                    f"no dram array {name!r} in {held.name}'s tiers: dram does not survive a restart, and "
                    "another session's arrays are its own; tiers.names('dram') lists these"
                )
            return DramArray(name, held.dram[name], held)

    def free(self, name: str, *, directory: Path | None, held: TierSet) -> bool:
        """Forget ``name``."""
        with held.dram_lock:
            return held.dram.pop(name, None) is not None

    def names(self, *, directory: Path | None, held: TierSet) -> list[str]:
        """The dram arrays of ``held``."""
        with held.dram_lock:
            return sorted(held.dram)


class FileTier(Tier):
    """A tier whose arrays are ``workbench.memory.shm`` files (``.npy`` segments) in a directory:
    ``leaf`` names its default directory, ``on_pmem`` whether ``$WORKBENCH_PMEM_DIR`` holds them."""

    persistent = True
    file_backed = True
    leaf = ""
    on_pmem = False

    def handle(self, name: str, where: Path, cache: DramCache, writable: bool = True) -> TierArray:
        """The handle of file ``name`` in ``where`` as this tier uses it (nothing is read or checked)."""
        raise NotImplementedError

    def put(
        self,
        name: str,
        array: Any,
        *,
        directory: Path | None,
        cache: Any,
        replace: bool,
        owner: shm.Process | None,
        held: TierSet,
    ) -> TierArray:
        """Write ``array`` as file ``name`` (atomically, the space reserved first); its handle."""
        array = _on_host(array, held)
        check_plain(array, f"array {name!r}", self.name)
        array = np.asarray(array)
        where = _directory(self.name, directory)
        exists = TierError(f"{name!r} is on {self.name} already ({where}): free() it, or place(..., replace=True)")
        try:
            if replace:
                shm.replace(name, array, directory=where, owner=owner)
                forget_cached(shm.segment_path(name, where))
            elif shm.exists(name, where):
                raise exists
            else:  # made under the name's writer lock, renamed into place whole: one of two racing callers makes it
                view, created = shm.copy_in(name, array, directory=where, owner=owner)
                del view
                if not created:
                    raise exists
        except shm.SharedMemoryError as error:
            if not replace and "exists with shape" in str(error):
                raise exists from None
            raise TierError(f"cannot place {name!r} on {self.name}: {error}") from None
        return self.handle(name, where, cache or held.cache)

    def open(self, name: str, *, directory: Path | None, cache: Any, writable: bool, held: TierSet) -> TierArray:
        """The handle of file ``name``, its header and owner checked now (not at first use)."""
        where = _directory(self.name, directory)
        if not shm.exists(name, where):
            raise FileNotFoundError(
                f"no {self.name} array {name!r} in {where}; list them with tiers.names({self.name!r})"
            )
        handle = self.handle(name, where, cache or held.cache, writable)
        try:
            handle.array  # noqa: B018 - check the file now (header, owner), not at first use
        except TierError:
            raise
        except shm.SharedMemoryError as error:
            raise TierError(f"cannot open {name!r} on {self.name}: {error}") from None
        return handle

    def free(self, name: str, *, directory: Path | None, held: TierSet) -> bool:
        """Delete file ``name`` (DRAM cache copies of it dropped)."""
        where = _directory(self.name, directory)
        forget_cached(shm.segment_path(name, where))
        return shm.delete(name, where)

    def names(self, *, directory: Path | None, held: TierSet) -> list[str]:
        """The complete files of this user in the tier's directory."""
        return sorted(s.name for s in shm.list_segments(_directory(self.name, directory)) if s.state == "complete")


class MappedTier(FileTier):
    """``mapped``: files mapped ``MAP_SHARED`` and used in place (persistent memory's software form)."""

    name = "mapped"
    leaf = "mapped"
    on_pmem = True

    def handle(self, name: str, where: Path, cache: DramCache, writable: bool = True) -> MappedArray:
        """The file mapped (on first use)."""
        return MappedArray(name, where, writable=writable)


class CachedTier(FileTier):
    """``cached``: the ``mapped`` files used through a DRAM cache with a byte budget (Memory Mode)."""

    name = "cached"
    leaf = "mapped"  # the same files as mapped
    on_pmem = True
    through_dram_cache = True

    def handle(self, name: str, where: Path, cache: DramCache, writable: bool = True) -> CachedArray:
        """The file through ``cache``."""
        return CachedArray(name, where, cache)


class DiskTier(FileTier):
    """``disk``: staged, read into DRAM when used and written back (atomically) when changed."""

    name = "disk"
    leaf = "disk"
    staged = True

    def handle(self, name: str, where: Path, cache: DramCache, writable: bool = True) -> DiskArray:
        """The file, read in on first use."""
        return DiskArray(name, where)


# -- the registry: every tier, registered once -------------------------------------------------
REGISTRY: dict[str, Tier] = {}  # name -> tier, in the order the tiers were registered


def register(tier: Tier) -> Tier:
    """Add ``tier`` to :data:`REGISTRY` under its name, after which every operation here (and the
    store) takes that name; a name taken already is an error (:func:`unregister` it first)."""
    if not isinstance(tier, Tier) or not isinstance(tier.name, str) or not tier.name:
        raise TypeError(f"register() takes a Tier with a name, got {tier!r}")
    if tier.name in REGISTRY:
        raise ValueError(f"a tier {tier.name!r} is registered already: unregister({tier.name!r}) it first")
    REGISTRY[tier.name] = tier
    return tier


def unregister(name: str) -> Tier:
    """Take the tier ``name`` out of :data:`REGISTRY` (arrays still on it stay where they are); the tier."""
    return REGISTRY.pop(check_tier(name))


def lookup(name: object) -> Tier:
    """The tier named ``name``; :class:`UnknownTier` naming the choices otherwise."""
    return REGISTRY[check_tier(name)]


for _tier in (DramTier(), MappedTier(), CachedTier(), DiskTier(), gpu.GpuTier()):
    register(_tier)

HOME = DramTier.name  # where an array is as Python made it (process memory): a new store object is there
TIERS = tuple(REGISTRY)  # the workbench's own tiers, by name (the store adds the "dynamic" policy)
HOST_TIERS = tuple(n for n, t in REGISTRY.items() if not t.counts_transfers)  # the node's memory and storage
FILE_TIERS = tuple(n for n, t in REGISTRY.items() if t.file_backed)  # those whose arrays are files in a directory


# -- operations by name ------------------------------------------------------------------------
def _directory(tier: str, directory: str | Path | None) -> Path:
    """The tier's directory: the default (private, see :func:`private_directory`), or the one given,
    refused where other users could replace this user's files in it: writable by others, or
    another user's, without the sticky bit (``/tmp`` and ``/dev/shm`` have it)."""
    path = default_directory(tier) if directory is None else Path(directory)
    try:
        is_directory = path.is_dir()
    except PermissionError:  # a directory on the way is another user's (another learner's tier files)
        raise TierError(
            f"tier directory {path} cannot be reached (permission denied): it is another user's, whose tier files "
            "are theirs only; use a directory of your own, or leave directory= out"
        ) from None
    if not is_directory:
        if path.exists() or path.is_symlink():
            raise TierError(f"tier directory {path} is not a directory: give a directory, or leave directory= out")
        raise TierError(f"tier directory {path} does not exist: create it, or leave directory= out for the default")
    if directory is not None:
        _refuse_shared(path, str(path), "use a directory of your own, or leave directory= out")
    return path


def place(
    name: str,
    array: np.ndarray,
    tier: str,
    *,
    directory: str | Path | None = None,
    cache: DramCache | None = None,
    replace: bool = False,
    owner: shm.Process | None = None,
    held: TierSet | None = None,
) -> TierArray:
    """Put a copy of ``array`` on ``tier`` under ``name`` and return its handle.

    File tiers write an ``.npy`` segment (atomically; the space reserved first, so a full file
    system is a ``TierError`` and nothing is left behind). ``replace=True`` writes a new version
    over an existing one (a killed writer leaves the previous one readable); otherwise an existing
    name is an error. ``owner`` (file tiers): the process the file lives for; it ends with an owner
    record, and once that process is dead ``shm.reclaim`` of its directory frees it (a store
    backend's files: see :func:`reclaim_store_files`). ``held``: the tier set whose ``dram`` and
    ``gpu`` arrays and DRAM cache the call uses (default: the one in use, :func:`current`).
    """
    kind = lookup(tier)
    shm._check_name(name, "tier array name")
    where = None if directory is None else Path(directory)
    return kind.put(name, array, directory=where, cache=cache, replace=replace, owner=owner, held=current(held))


def open_array(
    name: str,
    tier: str,
    *,
    directory: str | Path | None = None,
    cache: DramCache | None = None,
    writable: bool = False,
    held: TierSet | None = None,
) -> TierArray:
    """Reopen an array placed earlier (after a restart too: the file is the data and its header).
    ``dram`` and ``gpu`` are volatile: only the placements of the tier set (``held``, default the one in
    use) reopen."""
    where = None if directory is None else Path(directory)
    return lookup(tier).open(name, directory=where, cache=cache, writable=writable, held=current(held))


def move(
    handle: TierArray,
    tier: str,
    *,
    directory: str | Path | None = None,
    replace: bool = False,
    held: TierSet | None = None,
) -> TierArray:
    """Place ``handle``'s array on ``tier`` (same name) and free it where it was; returns the new handle.
    Another array of that name already on ``tier`` is an error unless ``replace=True``. ``directory`` is
    a file tier's (mapped, cached, disk); ``dram`` and ``gpu`` have none and pass it by, as :func:`place` does.
    ``held``: the tier set of the new place (default: the one in use); a ``dram`` or ``gpu`` array is freed
    in its own set (another session's, say), never one of the same name in ``held``."""
    held = current(held)
    kind = lookup(tier)
    if not kind.file_backed:
        directory = None
    if tier == handle.tier and (directory is None or handle.directory == Path(directory)):
        return handle
    if handle.directory is not None and isinstance(kind, FileTier):
        where = _directory(tier, directory)
        if where.resolve() == handle.directory.resolve():  # the same file serves both tiers: no copy
            handle.sync()  # a cached copy is written back and leaves its cache
            return kind.handle(handle.name, where, handle.cache or held.cache)
    if not replace and handle.name in names(tier, directory=directory, held=held):
        raise TierError(
            f"another array {handle.name!r} is on {tier} already: free() it, or move(..., replace=True) to overwrite it"
        )
    data = handle.array  # off the gpu tier: a counted host copy
    new = place(handle.name, data, tier, directory=directory, replace=True, held=held)
    source = handle.held if handle.held is not None else held
    if not source.closed:  # a closed set's arrays were freed with it
        lookup(handle.tier).free(handle.name, directory=handle.directory, held=source)
    return new


def free(name: str, tier: str, *, directory: str | Path | None = None, held: TierSet | None = None) -> bool:
    """Remove ``name`` from ``tier``; True if it was there (views still held stay valid until dropped).
    ``held``: the tier set of a ``dram`` or ``gpu`` array (default: the one in use)."""
    return lookup(tier).free(name, directory=None if directory is None else Path(directory), held=current(held))


def names(tier: str, *, directory: str | Path | None = None, held: TierSet | None = None) -> list[str]:
    """The arrays on ``tier``: complete files of this user only; on ``dram`` and ``gpu``, those of the tier
    set ``held`` (default: the one in use)."""
    return lookup(tier).names(directory=None if directory is None else Path(directory), held=current(held))


def adopt(name: str, array: Any, tier: str, *, held: TierSet | None = None) -> TierArray:
    """Name ``array``, made on ``tier`` already (a device array a kernel made: no bytes move), ``name``
    there; a host tier refuses (:meth:`Tier.adopt`). ``held``: the tier set (default: the one in use)."""
    kind = lookup(tier)
    shm._check_name(name, "tier array name")
    return kind.adopt(name, array, held=current(held))


# -- whose arrays: the tier sets ---------------------------------------------------------------
DEFAULT_CACHE_BYTES = 256 * 2**20  # a tier set's DRAM cache unless told

PROCESS = TierSet("the process", DramCache(DEFAULT_CACHE_BYTES), gpu.DEVICE)  # in use where no other set is


def new_set(name: str, settings: Settings | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> TierSet:
    """A new, empty tier set (see :mod:`workbench.memory.tier_set`) for ``name`` (who owns it): its own
    ``dram`` arrays, a DRAM cache of ``cache_bytes`` and its own device arrays, which read the device
    limit and the DRAM budget from ``settings`` (None: the environment where they run)."""
    return TierSet(name, DramCache(cache_bytes), gpu.DeviceMemory(settings), settings)


def current(held: TierSet | None = None) -> TierSet:
    """``held`` if given (refused if closed), else the tier set in use in this context
    (:func:`workbench.memory.tier_set.using`, a session's), else :data:`PROCESS`."""
    if held is None:
        return tier_set.active() or PROCESS
    if not isinstance(held, TierSet):
        raise TypeError(f"held= takes a TierSet (a session's: session.tier_set), got {type(held).__name__}")
    if held.closed:
        raise TierError(
            f"{held!r} is closed (its session ended, its arrays freed): start a session, or leave held= out"
        )
    return held


# -- the active object store's tier files ------------------------------------------------------
STORE_DIR_ENV = settings_names.STORE_DIR


def default_store_directory() -> Path:
    """The active object store's directory unless told: ``$WORKBENCH_STORE_DIR``, else
    ``~/.cache/locality-workbench/store``."""
    return Path(settings_names.now(STORE_DIR_ENV) or Path.home() / ".cache" / "locality-workbench" / "store")


def store_tier_path(store_directory: str | os.PathLike[str]) -> Path:
    """Where the store in ``store_directory`` keeps its ``mapped`` (and ``cached``) files:
    ``$WORKBENCH_PMEM_DIR/store-<its name>`` when set, else ``<store>/tiers/mapped`` (not made here)."""
    pmem = settings_names.now(PMEM_ENV)
    if pmem:
        return Path(pmem) / f"store-{Path(store_directory).name}"
    return Path(store_directory) / "tiers" / "mapped"


def reclaim_store_files(store_directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Free the tier files that dead store backends left in the store's tier directory (default: the
    default store's); the names removed.

    A backend's tier file ends with an owner record naming the worker process that made it: a kernel
    killed with SIGKILL (its workers with it) cannot remove them, so the next ``workbench.start()``,
    a new backend on that store and ``workbench shm clean`` call this. Only what ``shm.reclaim``
    removes goes: files of this user whose every recorded process is surely dead and that no live
    process maps; nothing in a directory that is missing or that other users could write."""
    path = store_tier_path(store_directory if store_directory is not None else default_store_directory())
    try:
        if not path.is_dir() or path.is_symlink() or others_could_swap(path) is not None:
            return []
    except OSError:
        return []
    return shm.reclaim(path)
