"""One learner of tests/test_two_users.py, run as that learner's Unix user (never imported by pytest).

``serve DIR``: start a cluster (dashboard as ``$WORKBENCH_DASHBOARD`` says), make shared segments
(lesson 02's fixed name, an RRO copy made on a worker), tier files and store objects in the default
places, write ``DIR/ready.json`` saying where everything is, wait for ``DIR/stop``, then remove it
all and close. ``intrude THEIRS.json``: as the other learner, try to read, attach, overwrite and
delete what ``serve`` listed there; print one JSON object: each attempt and the error it met.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import workbench
from workbench.memory import shm, tiers
from workbench.runtime import rro
from workbench.runtime.store import Store
from workbench.runtime.store.handles import ArrayBlock

LESSON_SEGMENT = "lesson02-readings"  # notebooks/02-shared-memory.ipynb's fixed name
STOP_WAIT_S = 600.0


def serve(directory: Path) -> None:
    session = workbench.start(n_workers=1, timeout=120)
    try:
        readings = shm.share(LESSON_SEGMENT, np.arange(1_000.0))
        worker = next(iter(session.client.scheduler_info()["workers"]))
        segment = rro.segment_name("twousers", "table", 1, "node")
        session.client.submit(rro.publish_on_node, np.ones(512), segment, workers=[worker], pure=False).result(120)
        mapped = tiers.place("lesson05-mapped", np.full(256, 5.0), "mapped", replace=True)
        staged = tiers.place("lesson05-disk", np.full(256, 6.0), "disk", replace=True)
        store = Store(session)
        block = store.make_persistent(ArrayBlock(np.full((8, 8), float(os.getuid()))))
        block.flush()  # a pickle on disk under the store directory
        block.place("mapped")  # a tier file of the store's own
        info = session.client.scheduler_info()
        ready = {
            "uid": os.getuid(),
            "prefix": shm.PREFIX,
            "segments": [LESSON_SEGMENT, segment],
            "segment_paths": [str(shm.segment_path(n)) for n in (LESSON_SEGMENT, segment)],
            "tier_dirs": {t: str(tiers.default_directory(t)) for t in ("mapped", "disk")},
            "tier_files": [str(mapped.path), str(staged.path)],
            "store_dir": str(store.directory),
            "store_files": sorted(str(p) for p in Path(store.directory).rglob("*") if p.is_file()),
            "scheduler": info["address"],
            "dashboard_port": info["services"].get("dashboard"),
            "readings_sum": float(readings.sum()),
        }
        (directory / "ready.json.partial").write_text(json.dumps(ready))
        (directory / "ready.json.partial").rename(directory / "ready.json")
        deadline = time.monotonic() + STOP_WAIT_S
        while not (directory / "stop").exists():  # the test says when both learners are done
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {directory / 'stop'} within {STOP_WAIT_S} s")
            time.sleep(0.1)
        assert float(shm.attach(LESSON_SEGMENT).sum()) == ready["readings_sum"]  # untouched by the other
        del readings
        block.delete()
        store.close()
        for name, tier in (("lesson05-mapped", "mapped"), ("lesson05-disk", "disk")):
            tiers.free(name, tier)
        shm.delete(LESSON_SEGMENT)
    finally:
        session.close()
    shm.delete_prefix(rro.segment_prefix("twousers"))
    (directory / "done").write_text("closed")


def _attempt(results: dict, what: str, action) -> None:
    """Run ``action``; record ``ok`` if it succeeded (a breach), else the error type and message."""
    try:
        action()
    except Exception as error:  # noqa: BLE001 (the attempt's outcome is what is recorded)
        results[what] = f"{type(error).__name__}: {error}"
    else:
        results[what] = "ok"


def intrude(theirs: Path) -> None:
    other = json.loads(theirs.read_text())
    results: dict[str, str] = {}
    shm_api = shm  # the API, pointed at the other user's names (as a malicious learner could)
    own_prefix = shm_api.PREFIX
    shm_api.PREFIX = other["prefix"]
    try:
        for name in other["segments"]:
            _attempt(results, f"shm.attach {name}", lambda name=name: shm_api.attach(name))
            _attempt(results, f"shm.replace {name}", lambda name=name: shm_api.replace(name, np.zeros(4)))
            _attempt(results, f"shm.delete {name}", lambda name=name: shm_api.delete(name))
    finally:
        shm_api.PREFIX = own_prefix
    paths = other["segment_paths"] + other["tier_files"] + other["store_files"]
    for path in paths:
        _attempt(results, f"read {path}", lambda path=path: Path(path).read_bytes())
        _attempt(results, f"write {path}", lambda path=path: open(path, "r+b").close())
        _attempt(results, f"unlink {path}", lambda path=path: os.unlink(path))
    for tier, where in other["tier_dirs"].items():
        _attempt(results, f"tiers.names {tier}", lambda tier=tier, where=where: tiers.names(tier, directory=where))
        _attempt(
            results,
            f"tiers.open_array {tier}",
            lambda tier=tier, where=where: tiers.open_array(f"lesson05-{tier}", tier, directory=where),
        )
    _attempt(results, "list store", lambda: os.listdir(other["store_dir"]))
    from workbench.runtime.store import catalogue_file

    _attempt(results, "read store catalogue", lambda: catalogue_file.read(other["store_dir"]))
    _attempt(results, "run code on their cluster", lambda: _run_on(other["scheduler"]))
    # Not protected, as docs/course/deploy.md says: the dashboard is plain HTTP on a local port.
    _attempt(results, DASHBOARD_READ, lambda: _read_dashboard(other["dashboard_port"]))
    print(json.dumps(results))


DASHBOARD_READ = "read their dashboard (not protected)"


def _read_dashboard(port: int) -> None:
    """Read another learner's Dask dashboard page (its workers' table) over plain HTTP."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/info/main/workers.html", timeout=10) as page:
        if b"Worker" not in page.read():
            raise RuntimeError("the dashboard answered without its workers' table")


def _run_on(address: str) -> None:
    """Connect a Dask client to another learner's scheduler and run a task there (as that learner)."""
    from distributed import Client

    with Client(address, timeout=10) as client:
        client.submit(os.getuid, pure=False).result(timeout=10)


if __name__ == "__main__":
    {"serve": serve, "intrude": intrude}[sys.argv[1]](Path(sys.argv[2]))
