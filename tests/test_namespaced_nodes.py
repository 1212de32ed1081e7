"""Separate nodes, as real machines are: the scheduler and two worker nodes, each in its own Linux
mount and UTS namespaces (``unshare --mount --uts``) with a private tmpfs on ``/dev/shm`` and a
hostname of its own, from which its workers take their node id (no ``$WORKBENCH_NODE_ID``). Two
worker processes per node, so a channel has ranks on one node (shared memory) and on two (sockets).
The client stays on the host. Every application runs all its variants through the ``workbench``
command (each command a process forked from one that imported the command line once:
cluster_helpers.Commands), and the traces show that RRO made one copy per node and which path each message took;
nothing is left on any node (segments, tier files, store registrations), nor on the host, and no
process once the cluster is stopped.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from channel_intrusion import check_refused, other_user, run_intrusion
from cluster_helpers import (
    BIN,
    MARKER_ENV,
    RUNS,
    START_TIMEOUT,
    ClusterProcesses,
    Commands,
    check_rro_made_one_copy_per_node,
    namespaces_refused,
    node_command,
    run_every_variant,
    store_registrations,
    wait_for,
)

import workbench
from workbench.memory import shm
from workbench.runtime import trace as tracing
from workbench.runtime.channels import run_group

NODES = {"nodeA": 2, "nodeB": 2}  # hostname -> worker processes on it
SCHEDULER_NODE = "scheduler"
# Four ranks: with two workers on each node, a channel's ranks meet on one node and across two.
NODE_RUNS = {
    **RUNS,
    "prk-reduce": ["--param", "ranks=4", "--param", "length=4096"],
    "prk-transpose": ["--param", "ranks=4", "--param", "order=64"],
    "prk-stencil": ["--param", "ranks=4", "--param", "n=64"],
}
HOST_GRACE_SECONDS = 15  # how long a segment new on the host may take to go before it counts as left
MESSAGES = ("put", "take", "wait")  # a channel's trace events; their task ends with "via <path>"


def _what_is_on_each_process(client) -> dict[str, dict]:
    """Per worker (and the scheduler): its node id, hostname, $WORKBENCH_NODE_ID, which /dev/shm it
    sees (the device), and what the workbench left there and in its tier directory."""

    def look():
        import os
        import socket
        from pathlib import Path

        from workbench.memory import shm, tiers
        from workbench.runtime.session import node_id

        tier_dir = Path(os.environ["WORKBENCH_TIER_DIR"])
        return {
            "node": node_id(),
            "hostname": socket.gethostname(),
            "node_env": os.environ.get("WORKBENCH_NODE_ID"),
            "shm_device": os.stat(shm.SHM_DIR).st_dev,
            "segments": sorted(p.name for p in shm.SHM_DIR.iterdir() if p.name.startswith(shm.PREFIX)),
            "tier_files": sorted(str(p) for p in tier_dir.rglob("*") if not p.is_dir()),
            "dram_arrays": tiers.names("dram"),
        }

    return {**client.run(look), "scheduler": client.run_on_scheduler(look)}


@pytest.fixture(scope="module")
def namespaced_cluster(tmp_path_factory):
    """``dask scheduler`` on node "scheduler", and ``dask worker --nworkers 2`` on nodes nodeA and
    nodeB, each node in its own namespaces; stopped and checked gone at the end."""
    refused = namespaces_refused()
    if refused:
        pytest.skip(f"cannot start separate nodes with Linux namespaces: {refused}")
    from distributed import Client

    here = tmp_path_factory.mktemp("nodes")
    scheduler_file = here / "scheduler.json"
    env = {**os.environ, MARKER_ENV: str(here), "NUMBA_NUM_THREADS": "1"}
    for name in ("WORKBENCH_NODE_ID", "WORKBENCH_SCHEDULER", "WORKBENCH_PMEM_DIR"):
        env.pop(name, None)  # a node's id comes from its hostname; its tier files go to its own directory
    env["WORKBENCH_FILES_DIR"] = str(here / "shared-files")  # the file system every node and the client share
    # this checkout (whatever the environment installed), and the tests' modules: task functions a test
    # defines are pickled by reference
    here_paths = (str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (*here_paths, os.environ.get("PYTHONPATH"))))
    (here / "shared-files").mkdir()

    def node_env(node: str) -> dict[str, str]:
        (here / node / "tiers").mkdir(parents=True)
        return {"WORKBENCH_TIER_DIR": str(here / node / "tiers")}  # a node's own disk

    cluster = ClusterProcesses(here, env)
    try:
        scheduler = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0"]
        command = [str(BIN / "dask"), *scheduler, "--scheduler-file", str(scheduler_file)]
        cluster.start(SCHEDULER_NODE, node_command(SCHEDULER_NODE, command), node_env(SCHEDULER_NODE))
        address = cluster.scheduler_address(scheduler_file)
        for node, workers in NODES.items():
            worker = ["worker", address, "--nworkers", str(workers), "--nthreads", "1", "--memory-limit", "2GiB"]
            command = [str(BIN / "dask"), *worker, "--dashboard-address", ":0"]
            cluster.start(node, node_command(node, command), node_env(node))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(sum(NODES.values()), timeout=START_TIMEOUT)
            client_env = {**env, "WORKBENCH_SCHEDULER": address, **node_env("client")}
            yield {"address": address, "client": client, "env": client_env, "dir": here}
    finally:
        cluster.stop()
    cluster.wait_gone()


def _check_message_paths(out: Path) -> Counter:
    """In every run, each channel message took the path its ranks' nodes call for: shared memory on
    one node, a socket between two, Dask for eager. Returns how many messages took each path."""
    document = json.loads((out / "results.json").read_text())
    paths: Counter = Counter()
    for result in document["results"]:
        frame = tracing.read(out / "traces" / f"{result['run_id']}.json")
        messages = frame[frame["action"].isin(MESSAGES)]
        assert len(messages), f"{result['variant']} traced no channel messages"
        rank_nodes = messages.groupby("key")["node"].unique()
        assert all(len(nodes) == 1 for nodes in rank_nodes), rank_nodes  # a rank runs on one node
        node_of = {key.removeprefix("rank"): nodes[0] for key, nodes in rank_nodes.items()}
        taken = messages["task"].str.rsplit(" via ", n=1).str[1]
        peer_nodes = messages["source"].astype(str).map(node_of)
        if result["variant"] == "eager":
            expected = np.full(len(messages), "dask")
        else:
            expected = np.where(messages["node"] == peer_nodes, "shm", "socket")
        wrong = messages[taken.to_numpy() != expected]
        assert wrong.empty, f"{result['variant']}: messages on the wrong path:\n{wrong[['task', 'node', 'source']]}"
        paths.update(taken)
    return paths


def _host_segments() -> set[str]:
    return {p.name for p in shm.SHM_DIR.glob(f"{shm.PREFIX}*")}


def _check_host_kept_nothing(before: set[str], app: str) -> None:
    """No segment was left on the host's /dev/shm. Other programs (tests run beside this one) may make
    and remove segments there meanwhile: a new one counts once it outlives a bounded wait, as ours would."""
    new = _host_segments() - before
    try:
        wait_for(lambda: not (new & _host_segments()), "segments new on the host did not go", HOST_GRACE_SECONDS)
    except TimeoutError:
        left = sorted(new & _host_segments())
        raise AssertionError(f"{app} left shared-memory segments on the host: {left}") from None


def test_every_application_runs_on_separate_nodes_and_leaves_nothing_on_any(namespaced_cluster, tmp_path):
    client, env = namespaced_cluster["client"], namespaced_cluster["env"]
    # the commands' names: the applications a fresh interpreter registers (tests register examples of their own)
    with Commands(env, tmp_path) as commands:
        assert set(NODE_RUNS) == set(commands.names), "give every application its small parameters in NODE_RUNS"
        host_device = os.stat(shm.SHM_DIR).st_dev
        host_segments_before = _host_segments()

        seen = _what_is_on_each_process(client)
        workers = {address: info for address, info in seen.items() if address != "scheduler"}
        assert Counter(info["node"] for info in workers.values()) == NODES
        for info in seen.values():  # the node id is the hostname, from nothing else
            assert info["node"] == info["hostname"] and info["node_env"] is None, info
        devices = {node: {i["shm_device"] for i in workers.values() if i["node"] == node} for node in NODES}
        assert all(len(d) == 1 for d in devices.values()), devices  # a node's workers share its /dev/shm...
        node_devices = [d.pop() for d in devices.values()] + [seen["scheduler"]["shm_device"], host_device]
        assert len(set(node_devices)) == len(node_devices), node_devices  # ...and no other node's, nor the host's

        paths: Counter = Counter()
        for app, options in NODE_RUNS.items():
            out = tmp_path / app
            document = run_every_variant(app, out, env, tmp_path, options, commands)
            assert Counter(w["node"] for w in document["metadata"]["cluster"]["workers"]) == NODES
            variants = {r["variant"] for r in document["results"]}
            if "rro" in variants:
                check_rro_made_one_copy_per_node(out, list(NODES))
            if variants & {"channels", "eager"}:
                paths += _check_message_paths(out)
            assert not any(store_registrations(namespaced_cluster["address"]).values()), (
                f"{app} left the store registered"
            )
            left = {
                where: {k: info[k] for k in ("segments", "tier_files", "dram_arrays") if info[k]}
                for where, info in _what_is_on_each_process(client).items()
            }
            assert not any(left.values()), f"{app} left on the nodes: {left}"
            _check_host_kept_nothing(host_segments_before, app)
        assert paths["shm"] and paths["socket"] and paths["dask"], paths  # ranks met on one node and across two
        client_files = [str(p) for p in namespaced_cluster["dir"].glob("client/tiers/**/*") if not p.is_dir()]
        assert not client_files and not any((namespaced_cluster["dir"] / "shared-files").iterdir()), client_files


# -- the path in the trace, without namespaces (simulated nodes) ----------------------------------
def talk_to_everyone(rank):
    """Every rank exchanges a small buffer with every other rank once."""
    channel = rank.channel("all", 4, np.float64)
    for shift in range(1, rank.size):
        channel.exchange((rank.rank + shift) % rank.size, (rank.rank - shift) % rank.size)


def test_a_channels_trace_says_which_path_each_message_took():
    with workbench.start(nodes=["nodeA", "nodeB"], timeout=60) as session:
        nodes = session.worker_nodes()
        for eager in (False, True):
            # four ranks round-robin over the two workers: 0 and 2 share nodeA's worker, 1 and 3 nodeB's
            events = run_group(session, talk_to_everyone, ranks=4, eager=eager, trace=True).events
            assert events
            for event in events:
                task, _, via = event["task"].rpartition(" via ")
                assert event["action"] in MESSAGES and task.endswith(" all"), event
                rank = int(event["key"].removeprefix("rank"))
                same_node = nodes[event["worker"]] == nodes[session.workers()[int(event["source"]) % 2]]
                assert (rank % 2 == int(event["source"]) % 2) == same_node
                assert via == ("dask" if eager else "shm" if same_node else "socket"), event
            if not eager:
                assert {e["task"].rpartition(" via ")[2] for e in events} == {"shm", "socket"}


# -- another user on the nodes' network (issue 35, item 2) ------------------------------------------
def test_another_user_cannot_take_a_ranks_link_between_namespaced_nodes(namespaced_cluster):
    """A user other than the cluster's connects first to the link port of a rank on nodeB and plays
    rank 0 (on nodeA) of the old protocol: it is refused and reads nothing, and the genuine rank 0
    links (tests/channel_intrusion.py)."""
    with other_user() as intruder, workbench.start(namespaced_cluster["address"], timeout=60) as session:
        nodes = session.worker_nodes()
        first = next(w for w in session.workers() if nodes[w] == "nodeA")
        second = next(w for w in session.workers() if nodes[w] == "nodeB")
        check_refused(run_intrusion(session, intruder.command, (first, second)))
    left = {where: info["segments"] for where, info in _what_is_on_each_process(namespaced_cluster["client"]).items()}
    assert not any(left.values()), f"the group left segments on the nodes: {left}"
