"""Read a store's catalogue straight from its SQLite file, without a cluster (``workbench store list``)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from workbench.runtime.store.catalogue import default_directory

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file


def read(directory: str | Path | None = None) -> dict[str, Any]:
    """Objects (with current version and aliases) of the store in ``directory``."""
    directory = Path(directory or default_directory()).expanduser()
    path = directory / "catalogue.sqlite"

    def not_catalogue(why: str) -> ValueError:
        return ValueError(
            f"{path} is not a workbench store catalogue (corrupt, or another program's file: {why}). "
            "Move it away to start an empty store there, or point --dir at the right store directory"
        )

    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{directory} holds no store catalogue (catalogue.sqlite): is it a store directory?"
        ) from None
    except IsADirectoryError:
        raise not_catalogue("it is a directory") from None
    except PermissionError:
        raise RuntimeError(f"cannot read {path}: permission denied. List the store as the user who owns it") from None
    if not header:  # created, then the scheduler stopped before it wrote anything: an empty store
        return {"directory": str(directory), "objects": []}
    if header != SQLITE_HEADER:
        raise not_catalogue("no SQLite header")
    try:
        return {"directory": str(directory), "objects": _objects(path)}
    except sqlite3.DatabaseError as error:
        raise not_catalogue(str(error)) from None


def _objects(path: Path) -> list[dict[str, Any]]:
    # Read-only, and the path quoted: a directory name with "?" or "#" would otherwise end the file name.
    with contextlib.closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)) as db:
        current = dict(db.execute("SELECT oid, version FROM current"))
        aliases: dict[str, list[str]] = {}
        for alias, oid in db.execute("SELECT alias, oid FROM aliases ORDER BY alias"):
            aliases.setdefault(oid, []).append(alias)
        objects = [
            {
                "oid": oid,
                "version": version,
                "current": current.get(oid) == version,
                "class_label": cls,
                "kind": kind,
                "nbytes": nbytes,
                "disk_path": disk,
                "aliases": aliases.get(oid, []),
            }
            for oid, version, cls, kind, nbytes, disk in db.execute(
                "SELECT oid, version, class_label, kind, nbytes, disk_path FROM objects ORDER BY created"
            )
        ]
    return objects
