"""No hidden store: the store strategies use the caller's store, or one the session opens and closes."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import datasets
from workbench.apps import histogram
from workbench.runtime.store import Store, store_for
from workbench.runtime.store.current import opened_store
from workbench.runtime.trace import Recorder


def _histogram(session, variant: str) -> np.ndarray:
    data = histogram.APP.prepare(session, datasets.get("histogram", "ci"), {"blocks_per_worker": 2})
    try:
        return np.asarray(histogram.APP.variant(variant)(session, data, Recorder()))
    finally:
        data.release()


def test_a_store_strategy_without_a_store_uses_one_the_session_closes(tmp_path, monkeypatch):
    default = tmp_path / "default-store"  # where a hidden persistent store would go
    monkeypatch.setenv("WORKBENCH_STORE_DIR", str(default))
    with workbench.start(n_workers=2, timeout=60) as session:
        active = _histogram(session, "active")
        store = session.owned()["store"]
        directory = store.directory
        assert directory.is_dir() and directory.name.startswith("workbench-session-store-")
        assert store_for(session) is store  # one per session, asked again
        assert store.objects().empty  # the strategy deleted what it placed
        np.testing.assert_array_equal(active, _histogram(session, "blocks"))
    assert store.closed and opened_store() is not store
    assert not directory.exists()
    assert not default.exists()


def test_the_callers_store_comes_first_and_a_closed_session_store_is_opened_again(tmp_path):
    with workbench.start(n_workers=1, timeout=60) as session:
        with Store(session, tmp_path / "mine") as mine:
            assert store_for(session) is mine
            assert session.owned() == {}
        first = store_for(session)  # the caller closed theirs: the session opens its own
        assert first is not mine and session.owned() == {"store": first}
        first.close()
        second = store_for(session)
        assert second is not first and not second.closed
    assert second.closed
    with pytest.raises(RuntimeError, match="the session is closed: start a new one"):
        session.own("store", lambda: Store(session))
