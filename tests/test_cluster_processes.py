"""A real multi-process cluster, as a user outgrowing one machine has: ``dask scheduler`` and two
``dask worker`` processes started from the command line, each worker with its own node id (not a
LocalCluster). Applications run all their variants through the ``workbench`` command (each
command a process forked from one that imported the command line once: cluster_helpers.Commands):
every application where this machine cannot start separate nodes, else those of :data:`FIRST`
(tests/test_namespaced_nodes.py runs every one there, from the same command line); then those
that leave state on the workers between runs (segments and the store: histogram; tier files:
histogram1d; channel groups: prk-stencil) run again on the same cluster, each through the
``workbench`` script in a new interpreter, and nothing is left behind: no store registration on the
scheduler or the workers, no shared-memory segment, no process once the cluster is stopped.
"""

from __future__ import annotations

import os

import pytest
from cluster_helpers import (
    BIN,
    MARKER_ENV,
    RUNS,
    START_TIMEOUT,
    ClusterProcesses,
    Commands,
    check_rro_made_one_copy_per_node,
    namespaces_refused,
    run_every_variant,
    store_registrations,
)

from workbench.memory import shm

NODES = ("nodeA", "nodeB")
# run again in the second round: the applications whose variants leave state on the workers (each
# application's own state is checked gone after it in the first round)
AGAIN = ("histogram", "histogram1d", "prk-stencil")
# the first round where tests/test_namespaced_nodes.py runs every application's variants on separate
# nodes (from the same command line, with the same checks): those that leave state, and k-means (a
# store variant and iterations); where that file cannot start nodes, every application runs here
FIRST = (*AGAIN, "kmeans")


@pytest.fixture(scope="module")
def external_cluster(tmp_path_factory):
    """``dask scheduler`` + two ``dask worker`` processes (nodes nodeA, nodeB); stopped and checked gone at the end."""
    from distributed import Client

    here = tmp_path_factory.mktemp("cluster")
    scheduler_file = here / "scheduler.json"
    env = {**os.environ, MARKER_ENV: str(here), "NUMBA_NUM_THREADS": "1"}
    env.pop("WORKBENCH_SCHEDULER", None)
    cluster = ClusterProcesses(here, env)
    scheduler = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0"]
    try:
        cluster.start("scheduler", [str(BIN / "dask"), *scheduler, "--scheduler-file", str(scheduler_file)])
        address = cluster.scheduler_address(scheduler_file)
        for node in NODES:
            worker = ["worker", address, "--nthreads", "1", "--nworkers", "1", "--memory-limit", "3GiB"]
            cluster.start(
                node,
                [str(BIN / "dask"), *worker, "--dashboard-address", ":0", "--name", node],
                {"WORKBENCH_NODE_ID": node},
            )
        with Client(address, timeout=60) as client:
            client.wait_for_workers(len(NODES), timeout=START_TIMEOUT)
        yield {"address": address, "env": {**env, "WORKBENCH_SCHEDULER": address}, "dir": here}
    finally:
        cluster.stop()
    cluster.wait_gone()


def test_every_application_runs_through_the_cli_on_an_external_cluster_and_again(external_cluster, tmp_path):
    segments_before = {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")}
    env = external_cluster["env"]
    with Commands(env, tmp_path) as forked:
        assert set(RUNS) == set(forked.names), "give every application its small parameters in RUNS"
        # the second round, by the script in new interpreters: the first left the cluster as it found it
        first = list(RUNS) if namespaces_refused() else FIRST
        for round_, apps, commands in ((1, first, forked), (2, AGAIN, None)):
            for app in apps:
                out = tmp_path / f"{app}-{round_}"
                document = run_every_variant(app, out, env, tmp_path, RUNS[app], commands)
                assert {w["node"] for w in document["metadata"]["cluster"]["workers"]} == set(NODES)
                if any(r["variant"] == "rro" for r in document["results"]):
                    check_rro_made_one_copy_per_node(out, NODES)
                assert not any(store_registrations(external_cluster["address"]).values()), (
                    f"round {round_}: {app} left the store registered"
                )
                left = {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")} - segments_before
                assert not left, f"round {round_}: {app} left shared-memory segments: {sorted(left)}"
