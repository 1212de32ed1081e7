"""The store's disk tier on the file system: where a disk copy goes, how it is written, and which
files a backend may read back.

Loading a pickle runs code, so a disk copy is read only if it is a regular file directly in this
store's ``objects`` directory, owned by this user (:func:`read_object`); the catalogue's path is
untrusted input. Files are written atomically and private (0600) by :func:`write_object`.
"""

from __future__ import annotations

import errno
import os
import pickle
import stat
import threading
from pathlib import Path
from typing import Any

import cloudpickle

from workbench.runtime.store.errors import StoreError


def disk_path(directory: str, oid: str, version: int) -> Path:
    """Where version ``version`` of object ``oid`` is flushed under ``directory``."""
    return Path(directory) / "objects" / f"{oid}-v{version}.pkl"


def write_object(path: Path, obj: Any) -> int:
    """Pickle ``obj`` (classes by value where registered) to ``path`` atomically, readable by its
    owner only (0600); returns bytes written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
            cloudpickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path.stat().st_size


def in_objects_directory(directory: str | Path, path: str | Path) -> bool:
    """Whether ``path`` names a file directly in the store's ``objects`` directory (the only place
    its disk copies are read from or deleted)."""
    candidate = Path(path)
    return (
        candidate.name not in ("", ".", "..") and candidate.parent.resolve() == (Path(directory) / "objects").resolve()
    )


def read_object(directory: str | Path, path: str | Path) -> Any:
    """The object pickled in ``path``, if that is a disk copy this store may load; a ``StoreError`` if not.

    Loading a pickle runs code, so the catalogue's path is untrusted input: only a regular file
    directly in this store's ``objects`` directory, owned by this user, is read. A catalogue edited
    to point elsewhere (``/tmp/evil.pkl``, ``../../x``), a symlink, a FIFO or another user's file is
    refused. The checks are made on the opened file itself (no window to swap it in between).
    """
    candidate = Path(path)
    if not in_objects_directory(directory, candidate):
        raise StoreError(
            f"the catalogue names {path} as a disk copy, outside this store's {Path(directory) / 'objects'}: refused "
            "(edited catalogue?)"
        )
    refused = StoreError(
        f"the disk copy {candidate} is not a regular file owned by this user: refused (only files the store "
        "wrote itself are loaded, since loading a pickle runs code)"
    )
    try:  # O_NONBLOCK: a FIFO put there must not hang the backend; it is refused below
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileNotFoundError(f"the disk copy {candidate} is missing (deleted by hand?)") from None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink
            raise refused from None
        raise
    with open(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise refused
        return pickle.load(f)
