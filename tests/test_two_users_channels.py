"""Channel links between nodes, with another Unix user on the machine (issue 35, item 2).

A rank's link port listens on a TCP port every user of the machine can reach. Another user who
connects to it first and names a rank must be refused, without taking the place of the rank it
named: the genuine rank still links, and the group's values are its own. The other user is made
with tests/test_two_users.py's machinery (``useradd``, a mount namespace that reaches the
interpreter, ``setpriv``); the scenario is tests/channel_intrusion.py's, run here on two simulated
nodes (tests/test_namespaced_nodes.py runs it on nodes that are Linux namespaces).
"""

from __future__ import annotations

import pytest
from channel_intrusion import check_refused, other_user, run_intrusion

import workbench
from workbench.runtime.channels.transport import HANDSHAKE_SECONDS


@pytest.fixture(scope="module")
def intruder():
    """A Unix user other than the test's."""
    with other_user() as user:
        yield user


@pytest.fixture(scope="module")
def two_nodes():
    with workbench.start(nodes=["nodeA", "nodeB"], timeout=60) as session:
        yield session


def _two_nodes_workers(session) -> tuple[str, str]:
    workers = session.workers()
    nodes = session.worker_nodes()
    assert nodes[workers[0]] != nodes[workers[1]]  # a link, not shared memory
    return workers[0], workers[1]


def test_another_user_connecting_to_a_rank_first_is_refused_and_the_real_rank_still_links(intruder, two_nodes):
    """The other user plays rank 0 of the old protocol (names the rank, sends its values, asks for
    rank 1's block): it reads nothing, and rank 1 takes the genuine rank 0's values."""
    outcome = run_intrusion(two_nodes, intruder.command, _two_nodes_workers(two_nodes))
    check_refused(outcome)


def test_a_stranger_that_connects_first_and_stalls_delays_no_rank(intruder, two_nodes):
    """The other user connects first, names rank 0 and then says nothing: the genuine rank 0 still
    links at once (handshakes run side by side), not after the stranger's handshake time runs out."""
    outcome = run_intrusion(two_nodes, intruder.command, _two_nodes_workers(two_nodes), mode="stalls")
    check_refused(outcome)
    assert outcome["seconds"] < HANDSHAKE_SECONDS, f"the group waited for the stranger: {outcome['seconds']:.1f} s"
