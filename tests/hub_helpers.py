"""A real JupyterHub for the tests, as a class server runs one: the hub and its configurable-http-proxy,
learners made as Unix users, single-user servers spawned through the hub's REST API (each learner's
copy of the course made before their server starts, as docs/course/deploy.md configures it), and code run in
a learner's kernel through that server's kernel API (HTTP and its websocket), never by importing
anything into the learner's process.

The hub runs as root (it must, to start servers as other users). Python and the checkout may sit where
other users cannot reach them (``/root/.pyenv``), so each server starts in a mount namespace of its
own that re-exposes them read-only (tests/test_two_users.py's ``_namespace_script``) and then drops to
the learner's user with ``setpriv``: the spawner is JupyterHub's ``LocalProcessSpawner`` with that
wrapper around its command (``hub_config.py`` below), nothing else changed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench.hub import COURSE_URL

BIN = Path(sys.executable).parent
START_WAIT_S = 120.0  # the hub, its proxy and a single-user server each start within this
CELL_WAIT_S = 300.0  # one cell of a lesson at size ci


def why_no_hub() -> str | None:
    """Why a hub cannot run here, or None."""
    try:
        import jupyterhub  # noqa: F401
        import jupyterhub_idle_culler  # noqa: F401
    except ImportError as error:
        return f"needs jupyterhub and jupyterhub-idle-culler (pip install -e .[test]): {error}"
    if proxy_command() is None:
        return "needs configurable-http-proxy (npm install -g configurable-http-proxy; .ci/run installs it)"
    if shutil.which("jupyterhub-singleuser", path=str(BIN)) is None:
        return "needs jupyterhub-singleuser in the virtual environment"
    return None


def proxy_command() -> str | None:
    """configurable-http-proxy, from PATH or npm's global prefix."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    for prefix in ("/usr/local/bin", "/usr/bin"):
        candidate = Path(prefix) / "configurable-http-proxy"
        if candidate.exists():
            return str(candidate)
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


HUB_CONFIG = r'''
import json, shlex
from jupyterhub.spawner import LocalProcessSpawner

settings = json.load(open(SETTINGS))


class NamespacedSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose command enters a mount namespace that reaches the interpreter and the
    checkout, then drops to the learner's user itself (setpriv): the hub stays root until then."""

    def make_preexec_fn(self, name):
        return None

    def wrap(self, command):
        learner = settings["learners"][self.user.name]
        drop = ["setpriv", f"--reuid={learner['uid']}", f"--regid={learner['gid']}", "--init-groups", *command]
        script = settings["namespace"][self.user.name] + f"\ncd {shlex.quote(learner['home'])}\nexec {shlex.join(drop)}"
        return ["unshare", "--mount", "sh", "-c", script]

    async def start(self):
        self.cmd = self.wrap([*self.cmd, *self.get_args()])
        self.get_args = lambda: []
        return await super().start()


async def clean_after_stop(spawner):
    from workbench.hub import clean_after_stop as clean

    await clean(spawner, wrap=spawner.wrap)


async def copy_course(spawner):
    from workbench.hub import copy_course_before_start as copy

    await copy(spawner, wrap=spawner.wrap)


c.JupyterHub.bind_url = settings["bind_url"]
c.JupyterHub.hub_bind_url = settings["hub_bind_url"]
c.JupyterHub.db_url = settings["db_url"]
c.JupyterHub.cookie_secret_file = settings["cookie_secret_file"]
c.JupyterHub.pid_file = settings["pid_file"]
c.JupyterHub.last_activity_interval = 2
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = set(settings["learners"])
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.ConfigurableHTTPProxy.api_url = settings["proxy_api_url"]
c.ConfigurableHTTPProxy.auth_token = settings["proxy_token"]
c.JupyterHub.spawner_class = NamespacedSpawner
c.Spawner.cmd = [settings["singleuser"]]
c.Spawner.default_url = settings["default_url"]
c.Spawner.pre_spawn_hook = copy_course
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = settings["environment"]
c.Spawner.post_stop_hook = clean_after_stop
c.LocalProcessSpawner.interrupt_timeout = 5
c.LocalProcessSpawner.term_timeout = 5
c.JupyterHub.services = settings["services"]
c.JupyterHub.load_roles = settings["roles"]
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "access:services!service=dask-gateway"]
'''


