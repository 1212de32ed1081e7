"""What every benchmark's run() opens with (no cluster: a given session is used as it is)."""

from __future__ import annotations

import importlib

import pytest

from workbench.bench.opening import bench_session, checked_size


def test_a_size_is_checked_against_the_benchmarks_table():
    assert checked_size("ci", {"ci": 1, "lab": 2}) == "ci"
    assert checked_size("lab", ("ci", "lab", "full")) == "lab"
    with pytest.raises(ValueError, match=r"size must be one of \['ci', 'lab'\], got 'huge'"):
        checked_size("huge", {"ci": 1, "lab": 2})


def test_a_given_session_is_the_callers_and_stays_open():
    given = object()  # bench_session neither starts nor closes what it is given
    with bench_session(given, workers=2, timeout=1) as session:
        assert session is given


@pytest.mark.parametrize("module", ["balance", "channels", "kernels", "shm", "splitter", "store", "store_scale"])
def test_every_benchmark_refuses_an_unknown_size_before_it_starts_a_cluster(module, monkeypatch):
    bench = importlib.import_module(f"workbench.bench.{module}")
    monkeypatch.setattr("workbench.bench.opening.start", lambda **kwargs: pytest.fail("a cluster was started"))
    with pytest.raises(ValueError, match="size must be one of .*got 'huge'"):
        bench.run(size="huge")
