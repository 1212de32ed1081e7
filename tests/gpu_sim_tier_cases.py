"""The ``gpu`` tier (workbench/memory/gpu.py), the store's objects on it and ``workbench bench gpu``, in
numba's CUDA simulator.

Not collected by the suite itself (its name does not start with ``test_``): ``tests/test_tiers.py``
runs it in a pytest process of its own with ``NUMBA_ENABLE_CUDASIM=1`` (set before numba's CUDA
module is first imported; the workers of the ``session`` fixture inherit it). On a machine with a
GPU, ``pytest tests/gpu_sim_tier_cases.py`` without the variable runs the same cases on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from store_helpers import DeviceBag
from test_tiers_stateful import SETTINGS, TIERS_HERE, TierMachine

from workbench.bench import gpu as gpu_bench
from workbench.kernels import gpu as device_kernels
from workbench.lab import gpu_experiments
from workbench.lab.gpu_experiments import Readings
from workbench.memory import gpu, tiers
from workbench.runtime.store import store_for


@pytest.fixture(autouse=True)
def no_limit(monkeypatch):
    monkeypatch.delenv(gpu.GPU_BYTES_ENV, raising=False)


def test_the_tier_list_has_gpu_here():
    assert device_kernels.available() and "gpu" in TIERS_HERE


def test_the_tiers_against_a_model_with_the_gpu_tier():
    run = TierMachine.TestCase("runTest")
    run.settings = settings(SETTINGS)
    run.runTest()


@pytest.mark.parametrize(
    "value",
    [
        np.arange(10.0, dtype=">f8"),  # big-endian: copied in native order, values kept
        np.arange(20, dtype=np.int16)[::3],  # not contiguous
        np.array([True, False, True]),
        np.arange(6, dtype=np.complex64).reshape(2, 3).T,
        np.frombuffer(np.arange(4.0).tobytes(), dtype=np.float64),  # read-only
        np.array(2.5),  # 0-d: comes back 0-d
        np.array(7, dtype=">i4"),
    ],
)
def test_odd_arrays_keep_their_values_on_the_device(value):
    handle = tiers.place("odd", value, "gpu", replace=True)
    try:
        back = handle.array
        np.testing.assert_array_equal(back, value)
        assert back.dtype == value.dtype.newbyteorder("=") and back.shape == value.shape
        assert handle.dram_bytes == 0 and handle.nbytes == value.nbytes
    finally:
        assert tiers.free("odd", "gpu")


@pytest.mark.parametrize(
    "value, words",
    [
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "numbers only"),
        (np.array(["text"]), "numbers only"),
        (np.zeros(2, dtype=[("x", "f8"), ("y", "i4")]), "numbers only"),
        (np.array([object()]), "numbers only"),
        (np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "plain array only"),
    ],
)
def test_what_the_device_cannot_hold_is_a_clear_error_and_nothing_is_placed(value, words):
    with pytest.raises(tiers.TierError, match=words):
        tiers.place("refused", value, "gpu")
    assert "refused" not in tiers.names("gpu")


def test_a_full_device_is_an_error_that_says_what_holds_it_and_nothing_spills(monkeypatch):
    first = tiers.place("first", np.zeros(100), "gpu")
    try:
        monkeypatch.setenv(gpu.GPU_BYTES_ENV, "1000")
        with pytest.raises(tiers.TierError, match=r"needs 800 B of device memory.*800 B of its 1000 B.*'first'"):
            tiers.place("second", np.zeros(100), "gpu")
        assert tiers.names("gpu") == ["first"]
        tiers.move(first, "dram")  # room made the way the error says
        second = tiers.place("second", np.ones(100), "gpu")
        assert second.array.sum() == 100.0
    finally:
        for name, tier in (("first", "dram"), ("second", "gpu"), ("first", "gpu")):
            tiers.free(name, tier)


@pytest.mark.parametrize("text", ["lots", "-5", "0", "1e400", "inf"])
def test_a_limit_that_is_not_a_size_is_refused(monkeypatch, text):
    monkeypatch.setenv(gpu.GPU_BYTES_ENV, text)
    with pytest.raises(tiers.TierError, match="is not a size"):
        tiers.place("x", np.zeros(3), "gpu")


def test_a_list_goes_on_the_device_as_numpy_reads_it_as_on_the_host_tiers():
    for tier in ("dram", "gpu"):
        handle = tiers.place("listed", [[1, 2], [3, 4]], tier)
        try:
            np.testing.assert_array_equal(handle.array, np.asarray([[1, 2], [3, 4]]), strict=True)
        finally:
            assert tiers.free("listed", tier)
    with pytest.raises(tiers.TierError, match="numbers only"):
        tiers.place("listed", ["a", "b"], "gpu")


def test_a_move_to_gpu_with_a_directory_reaches_the_device(tmp_path):
    values = np.arange(12.0)
    mapped = tiers.place("moving", values, "mapped", directory=tmp_path)
    before = tiers.current().device.transfers.snapshot()
    try:
        moved = tiers.move(mapped, "gpu", directory=tmp_path)  # a file tier's directory: the device has none
        assert isinstance(moved, gpu.GpuArray) and tiers.names("gpu") == ["moving"]
        assert (tiers.current().device.transfers - before).to_device == values.nbytes and tiers.names(
            "mapped", directory=tmp_path
        ) == []
        assert tiers.move(moved, "gpu", directory=tmp_path) is moved  # already there: not "another array"
        assert tiers.move(moved, "gpu", directory=tmp_path, replace=True) is moved
        np.testing.assert_array_equal(moved.array, values)
    finally:
        tiers.free("moving", "gpu")


def test_every_copy_across_the_bus_is_counted_and_kernels_use_the_device_array():
    values = np.random.default_rng(1).random(500)
    before = tiers.current().device.transfers.snapshot()
    handle = tiers.place("counted", values, "gpu")
    try:
        counts = device_kernels.histogram1d(handle.device, 10, (0.0, 1.0))  # no host copy of the values
        np.testing.assert_array_equal(counts, np.histogram(values, 10, (0.0, 1.0))[0])
        moved = tiers.current().device.transfers - before
        assert (moved.to_device, moved.to_host) == (values.nbytes, 0)
        handle.array  # noqa: B018 - a host copy, counted
        assert (tiers.current().device.transfers - before).to_host == values.nbytes
        reopened = tiers.open_array("counted", "gpu")
        assert reopened.device is handle.device and "gpu array 'counted' (500,)" in repr(reopened)
    finally:
        tiers.free("counted", "gpu")
    with pytest.raises(tiers.TierError, match="no gpu array 'counted' in this process"):
        tiers.open_array("counted", "gpu")


# -- the store's objects on the gpu tier -------------------------------------------------------------
def _device_names(session) -> list[str]:
    return sorted(n for names in session.client.run(lambda: gpu.DEVICE.names()).values() for n in names)


def _off_device(session) -> int:
    return sum(session.client.run(lambda: gpu.DEVICE.transfers.to_host).values())


def test_an_active_method_runs_where_the_values_lie_and_a_fetch_copies_them_off(session):
    store = store_for(session)
    values = np.random.default_rng(2).random(800)
    proxy = store.make_persistent(Readings(values))
    try:
        proxy.place("gpu")
        assert proxy.tier() == "gpu" and any(proxy.oid in n for n in _device_names(session))
        before = _off_device(session)
        counts = proxy.histogram.value(16, 0.0, 1.0)
        assert _off_device(session) == before  # no value crossed the bus
        np.testing.assert_array_equal(counts, np.histogram(values, 16, (0.0, 1.0))[0])
        fetched = proxy.fetch()
        assert isinstance(fetched.values, np.ndarray) and _off_device(session) == before + values.nbytes
        np.testing.assert_array_equal(fetched.values, values)
    finally:
        proxy.delete()
    assert not any(proxy.oid in n for n in _device_names(session))  # freed with its object


def test_a_gpu_object_keeps_its_writes_through_every_tier_and_copy(session):
    store = store_for(session)
    proxy = store.make_persistent(Readings(np.arange(64.0)))
    try:
        proxy.place("gpu")
        proxy.scale.value(2.0)  # in place, on the device
        for tier in ("mapped", "gpu", "disk", "gpu", "dram", "gpu"):
            proxy.place(tier)
            np.testing.assert_array_equal(proxy.fetch().values, np.arange(64.0) * 2)
        (holder,) = proxy.locations()
        other = next(w for w in store.backends() if w != holder)
        proxy.move(other)  # a host copy travels; it arrives on dram
        np.testing.assert_array_equal(proxy.fetch().values, np.arange(64.0) * 2)
        copy = proxy.new_version()
        np.testing.assert_array_equal(copy.fetch().values, np.arange(64.0) * 2)
        copy.delete()
    finally:
        proxy.delete()
    assert not any(proxy.oid in n for n in _device_names(session))


def test_a_full_device_leaves_the_object_where_it_was(session):
    store = store_for(session)
    proxy = store.make_persistent(Readings(np.ones(1000)))

    try:
        session.client.run(_set_limit, "1000")
        with pytest.raises(Exception, match="of device memory"):
            proxy.place("gpu")
        assert proxy.tier() == "dram" and not any(proxy.oid in n for n in _device_names(session))
        np.testing.assert_array_equal(proxy.fetch().values, np.ones(1000))
    finally:
        session.client.run(_set_limit, None)
        proxy.delete()


def test_the_benchmark_runs_simulated_and_says_so(session):
    report = gpu_bench.run(size="ci", session=session, allow_simulated=True)
    assert report.parts["device"]["simulated"] and len(report.goals) == 5
    assert (
        report.parts["histogram"]["exact"]
        and report.parts["kmeans"]["same_centres"]
        and report.parts["store"]["same_counts"]
    )
    k = report.parts["kmeans"]
    assert k["copied_bytes_to_device"] == k["points_bytes"] * k["iterations"]
    assert k["resident_bytes_to_device"] == k["points_bytes"]
    assert report.parts["store"]["active_bytes_off_device"] == 0
    assert report.parts["store"]["non_active_bytes_off_device"] == report.parts["store"]["values_bytes"]
    text = gpu_bench.format_report(report)
    assert "SIMULATED" in text and "goals:" in text and "not measured: dask-cuda" in text
    assert gpu_bench.run(size="ci").skipped.startswith("numba's CUDA simulator")  # never measured by default
    assert gpu_experiments.device()["simulated"]


class DeviceStoreMachine(RuleBasedStateMachine):
    """One stored object's attributes on every tier, ``gpu`` included, against a dict of numpy arrays
    (aliases are one array in the model too): placed, written on the device or the host, rebound,
    aliased, copied out (fetch, new version, move) and refused by a full device."""

    session = None  # set by the test

    def __init__(self):
        super().__init__()
        self.store = store_for(self.session)
        self.model: dict[str, np.ndarray] = {"a": np.zeros(50)}
        self.model["b"] = self.model["a"]
        self.proxy = self.store.make_persistent(DeviceBag(**self.model))
        self.tier = "dram"

    @rule(tier=st.sampled_from(["dram", "mapped", "cached", "disk", "gpu"]), full=st.booleans())
    def place(self, tier, full):
        if full and tier == "gpu" and self.tier != "gpu":
            self.session.client.run(_set_limit, "1")
            try:
                with pytest.raises(Exception, match="of device memory"):
                    self.proxy.place("gpu")
            finally:
                self.session.client.run(_set_limit, None)
            return  # refused: where it was
        self.proxy.place(tier)
        self.tier = tier

    @rule(data=st.data(), delta=st.integers(1, 3))
    def add(self, data, delta):
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.proxy.add.value(float(delta), name)
        self.model[name] += delta

    @rule(name=st.sampled_from(["a", "b", "c"]), shape=st.sampled_from([(), (1,), (40,)]), fill=st.integers(-3, 3))
    def rebind(self, name, shape, fill):
        value = np.full(shape, float(fill))  # () : a 0-d array stays 0-d on every tier
        self.proxy.bind.value(name, value)
        self.model[name] = value.copy()

    @rule(name=st.sampled_from(["a", "b", "c"]), data=st.data())
    def alias(self, name, data):
        other = data.draw(st.sampled_from(sorted(self.model)))
        self.proxy.bind_to.value(name, other)
        self.model[name] = self.model[other]

    @rule(transfer=st.sampled_from(["fetch", "new_version", "move"]))
    def copy_out(self, transfer):
        if transfer == "fetch":
            state = vars(self.proxy.fetch())
            assert all(isinstance(state[k], np.ndarray) for k in self.model)  # host arrays leave the device
            for name, value in self.model.items():
                np.testing.assert_array_equal(state[name], value, strict=True)
        elif transfer == "new_version":
            self.proxy = self.proxy.new_version().consolidate()
            self.tier = "dram"  # a new version starts in DRAM
        else:
            (holder,) = self.proxy.locations() or [None]
            others = [w for w in self.store.backends() if w != holder]
            if holder is not None and others:
                self.proxy.move(others[0])
                self.tier = "dram"

    @invariant()
    def reads_equal_the_model(self):
        for name, value in self.model.items():
            np.testing.assert_array_equal(self.proxy.read.value(name), value, strict=True)  # shape and dtype too
            assert self.proxy.on_device.value(name) == (self.proxy.tier() == "gpu")
        names = sorted(self.model)
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                assert self.proxy.same.value(x, y) == (self.model[x] is self.model[y]), (x, y)

    @invariant()
    def the_device_holds_this_objects_arrays_only_on_gpu(self):
        mine = [n for n in _device_names(self.session) if self.proxy.oid in n]
        distinct = len({id(v) for v in self.model.values()})
        assert len(mine) == (distinct if self.proxy.tier() == "gpu" else 0), mine

    def teardown(self):
        self.proxy.delete()
        assert not any(self.proxy.oid in n for n in _device_names(self.session))


def _set_limit(text):
    import os

    if text is None:
        os.environ.pop(gpu.GPU_BYTES_ENV, None)
    else:
        os.environ[gpu.GPU_BYTES_ENV] = text


def test_a_store_object_on_every_tier_against_a_model(session):
    DeviceStoreMachine.session = session
    try:
        run = DeviceStoreMachine.TestCase("runTest")
        run.settings = settings(SETTINGS, max_examples=min(SETTINGS.max_examples, 15), stateful_step_count=10)
        run.runTest()
    finally:
        DeviceStoreMachine.session = None