GATEWAY_CONFIG = r'''
import json, os, shlex
from dask_gateway_server.backends.local import LocalBackend

settings = json.load(open(SETTINGS))


class NamespacedBackend(LocalBackend):
    """dask-gateway's LocalBackend (each cluster's scheduler and workers run as the user who asked),
    with the hub spawner's wrapper: a mount namespace that reaches the interpreter, then setpriv."""

    def make_preexec_fn(self, cluster):
        return None

    def setup_working_directory(self, cluster):
        # LocalBackend's own (2026.3.0) extends its list of paths to chown with each certificate's
        # path as a *string*, one character at a time: as root that chowns "/" to the user and then
        # fails on "t". The same directory and files, owned by the user, made here.
        workdir = os.path.join(self.clusters_directory, cluster.name)
        certs, logs = self.get_certs_directory(workdir), self.get_logs_directory(workdir)
        for path in (workdir, certs, logs):
            os.makedirs(path, 0o700, exist_ok=True)
        cert_path, key_path = self._get_tls_paths(workdir)
        for path, data in ((cert_path, cluster.tls_cert), (key_path, cluster.tls_key)):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(data)
        self.set_file_permissions([workdir, certs, logs, cert_path, key_path], cluster.username)
        return workdir

    async def start_process(self, cluster, cmd, env, name):
        learner = settings["learners"][cluster.username]
        drop = ["setpriv", f"--reuid={learner['uid']}", f"--regid={learner['gid']}", "--init-groups", *cmd]
        script = settings["namespace"][cluster.username] + f"\ncd {shlex.quote(cluster.state['workdir'])}"
        script += f"\nexec {shlex.join(drop)}"
        env = {**env, "HOME": learner["home"], "PYTHONDONTWRITEBYTECODE": "1"}
        return await super().start_process(cluster, ["unshare", "--mount", "sh", "-c", script], env, name)


c.DaskGateway.backend_class = NamespacedBackend
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.JupyterHubAuthenticator"
c.LocalBackend.clusters_directory = settings["gateway_clusters"]
c.Proxy.address = settings["gateway_web"]
c.Proxy.tcp_address = settings["gateway_tcp"]
c.Proxy.prefix = "/services/dask-gateway"
c.ClusterConfig.scheduler_cmd = [settings["bin"] + "/dask", "scheduler"]
c.ClusterConfig.worker_cmd = [settings["bin"] + "/dask", "worker"]
c.ClusterConfig.worker_memory = "512 M"
c.ClusterConfig.cluster_max_workers = 2
'''


def gateway_service(base: Path) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """dask-gateway-server as a hub service (its scheduler and worker processes run as the learner
    who asked), the settings its config reads, and the environment a learner's server needs to use it."""
    web, tcp = free_port(), free_port()
    clusters = base / "gateway-clusters"
    clusters.mkdir(mode=0o755)
    (base / "gateway_config.py").write_text(f"SETTINGS = {str(base / 'settings.json')!r}\n" + GATEWAY_CONFIG)
    service = {
        "name": "dask-gateway",
        "url": f"http://127.0.0.1:{web}",
        "command": [str(BIN / "dask-gateway-server"), "-f", str(base / "gateway_config.py")],
        "cwd": str(base),
    }
    settings = {"gateway_web": f"127.0.0.1:{web}", "gateway_tcp": f"127.0.0.1:{tcp}",
                "gateway_clusters": str(clusters), "bin": str(BIN)}  # fmt: skip
    return service, settings, {"DASK_GATEWAY__PROXY_ADDRESS": f"gateway://127.0.0.1:{tcp}"}


