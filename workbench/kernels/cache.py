"""This user's cache directory of the workbench, ``~/.cache/locality-workbench``: numba's compiled
kernels (``numba/``, made when ``kernels`` is imported), the Slurm kind's job logs and credentials
(``slurm/``) and the active store (``store/``) live in it.

Every directory made here is made 0700, whatever the umask: ``os.mkdir`` with an explicit mode (a
umask only takes bits away) and the mode set again through the new directory's descriptor. Under a
umask such as 002 (the default on RHEL-family login nodes and on Ubuntu with user-private groups)
``mkdir -p`` made ``locality-workbench`` 0775, and the checks that no other user can swap what is in
it (``workbench.memory.tiers.others_could_swap``: the Slurm credentials, the store) then refused it.
This module imports nothing of the workbench: ``kernels`` is its lowest layer, and makes the first
of these directories at import.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from workbench.settings import CACHE_HOME, Settings

CACHE_NAME = "locality-workbench"


def cache_root(settings: Settings | None = None) -> Path:
    """``$XDG_CACHE_HOME/locality-workbench``, else ``~/.cache/locality-workbench`` (not made here), in
    ``settings`` (default: the environment now)."""
    base = (settings or Settings.read()).get(CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(base)) / CACHE_NAME


def _make_private(path: Path) -> bool:
    """Make directory ``path`` with mode 0700 exactly; False if it was there already."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    _set_private(path)
    return True


def _set_private(path: Path) -> None:
    """Set directory ``path``'s mode to 0700 through its descriptor (a symlink there is not followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def private_directories(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory, made if missing with every missing directory above it, each 0700
    whatever the umask (``os.makedirs(path, mode=0o700)`` gives its mode to the last one only; the
    others get the umask's). Directories that exist are left as they are: whose they are, and who may
    change them, is for the caller to check. OSError when one cannot be made."""
    path = Path(os.path.abspath(path))
    missing = []
    for step in (path, *path.parents):
        if os.path.lexists(step):
            break
        missing.append(step)
    for step in reversed(missing):
        _make_private(step)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    return path


def cache_directory(*parts: str, settings: Settings | None = None) -> Path:
    """``cache_root()/parts``, made (:func:`private_directories`). The ``locality-workbench`` directory,
    when it is this user's and open to others (an older workbench made it under a umask such as 002),
    is made 0700 again: the checks that refuse a directory others could change would refuse it."""
    root = cache_root(settings)
    private_directories(root)
    info = os.lstat(root)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        _set_private(root)
    return private_directories(root.joinpath(*parts))
