"""Where a local cluster serves its dashboard (workbench.runtime.dashboard): never on the network, and
for a shared server on a Unix socket of the user's own instead of any TCP port.

These tests also pin what the socket mode takes from Dask that is not a public API (how
``Scheduler.__init__`` builds its HTTP server, and ``LocalCluster`` handing its scheduler spec to
``SpecCluster``): they fail when Dask changes it."""

from __future__ import annotations

import http.client
import importlib.metadata
import os
import socket
import stat
from pathlib import Path

import psutil
import pytest

import workbench
from workbench.runtime import dashboard
from workbench.runtime.dashboard import dashboard_place, socket_path
from workbench.settings import Settings


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to a Unix socket (what jupyter-server-proxy opens)."""

    def __init__(self, path: Path, timeout: float = 30):
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def get(path: Path, url: str) -> tuple[int, str]:
    connection = UnixHTTPConnection(path)
    try:
        connection.request("GET", url)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def get_tcp(port: int, url: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", url)
        return connection.getresponse().status
    finally:
        connection.close()


def listening_ips(port: int) -> set[str]:
    """The local addresses this process listens on at TCP ``port``."""
    return {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


@pytest.mark.parametrize(
    ("value", "place"),
    [(None, "off"), (False, "off"), (True, "port"), ("1", "port"), ("on", "port"), ("socket", "socket")]
    + [("Off", "off")],
)
def test_the_dashboard_place_is_read_from_the_argument_then_the_environment(value, place):
    assert dashboard_place(value, Settings({})) == place
    if isinstance(value, str):
        assert dashboard_place(None, Settings({dashboard.DASHBOARD_ENV: value})) == place


def test_an_unknown_dashboard_place_names_the_choices():
    with pytest.raises(ValueError, match=r"dashboard is off, port .* or socket .*got 'sockets'"):
        dashboard_place("sockets")
    with pytest.raises(ValueError, match=r"\$WORKBENCH_DASHBOARD is off"):
        dashboard_place(None, Settings({dashboard.DASHBOARD_ENV: "yes please"}))
    with pytest.raises(ValueError, match="dashboard is off"):
        workbench.start(n_workers=1, dashboard="tcp")


def test_a_dashboard_on_a_port_listens_on_the_loopback_interface_only():
    with workbench.start(n_workers=1, dashboard=True, timeout=60) as session:
        port = session.client.scheduler_info()["services"]["dashboard"]
        assert listening_ips(port) == {"127.0.0.1"}
        assert get_tcp(port, "/status") == 200
        assert session.describe()["dashboard"].endswith(f":{port}/status")


def test_the_session_shows_its_dashboards_pages_and_the_task_stream_is_recorded_from_the_start():
    """Issue 46, item 6: the session cell shows the links (they work while cells run, where
    dask-labextension's search waits for the kernel), through JupyterLab's proxy as ``make lab``
    sets Dask's link; and a Task Stream pane opened after Run All shows the tasks that ran before it
    (Dask starts recording the stream only when a pane first opens)."""
    import dask

    link = dask.config.set({"distributed.dashboard.link": "/proxy/{port}/status"})  # the Makefile's LAB_DASK
    with link, workbench.start(n_workers=1, dashboard=True, timeout=60) as session:
        port = session.client.scheduler_info()["services"]["dashboard"]
        links = session.dashboard_links()
        assert links["Task Stream"] == f"/proxy/{port}/individual-task-stream"
        assert links["Status"] == session.dashboard_link() == f"/proxy/{port}/status"
        for page in links.values():
            assert get_tcp(port, page.removeprefix(f"/proxy/{port}")) == 200, page
        shown = session._repr_html_()
        assert f'<a href="/proxy/{port}/individual-task-stream" target="_blank">Task Stream</a>' in shown
        assert "1 worker process x 1 thread" in shown
        assert session.client.submit(sum, [1, 2], key="before-any-pane").result(timeout=30) == 3
        recorded = session.run_on_scheduler(
            lambda dask_scheduler: [r["key"] for r in dask_scheduler.plugins["task-stream"].buffer]
        )
        assert "before-any-pane" in recorded
    assert "closed" in session._repr_html_()


def test_a_session_without_a_dashboard_says_how_to_turn_it_on(session):
    assert session.dashboard_links() == {}
    assert "dashboard is off" in session._repr_html_() and "WORKBENCH_DASHBOARD=1" in session._repr_html_()


def test_with_the_dashboard_off_the_schedulers_port_answers_health_and_metrics_only(session):
    """Issue 47, item 2: the scheduler's loopback port, which every local user can open, served Dask's
    info pages (a learner's task exceptions, worker logs, call stacks) and JSON pages with the dashboard
    off; now it answers health and metrics, and nothing else."""
    port = session.client.scheduler_info()["services"]["dashboard"]
    assert listening_ips(port) == {"127.0.0.1"}
    assert get_tcp(port, "/health") == 200
    assert get_tcp(port, "/metrics") == 200
    for page in ("/info/main/workers.html", "/info/main/logs.html", "/json/identity.json", "/status", "/statics/"):
        assert get_tcp(port, page) == 404, page


@pytest.mark.parametrize("nodes", [None, ["node-a"]], ids=["local", "simulated-nodes"])
def test_a_socket_dashboard_is_served_to_its_user_alone_and_on_no_tcp_port(tmp_path, monkeypatch, nodes):
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    path = socket_path()
    with workbench.start(n_workers=1, nodes=nodes, dashboard="socket", timeout=60) as session:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert get(path, "/health") == (200, "ok")
        status, page = get(path, "/status")
        assert status == 200 and "bokeh" in page.lower()
        assert "dashboard" not in session.client.scheduler_info()["services"], "a TCP port serves the dashboard"
        assert session.describe()["dashboard"] == "/user/ada/lwb-dashboard/status"
        # the workers' HTTP servers answer no route either (their metrics would tell another user what runs)
        worker_ports = session.client.run(lambda dask_worker: dask_worker.http_server.port)
        assert worker_ports and all(get_tcp(port, "/health") == 404 for port in worker_ports.values())
        if nodes is None:  # still a LocalCluster the session owns: the lesson panels may scale it
            from workbench.viz.panels import ExperimentPanel

            assert not ExperimentPanel(session).workers.disabled
    assert not path.exists(), "the dashboard socket outlived its session"


def test_the_newest_session_owns_the_socket_and_an_older_one_leaves_it(tmp_path, monkeypatch):
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path))
    path = socket_path()
    older = workbench.start(n_workers=1, dashboard="socket", timeout=60)
    try:
        with workbench.start(n_workers=1, dashboard="socket", timeout=60) as newer:
            older.close()
            assert get(path, "/health") == (200, "ok"), "closing the older session removed the newer's socket"
            newer_scheduler = newer.client.scheduler_info()["id"]
            assert newer_scheduler in get(path, "/json/identity.json")[1]
    finally:
        older.close()
    assert not path.exists()


def test_a_socket_path_too_long_for_unix_is_refused_before_a_cluster_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path / ("d" * 120)))
    with pytest.raises(ValueError, match="longer than a Unix socket allows"):
        workbench.start(n_workers=1, dashboard="socket", timeout=60)
    assert not (tmp_path / ("d" * 120)).exists()


def test_the_learners_jupyter_server_proxies_the_socket_through_the_entry_point(tmp_path, monkeypatch):
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path))
    entries = importlib.metadata.entry_points(group="jupyter_serverproxy_servers")
    (entry,) = [e for e in entries if e.name == "lwb-dashboard"]
    config = entry.load()()
    assert config["unix_socket"] == str(socket_path()) and "command" not in config
    from jupyter_server_proxy.config import ServerProcess

    handler, _ = ServerProcess(name="lwb-dashboard", **config).make_proxy_handler()
    assert handler is not None and handler.__mro__[1].__name__ == "NamedLocalProxyHandler"


def test_a_directory_another_user_could_control_or_a_relative_one_is_refused_before_a_cluster_starts(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path))
    squatted = dashboard.socket_directory()
    squatted.symlink_to(tmp_path / "elsewhere")  # a link where the private directory should be
    with pytest.raises(ValueError, match=r"is not a private directory of yours \(l.*WORKBENCH_DASHBOARD_DIR"):
        workbench.start(n_workers=1, dashboard="socket", timeout=60)
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, "relative/dir")
    with pytest.raises(ValueError, match="must be an absolute path"):
        workbench.start(n_workers=1, dashboard="socket", timeout=60)


def test_a_slurm_session_refuses_that_directory_before_any_job_is_submitted(tmp_path, monkeypatch):
    """Slurm's scheduler runs in the kernel: its socket is checked as a local cluster's, in the kind's
    check, before sbatch is called (Slurm's commands are stand-ins here that record any call)."""
    from workbench.runtime.clusters import SlurmOptions

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for command in ("sbatch", "squeue", "scancel"):
        (bin_dir / command).write_text(f"#!/bin/sh\necho {command} >> {calls}\nexit 1\n")
        (bin_dir / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(dashboard.SOCKET_DIR_ENV, str(tmp_path))
    dashboard.socket_directory().symlink_to(tmp_path / "elsewhere")
    options = SlurmOptions(jobs=1, cores=1, memory="1GiB", interface="lo", log_directory=str(tmp_path / "logs"))
    with pytest.raises(ValueError, match="is not a private directory of yours"):
        workbench.start(cluster="slurm", slurm=options, dashboard="socket", timeout=60)
    assert not calls.exists()  # no job was submitted