class Hub:
    """A JupyterHub on loopback ports with a service token that can make users, tokens and servers."""

    def __init__(
        self,
        base: Path,
        learners: dict[str, Any],
        environment: dict[str, str],
        services: list | None = None,
        extra: dict[str, Any] | None = None,
    ):
        self.base = base
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        from test_two_users import _namespace_script

        namespaces = {}
        for name, learner in learners.items():
            namespaces[name] = _namespace_script(learner.stage)
        services = [{"name": "tester", "api_token": self.token}, *(services or [])]
        roles = [
            {"name": "user", "scopes": ["self", "access:services!service=dask-gateway"]},
            {
                "name": "tester",
                "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "read:users"],
                "services": ["tester"],
            },
            *[s.pop("role") for s in services if "role" in s],
        ]
        settings = {
            "bind_url": self.url,
            "hub_bind_url": f"http://127.0.0.1:{free_port()}",
            "db_url": f"sqlite:///{base / 'hub.sqlite'}",
            "cookie_secret_file": str(base / "cookie_secret"),
            "pid_file": str(base / "hub.pid"),
            "proxy": proxy_command(),
            "proxy_api_url": f"http://127.0.0.1:{free_port()}",
            "proxy_token": secrets.token_hex(16),
            "singleuser": str(BIN / "jupyterhub-singleuser"),
            "default_url": COURSE_URL,  # the learner's copy of the lessons, which the hub makes before the start
            "learners": {
                name: {"uid": learner.uid, "gid": learner.gid, "home": str(learner.home)}
                for name, learner in learners.items()
            },
            "namespace": namespaces,
            "environment": {k: v.replace("{hub}", self.url) for k, v in environment.items()},  # {hub}: its address
            "services": services,
            "roles": roles,
            **(extra or {}),
        }
        (base / "settings.json").write_text(json.dumps(settings))
        (base / "hub_config.py").write_text(f"SETTINGS = {str(base / 'settings.json')!r}\n" + HUB_CONFIG)
        self.log_path = base / "hub.log"
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [str(BIN / "jupyterhub"), "-f", str(base / "hub_config.py")],
                cwd=base, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + START_WAIT_S
        while True:  # the proxy answers 404 until the hub has added its route
            try:
                if self.request("GET", "/hub/api/", None)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = self.log()
                self.stop()  # the caller never gets this hub to stop: it must not outlive the test
                raise AssertionError(f"the hub did not start:\n{said}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def request(self, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, bytes]:
        """(status, body) of one HTTP request to the hub's public address (through its proxy)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            request.add_header("Authorization", f"token {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def redirect(self, path: str, token: str) -> str | None:
        """Where a GET of ``path`` redirects (its ``Location``), or None when it does not."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"token {token}"})

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        try:
            with urllib.request.build_opener(NoRedirect).open(request, timeout=60):
                return None
        except urllib.error.HTTPError as error:
            return error.headers.get("Location") if 300 <= error.code < 400 else None

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        status, data = self.request(method, path, token or self.token, body)
        if status >= 400:
            raise AssertionError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data else None

    def add_learner(self, name: str) -> str:
        """Make the hub user ``name`` and return a token of its own (what its browser session holds)."""
        status, body = self.request("POST", f"/hub/api/users/{name}", self.token)
        assert status in (201, 409), (status, body[:300])  # 409: the hub made it already (allowed_users)
        made = self.api("POST", f"/hub/api/users/{name}/tokens", {"note": "test", "expires_in": 3600})
        return made["token"]

    def spawn(self, name: str) -> None:
        """Start ``name``'s server and wait until the hub says it is ready."""
        self.api("POST", f"/hub/api/users/{name}/server")
        self.wait_server(name, ready=True)

    def stop_server(self, name: str) -> None:
        """Stop ``name``'s server and wait until the hub says it is stopped."""
        self.api("DELETE", f"/hub/api/users/{name}/server")
        self.wait_server(name, ready=False)

    def spawn_all(self, names: list[str]) -> None:
        """:meth:`spawn` the servers of ``names`` at once: a start mostly waits for processes to start."""
        _each_at_once(self.spawn, names)

    def stop_all(self, names: list[str]) -> None:
        """:meth:`stop_server` the servers of ``names`` at once: a stop mostly waits for processes to exit."""
        _each_at_once(self.stop_server, names)

    def wait_server(self, name: str, ready: bool, timeout: float = START_WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            servers = self.api("GET", f"/hub/api/users/{name}")["servers"]
            now = bool(servers.get("", {}).get("ready"))
            if now == ready and (ready or "" not in servers):
                return
            if time.monotonic() > deadline:
                state = "never became ready" if ready else "was not stopped"
                raise AssertionError(f"{name}'s server {state}:\n{self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the hub: it stops the servers it runs (``cleanup_servers``) and its proxy; whatever
        is left of its process group then is killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the proxy, if the hub could not stop it
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


def _each_at_once(call: Any, names: list[str]) -> None:
    """``call(name)`` for every name, each on a thread of its own; raises the first error."""
    with ThreadPoolExecutor(len(names)) as pool:
        for done in [pool.submit(call, name) for name in names]:
            done.result()


def run_at_once(kernels: dict[str, Kernel], code: str) -> dict[str, list[dict[str, Any]]]:
    """Run ``code`` in every kernel at the same time (each on a thread of its own): name -> its outputs."""
    with ThreadPoolExecutor(len(kernels)) as pool:
        running = {name: pool.submit(kernel.run, code) for name, kernel in kernels.items()}
        return {name: done.result() for name, done in running.items()}


class Kernel:
    """A kernel in a learner's server, started and driven through the server's REST and websocket API."""

    def __init__(self, hub: Hub, user: str, token: str):
        self.hub, self.user, self.token = hub, user, token
        made = hub.api("POST", f"/user/{user}/api/kernels", {"name": "python3"}, token=token)
        self.id = made["id"]

    def run(self, code: str, timeout: float = CELL_WAIT_S) -> list[dict[str, Any]]:
        """Execute ``code`` and return its outputs (Jupyter's message contents, with ``msg_type``)."""
        return asyncio.run(self._run(code, timeout))

    async def _run(self, code: str, timeout: float) -> list[dict[str, Any]]:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = self.hub.url.replace("http", "ws", 1) + f"/user/{self.user}/api/kernels/{self.id}/channels"
        socket_ = await websocket_connect(
            HTTPRequest(url, headers={"Authorization": f"token {self.token}"}, request_timeout=60, connect_timeout=60)
        )
        msg_id = uuid.uuid4().hex
        message = {
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.user, "session": msg_id,
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }  # fmt: skip
        await socket_.write_message(json.dumps(message))
        outputs: list[dict[str, Any]] = []
        replied = idle = False
        deadline = time.monotonic() + timeout
        try:
            while not (replied and idle):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"a cell did not finish within {timeout} s in {self.user}'s kernel:\n{code}")
                raw = await asyncio.wait_for(socket_.read_message(), left)
                if raw is None:
                    raise AssertionError(f"{self.user}'s kernel connection closed while running:\n{code}")
                reply = json.loads(raw)
                if reply.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = reply["header"]["msg_type"]
                if kind in ("stream", "error", "execute_result", "display_data"):
                    outputs.append({"msg_type": kind, **reply["content"]})
                elif kind == "execute_reply":
                    replied = True
                elif kind == "status" and reply["content"]["execution_state"] == "idle":
                    idle = True
        finally:
            socket_.close()
        return outputs
