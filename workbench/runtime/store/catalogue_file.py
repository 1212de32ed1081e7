"""Read a store's catalogue straight from its SQLite file, without a cluster (``workbench store list``)."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def read(directory: str | Path | None = None) -> dict[str, Any]:
    """Objects (with current version and aliases) of the store in ``directory``."""
    from workbench.runtime.store.client import default_directory

    directory = Path(directory or default_directory()).expanduser()
    path = directory / "catalogue.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"{directory} holds no store catalogue (catalogue.sqlite): is it a store directory?")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        current = dict(db.execute("SELECT oid, version FROM current"))
        aliases: dict[str, list[str]] = {}
        for alias, oid in db.execute("SELECT alias, oid FROM aliases ORDER BY alias"):
            aliases.setdefault(oid, []).append(alias)
        objects = [
            {"oid": oid, "version": version, "current": current.get(oid) == version, "class_label": cls, "kind": kind,
             "nbytes": nbytes, "disk_path": disk, "aliases": aliases.get(oid, [])}
            for oid, version, cls, kind, nbytes, disk in db.execute(
                "SELECT oid, version, class_label, kind, nbytes, disk_path FROM objects ORDER BY created")
        ]
    return {"directory": str(directory), "objects": objects}
