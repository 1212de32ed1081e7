"""The store under adversarial use: racing writes on evicted objects, results that must not change,
an untrusted store directory, odd aliases and arrays, and a store that is closed and detached."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sqlite3
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import dask.array as da
import numpy as np
import pytest
from distributed import futures_of
from store_helpers import Counter, SlowToLoad

import workbench
import workbench.runtime.store.backend_ops as backend_ops
from workbench.runtime.store import (
    ArrayBlock,
    ObjectLost,
    PersistentObject,
    Store,
    StoreError,
    active,
    registered_directory,
    store_for,
)
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.protocol import HANDLER, PLUGIN_NAME


@pytest.fixture
def store(session):
    return store_for(session)


class Pair(NamedTuple):
    head: np.ndarray
    seen: list[float]


class Holder(PersistentObject):
    """Returns views of its own state: the results must still never change afterwards."""

    def __init__(self, data: np.ndarray):
        self.data = data
        self.log: list[float] = []
        self.parts = {"inner": Pair(data[:1], [])}

    @active
    def raw(self) -> np.ndarray:
        return self.data

    @active
    def history(self) -> list[float]:
        return self.log

    @active
    def inner(self) -> Pair:
        return self.parts["inner"]

    @active
    def nested(self) -> tuple[np.ndarray, dict[str, np.ndarray], list[np.ndarray], float]:
        return self.data[:2], {"tail": self.data[-2:]}, [self.data], 1.0

    @active
    def fresh(self) -> np.ndarray:
        return self.data * 2  # a new array: returned as it is

    @active
    def itself(self) -> Holder:
        return self

    @active(writes=True)
    def add(self, value: float) -> None:
        self.data += value
        self.log.append(value)
        self.parts["inner"].seen.append(value)


def _increment_many(session, proxy, threads: int) -> list[int]:
    """``threads`` concurrent writing increments, half through the direct path, half as tasks."""

    def one(i: int) -> int:
        if i % 2:
            return proxy.slow_increment.value()
        return session.gather(proxy.slow_increment(), timeout=120)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(threads)))


def test_writes_to_an_evicted_object_are_never_lost(session, store):
    proxy = store.make_persistent(SlowToLoad(np.ones(4)))
    try:
        expected = 0
        for _ in range(3):  # evicted right before a burst of 50 concurrent writers, again and again
            proxy.evict()
            assert proxy.locations() == []
            results = _increment_many(session, proxy, 50)
            expected += 50
            assert sorted(results) == list(range(expected - 49, expected + 1))  # each increment saw the one before
            assert len(proxy.locations()) == 1  # reloaded once, on one backend
        assert proxy.slow_increment.value() == expected + 1
    finally:
        proxy.delete()


def test_evicting_while_writers_run_loses_nothing(session, store):
    proxy = store.make_persistent(Counter(np.ones(4)))
    stop = threading.Event()

    def evict_repeatedly() -> int:
        evictions = 0
        while not stop.is_set():
            proxy.evict()
            evictions += 1
        return evictions

    try:
        with ThreadPoolExecutor(1) as pool:
            evicting = pool.submit(evict_repeatedly)
            try:
                results = _increment_many(session, proxy, 20)
            finally:
                stop.set()
            assert evicting.result(timeout=120) > 0
        assert sorted(results) == list(range(1, 21))
        assert proxy.slow_increment.value() == 21
    finally:
        proxy.delete()


def test_reads_of_an_evicted_object_reload_it_once(session, store):
    proxy = store.make_persistent(SlowToLoad(np.arange(6.0)))
    try:
        proxy.evict()
        with ThreadPoolExecutor(16) as pool:
            totals = list(
                pool.map(lambda i: proxy.total.value() if i % 2 else session.gather(proxy.total()), range(32))
            )
        assert totals == [15.0] * 32
        assert len(proxy.locations()) == 1
    finally:
        proxy.delete()


def test_a_read_heavy_mix_on_an_evicted_object_loses_no_write(session, store):
    proxy = store.make_persistent(SlowToLoad(np.arange(6.0)))

    def one(i: int) -> tuple[str, int | float]:
        if i % 5 == 0:  # one call in five writes
            return "write", proxy.slow_increment.value() if i % 10 else session.gather(
                proxy.slow_increment(), timeout=120
            )
        if i % 2:
            return "total", proxy.total.value()
        return "count", session.gather(proxy.count(), timeout=120)

    try:
        writes = 0
        for _ in range(3):
            proxy.evict()
            with ThreadPoolExecutor(40) as pool:
                results = list(pool.map(one, range(40)))
            new = sorted(v for kind, v in results if kind == "write")
            assert new == list(range(writes + 1, writes + len(new) + 1))
            writes += len(new)
            assert all(v == 15.0 for kind, v in results if kind == "total")
            assert all(0 <= v <= writes for kind, v in results if kind == "count")
            assert len(proxy.locations()) == 1
        assert proxy.count.value() == writes == 24
    finally:
        proxy.delete()


def test_a_finished_result_never_changes(session, store):
    proxy = store.make_persistent(Holder(np.ones(4)))
    try:
        future = proxy.raw()
        session.wait(future)
        value = proxy.raw.value()
        nested = proxy.nested.value()
        nested_future = proxy.nested()
        itself = proxy.itself()
        history, inner = proxy.history(), proxy.inner()
        session.wait([nested_future, itself, history, inner])
        proxy.add.value(100.0)
        np.testing.assert_array_equal(future.result(), np.ones(4))  # not [101, ...]
        np.testing.assert_array_equal(itself.result().data, np.ones(4))
        np.testing.assert_array_equal(value, np.ones(4))
        assert history.result() == [] and proxy.history.value() == [100.0]  # a list of the state is copied too
        assert isinstance(inner.result(), Pair) and inner.result().seen == []  # and a namedtuple inside a dict
        np.testing.assert_array_equal(inner.result().head, [1.0])
        for got in (nested, nested_future.result()):
            np.testing.assert_array_equal(got[0], [1.0, 1.0])
            np.testing.assert_array_equal(got[1]["tail"], [1.0, 1.0])
            np.testing.assert_array_equal(got[2][0], np.ones(4))
            assert got[3] == 1.0
        np.testing.assert_array_equal(proxy.raw.value(), np.full(4, 101.0))
        np.testing.assert_array_equal(proxy.fresh.value(), np.full(4, 202.0))
    finally:
        proxy.delete()


def test_the_store_directory_is_private_and_its_disk_copies_are_checked(session, store, tmp_path):
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.directory / "catalogue.sqlite").st_mode) == 0o600
    proxy = store.make_persistent(Counter(np.arange(3.0)))
    try:
        path = proxy.flush()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        proxy.evict()
        # a catalogue edited to point outside the store: the object is not loaded from there
        outside = tmp_path / "evil.pkl"
        outside.write_bytes(open(path, "rb").read())
        store.link.catalogue(StoreCatalogue.op_set_disk, oid=proxy.oid, version=proxy.version, disk_path=str(outside))
        with pytest.raises(StoreError, match="outside this store"):
            proxy.total.value()
        # a symlink in the objects directory is not followed either
        link = store.directory / "objects" / "link.pkl"
        link.symlink_to(outside)
        store.link.catalogue(StoreCatalogue.op_set_disk, oid=proxy.oid, version=proxy.version, disk_path=str(link))
        with pytest.raises(StoreError, match="not a regular file"):
            proxy.total.value()
        link.unlink()
        fifo = store.directory / "objects" / "fifo.pkl"  # opening a FIFO to read would wait for a writer for ever
        os.mkfifo(fifo)
        try:
            store.link.catalogue(StoreCatalogue.op_set_disk, oid=proxy.oid, version=proxy.version, disk_path=str(fifo))
            with pytest.raises(StoreError, match="not a regular file"):
                proxy.total.value()
        finally:
            fifo.unlink()
        store.link.catalogue(StoreCatalogue.op_set_disk, oid=proxy.oid, version=proxy.version, disk_path=path)
        assert proxy.total.value() == 3.0  # the store's own copy still loads
        # deleting an object never deletes a file outside the store that the catalogue names
        store.link.catalogue(StoreCatalogue.op_set_disk, oid=proxy.oid, version=proxy.version, disk_path=str(outside))
        proxy.delete()
        assert outside.exists()
        os.unlink(path)  # the store's own copy, which the edited catalogue no longer named
    finally:
        proxy.delete()
    shared = tmp_path / "everyones"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StoreError, match="writable by every user"):
        Store(session, shared)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_store_directory_another_user_owns_or_could_swap_is_refused(session, tmp_path):
    """Issue 47, item 15: only a directory every user may write was refused; one of another user's
    (who can then swap or delete the learner's disk copies, or plant a pickle), or one in a directory of
    theirs (they can move it away and put their own in its place), was taken. The check comes before
    anything is sent, so the session's own store does not stand in the way."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "objects").mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)  # another user's
    with pytest.raises(StoreError, match=r"theirs belongs to user 65534, who can move or replace what is in it"):
        Store(session, theirs)
    inside = theirs / "mine"
    inside.mkdir(mode=0o700)  # the learner's own, in a directory of theirs
    with pytest.raises(StoreError, match=r"is not safe from other users: .*theirs belongs to user 65534"):
        Store(session, inside)
    group_writable = tmp_path / "group"
    group_writable.mkdir()
    group_writable.chmod(0o770)
    with pytest.raises(StoreError, match=r"\(drwxrwx---\) lets other users move or replace what is in it"):
        Store(session, group_writable)
    assert sorted(p.name for p in theirs.iterdir()) == ["mine", "objects"] and not any(inside.iterdir())


def test_a_corrupt_catalogue_is_refused_clearly(tmp_path):
    from workbench.runtime.store import catalogue_file

    (tmp_path / "catalogue.sqlite").write_bytes(b"this is not SQLite " * 100)
    with pytest.raises(ValueError, match="not a workbench store catalogue.*Move it away"):
        catalogue_file.read(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with contextlib.closing(sqlite3.connect(other / "catalogue.sqlite")) as db:  # SQLite, but another program's tables
        db.execute("CREATE TABLE unrelated (x)")
    with pytest.raises(ValueError, match="not a workbench store catalogue"):
        catalogue_file.read(other)
    (other / "catalogue.sqlite").unlink()
    (other / "catalogue.sqlite").mkdir()
    with pytest.raises(ValueError, match="not a workbench store catalogue.*a directory"):
        catalogue_file.read(other)
    (other / "catalogue.sqlite").rmdir()
    (other / "catalogue.sqlite").touch()  # created by a scheduler that stopped before writing: empty
    assert catalogue_file.read(other)["objects"] == []


def _crafted_catalogue(directory: Path, class_label: object, nbytes: object, alias: str = "plain") -> Path:
    """A catalogue with one object row as another program (or user) could write it."""
    from workbench.runtime.store import catalogue_file

    directory.mkdir()
    with contextlib.closing(sqlite3.connect(directory / "catalogue.sqlite")) as db, db:
        db.executescript(catalogue_file.SCHEMA)
        db.execute(
            "INSERT INTO objects VALUES ('abc', 1, ?, 'object', ?, '{}', '{}', NULL, 1.0)", (class_label, nbytes)
        )
        db.execute("INSERT INTO current VALUES ('abc', 1)")
        db.execute("INSERT INTO aliases VALUES (?, 'abc')", (alias,))
    return directory


def test_store_list_shows_a_crafted_catalogue_safely_or_refuses_it_in_one_line(tmp_path, capsys):
    """``workbench store list`` reads a file anyone may have written: a row's text is shown with its
    control characters escaped, a row that is not what the store writes is a one-line error, and a
    FIFO, a symlink or a file in the catalogue's place never hangs it nor gives a traceback."""
    from workbench import cli

    def listing(directory: Path) -> tuple[int, str, str]:
        status = cli.main(["store", "list", "--dir", str(directory)])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err

    shown = _crafted_catalogue(tmp_path / "escapes", "Evil\x1b[2J\x1b]0;owned\x07\u202e", 10**6, "al\x1bias")
    status, out, _ = listing(shown)
    assert status == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert r"Evil\x1b[2J\x1b]0;owned\x07\u202e" in out and r"al\x1bias" in out and "1.000 MB" in out
    for number, (nbytes, found) in enumerate((("lots", "'lots'"), (b"\x00\xff", "b'\\x00\\xff'"), (-5, "at least 0"))):
        status, _, err = listing(_crafted_catalogue(tmp_path / f"size-{number}", "Bag", nbytes))
        assert status == 2 and "the size of object 'abc' v1" in err and found in err, err
        assert "not a workbench store catalogue" in err and len(err.splitlines()) == 1
    undecodable = _crafted_catalogue(tmp_path / "undecodable", "Bag", 1)  # SQLite's error quotes the bytes
    with contextlib.closing(sqlite3.connect(undecodable / "catalogue.sqlite")) as db, db:
        db.execute("UPDATE objects SET class_label = CAST(x'ff1b5b324a' AS TEXT)")
    status, _, err = listing(undecodable)
    assert status == 2 and "decode" in err and "\x1b" not in err and r"\x1b[2J" in err
    endless = _crafted_catalogue(tmp_path / "endless", "Bag", 1)  # a view that never ends its rows
    with contextlib.closing(sqlite3.connect(endless / "catalogue.sqlite")) as db, db:
        db.execute("DROP TABLE current")
        db.execute(
            "CREATE VIEW current AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT 'abc', x FROM c"
        )
    status, _, err = listing(endless)
    assert status == 2 and "current is a 'view', where the store makes a table" in err
    status, _, err = listing(_crafted_catalogue(tmp_path / "label", b"\x1b[2J" * 100, 1))
    assert status == 2 and "the class of object 'abc' v1 should be str" in err and "\x1b" not in err
    assert len(err) < 400  # a long value is cut short in the message
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "catalogue.sqlite")
    done: list[tuple[int, str, str]] = []
    reader = threading.Thread(target=lambda: done.append(listing(fifo)), daemon=True)
    reader.start()
    reader.join(60)  # a bound, never a pause: it returns at once
    if reader.is_alive():  # it hangs in open(): a writer that opens and closes lets it go on
        os.close(os.open(fifo / "catalogue.sqlite", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(60)
    assert done and done[0][0] == 2 and "not a regular file" in done[0][2], done
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "catalogue.sqlite").symlink_to(shown / "catalogue.sqlite")
    status, _, err = listing(linked)
    assert status == 2 and "without following a link" in err
    a_file = tmp_path / "a-file"
    a_file.write_text("not a store")
    status, _, err = listing(a_file)
    assert status == 2 and "is not a directory" in err


@pytest.mark.parametrize("alias", ["", "\ud800", "tab\there", "line\nbreak", " padded", 7])
def test_bad_aliases_are_refused_before_anything_is_sent(session, store, alias):
    before = len(store.objects())
    with pytest.raises(ValueError, match="alias"):
        store.make_persistent(Counter(np.ones(2)), alias=alias)
    with pytest.raises(ValueError, match="alias"):
        store.persist_blocks([np.ones((2, 2))], alias=alias)
    with pytest.raises(ValueError, match="alias"):
        store.persist_blocks(da.ones((4, 2), chunks=(2, 2)), alias=alias)
    if isinstance(alias, str) and alias:
        with pytest.raises(ValueError, match="alias"):
            store.get_by_alias(alias)
    with pytest.raises(ValueError, match="alias"):  # inside a task, too
        session.gather(session.client.submit(_persist_in_a_task, alias, pure=False))
    if alias != "\ud800":  # (a lone surrogate cannot even be sent: the clients refuse it, as above)
        with pytest.raises(ValueError, match="alias"):  # the catalogue refuses it from anyone else, too
            store.link.catalogue(
                StoreCatalogue.op_register,
                entries=[{"oid": "x" * 32, "version": 0, "class_label": "C", "nbytes": 0, "alias": alias}],
            )
    assert len(store.objects()) == before


def _persist_in_a_task(alias: object) -> None:
    Counter(np.ones(2)).make_persistent(alias=alias)


@pytest.mark.parametrize("shape,chunks", [((12, 3, 4), (5, 3, 4)), ((9, 2, 3, 2), (2, 2, 3, 2))])
def test_persist_blocks_of_any_dimension(store, shape, chunks):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    collection = store.persist_blocks(da.from_array(x, chunks=chunks))
    try:
        assert collection.shape == shape and len(collection) == -(-shape[0] // chunks[0])
        assert list(collection.offsets()) == list(range(0, shape[0], chunks[0])) + [shape[0]]
        assert [b.shape.value() for b in collection] == [(n, *shape[1:]) for n in collection.chunks]
        np.testing.assert_array_equal(collection.fetch(), x)
    finally:
        collection.delete()


def test_persist_blocks_measures_unknown_row_counts(store):
    values = np.random.default_rng(5).random(500)
    y = da.from_array(values, chunks=50)
    collection = store.persist_blocks(y[y > 0.5])
    try:
        expected = values[values > 0.5]
        assert collection.chunks == tuple(int((values[i : i + 50] > 0.5).sum()) for i in range(0, 500, 50))
        assert collection.shape == (expected.size,)
        assert (np.diff(collection.offsets()) >= 0).all() and collection.offsets()[-1] == expected.size
        np.testing.assert_array_equal(collection.fetch(), expected)
    finally:
        collection.delete()


def _open_catalogue_files(session, under: Path) -> list[str]:
    """Files named catalogue.sqlite* under ``under`` that the scheduler's process has open (other
    clusters' schedulers may share that process: their files are not counted)."""

    def on_scheduler(dask_scheduler, under=str(under)):
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(under + os.sep) and os.path.basename(target).startswith("catalogue.sqlite"):
                found.append(target)
        return found

    return session.run_on_scheduler(on_scheduler)


def _registrations(session) -> dict[str, bool]:
    def on_scheduler(dask_scheduler):
        return PLUGIN_NAME in dask_scheduler.plugins or HANDLER in dask_scheduler.handlers

    def on_worker(dask_worker):
        return PLUGIN_NAME in dask_worker.plugins or HANDLER in dask_worker.handlers

    return {"scheduler": session.run_on_scheduler(on_scheduler), **session.run(on_worker)}


def test_a_store_is_closed_and_detached_and_a_stale_one_is_replaced(tmp_path):
    with workbench.start(n_workers=2, timeout=60) as session:
        assert registered_directory(session) is None
        with Store(session, tmp_path / "first") as first:
            assert first.owns_registration and registered_directory(session) == (tmp_path / "first").resolve()
            for private in (first.directory, first.directory / "objects"):  # created here, so private
                assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
            assert _open_catalogue_files(session, first.directory)
            kept = first.make_persistent(Counter(np.arange(3.0)), alias="kept")
            kept.flush()
            first.make_persistent(Counter(np.ones(2)), alias="volatile")
            joined = Store(session)  # joins the store already there
            assert not joined.owns_registration and joined.directory == first.directory
            joined.close()
            assert all(_registrations(session).values())  # a joiner leaves the store in place
            left_open = Store(session)
        assert not any(_registrations(session).values())  # the owner took it off the cluster
        assert not _open_catalogue_files(session, first.directory)  # and closed its file
        with pytest.raises(StoreError, match="has no store: the store was closed"):
            left_open.aliases()  # a joiner outliving the owner says what happened
        left_open.close()
        assert registered_directory(session) is None
        first.close()  # twice is fine
        with pytest.raises(StoreError, match="was closed"):
            first.aliases()

        again = Store(session, tmp_path / "first")  # the flushed object is back; the other was memory only
        assert again.get_by_alias("kept").total.value() == 3.0
        with pytest.raises(ObjectLost, match="'volatile'"):
            again.get_by_alias("volatile").total.value()
        again.clear()
        again.close()

        # A crashed run's throwaway store: registered, its directory deleted. It counts as no store,
        # and the CLI's way of opening one (its own unless the cluster has one) replaces it.
        for attempt in range(2):
            stale_dir = tmp_path / f"stale-{attempt}"
            crashed = Store(session, stale_dir)  # never closed
            crashed.make_persistent(Counter(np.ones(2)), alias="from-the-crashed-run")
            shutil.rmtree(stale_dir)
            assert registered_directory(session) is None
            mine = tmp_path / f"fresh-{attempt}"
            fresh = Store(session, mine if registered_directory(session) is None else None)
            assert fresh.owns_registration and registered_directory(session) == mine.resolve()
            assert fresh.aliases() == {}  # nothing of the crashed run's store
            crashed.close()  # its registration was replaced: closing it leaves the fresh one alone
            assert all(_registrations(session).values())
            proxy = fresh.make_persistent(ArrayBlock(np.ones(3)))
            assert proxy.shape.value() == (3,)
            fresh.clear()
            fresh.close()
            assert not any(_registrations(session).values())

        # A corrupt catalogue: a clear error, and nothing is left registered.
        corrupt = tmp_path / "corrupt"
        corrupt.mkdir()
        (corrupt / "catalogue.sqlite").write_bytes(b"garbage" * 1000)
        with pytest.raises(RuntimeError, match="not a workbench store catalogue"):
            Store(session, corrupt)
        assert not any(_registrations(session).values())
        edited = tmp_path / "edited"
        with Store(session, edited) as store:
            store.make_persistent(Counter(np.ones(2)), alias="x").flush()
        with contextlib.closing(sqlite3.connect(edited / "catalogue.sqlite")) as db, db:
            db.execute("UPDATE objects SET methods = 'not json'")
        with pytest.raises(RuntimeError, match="not a workbench store catalogue"):
            Store(session, edited)
        assert not any(_registrations(session).values()) and not _open_catalogue_files(session, tmp_path.resolve())


_LOCAL_MODEL = """
from workbench.runtime.store import PersistentObject, active

class Scaled(PersistentObject):
    def __init__(self, x):
        self.x = x

    @active
    def times(self, factor):
        return factor * self.x
"""


def test_a_closed_store_leaves_no_module_shipped_by_value(tmp_path, monkeypatch):
    """A class from a module next to the user's code travels by value while a store that sent it is
    open; once the last such store closes, the module pickles by reference again. Left registered, it
    outlived its store: a later session in this process (a learner re-running cells) still sent that
    module's classes and functions by value, and an object of it fetched back from a worker rebound the
    class's methods here to copies blind to the module's globals (a test helper's meeting points). A
    module the user registered by value stays registered."""
    import cloudpickle

    ours, theirs = "lab_model_shipped_while_open", "lab_model_the_user_ships"
    for name in (ours, theirs):
        (tmp_path / f"{name}.py").write_text(_LOCAL_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not on the workers
    model, user_model = importlib.import_module(ours), importlib.import_module(theirs)
    cloudpickle.register_pickle_by_value(user_model)
    try:
        with workbench.start(n_workers=1, timeout=60) as session:
            with Store(session, tmp_path / "store") as store:
                first = store.make_persistent(model.Scaled(21))
                users = store.make_persistent(user_model.Scaled(5))
                joined = Store(session)  # a second open store that sends the same module
                second = joined.make_persistent(model.Scaled(1))
                assert first.times.value(2) == 42 and second.times.value(3) == 3 and users.times.value(1) == 5
                assert {ours, theirs} <= cloudpickle.list_registry_pickle_by_value()
                joined.close()
                assert ours in cloudpickle.list_registry_pickle_by_value()  # the other store still sends it
                store.clear()
            assert ours not in cloudpickle.list_registry_pickle_by_value()
            assert theirs in cloudpickle.list_registry_pickle_by_value()
    finally:
        if theirs in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(user_model)
        for name in (ours, theirs):
            sys.modules.pop(name, None)


def _count_graphs(name: str, dask_scheduler=None) -> int:
    """On the scheduler: add (first call) or read and remove (second call) a counter of graph updates."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class GraphCounter(SchedulerPlugin):
        def __init__(self) -> None:
            self.graphs = 0

        def update_graph(self, scheduler, **kwargs) -> None:
            self.graphs += 1

    if name in dask_scheduler.plugins:
        return dask_scheduler.plugins.pop(name).graphs
    dask_scheduler.add_plugin(GraphCounter(), name=name)
    return 0


def test_a_collection_call_is_one_graph_with_active_keys(session, store):
    x = session.client.persist(da.arange(4000, chunks=100).reshape(200, 20).rechunk((10, 20)))
    session.wait(futures_of(x))
    session.run_on_scheduler(_count_graphs, "count-persist")
    collection = store.persist_blocks(x)
    # 20 blocks placed by one Client.run on their workers: no task graph (and no task with 20 dependencies)
    assert session.run_on_scheduler(_count_graphs, "count-persist") == 0
    try:
        session.run_on_scheduler(_count_graphs, "count-call")
        futures = collection.call("apply", np.sum)
        session.wait(futures)  # the graph reached the scheduler (the count is asked on another connection)
        graphs = session.run_on_scheduler(_count_graphs, "count-call")
        assert graphs == 1 and len(futures) == len(collection) == 20
        assert all(f.key.startswith("apply-active-") for f in futures)  # the prefix traces group by
        assert sum(session.gather(futures)) == sum(range(4000))
        holders = collection.holders()
        assert all(
            session.client.who_has([f])[f.key] == (w,) for f, w in zip(futures, holders)
        )  # ran where each block is
    finally:
        collection.delete()


def test_futures_are_dependencies_of_active_calls(session, store):
    proxy = store.make_persistent(Counter(np.arange(4.0)))
    try:
        factor = session.client.submit(lambda: 2.0, pure=False)
        offset = session.client.submit(lambda: 1.0, pure=False)
        assert session.gather(proxy.scaled_total(factor, offset=offset)) == 13.0
        assert proxy.scaled_total.value(factor, offset=offset) == 13.0
    finally:
        proxy.delete()


def test_a_deleted_object_leaves_no_copy_and_no_file_behind(session, store):
    proxy = store.make_persistent(Counter(np.ones(3)))
    (holder,) = proxy.locations()
    other = next(w for w in session.workers() if w != holder)
    obj = proxy.fetch()
    # Deleted in the catalogue while its backend still holds it (the drop message is on its way).
    store.link.catalogue(StoreCatalogue.op_delete, oids=[proxy.oid])
    # A copy arriving after the delete (a move or a reload racing it) is refused by the catalogue,
    # and the backend does not keep it: a location of a deleted object would hold it for ever.
    with pytest.raises(KeyError, match="deleted meanwhile"):
        store.link.backend(other, backend_ops.op_put, oid=proxy.oid, version=0, obj=obj, announce=True)
    # A disk copy written meanwhile (a flush or an eviction racing the delete) is removed again.
    with pytest.raises(StoreError, match="deleted while it was written"):
        store.link.backend(holder, backend_ops.op_flush, oid=proxy.oid, version=0)
    assert not list((store.directory / "objects").glob(f"{proxy.oid}*"))
    assert store.link.backend(holder, backend_ops.op_evict, oid=proxy.oid, version=0) > 0  # an eviction just lets it go
    assert proxy.oid not in set(store.backend_tables()["oid"])
    assert not list((store.directory / "objects").glob(f"{proxy.oid}*"))


@pytest.mark.parametrize(
    "blocks", [[np.ones((2, 2)), np.ones((2, 3))], [np.ones(2), np.ones(2, dtype=np.int32)], [np.float64(1.0)]]
)
def test_blocks_that_are_not_one_array_are_refused_before_anything_is_placed(store, blocks):
    before = len(store.objects())
    with pytest.raises(ValueError, match="row blocks of one array"):
        store.persist_blocks(blocks)
    assert len(store.objects()) == before
