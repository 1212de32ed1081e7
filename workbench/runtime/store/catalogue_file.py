"""The catalogue's SQLite file: where it is, what its rows may hold, how the catalogue writes it, and
how it is read without a cluster (``workbench store list``).

The catalogue (a scheduler plugin) keeps every object in memory and writes each change to this file
so that it survives a cluster restart. Its writes run on one thread of their own
(:class:`CatalogueFile`), in the order they were made: a commit of 10^5 rows takes the scheduler's
event loop no longer than it takes to hand the rows over, and every client of the scheduler goes on
being answered meanwhile. A reply that a caller waits for is sent only once its write is committed
(:meth:`CatalogueFile.committed`, awaited without holding up the event loop): when ``proxy.flush()``
returns, its row is in the file, and a scheduler killed right after loses nothing it acknowledged.
Closing the file waits for every write handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import stat
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

from workbench.memory.tiers import default_store_directory
from workbench.names import printable
from workbench.runtime.store.errors import StoreError

logger = logging.getLogger(__name__)
Statement = tuple[str, tuple[Any, ...]]  # an SQL statement and its parameters
Batch = tuple[str, list[tuple[Any, ...]]]  # an SQL statement and the parameters of each of its runs


def default_directory() -> Path:
    """``$WORKBENCH_STORE_DIR``, else ``~/.cache/locality-workbench/store`` (where the tier files of
    its backends are found too: ``workbench.memory.tiers.default_store_directory``)."""
    return default_store_directory()


SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    oid TEXT NOT NULL, version INTEGER NOT NULL, class_label TEXT NOT NULL, kind TEXT NOT NULL,
    nbytes INTEGER NOT NULL, methods TEXT NOT NULL, meta TEXT NOT NULL, disk_path TEXT,
    created REAL NOT NULL, PRIMARY KEY (oid, version));
CREATE TABLE IF NOT EXISTS current (oid TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS aliases (alias TEXT PRIMARY KEY, oid TEXT NOT NULL);
"""


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` (control characters escaped) cut to ``limit`` characters: a value from an
    untrusted row, in an error message of one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _of(kind: type, value: Any, what: str) -> Any:
    """``value`` if it is of ``kind``; a ``ValueError`` naming ``what`` otherwise (a catalogue row is untrusted)."""
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ValueError(f"{what} should be {kind.__name__}, found {_shown(value)}")
    return value


def _checked_record(
    oid: Any,
    version: Any,
    class_label: Any,
    kind: Any,
    nbytes: Any,
    methods: Any,
    meta: Any,
    disk_path: Any,
    created: Any,
) -> dict[str, Any]:
    """One ``objects`` row as the catalogue keeps it, every field checked: a ``ValueError`` if any is
    not what the store writes (an edited or damaged file fails here, not later inside a call)."""
    where = f"object {_shown(oid)} v{_shown(version)}"
    _of(str, oid, "an object id")
    _of(int, version, f"the version of {where}")
    _of(str, class_label, f"the class of {where}")
    if kind not in ("object", "collection"):
        raise ValueError(f"the kind of {where} should be 'object' or 'collection', found {_shown(kind)}")
    if _of(int, nbytes, f"the size of {where}") < 0:
        raise ValueError(f"the size of {where} should be at least 0, found {nbytes}")
    if not isinstance(methods, dict) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in methods.items()):
        raise ValueError(f"the active methods of {where} should map names to true/false, found {methods!r}")
    _of(dict, meta, f"the metadata of {where}")
    if kind == "collection":
        for field, item in (("blocks", str), ("chunks", int), ("shape", int)):
            if not isinstance(meta.get(field), list) or not all(isinstance(v, item) for v in meta[field]):
                raise ValueError(f"the collection {where} should list its {field}, found {meta.get(field)!r}")
        _of(str, meta.get("dtype"), f"the dtype of {where}")
    if disk_path is not None:
        _of(str, disk_path, f"the disk copy of {where}")
    if not isinstance(created, (int, float)):
        raise ValueError(f"the creation time of {where} should be a number, found {created!r}")
    return {
        "class_label": class_label,
        "kind": kind,
        "nbytes": nbytes,
        "methods": methods,
        "meta": meta,
        "disk_path": disk_path,
        "created": created,
    }


class CatalogueFile:
    """The catalogue's open SQLite file: read once when opened, then written by one thread, in order.

    ``write`` hands a transaction to the writer thread and returns at once (its future, which
    :meth:`committed` awaits); a write that failed (disk full, the file removed) makes the next
    ``write``, ``committed`` and ``close`` raise a ``StoreError`` saying so, since the catalogue in
    memory then holds changes its file lost.
    """

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / "catalogue.sqlite"
        Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)
        _open_private(self.path)
        self._db: sqlite3.Connection | None = sqlite3.connect(self.path, check_same_thread=False)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="workbench-catalogue-writer")
        self._last: Future[None] | None = None
        self._failed: BaseException | None = None
        try:
            self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" + SCHEMA)
        except sqlite3.DatabaseError as error:
            self.close()
            raise not_a_catalogue(self.path, error) from None

    def read(self) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[str, int], dict[str, str]]:
        """Every object's record (checked), the current version of each object, and the aliases; a
        ``RuntimeError`` saying so when the file is not a catalogue (it is untrusted input)."""
        assert self._db is not None
        try:
            objects = {
                (oid, version): _checked_record(
                    oid, version, class_label, kind, nbytes, json.loads(methods), json.loads(meta), disk_path, created
                )
                for oid, version, class_label, kind, nbytes, methods, meta, disk_path, created in self._db.execute(
                    "SELECT oid, version, class_label, kind, nbytes, methods, meta, disk_path, created FROM objects"
                )
            }
            current = {
                _of(str, oid, "an object id"): _of(int, version, "a version")
                for oid, version in self._db.execute("SELECT oid, version FROM current")
            }
            aliases = {
                _of(str, alias, "an alias"): _of(str, oid, "an object id")
                for alias, oid in self._db.execute("SELECT alias, oid FROM aliases")
            }
        except (sqlite3.DatabaseError, ValueError, TypeError) as error:
            raise not_a_catalogue(self.path, error) from None
        return objects, current, aliases

    def write(self, statements: Sequence[Statement] = (), batches: Sequence[Batch] = ()) -> Future[None] | None:
        """Commit ``statements`` and then ``batches`` (a statement run with each of many parameters) as
        one transaction on the writer thread, after every earlier write; returns before it is committed
        (the rows are grouped there, off the event loop): the write's future (None: nothing to write),
        for :meth:`committed`."""
        self._check()
        if not (statements or batches):
            return None
        self._last = self._writer.submit(self._commit, list(statements), list(batches))
        self._last.add_done_callback(self._note_failure)
        return self._last

    async def committed(self, written: Future[None]) -> None:
        """Return once ``written`` (a :meth:`write`'s future), and so every write before it, is
        committed; a ``StoreError`` if a write failed. Awaited on the event loop without blocking it;
        a cancelled wait (the scheduler closing) leaves the write to finish (``close`` waits for it)."""
        with contextlib.suppress(Exception):  # its failure is noted by _note_failure, raised by _check
            await asyncio.shield(asyncio.wrap_future(written))
        self._check()

    def flush(self) -> None:
        """Wait until every write handed over is committed; a ``StoreError`` if one failed."""
        last = self._last
        if last is not None:
            with contextlib.suppress(Exception):  # its failure is noted by _note_failure
                last.result()
        self._check()

    def close(self) -> None:
        """Commit what was handed over, then close the file (a ``StoreError`` afterwards if a write failed)."""
        if self._db is None:
            return
        self._writer.shutdown(wait=True)
        self._db.close()
        self._db = None
        self._check()

    @property
    def closed(self) -> bool:
        """Whether the file was closed."""
        return self._db is None

    def _commit(self, statements: list[Statement], batches: list[Batch]) -> None:
        """One transaction of ``statements`` (runs of the same one in one ``executemany``), then
        ``batches`` (on the writer thread)."""
        assert self._db is not None
        with self._db:
            start = 0
            while start < len(statements):
                sql, end = statements[start][0], start + 1
                while end < len(statements) and statements[end][0] == sql:
                    end += 1
                self._db.executemany(sql, [params for _, params in statements[start:end]])
                start = end
            for sql, rows in batches:
                self._db.executemany(sql, rows)

    def _note_failure(self, done: Future[None]) -> None:
        """Keep the first failed write's error (logged: nobody waits for the write itself)."""
        error = None if done.cancelled() else done.exception()
        if error is not None and self._failed is None:
            self._failed = error
            logger.error("the store catalogue %s could not be written: %s", self.path, error)

    def _check(self) -> None:
        if self._failed is not None:
            raise StoreError(
                f"the store catalogue {self.path} could not be written ({type(self._failed).__name__}: "
                f"{self._failed}): the objects changed since are not on disk. Free the disk, then close and "
                "open the store again"
            )


def _open_private(path: Path) -> None:
    """Create ``path`` private (0600; an older store's file is made private), never through a symlink."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    except OSError as error:
        raise RuntimeError(
            f"cannot open the store catalogue {path} ({error.strerror or error}; a symlink is refused): "
            "use a store directory of your own"
        ) from None


def not_a_catalogue(path: Path, error: BaseException) -> RuntimeError:
    """The error of a file that is not a catalogue the store wrote."""
    return RuntimeError(
        f"{path} is not a workbench store catalogue (corrupt? {error}): move it away, or open the store in "
        "another directory"
    )


# -- reading without a cluster ---------------------------------------------------------------------
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file


def read(directory: str | Path | None = None) -> dict[str, Any]:
    """Objects (with current version and aliases) of the store in ``directory``.

    The file and its rows are untrusted (another user's, crafted, damaged): only a regular file is
    read (opened without blocking and without following a symlink: a FIFO of that name would hang a
    plain open, as SQLite's own), and every row must hold what the store writes. What fails is a
    ``ValueError``, ``FileNotFoundError``, ``NotADirectoryError`` or ``PermissionError`` that says what
    to do (``workbench store list`` prints it as one line)."""
    directory = Path(directory or default_directory()).expanduser()
    path = directory / "catalogue.sqlite"

    def not_catalogue(why: str) -> ValueError:
        why = printable(why if len(why) <= 300 else why[:297] + "...")  # SQLite's message may quote a row
        return ValueError(
            f"{path} is not a workbench store catalogue (corrupt, or another program's file: {why}). "
            "Move it away to start an empty store there, or point --dir at the right store directory"
        )

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{directory} holds no store catalogue (catalogue.sqlite): is it a store directory?"
        ) from None
    except NotADirectoryError:
        raise NotADirectoryError(
            f"{directory} is not a directory (or a path above it is a file): point --dir at a store directory"
        ) from None
    except PermissionError:
        raise PermissionError(
            f"cannot read {path}: permission denied. List the store as the user who owns it"
        ) from None
    except OSError as error:  # ELOOP: a symlink, which the store never makes (and never opens)
        raise not_catalogue(f"cannot open it without following a link: {error.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise not_catalogue(f"it is {kind}")
        header = os.read(fd, len(SQLITE_HEADER))
    finally:
        os.close(fd)
    if not header:  # created, then the scheduler stopped before it wrote anything: an empty store
        return {"directory": str(directory), "objects": []}
    if header != SQLITE_HEADER:
        raise not_catalogue("no SQLite header")
    try:
        return {"directory": str(directory), "objects": _objects(path)}
    except (sqlite3.DatabaseError, ValueError) as error:
        raise not_catalogue(str(error)) from None


def _json(text: Any) -> Any:
    """A JSON column of an untrusted row, decoded; a ``ValueError`` when it is not JSON text."""
    if not isinstance(text, (str, bytes)):
        raise ValueError(f"a JSON column should be text, found {_shown(text)}")
    return json.loads(text)


def _objects(path: Path) -> list[dict[str, Any]]:
    """Every object row of the catalogue at ``path``, checked (a ``ValueError`` naming the first field
    that is not what the store writes: a text size, a binary name)."""
    # Read-only, and the path quoted: a directory name with "?" or "#" would otherwise end the file name.
    with contextlib.closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)) as db:
        kinds = dict(db.execute("SELECT name, type FROM sqlite_master WHERE name IN ('objects', 'current', 'aliases')"))
        for table in ("objects", "current", "aliases"):  # a view could compute rows without end (a recursive one)
            if kinds.get(table, "table") != "table":
                raise ValueError(f"{table} is a {_shown(kinds[table])}, where the store makes a table")
        current = {
            _of(str, oid, "an object id"): _of(int, version, f"the current version of {_shown(oid)}")
            for oid, version in db.execute("SELECT oid, version FROM current")
        }
        aliases: dict[str, list[str]] = {}
        for alias, oid in db.execute("SELECT alias, oid FROM aliases ORDER BY alias"):
            aliases.setdefault(_of(str, oid, "an object id"), []).append(_of(str, alias, "an alias"))
        objects = []
        for oid, version, class_label, kind, nbytes, methods, meta, disk_path, created in db.execute(
            "SELECT oid, version, class_label, kind, nbytes, methods, meta, disk_path, created FROM objects "
            "ORDER BY created"
        ):  # each row held to the store's own check (_checked_record): store list refuses what the store would
            record = _checked_record(
                oid, version, class_label, kind, nbytes, _json(methods), _json(meta), disk_path, created
            )
            objects.append(
                {
                    "oid": oid,
                    "version": version,
                    "current": current.get(oid) == version,
                    "class_label": record["class_label"],
                    "kind": record["kind"],
                    "nbytes": record["nbytes"],
                    "disk_path": record["disk_path"],
                    "aliases": aliases.get(oid, []),
                }
            )
    return objects
