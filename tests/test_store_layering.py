"""The store's layers (current <- model <- protocol; wire <- catalogue, backend_ops <- link <- table <- placing
<- backend; protocol <- calls <- backend; tasks <- handles <- local <- client), its one process-wide state, and
the local-object API of task bodies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from import_helpers import module_imports, module_name

from workbench.runtime.store import ArrayBlock, NotHere, StoreError, local_object, store_for
from workbench.runtime.store.catalogue import StoreCatalogue
from workbench.runtime.store.tasks import local_backend

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "workbench" / "runtime" / "store"
PACKAGE = "workbench.runtime.store"
# store module -> the store modules it may import (any import statement, function-local ones included).
# Every module of the package is listed: a new one must be placed in the layers here.
ALLOWED = {
    "errors": set(),
    "current": {"errors"},
    "model": {"current"},
    "protocol": {"model", "errors"},
    "wire": set(),  # the one definition of each operation, and both ends' dispatch from it
    "backend_ops": {"wire"},  # the backend's operations (their handlers reach the backend they are given)
    "link": {"model", "errors", "protocol", "wire", "catalogue", "backend_ops"},
    "catalogue": {"model", "errors", "protocol", "catalogue_file", "wire"},
    "catalogue_file": {"errors"},
    "tiering": set(),
    "disk": {"errors"},
    "tasks": {"model", "protocol", "errors"},
    "table": {"model", "protocol", "errors", "tiering", "link", "disk", "catalogue", "backend_ops"},
    "placing": {"model", "errors", "tiering", "table"},
    "calls": {"errors", "protocol"},  # a backend's memory of active calls by id (issue 47: none runs twice)
    "backend": {
        "model",
        "protocol",
        "errors",
        "tiering",
        "link",
        "current",
        "table",
        "placing",
        "tasks",
        "calls",
        "wire",
        "backend_ops",
    },
    "handles": {"model", "protocol", "errors", "tiering", "link", "current", "tasks", "catalogue", "backend_ops"},
    "local": {"model", "protocol", "errors", "handles", "current", "tasks"},  # no table: the in-process API alone
    "client": {
        "model",
        "protocol",
        "catalogue",
        "catalogue_file",
        "errors",
        "backend",
        "disk",
        "tiering",
        "handles",
        "local",
        "link",
        "current",
        "backend_ops",
    },
    "__init__": {"client", "handles", "local", "model", "errors", "current"},
}
# store module -> the workbench modules outside the store it may import (None: any that does not import the store)
OUTSIDE = {
    "errors": set(),
    "current": set(),
    "model": {"workbench.memory.gpu", "workbench.names"},  # state_nbytes: a device array is not the process's memory
    "protocol": {"workbench.runtime", "workbench.runtime.failures", "workbench.runtime.dask_seam"},
    # the Dask seam imports nothing of the workbench: every store module may call it
    "wire": set(),
    "backend_ops": set(),
    "link": {"workbench.runtime.dask_seam"},
    "catalogue": {
        "workbench.names",
        "workbench.runtime.dask_seam",
    },  # did_you_mean for an unknown alias (names imports nothing of the workbench)
    "catalogue_file": {
        "workbench.names",
        "workbench.memory.tiers",
    },  # printable (store list's errors); the default store directory, which the tier files' reclaim needs too
    # owners: a tier file's record names the worker process that wrote it (a killed kernel's files are reclaimed)
    "tiering": {"workbench.memory", "workbench.memory.tiers", "workbench.memory.gpu", "workbench.memory.owners"},
    "disk": set(),
    "tasks": {"workbench.runtime", "workbench.runtime.failures", "workbench.runtime.dask_seam"},
    "table": {"workbench.runtime.dask_seam"},
    "placing": {"workbench.memory", "workbench.memory.tiers", "workbench.memory.placement"},
    "calls": set(),
    "backend": {
        "workbench.runtime",
        "workbench.runtime.dask_seam",
        "workbench.runtime.trace",
        "workbench.memory",
        "workbench.memory.tiers",
        "workbench.memory.placement",
    },
    # and the kernels (the bottom layer: ``from workbench import kernels`` names the package too)
    "handles": {
        "workbench",
        "workbench.kernels",
        "workbench.runtime",
        "workbench.runtime.session",
        "workbench.runtime.trace",
        "workbench.runtime.dask_seam",
    },
    "local": {"workbench.runtime.dask_seam"},
    "client": None,
    "__init__": set(),
}


def _workbench_modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / "workbench").rglob("*.py")}


def _store_layer(name: str) -> str | None:
    """The store module ``name`` is (``__init__`` for the package itself), or None outside the store."""
    if name == PACKAGE:
        return "__init__"
    if name.startswith(PACKAGE + "."):
        return name.split(".")[3]
    return None


def test_every_store_module_has_a_layer():
    assert {p.stem for p in STORE.glob("*.py")} == set(ALLOWED), "place new store modules in ALLOWED and OUTSIDE"


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_store_modules_import_only_the_layers_below(module):
    imported = module_imports(STORE / f"{module}.py")
    known = _workbench_modules()
    store = {layer for name in imported if (layer := _store_layer(name)) is not None} - {module}
    assert store <= ALLOWED[module], f"{module} imports {sorted(store - ALLOWED[module])}"
    outside = {n for n in imported if n in known and _store_layer(n) is None}
    if OUTSIDE[module] is not None:
        assert outside <= OUTSIDE[module], f"{module} imports {sorted(outside - OUTSIDE[module])}"


def test_no_store_module_takes_part_in_an_import_cycle():
    """From every store module, following every import (function-local ones included) through the
    workbench: no cycle (so trace, session and blocks, which the store uses, never import it)."""
    known = _workbench_modules()
    graph: dict[str, set[str]] = {}

    def edges(module: str) -> set[str]:
        if module not in graph:
            graph[module] = {n for n in module_imports(known[module]) if n in known and n != module}
        return graph[module]

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges(module)):
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(target) :] + [target]))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for path in sorted(STORE.glob("*.py")):
        if module_name(path) not in state:
            visit(module_name(path))


def test_the_layer_check_sees_function_local_and_relative_imports(tmp_path):
    fake = tmp_path / "model.py"
    fake.write_text(
        "def f():\n    from .client import current_store\n    from . import backend\n"
        "    import workbench.runtime.store.catalogue\n"
    )
    found = {_store_layer(n) for n in module_imports(fake, f"{PACKAGE}.model")}
    assert {"client", "backend", "catalogue"} <= found


def test_the_layer_check_leaves_out_imports_for_annotations_only(tmp_path):
    fake = tmp_path / "handles.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .client import Store\nfrom . import backend\n"
    )
    found = {_store_layer(n) for n in module_imports(fake, f"{PACKAGE}.handles")}
    assert "client" not in found and "backend" in found


def test_persistent_object_needs_no_client_import(session):
    """model.make_persistent goes through a hook an opened Store installs, not through an import."""
    from workbench.runtime.store import current

    store_for(session)
    assert current._persister is not None and current._persister.__module__ == f"{PACKAGE}.local"


def test_importing_the_store_installs_nothing():
    """Nothing happens at import beyond definitions: no persister hook until a Store is opened."""
    code = (
        "import workbench.runtime.store\n"
        "from workbench.runtime.store import current, model\n"
        "assert current._persister is None, current._persister\n"
        "assert current.opened_store() is None\n"
        "try:\n"
        "    model.PersistentObject().make_persistent()\n"
        "except RuntimeError as error:\n"
        "    assert 'no store is open' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('make_persistent ran without a store')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_process_wide_state_is_the_current_module_alone():
    """No store module but ``current`` assigns a module global at run time (a ``global`` statement):
    what the store keeps per process is named in one place."""
    import ast

    keeping = sorted(
        path.stem
        for path in STORE.glob("*.py")
        if any(isinstance(node, ast.Global) for node in ast.walk(ast.parse(path.read_text())))
    )
    assert keeping == ["current"]


def test_the_current_store_is_cleared_when_it_closes(session, tmp_path):
    """The store opened last is the current one; closing it clears it, closing another leaves it."""
    from workbench.runtime.store import current
    from workbench.runtime.store.client import Store

    before = current.opened_store()
    try:
        first = Store(session)  # joins the cluster's store: no registration of its own
        assert current.current_store() is first
        last = Store(session)
        assert current.current_store() is last
        first.close()
        assert current.opened_store() is last  # not the current one: its close leaves the current store
        last.close()
        assert current.opened_store() is None
        with pytest.raises(StoreError, match="no store is open"):
            current.current_store()
        with pytest.raises(StoreError, match="was closed"):
            first.link.catalogue(StoreCatalogue.op_aliases)  # its link sends nothing once it is closed
    finally:
        if before is not None and not before.closed:
            current.set_current_store(before)


def test_each_store_module_imports_alone():
    """Every store module imports by itself in an interpreter that has imported no module of the
    workbench (no import cycle at run time). One interpreter imports the third-party libraries the
    store uses, once; each store module is then imported in a child forked from it."""
    code = (
        "import os, sys, traceback\n"
        "import cloudpickle, dask.array, distributed, msgpack, numpy, pandas\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('workbench', 'kernels')]\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            __import__(name)\n"
        "        except BaseException:\n"
        "            traceback.print_exc()\n"
        "            os._exit(1)\n"
        "        os._exit(0)\n"
        "    if os.waitpid(pid, 0)[1]:\n"
        "        failed.append(name)\n"
        "sys.exit(f'these do not import alone: {failed}' if failed else 0)\n"
    )
    modules = [module_name(path) for path in sorted(STORE.glob("*.py"))]
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


# -- local_object ----------------------------------------------------------------------------------
def _held_entry(proxy):
    table = local_backend().table
    with table.lock:
        return next(e for (oid, _), e in table.items() if oid == proxy.oid)


def _read_where_it_lives(proxy):
    block = local_object(proxy)
    held = _held_entry(proxy).obj
    return (
        float(block.data.sum()),
        block is held,
        bool(np.shares_memory(block.data, held.data)),
        block.data.flags.writeable,
        block.data.ctypes.data,
    )


def _write_where_it_lives(proxy, value):
    with local_object(proxy, for_write=True) as block:
        writeable = block.data.flags.writeable
        block.data[:] = value
        shared_free = _held_entry(proxy).lock.acquire(False, timeout=0)  # the exclusive lock is held
    return writeable, shared_free, local_object(proxy).data.flags.writeable


def _misuse_write(proxy):
    return local_object(proxy, for_write=True).data


def _submit(session, function, *args, worker):
    return session.client.submit(function, *args, workers=[worker], allow_other_workers=False, pure=False).result(
        timeout=60
    )


def test_local_object_reads_in_place_where_the_object_lives(session):
    store = store_for(session)
    proxy = store.make_persistent(ArrayBlock(np.arange(1000.0)))
    try:
        holder = proxy.locations()[0]
        other = next(w for w in session.workers() if w != holder)
        total, same, shared, writeable, first = _submit(session, _read_where_it_lives, proxy, worker=holder)
        assert total == sum(range(1000))
        assert same and shared  # the backend's own object and array, not a copy
        assert not writeable  # read-only between calls
        assert _submit(session, _read_where_it_lives, proxy, worker=holder)[4] == first
        with pytest.raises(NotHere, match="not held by this backend.*lives on other backends"):
            _submit(session, _read_where_it_lives, proxy, worker=other)
    finally:
        proxy.delete()
    with pytest.raises(RuntimeError, match="inside a task on a worker"):
        local_object(proxy)
    with pytest.raises(RuntimeError, match="inside a task on a worker"):
        local_object(proxy, for_write=True)
    with pytest.raises(TypeError, match="takes a store proxy"):
        local_object(np.zeros(3))


def test_local_object_for_write_holds_the_exclusive_lock(session):
    store = store_for(session)
    proxy = store.make_persistent(ArrayBlock(np.zeros(100)))
    try:
        holder = proxy.locations()[0]
        other = next(w for w in session.workers() if w != holder)
        path = proxy.flush()
        writeable, shared_free, after = _submit(session, _write_where_it_lives, proxy, 2.0, worker=holder)
        assert writeable and not shared_free and not after  # writeable inside the block only, locked meanwhile
        assert proxy.apply.value(np.sum) == 200.0
        assert proxy.info()["disk_path"] is None and not Path(path).exists()  # the stale disk copy is gone
        with pytest.raises(NotHere, match="not held by this backend"):
            _submit(session, _write_where_it_lives, proxy, 3.0, worker=other)
        with pytest.raises(TypeError, match="is a context manager"):
            _submit(session, _misuse_write, proxy, worker=holder)
        proxy.replicate(other)
        with pytest.raises(StoreError, match="replicas"):
            _submit(session, _write_where_it_lives, proxy, 4.0, worker=holder)
        assert proxy.apply.value(np.sum) == 200.0
    finally:
        proxy.delete()


def test_records_and_claims_travel_as_plain_messages():
    """What the catalogue sends is msgpack-able, and reads back as the record it was."""
    import msgpack

    from workbench.runtime.store.model import ObjectRef
    from workbench.runtime.store.protocol import LoadClaim, Missing, Record, found, record_from_wire

    record = Record("ab" * 16, 2, ["tcp://w1"], True, [], ["x"], "m.C", "object", 8, {"f": False}, {}, None, 1.5)
    missing = Missing("cd" * 16, None, "deleted")
    for sent in (record, missing):
        assert record_from_wire(msgpack.loads(msgpack.dumps(sent.to_wire()))) == sent
    claim = LoadClaim([], load_on="tcp://w2", disk_path="/s/objects/x.pkl")
    assert LoadClaim.from_wire(msgpack.loads(msgpack.dumps(claim.to_wire()))) == claim
    assert found(record, ObjectRef(record.oid)) is record
    with pytest.raises(StoreError, match="was deleted: it is no longer in the store"):
        found(missing, ObjectRef(missing.oid))


def test_the_compact_locations_reply_reads_back():
    from workbench.runtime.store.protocol import encode_locations, locations_of

    holders = [{"a"}, set(), None, {"b", "a"}, {"c"}, {"gone"}, {"gone", "c"}]
    reply = encode_locations(holders, live={"a", "b", "c"})
    assert locations_of(reply, 7) == [["a"], [], [], ["a", "b"], ["c"], [], ["c"]]
    with pytest.raises(StoreError, match="located 7 objects of 4"):
        locations_of(reply, 4)
