"""The store's layers (model <- catalogue <- backend <- client) and the local-object API of task bodies."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from workbench.runtime.store import ArrayBlock, NotHere, local_object, store_for

STORE = Path(__file__).resolve().parents[1] / "workbench" / "runtime" / "store"
# module -> the store modules it may import (any import statement, function-local ones included)
ALLOWED = {
    "errors": set(),
    "model": set(),
    "catalogue": {"model", "errors"},
    "catalogue_file": {"catalogue", "model", "errors"},
    "backend": {"model", "catalogue", "errors"},
    "client": {"model", "catalogue", "errors", "backend"},
}


def _store_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.startswith("workbench.runtime.store."):
                found.add(name.split(".")[3])
            elif name == "workbench.runtime.store":
                found.add("__init__")
    return found


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_store_modules_import_only_the_layers_below(module):
    imported = _store_imports(STORE / f"{module}.py") - {module}
    assert imported <= ALLOWED[module], f"{module} imports {sorted(imported - ALLOWED[module])}"


def _read_where_it_lives(proxy):
    block = local_object(proxy)
    return block.data.sum(), block.data.ctypes.data


def test_local_object_reads_in_place_where_the_object_lives(session):
    store = store_for(session)
    proxy = store.make_persistent(ArrayBlock(np.arange(1000.0)))
    try:
        holder = proxy.locations()[0]
        other = next(w for w in session.workers() if w != holder)
        total, first = session.client.submit(_read_where_it_lives, proxy, workers=[holder], pure=False).result(
            timeout=60
        )
        again = session.client.submit(_read_where_it_lives, proxy, workers=[holder], pure=False).result(timeout=60)[1]
        assert total == sum(range(1000)) and first == again  # the backend's own array, not a copy per call
        with pytest.raises(NotHere, match="not held by this backend"):
            session.client.submit(
                _read_where_it_lives, proxy, workers=[other], allow_other_workers=False, pure=False
            ).result(timeout=60)
    finally:
        proxy.delete()
    with pytest.raises(RuntimeError, match="inside a task on a worker"):
        local_object(proxy)
    with pytest.raises(TypeError, match="takes a store proxy"):
        local_object(np.zeros(3))
