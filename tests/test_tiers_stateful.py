"""Model-based tests of the tiers and of the store's placements (issue 25, 19): random sequences of
make, place on any tier, write in place, rebind, alias, read, move, free and evict under tiny DRAM
and cache budgets, against a plain in-memory model. Every read equals the model; no file outlives
its object. The store's machine also copies its object (move, replica, fetch, non-active call, new
version) while a writing call is half-way (issue 35): every copy is all before or all after the
write. ``WORKBENCH_STATEFUL_EXAMPLES`` sets how many sequences run (50 by default: seconds)."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from store_helpers import Bag, wait_for_file

import workbench.runtime.store.backend_ops as backend_ops
from workbench.memory import gpu, shm, tier_set, tiers
from workbench.runtime.store import store_for
from workbench.runtime.store.protocol import PLUGIN_NAME

EXAMPLES = int(os.environ.get("WORKBENCH_STATEFUL_EXAMPLES", "50"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
NAMES = st.sampled_from(["a", "b", "c"])
SIZES = st.sampled_from([1, 3, 500, 1000])  # 8 B .. 8 kB: a cache of 10 kB holds one of the large
BOUND = 60.0  # the longest wait of a rule (a bound, never a pause)


def _tiers_here() -> tuple[str, ...]:
    """Every tier where a CUDA device (or numba's simulator: tests/gpu_sim_tier_cases.py) runs the gpu
    tier, the host tiers elsewhere (where placing on gpu is a clear error, tested in test_tiers.py)."""
    from workbench.kernels import gpu as device_kernels

    return tiers.TIERS if device_kernels.available() else tiers.HOST_TIERS


TIERS_HERE = _tiers_here()
DEVICE_LIMITS = st.sampled_from([None, 0, 8_100, 2**30])  # $WORKBENCH_GPU_BYTES: unset, full, one large array, room


class TierMachine(RuleBasedStateMachine):
    """``workbench.memory.tiers`` against a dict of numpy arrays."""

    def __init__(self):
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lwb-stateful-"))
        self.dirs = {"mapped": self.root / "mapped", "cached": self.root / "mapped", "disk": self.root / "disk"}
        for path in self.dirs.values():
            path.mkdir(exist_ok=True)
        self.cache = tiers.DramCache(10_000)
        self.model: dict[str, np.ndarray] = {}
        self.handles: dict[str, tiers.TierArray] = {}
        self.prefix = f"sm{os.getpid()}-{id(self)}-"
        self.device_limit: int | None = None
        os.environ.pop(gpu.GPU_BYTES_ENV, None)
        # A tier set of its own, reading the environment as it runs (a session's reads its snapshot):
        # in use from here to teardown, the set before it (a session's) back after.
        self.held = tiers.new_set("the tier model")
        self.in_use = contextlib.ExitStack()
        self.in_use.enter_context(tier_set.using(self.held))

    def _name(self, name: str) -> str:
        return self.prefix + name

    def _place(self, name: str, data: np.ndarray, tier: str, replace: bool = False) -> tiers.TierArray:
        directory = self.dirs.get(tier)  # dram and gpu: none
        return tiers.place(self._name(name), data, tier, directory=directory, cache=self.cache, replace=replace)

    def _device_full(self, nbytes: int, replacing: str | None = None) -> bool:
        """Whether the model says ``nbytes`` more on the gpu tier (``replacing`` this name's array
        there) pass the limit: the tier must then refuse, and change nothing."""
        if self.device_limit is None:
            return False
        held = sum(int(h.nbytes) for n, h in self.handles.items() if h.tier == "gpu" and n != replacing)
        return held + nbytes > self.device_limit

    @rule(name=NAMES, size=st.sampled_from([3, 1000]), tier=st.sampled_from(TIERS_HERE), seed=st.integers(0, 9))
    def make(self, name, size, tier, seed):
        data = np.random.default_rng(seed).random(size)
        if name in self.handles:
            with pytest.raises(tiers.TierError, match="already"):
                self._place(name, data, self.handles[name].tier)
            return
        if tier == "gpu" and self._device_full(data.nbytes):
            with pytest.raises(tiers.TierError, match="of device memory"):
                self._place(name, data, tier)
            return
        self.handles[name] = self._place(name, data, tier)
        self.model[name] = data.copy()

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), delta=st.integers(1, 4))
    def write_in_place(self, data, delta):
        name = data.draw(st.sampled_from(sorted(self.handles)))
        handle = self.handles[name]
        self.model[name] += delta
        if handle.tier == "gpu":  # in place on the device, by a device kernel: x = x + delta * 1
            from workbench.kernels import gpu as device_kernels

            ones = device_kernels.cuda.to_device(np.ones(handle.device.shape))
            device_kernels.stream_triad(handle.device, handle.device, ones, float(delta))
            return
        array = handle.array
        array += delta
        handle.sync()

    @precondition(lambda self: len([h for h in self.handles.values() if h.tier != "gpu"]) >= 2)
    @rule(data=st.data(), delta=st.integers(1, 4))
    def write_two_then_sync(self, data, delta):
        on_host = sorted(n for n, h in self.handles.items() if h.tier != "gpu")
        first, second = data.draw(st.permutations(on_host))[:2]
        arrays = [self.handles[first].array, self.handles[second].array]  # both in use at once
        for name, array in zip([first, second], arrays):
            array += delta
            self.model[name] += delta
        self.handles[first].sync()
        self.handles[second].sync()
        del arrays

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), seed=st.integers(0, 9))
    def rebind(self, data, seed):
        name = data.draw(st.sampled_from(sorted(self.handles)))
        new = np.random.default_rng(seed).random(len(self.model[name]))
        if self.handles[name].tier == "gpu" and self._device_full(new.nbytes, replacing=name):
            with pytest.raises(tiers.TierError, match="of device memory"):
                self._place(name, new, "gpu", replace=True)
            return
        self.handles[name] = self._place(name, new, self.handles[name].tier, replace=True)
        self.model[name] = new.copy()

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), tier=st.sampled_from(TIERS_HERE))
    def move(self, data, tier):
        name = data.draw(st.sampled_from(sorted(self.handles)))
        handle = self.handles[name]
        if tier in ("dram", "gpu"):  # no directory of their own: one given (a file tier's) is passed by
            directory = data.draw(st.sampled_from([None, self.dirs["mapped"]]))
        else:
            directory = self.dirs[tier]
        if tier == "gpu" and handle.tier != "gpu" and self._device_full(self.model[name].nbytes):
            with pytest.raises(tiers.TierError, match="of device memory"):
                tiers.move(handle, tier, directory=directory, replace=data.draw(st.booleans()))
            return  # refused: it stays where it was
        self.handles[name] = tiers.move(handle, tier, directory=directory, replace=data.draw(st.booleans()))
        assert self.handles[name].tier == tier

    @precondition(lambda self: "gpu" in TIERS_HERE)
    @rule(limit=DEVICE_LIMITS)
    def set_device_limit(self, limit):
        self.device_limit = limit
        if limit is None:
            os.environ.pop(gpu.GPU_BYTES_ENV, None)
        else:
            os.environ[gpu.GPU_BYTES_ENV] = str(limit) if limit else "1"  # 0 is not a size: 1 byte is full
            self.device_limit = max(limit, 1)

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def evict(self, data):
        handle = self.handles[data.draw(st.sampled_from(sorted(self.handles)))]
        if handle.tier in ("mapped", "cached"):
            handle.evict()
        elif handle.tier == "disk":
            handle.drop()

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def free(self, data):
        name = data.draw(st.sampled_from(sorted(self.handles)))
        handle = self.handles.pop(name)
        assert tiers.free(handle.name, handle.tier, directory=handle.directory)
        del self.model[name]

    @rule(budget=st.sampled_from([0, 8, 10_000, 20_000]))
    def set_cache_budget(self, budget):
        with self.cache.lock:
            self.cache.budget = budget
            while self.cache.used > budget and self.cache.evict_oldest():
                pass

    @invariant()
    def reads_equal_the_model(self):
        for name, handle in self.handles.items():
            np.testing.assert_array_equal(np.asarray(handle.array), self.model[name])

    @invariant()
    def files_are_the_live_arrays(self):
        files = {
            (tier, p.name)
            for tier in ("mapped", "disk")
            for p in self.dirs[tier].iterdir()
            if not p.name.endswith(shm.LOCK_SUFFIX)
        }
        expected = {
            ("disk" if h.tier == "disk" else "mapped", shm.segment_path(h.name, h.directory).name)
            for h in self.handles.values()
            if h.tier not in ("dram", "gpu")
        }
        assert files == expected

    @invariant()
    def the_device_holds_the_gpu_arrays(self):
        mine = [n for n in tiers.names("gpu") if n.startswith(self.prefix)] if "gpu" in TIERS_HERE else []
        assert sorted(mine) == sorted(h.name for h in self.handles.values() if h.tier == "gpu")

    def teardown(self):
        for handle in self.handles.values():
            tiers.free(handle.name, handle.tier, directory=handle.directory)
        shutil.rmtree(self.root, ignore_errors=True)
        os.environ.pop(gpu.GPU_BYTES_ENV, None)
        self.in_use.close()
        self.held.close()


TestTiers = TierMachine.TestCase
TestTiers.settings = SETTINGS


class StoreMachine(RuleBasedStateMachine):
    """One stored object's attributes on the store's tiers against a dict of numpy arrays (aliases
    are one array in the model too), under tiny memory limits and cache budgets."""

    store = None  # set by the test

    def __init__(self):
        super().__init__()
        self.model: dict[str, object] = {"a": np.zeros(500)}
        self.model["b"] = self.model["a"]  # aliased from the start
        self.proxy = self.store.make_persistent(Bag(**self.model))
        self.gates = Path(tempfile.mkdtemp(prefix="lwb-stateful-gates-"))

    @rule(tier=st.sampled_from(["dram", "mapped", "cached", "disk"]))
    def place(self, tier):
        self.proxy.place(tier)

    @precondition(lambda self: any(isinstance(v, np.ndarray) for v in self.model.values()))
    @rule(data=st.data(), delta=st.integers(1, 3))
    def add(self, data, delta):
        names = sorted(k for k, v in self.model.items() if isinstance(v, np.ndarray))
        chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
        self.proxy.add.value(float(delta), *chosen)
        for name in chosen:
            array = self.model[name]
            array += delta

    @rule(name=NAMES, size=SIZES, fill=st.integers(-5, 5))
    def rebind_array(self, name, size, fill):
        value = np.full(size, float(fill))
        self.proxy.bind.value(name, value)
        self.model[name] = value.copy()

    @rule(name=NAMES, value=st.sampled_from([None, [1, 2], "x"]))
    def rebind_other(self, name, value):
        self.proxy.bind.value(name, value)
        self.model[name] = value

    @precondition(lambda self: self.model)
    @rule(name=NAMES, data=st.data())
    def alias(self, name, data):
        other = data.draw(st.sampled_from(sorted(self.model)))
        self.proxy.bind_to.value(name, other)
        self.model[name] = self.model[other]

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def forget(self, data):
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.proxy.forget.value(name)
        del self.model[name]

    @rule(cache=st.sampled_from([0, 5_000, 10_000, 2**20]), limit=st.sampled_from([None, 0, 6_000, 2**30]))
    def budgets(self, cache, limit):
        self.store.set_cache(cache)
        self.store.set_memory_limit(limit)

    @rule()
    def cool(self):
        self.proxy.cool()

    @precondition(lambda self: any(isinstance(v, np.ndarray) for v in self.model.values()))
    @rule(
        data=st.data(),
        value=st.integers(10, 20),
        transfer=st.sampled_from(["move", "replicate", "fetch", "non_active", "new_version"]),
    )
    def write_while_copying(self, data, value, transfer):
        """A writing call stops half-way (at a gate) while the object is copied; the gate opens once
        the copy ended or waits for the object's lock. Every copy is of one version; none loses the
        write, which returned True."""
        name = data.draw(st.sampled_from(sorted(k for k, v in self.model.items() if isinstance(v, np.ndarray))))
        before = copy.deepcopy(self.model)
        self.model[name][...] = value  # its aliases are the same array in the model
        after = self.model
        gate = self.gates / f"gate-{len(list(self.gates.iterdir()))}"
        (holder, *_) = self.proxy.locations() or self.proxy._resolved(refresh=True)[1]
        other = next(w for w in self.store.backends() if w != holder)
        copies = {
            "move": lambda: self.proxy.move(other) and None,
            "replicate": lambda: self.proxy.replicate(other) and None,
            "fetch": lambda: dict(vars(self.proxy.fetch())),
            "non_active": lambda: self.store.session.gather(self.proxy.everything.non_active()),
            "new_version": self.proxy.new_version,
        }
        with ThreadPoolExecutor(2) as pool:
            writer = pool.submit(self.proxy.fill_gated.value, name, float(value), str(gate), BOUND)
            try:
                wait_for_file(str(gate) + ".started", BOUND)
                copying = pool.submit(copies[transfer])
                deadline = time.monotonic() + BOUND
                while not (copying.done() or self._lock_waiters() > 0):
                    assert time.monotonic() < deadline, "the copy neither ended nor waited for the object's lock"
                    time.sleep(0.002)  # a poll interval of a bounded wait on a state
            finally:
                gate.touch()
            copied, wrote = copying.result(timeout=BOUND), writer.result(timeout=BOUND)
        assert wrote is True
        if transfer == "new_version":
            state = copied.everything.value()
            assert self._matches(state, before) or self._matches(state, after), f"torn new version: {state}"
            self.proxy = copied.consolidate()  # the object is now that copy: the model follows it
            self.model = after if self._matches(state, after) else before
        elif copied is not None:
            assert self._matches(copied, before) or self._matches(copied, after), f"torn {transfer} copy: {copied}"
        held = self._held_states()
        assert held and all(self._matches(state, self.model) for state in held), f"copies held: {held}"
        if transfer == "replicate":
            assert len(held) == 2
            self.proxy.drop_replicas()  # writing rules need one copy
        if transfer == "move":
            assert self.proxy.locations() in ([other], [])  # [] : evicted to disk since (a memory limit)

    def _matches(self, state: dict, model: dict) -> bool:
        """Whether an object's attributes equal the model's (arrays by value)."""
        if set(state) != set(model):
            return False
        for key, value in model.items():
            got = state[key]
            if isinstance(value, np.ndarray):
                if not isinstance(got, np.ndarray) or not np.array_equal(got, value):
                    return False
            elif got != value:
                return False
        return True

    def _lock_waiters(self) -> int:
        """Calls and copies waiting for the object's lock on any backend."""
        oid = self.proxy.oid

        def probe(dask_worker) -> int:
            backend = dask_worker.plugins[PLUGIN_NAME]
            with backend.table.lock:
                return sum(getattr(e.lock, "waiting", 0) for (o, _), e in backend.table.items() if o == oid)

        return sum(self.store.session.client.run(probe).values())

    def _held_states(self) -> list[dict]:
        """The attributes of every copy of the object's current version held in memory, read in place."""
        oid, version = self.proxy.oid, self.proxy._resolved(refresh=True)[0].version

        def probe(dask_worker) -> list[dict]:
            backend = dask_worker.plugins[PLUGIN_NAME]
            with backend.table.lock:
                entry = backend.table.get((oid, version))
            if entry is None:
                return []
            return [{k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in vars(entry.obj).items()}]

        return [state for states in self.store.session.client.run(probe).values() for state in states]

    @invariant()
    def reads_equal_the_model(self):
        for name, value in self.model.items():
            got = self.proxy.read.value(name)
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(got, value)
            else:
                assert got == value
        arrays = [k for k, v in self.model.items() if isinstance(v, np.ndarray)]
        for i, x in enumerate(arrays):
            for y in arrays[i + 1 :]:
                assert self.proxy.same.value(x, y) == (self.model[x] is self.model[y]), (x, y)

    def teardown(self):
        self.proxy.delete()
        shutil.rmtree(self.gates, ignore_errors=True)
        directory = self.store.directory / "tiers" / "mapped"
        left = [p.name for p in directory.iterdir() if self.proxy.oid in p.name] if directory.is_dir() else []
        assert left == [], f"tier files outlived their object: {left}"


@pytest.fixture
def restored_budgets(session):
    store = store_for(session)
    caches = {w: store.link.backend(w, backend_ops.op_set_cache, nbytes=2**20) for w in store.backends()}
    limits = {w: store.link.backend(w, backend_ops.op_set_memory_limit, nbytes=None) for w in store.backends()}
    yield store
    for w, nbytes in caches.items():
        store.link.backend(w, backend_ops.op_set_cache, nbytes=nbytes)
    for w, limit in limits.items():
        store.link.backend(w, backend_ops.op_set_memory_limit, nbytes=limit)


def test_the_store_against_a_model(restored_budgets):
    StoreMachine.store = restored_budgets
    try:
        run = StoreMachine.TestCase("runTest")
        run.settings = settings(SETTINGS, stateful_step_count=12)
        run.runTest()
    finally:
        StoreMachine.store = None
