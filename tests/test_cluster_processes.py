"""A real multi-process cluster, as a user outgrowing one machine has: ``dask scheduler`` and two
``dask worker`` processes started from the command line, each worker with its own node id (not a
LocalCluster). Every application runs all its variants through the ``workbench`` command, twice in
a row on the same cluster, and nothing is left behind: no store registration on the scheduler or
the workers, no shared-memory segment, no process once the cluster is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.apps import registry
from workbench.memory import shm
from workbench.runtime import trace as tracing

BIN = Path(sys.executable).parent
NODES = ("nodeA", "nodeB")
START_TIMEOUT = 90  # seconds for the scheduler file to appear and both workers to register
# Small grids: the point is that every variant runs and agrees (the runner checks answers), twice.
RUNS = {
    "histogram": ["--param", "blocks_per_worker=4"],
    "kmeans": ["--param", "dims=8", "--param", "iterations=2"],
    "matmul": ["--param", "blocks=2", "--param", "block_size=64"],
    "csvm": ["--param", "blocks_per_worker=2"],
    "knn": ["--param", "blocks_per_worker=2"],
    "histogram1d": ["--param", "points=262144", "--param", "block=32768"],
    "matadd": ["--param", "rows=256", "--param", "block=64"],
    # ranks on the two nodes talk over sockets; two ranks on one node through shared memory
    "prk-reduce": ["--param", "ranks=2,3", "--param", "length=4096"],
    "prk-transpose": ["--param", "ranks=2", "--param", "order=64"],
    "prk-stencil": ["--param", "ranks=3", "--param", "n=64"],
}


def _wait_for(condition, what: str, timeout: float = START_TIMEOUT) -> None:
    """Poll ``condition`` until it is true (bounded: a cluster that does not come up fails the test)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout} s")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM every process group (the nanny takes its worker with it), then SIGKILL what remains."""
    for p in processes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for p in processes:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line or environment names ``marker`` (this cluster's own)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()) or marker in proc.environ().get(
                "WORKBENCH_TEST_CLUSTER", ""
            ):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture(scope="module")
def external_cluster(tmp_path_factory):
    """``dask scheduler`` + two ``dask worker`` processes (nodes nodeA, nodeB); stopped and checked gone at the end."""
    from distributed import Client

    here = tmp_path_factory.mktemp("cluster")
    scheduler_file = here / "scheduler.json"
    marker = str(here)
    env = {**os.environ, "WORKBENCH_TEST_CLUSTER": marker, "NUMBA_NUM_THREADS": "1"}
    env.pop("WORKBENCH_SCHEDULER", None)
    logs = []

    def spawn(name: str, arguments: list[str], extra: dict[str, str]) -> subprocess.Popen:
        log = open(here / f"{name}.log", "w")
        logs.append(log)
        return subprocess.Popen(
            [str(BIN / "dask"), *arguments],
            env={**env, **extra},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole, nanny and worker alike
        )

    processes = [
        spawn(
            "scheduler",
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                str(scheduler_file),
            ],
            {},
        )
    ]
    try:
        _wait_for(
            lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0,
            "the scheduler did not write its file",
        )
        address = json.loads(scheduler_file.read_text())["address"]
        for node in NODES:
            processes.append(
                spawn(
                    node,
                    [
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--memory-limit",
                        "3GiB",
                        "--dashboard-address",
                        ":0",
                        "--name",
                        node,
                    ],
                    {"WORKBENCH_NODE_ID": node},
                )
            )
        with Client(address, timeout=60) as client:
            client.wait_for_workers(len(NODES), timeout=START_TIMEOUT)
        yield {"address": address, "env": {**env, "WORKBENCH_SCHEDULER": address}, "dir": here}
    finally:
        _stop(processes)
        for log in logs:
            log.close()
    _wait_for(lambda: not _processes_mentioning(marker), "cluster processes were still running after being stopped", 30)


def _workbench(arguments: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "workbench"), *arguments], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _store_registrations(address: str) -> dict[str, bool]:
    """Whether the scheduler, and each worker, still has the store's plugin and handler."""
    from distributed import Client

    from workbench.runtime.store.protocol import HANDLER, PLUGIN_NAME

    def on_scheduler(dask_scheduler):
        return PLUGIN_NAME in dask_scheduler.plugins or HANDLER in dask_scheduler.handlers

    def on_worker(dask_worker):
        return PLUGIN_NAME in dask_worker.plugins or HANDLER in dask_worker.handlers

    with Client(address, timeout=60) as client:
        return {"scheduler": client.run_on_scheduler(on_scheduler), **client.run(on_worker)}


def _check_rro_made_one_copy_per_node(out: Path) -> None:
    """In every rro run, each publish task made its node's segment (none found one already), spread over both nodes."""
    document = json.loads((out / "results.json").read_text())
    rro_runs = [r["run_id"] for r in document["results"] if r["variant"] == "rro"]
    assert rro_runs
    for run_id in rro_runs:
        frame = tracing.read(out / "traces" / f"{run_id}.json")
        publishes = frame[(frame["action"] == "compute") & (frame["task"] == "rro-publish")]
        created = frame[(frame["action"] == "shm-create") & (frame["task"] == "rro-publish")]
        assert len(publishes) > 0 and len(created) == len(publishes), (run_id, len(created), len(publishes))
        per_node = created["node"].value_counts().to_dict()
        assert set(per_node) == set(NODES) and len(set(per_node.values())) == 1, per_node


def test_every_application_runs_twice_through_the_cli_on_an_external_cluster(external_cluster, tmp_path):
    segments_before = {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")}
    for round_ in (1, 2):  # the second round proves the first left the cluster as it found it
        for app, options in RUNS.items():
            variants = list(registry.get(app).variants)
            out = tmp_path / f"{app}-{round_}"
            result = _workbench(
                [
                    "run",
                    app,
                    "--variants",
                    ",".join(variants),
                    "--size",
                    "ci",
                    "--repeat",
                    "1",
                    "--out",
                    str(out),
                    "--json",
                    *options,
                ],
                external_cluster["env"],
                tmp_path,
            )
            assert result.returncode == 0, f"round {round_}, {app}:\n{result.stderr[-4000:]}"
            document = json.loads(result.stdout)
            assert {r["variant"] for r in document["results"]} == set(variants)
            assert {w["node"] for w in document["metadata"]["cluster"]["workers"]} == set(NODES)
            assert not document["metadata"]["cluster"]["owned"]  # it joined the scheduler; it did not start one
            if "rro" in variants:
                _check_rro_made_one_copy_per_node(out)
            assert not any(_store_registrations(external_cluster["address"]).values()), (
                f"{app} left the store registered"
            )
            left = {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")} - segments_before
            assert not left, f"{app} left shared-memory segments: {sorted(left)}"
