"""The runtime's per-worker tables live on one worker plugin (:mod:`workbench.runtime.worker_state`),
registered by ``start`` on every worker, made empty on arrival and dropped at teardown; no module global."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.spill import SpillBuffer

import workbench
from workbench.runtime import rro, worker_state
from workbench.runtime.worker_state import PLUGIN_NAME, NoWorkerState, SpillSpace, WorkerState

ROOT = Path(__file__).resolve().parents[1]
# the modules whose worker-side tables moved onto the plugin: none may keep a mutable table at module level
MOVED = [
    "workbench/runtime/rro.py",
    "workbench/runtime/strategies/tiers.py",
    "workbench/runtime/channels/transport.py",
    "workbench/runtime/channels/channel.py",
    "workbench/runtime/strategies/balance.py",
]


def _has_state(dask_worker=None):
    state = dask_worker.plugins.get(PLUGIN_NAME)
    return isinstance(state, WorkerState) and state is worker_state.worker_state(dask_worker)


def _state_in_a_task():
    return type(worker_state.worker_state()).__name__


def test_every_worker_has_the_plugin_those_that_join_later_too():
    with workbench.start(n_workers=1, timeout=60) as session:
        assert list(session.run(_has_state).values()) == [True]
        assert session.gather(session.client.submit(_state_in_a_task, pure=False)) == "WorkerState"
        session.scale(2)
        assert list(session.run(_has_state).values()) == [True, True]
        states = session.run(lambda dask_worker=None: id(worker_state.worker_state(dask_worker)))
        assert len(set(states.values())) == 2  # each worker its own tables


def test_outside_a_worker_and_on_a_worker_without_the_plugin_the_error_says_what_to_do():
    with pytest.raises(NoWorkerState, match="only in a task on a Dask worker"):
        worker_state.worker_state()
    with pytest.raises(NoWorkerState, match="only in a task on a Dask worker"):
        rro.table_size()
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        future = client.submit(_state_in_a_task, pure=False)
        with pytest.raises(NoWorkerState, match=r"has no 'workbench-worker-state' plugin.*session\.start"):
            future.result(timeout=30)
        client.register_plugin(WorkerState(), name=PLUGIN_NAME)  # what the message says to do
        assert client.submit(_state_in_a_task, pure=False).result(timeout=30) == "WorkerState"


def test_a_state_travels_empty():
    state = WorkerState()
    state.views["rro-x"] = np.zeros(3)
    state.aborted_groups.add("g")
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        copy = loads(dumps(state))
        assert isinstance(copy, WorkerState) and copy is not state
        assert (copy.views, copy.spills, copy.aborted_groups, copy.inboxes) == ({}, {}, set(), {})
        with copy.spill_lock:  # a lock of its own
            assert not state.spill_lock.locked()


class _Inbox:
    def __init__(self, state: WorkerState, key: tuple[str, int]):
        self.state, self.key, self.closed = state, key, None
        state.inboxes[key] = self

    def close(self, why: str) -> None:  # Inbox.close's signature: why it closed, for later messages' errors
        self.closed = why
        self.state.inboxes.pop(self.key, None)


def test_teardown_drops_views_closes_inboxes_and_removes_spill_files(tmp_path):
    state = WorkerState()
    state.views["rro-x"] = np.zeros(3)
    state.aborted_groups.add("g")
    inboxes = [_Inbox(state, ("g", 0)), _Inbox(state, ("g", 1))]
    path = str(tmp_path / "spill" / "buffer")
    buffer = SpillBuffer(path, target=1)  # everything goes to disk
    buffer["block-0"] = np.ones(1000)
    state.spills["spill"] = SpillSpace(buffer, path)
    assert os.listdir(path)
    state.teardown(None)
    assert (state.views, state.spills, state.aborted_groups, state.inboxes) == ({}, {}, set(), {})
    assert all(inbox.closed == "is on a worker that is closing" for inbox in inboxes)
    assert not os.path.exists(path)


def _module_level_tables(source: str) -> list[str]:
    """Names bound at module level to an empty dict, set or list (a table filled later, outliving a task)."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        empty = (isinstance(value, ast.Dict) and not value.keys) or (isinstance(value, ast.List) and not value.elts)
        empty |= isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("dict", "set", "list", "defaultdict")
        if empty:
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return found


def test_the_moved_modules_keep_no_table_at_module_level():
    made_up = "_T: dict[str, int] = {}\nS = set()\nL = []\nCONSTANT = {'a': 1}\ndef f():\n    local = {}\n"
    assert _module_level_tables(made_up) == ["_T", "S", "L"]  # the check finds the tables where there are some
    tables = {module: _module_level_tables((ROOT / module).read_text()) for module in MOVED}
    assert not any(tables.values()), tables


def test_the_plugin_module_imports_neither_channels_nor_strategies():
    from import_helpers import module_imports

    imported = module_imports(ROOT / "workbench" / "runtime" / "worker_state.py")
    workbench_imports = {name for name in imported if name.startswith("workbench")}
    # the Dask seam imports nothing of the workbench
    assert workbench_imports <= {"workbench.runtime.dask_seam"}, workbench_imports
