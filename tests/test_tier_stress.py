"""Store objects on tiers under a 64 KiB DRAM budget, demoted, cooled, evicted, freed, replicated and moved
while Dask serialises and transfers the same objects, with every transfer's frames kept in garbage cycles.

The failure guarded against: a worker that dies (SIGSEGV, no Python traceback) after "Exception ignored in
tp_clear of: <class 'memoryview'>" and "BufferError: memoryview has 1 exported buffer", when the garbage
collector breaks a cycle holding a frame's memoryview and the byte view Dask made of it (CPython before
3.12.7, gh-77894; see ``workbench.runtime.frames``). Here such cycles are certain: in each worker, every
caller of Dask's ``ensure_memoryview`` (the comm's write, compression, pickled messages) leaves its frame
in a reference cycle, as a sampling profiler whose samples fail leaves the frames it sampled, and the
collector runs every 64 kept frames. ``WORKBENCH_STRESS_REPEATS`` runs it longer (default: 8 rounds).
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import workbench
from workbench.runtime import frames
from workbench.runtime.store import ArrayBlock, Store

BUDGET = 64 * 1024  # the DRAM budget the tier applications are tested under (test_tier_apps)
SHAPE = (16_384, 4)  # 512 KiB of float64: over Dask's 128 KiB, so a transfer is written frame by frame
OBJECTS = 3
REPEATS = int(os.environ.get("WORKBENCH_STRESS_REPEATS") or 8)
COLLECT_EVERY = 64  # kept frames between two collections in a worker
WAIT = 60.0

# Dask's modules that call ensure_memoryview by the name they imported.
_CALLERS = ("distributed.comm.tcp", "distributed.protocol.core", "distributed.protocol.compression")
_KEEPER: dict[str, object] = {}


def _keep_frames(every: int) -> int:
    """In a worker: from now on every caller of Dask's ``ensure_memoryview`` leaves its frame in a reference
    cycle (its locals, the frames of a transfer, are then freed by the garbage collector only), and every
    ``every`` kept frames the collector runs. Returns the worker's pid."""
    if _KEEPER:
        return os.getpid()
    lock = threading.Lock()
    _KEEPER.update(original={name: sys.modules[name].ensure_memoryview for name in _CALLERS}, kept=0)

    def keeping(make_view):
        def keep(obj):
            view = make_view(obj)
            cycle = [sys._getframe(1)]
            cycle.append(cycle)
            del cycle
            with lock:
                _KEEPER["kept"] += 1
                collect = _KEEPER["kept"] % every == 0
            if collect:
                gc.collect()
            return view

        return keep

    for name, make_view in _KEEPER["original"].items():
        sys.modules[name].ensure_memoryview = keeping(make_view)
    return os.getpid()


def _stop_keeping() -> int:
    """In a worker: Dask's ``ensure_memoryview`` back in place, a last collection; the frames kept."""
    if not _KEEPER:
        return 0
    for name, function in _KEEPER["original"].items():
        sys.modules[name].ensure_memoryview = function
    kept = int(_KEEPER["kept"])
    _KEEPER.clear()
    gc.collect()
    return kept


@pytest.fixture
def stressed(tmp_path):
    """A cluster and store of this test's own (a worker that dies must not take the suite's with it),
    under the 64 KiB budget, its workers keeping every transfer's frames in cycles."""
    with workbench.start(n_workers=2, timeout=WAIT) as session:
        store = Store(session, tmp_path / "store")
        try:
            store.set_cache(BUDGET)
            store.set_dynamic_budget(BUDGET)
            pids = session.run(_keep_frames, COLLECT_EVERY)
            yield session, store, pids
        finally:
            store.close()


def _total(data: np.ndarray) -> float:
    return float(data.sum())


def test_tier_moves_during_transfers_whose_frames_are_garbage_leave_every_worker_alive(stressed):
    session, store, pids = stressed
    expected = [float(i + 1) * SHAPE[0] * SHAPE[1] for i in range(OBJECTS)]
    proxies = [store.make_persistent(ArrayBlock(np.full(SHAPE, float(i + 1)))) for i in range(OBJECTS)]
    backends = store.backends()
    failures: list[str] = []
    deadline = time.monotonic() + 5 * WAIT

    def mover(i: int) -> None:  # the object's tier and holders change under the readers
        proxy = proxies[i]
        tiers = ["mapped", "cached", "dynamic", "dram", "disk"]
        for r in range(REPEATS):
            if failures or time.monotonic() > deadline:
                return
            try:
                tier = tiers[(r + i) % len(tiers)]
                proxy.place(tier)
                if tier in ("mapped", "cached"):
                    proxy.cool()
                if r % 3 == 1:
                    proxy.replicate()
                    proxy.drop_replicas()
                if r % 4 == 3:
                    proxy.move(next(b for b in backends if b not in proxy.locations()))
            except Exception as error:  # noqa: BLE001 - reported below, with the object and round
                failures.append(f"mover {i} round {r}: {type(error).__name__}: {error}")

    def reader(i: int) -> None:  # copies to this process, to other workers, and calls where it is
        proxy = proxies[i]
        for r in range(3 * REPEATS):
            if failures or time.monotonic() > deadline:
                return
            try:
                copy = proxy.fetch()
                got = [
                    _total(copy.data),
                    proxy.apply.value(_total),
                    proxy.apply.non_active(_total).result(timeout=WAIT),
                ]
                if got != [expected[i]] * 3:
                    failures.append(f"reader {i} round {r}: sums {got}, expected {expected[i]}")
            except Exception as error:  # noqa: BLE001
                failures.append(f"reader {i} round {r}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=f, args=(i,)) for i in range(OBJECTS) for f in (mover, reader)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), f"the stress did not end within {5 * WAIT:.0f} s"
        alive = session.run(os.getpid)
        assert alive == pids, (
            f"a worker process died during the transfers (pids before {pids}, after {alive}): its log shows "
            "whether it was gh-77894's crash ('Exception ignored in tp_clear of: <class 'memoryview'>')"
        )
        assert not failures, "\n".join(failures[:10])
        kept = session.run(_stop_keeping)
        assert all(kept.values()), f"a worker kept no transfer's frames, so the stress proved nothing: {kept}"
    finally:
        for proxy in proxies:
            try:
                proxy.delete()
            except Exception:  # noqa: BLE001 - a worker that died: the store and cluster close anyway
                pass


# -- the mechanism, in one process --------------------------------------------------------------
_CYCLE = """
import gc, pickle, sys
import numpy as np
import distributed.utils
from workbench.runtime import frames
assert frames.install()
frame = memoryview(pickle.PickleBuffer(np.ones((4096, 8))))  # Dask's frame of a 2-D block's pickle
sent = distributed.utils.ensure_memoryview(frame)  # what its comm writes, compression reads
cycle = [frame, sent]
cycle.append(cycle)
del frame, sent, cycle
gc.collect()
print("collected")
"""


@pytest.mark.skipif(not frames.AFFECTED, reason="this interpreter has the fix of gh-77894")
def test_a_cycle_holding_dasks_frame_views_is_collected_without_crashing():
    """The crash itself, in a child process: Dask's view of a frame, and the frame, in one garbage cycle."""
    result = subprocess.run([sys.executable, "-c", _CYCLE], capture_output=True, text=True, timeout=WAIT, check=False)
    assert result.returncode == 0 and "collected" in result.stdout, (
        f"exit status {result.returncode}, stderr:\n{result.stderr[-2000:]}"
    )
    assert "tp_clear" not in result.stderr


def test_byte_views_are_dasks_bytes_without_exporting_the_frame():
    rng = np.random.default_rng(7)
    arrays = [
        rng.random((64, 8)),
        np.asfortranarray(rng.random((64, 8))),
        np.arange(100, dtype=">i4"),
        np.ones((5, 3), dtype=complex),
        np.zeros(7, dtype=[("x", "<f8"), ("y", "<i2")]),
        np.array([True, False, True]),
        np.arange(12, dtype=np.uint8).reshape(3, 4),
    ]
    for array in arrays:
        for frame in (memoryview(pickle.PickleBuffer(array)), pickle.PickleBuffer(array)):
            view = frames.byte_view(frame)
            assert (view.ndim, view.format, view.nbytes) == (1, "B", array.nbytes)
            assert view.tobytes() == array.tobytes(order="A")  # in memory order
            assert np.shares_memory(np.frombuffer(view, dtype=np.uint8), array)  # no copy
            assert view.readonly == (not array.flags.writeable)
            if isinstance(frame, memoryview):
                frame.release()  # refused ("memoryview has 1 exported buffer") while a view pins it
    strided = memoryview(np.arange(10.0))[::2]
    assert frames.byte_view(strided).tobytes() == np.arange(0.0, 10.0, 2).tobytes()  # copied, as Dask does
    assert frames.byte_view(b"").nbytes == 0
    raw = memoryview(b"abc")
    assert frames.byte_view(raw) is raw


@pytest.mark.skipif(not frames.AFFECTED, reason="this interpreter has the fix of gh-77894")
def test_dask_uses_byte_views_in_the_workbench_and_its_workers(session):
    import distributed.comm.tcp
    import distributed.protocol.compression
    import distributed.utils

    for module in (distributed.utils, distributed.comm.tcp, distributed.protocol.compression):
        assert module.ensure_memoryview is frames.byte_view, module.__name__

    def in_worker() -> bool:
        import distributed.comm.tcp
        import distributed.utils

        return distributed.utils.ensure_memoryview is distributed.comm.tcp.ensure_memoryview is frames.byte_view

    assert all(session.run(in_worker).values())
