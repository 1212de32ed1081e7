"""A class on a real JupyterHub: two learners, each with a server spawned through the hub's REST API,
run lesson 00 at size ci through their server's kernel API, at the same time. Then, in each learner's
kernel: a cluster, a shared segment, a tier file and a store object in the default places. Checked:

- each learner's server starts with their own copy of the course (the hub's ``pre_spawn_hook`` runs
  ``workbench course copy`` as the learner: docs/course/deploy.md), the lessons beside the course
  pages they link, and opens JupyterLab on it; the lesson run is that copy's, and a second start
  keeps the copy the learner has;
- each learner's segments, tier files and store are theirs (owner, private modes, different paths);
- the per-learner memory cap the spawner's environment sets (``WORKBENCH_MAX_MEMORY``) holds;
- one learner's token reaches neither the other's server, kernel nor Dask dashboard. The dashboard
  listens on no TCP port (``WORKBENCH_DASHBOARD=socket``): on a Unix socket only its learner can open,
  which the learner's own server proxies at ``/user/NAME/lwb-dashboard/status``; no port of a kernel
  or of its workers answers HTTP;
- ``jupyterhub-idle-culler`` stops an idle learner's server, and the learner's kernel and cluster
  leave nothing in ``/dev/shm``.

Needs root, ``useradd``, ``unshare`` (as tests/test_two_users.py), JupyterHub and its
configurable-http-proxy (``.ci/run`` installs it from npm).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest
from hub_helpers import Hub, Kernel, gateway_service, run_at_once, why_no_hub
from test_two_users import Learner, _why_not

from workbench.hub import COURSE_URL
from workbench.memory import shm
from workbench.teach import PASSED
from workbench.teach.course import COPY_NAME
from workbench.teach.execute import with_answers
from workbench.teach.feedback import MIME

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "00-welcome.ipynb"
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
LESSON_IN_COPY = "notebooks/00-welcome.ipynb"  # in the learner's copy, as in the repository
CAP = "1536MiB"
CULL_AFTER_S = 1  # idle seconds before the culler stops a server (it looks every second); started once all is done
CULL_WAIT_S = 180.0

PLACE = r"""
import json, os
import numpy as np
import workbench
from workbench.memory import shm, tiers
from workbench.runtime.store import Store
from workbench.runtime.store.handles import ArrayBlock

from workbench.runtime import dashboard

def http_ports():
    # the TCP ports this kernel and its workers listen on that answer an HTTP request with a page, all
    # asked at once: a port that is not HTTP's (the kernel's own ZeroMQ ports) says nothing for 2 s
    import http.client, psutil
    from concurrent.futures import ThreadPoolExecutor
    me = psutil.Process()
    ports = sorted({c.laddr.port for p in (me, *me.children(recursive=True)) for c in p.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN})

    def answers(port):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/health")
            return connection.getresponse().status == 200
        except Exception:
            return False
        finally:
            connection.close()

    with ThreadPoolExecutor(max(1, len(ports))) as pool:
        return [port for port, answered in zip(ports, pool.map(answers, ports)) if answered]

session = workbench.start(timeout=120)
readings = shm.share("lesson02-readings", np.arange(1_000.0))
placed = tiers.place("lesson05-mapped", np.full(256, 5.0), "mapped", replace=True)
store = Store(session)
block = store.make_persistent(ArrayBlock(np.full((8, 8), 1.0)))
block.flush()
try:
    workbench.start(n_workers=2, memory_limit="4GiB", timeout=60)
    over_cap = "started"
except ValueError as error:
    over_cap = str(error)
limits = [w["memory_limit"] for w in session.client.scheduler_info()["workers"].values()]
print(json.dumps({
    "uid": os.getuid(),
    "segment": str(shm.segment_path("lesson02-readings")),
    "tier_file": str(placed.path),
    "store_dir": str(store.directory),
    "over_cap": over_cap,
    "limits": limits,
    "dashboard": session.describe()["dashboard"],
    "dashboard_socket": str(dashboard.socket_path()),
    "scheduler_id": session.client.scheduler_info()["id"],
    "http_ports": http_ports(),
}))
"""


OPEN_SOCKET = r"""
import json, socket
probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    probe.connect({path})
    print(json.dumps("connected"))
except OSError as error:
    print(json.dumps(type(error).__name__))
finally:
    probe.close()
"""


@pytest.fixture(scope="module")
def hub():
    reason = _why_not() or why_no_hub()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="lwb-hub-", dir="/tmp"))
    base.chmod(0o755)
    learners: list[Learner] = []
    running = None
    try:
        learners = [Learner(base, "a"), Learner(base, "b")]
        culler_token = secrets.token_hex(16)
        culler = {  # started by the test once the learners are idle (tests/test_hub.py: _culling)
            "name": "idle-culler",
            "api_token": culler_token,
            "role": {
                "name": "idle-culler",
                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
                "services": ["idle-culler"],
            },
        }
        gateway, gateway_settings, gateway_env = gateway_service(base)
        environment = {
            **gateway_env,
            "DASK_GATEWAY__ADDRESS": "{hub}/services/dask-gateway",  # through the hub's proxy
            "DASK_GATEWAY__AUTH__TYPE": "jupyterhub",
            "WORKBENCH_MAX_MEMORY": CAP,
            "WORKBENCH_SIZE": "ci",
            "WORKBENCH_DASHBOARD": "socket",  # the dashboard on a Unix socket of the learner's only
            "PYTHONDONTWRITEBYTECODE": "1",  # the checkout is read-only to the learner
            "JUPYTERHUB_ACTIVITY_INTERVAL": "5",
        }
        running = Hub(
            base, {x.name: x for x in learners}, environment, services=[culler, gateway], extra=gateway_settings
        )
        tokens = {learner.name: running.add_learner(learner.name) for learner in learners}
        running.culler_token = culler_token
        yield running, learners, tokens
    finally:
        if running is not None:
            running.stop()
        for learner in learners:
            learner.remove()
        shutil.rmtree(base, ignore_errors=True)


def _lesson_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    lesson = with_answers(notebook, "00", "solutions")
    return [c for c in lesson.cells if c.cell_type == "code"]


def _run_lesson(kernel: Kernel, notebook: nbformat.NotebookNode, results: dict) -> None:
    try:
        verdicts, errors = [], []
        for cell in _lesson_cells(notebook):
            outputs = kernel.run(cell.source)
            expected = "raises-exception" in cell.metadata.get("tags", [])
            raised = [o for o in outputs if o["msg_type"] == "error"]
            if bool(raised) != expected:
                said = f"{raised[0]['ename']}: {raised[0]['evalue']}" if raised else "no error"
                errors.append((cell.source[:120], said))
            verdicts += [o["data"][MIME] for o in outputs if MIME in o.get("data", {})]
        results[kernel.user] = {"verdicts": verdicts, "errors": errors}
    except BaseException as error:  # noqa: BLE001 - reported by the test's thread
        results[kernel.user] = {"failed": repr(error)}


def _printed(outputs: list[dict]) -> dict:
    errors = [o for o in outputs if o["msg_type"] == "error"]
    assert not errors, f"{errors[0]['ename']}: {errors[0]['evalue']}"
    text = "".join(o["text"] for o in outputs if o["msg_type"] == "stream" and o["name"] == "stdout")
    return json.loads(text.strip().splitlines()[-1])


def _owned_segments(uid: int) -> list[str]:
    found = []
    for entry in shm.SHM_DIR.iterdir():
        try:
            if entry.lstat().st_uid == uid:
                found.append(entry.name)
        except FileNotFoundError:
            continue
    return found


def test_two_learners_on_a_real_hub_run_a_lesson_and_stay_apart(hub):
    server, learners, tokens = hub
    server.spawn_all([learner.name for learner in learners])
    kernels = {learner.name: Kernel(server, learner.name, tokens[learner.name]) for learner in learners}
    copies = _each_has_a_copy_of_the_course(server, learners, tokens)
    _both_run_the_lesson_at_once(server, kernels, copies)
    placed = _each_places_a_cluster_segment_tier_file_and_store_object(kernels, learners)
    _the_dashboard_is_the_learners_alone(server, learners, tokens, kernels, placed)
    _the_culler_stops_both_and_leaves_nothing(server, learners)


def _each_has_a_copy_of_the_course(server: Hub, learners: list, tokens: dict[str, str]) -> dict:
    """Each learner's copy of the course, made by the hub before their server started: the lessons beside
    the course pages they link, the learner's own files, and JupyterLab opens on the lessons. Returns
    lesson 00 of each learner's copy (name -> notebook), the repository's own."""
    copies = {}
    for learner in learners:
        token, copy = tokens[learner.name], f"/user/{learner.name}/api/contents/{COPY_NAME}"
        listed = server.api("GET", f"{copy}/notebooks", token=token)["content"]
        assert sorted(x["name"] for x in listed) == [p.name for p in LESSONS], listed
        assert server.request("GET", f"{copy}/docs/course/bibliography.md", token)[0] == 200  # the lessons' link
        for path in (learner.home / COPY_NAME / "notebooks").iterdir():
            assert path.stat().st_uid == learner.uid, (path, path.stat().st_uid)
        opens = server.redirect(f"/user/{learner.name}/", token)
        assert opens is not None and opens.split("?")[0].endswith(f"/user/{learner.name}{COURSE_URL}"), opens
        copies[learner.name] = nbformat.from_dict(server.api("GET", f"{copy}/{LESSON_IN_COPY}", token=token)["content"])
    for copy in copies.values():
        assert nbformat.writes(copy) == nbformat.writes(nbformat.read(LESSON, as_version=4))
    return copies


def _both_run_the_lesson_at_once(server: Hub, kernels: dict[str, Kernel], copies: dict) -> None:
    """Lesson 00 at size ci in both servers at once, through the kernel API, from the learner's copy:
    every cell as expected (an error only where tagged), every check passed."""
    results: dict = {}
    threads = [threading.Thread(target=_run_lesson, args=(k, copies[n], results)) for n, k in kernels.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    for name in kernels:
        outcome = results.get(name, {"failed": "the lesson did not finish"})
        assert "failed" not in outcome, f"{name}: {outcome}\n{server.log()}"
        assert not outcome["errors"], (name, outcome["errors"])
        assert outcome["verdicts"] and all(v["status"] == PASSED for v in outcome["verdicts"]), outcome["verdicts"]


def _each_places_a_cluster_segment_tier_file_and_store_object(kernels: dict[str, Kernel], learners: list) -> dict:
    """Both kernels at once make a cluster, a segment, a tier file and a store object in the default places
    (:data:`PLACE`): each is the learner's own, private, apart from the other's; the memory cap holds.
    Returns what each kernel printed (name -> :data:`PLACE`'s record)."""
    from dask.utils import parse_bytes

    placed = {name: _printed(outputs) for name, outputs in run_at_once(kernels, PLACE).items()}
    for learner in learners:
        mine = placed[learner.name]
        assert mine["uid"] == learner.uid
        for path in (mine["segment"], mine["tier_file"], mine["store_dir"]):
            info = Path(path).stat()
            assert info.st_uid == learner.uid and not info.st_mode & 0o077, (path, oct(info.st_mode))
        assert "WORKBENCH_MAX_MEMORY" in mine["over_cap"], mine["over_cap"]
        assert 0 < sum(mine["limits"]) <= parse_bytes(CAP), mine["limits"]
    a, b = learners
    assert placed[a.name]["segment"] != placed[b.name]["segment"]
    assert placed[a.name]["store_dir"] != placed[b.name]["store_dir"]
    return placed


def _the_dashboard_is_the_learners_alone(
    server: Hub, learners: list, tokens: dict[str, str], kernels: dict[str, Kernel], placed: dict
) -> None:
    """No TCP port of a kernel or its workers serves HTTP; a's Jupyter server proxies a's dashboard socket
    to a's token, and b can neither open the socket nor pass the proxy, nor reach a's server or kernel."""
    a, b = learners
    for learner in learners:
        assert placed[learner.name]["http_ports"] == [], (learner.name, placed[learner.name]["http_ports"])
    link = placed[a.name]["dashboard"]
    assert link == f"/user/{a.name}/lwb-dashboard/status", link
    status, _ = server.request("GET", link, tokens[a.name])
    assert status == 200, status
    status, identity = server.request("GET", f"/user/{a.name}/lwb-dashboard/json/identity.json", tokens[a.name])
    assert status == 200 and placed[a.name]["scheduler_id"] in identity.decode(), (status, identity[:200])
    refused = _printed(kernels[b.name].run(OPEN_SOCKET.format(path=json.dumps(placed[a.name]["dashboard_socket"]))))
    assert refused == "PermissionError", refused
    for path in (f"/user/{a.name}/api/kernels", f"/user/{a.name}/api/kernels/{kernels[a.name].id}",
                 link, f"/user/{a.name}/api/contents"):  # fmt: skip
        status, body = server.request("GET", path, tokens[b.name])
        assert status in (302, 403, 404), (path, status, body[:200])
    intruder = Kernel.__new__(Kernel)
    intruder.hub, intruder.user, intruder.token, intruder.id = server, a.name, tokens[b.name], kernels[a.name].id
    with pytest.raises(Exception):  # noqa: B017 - the websocket is refused, whatever tornado calls it
        intruder.run("1 + 1", timeout=60)


def _the_culler_stops_both_and_leaves_nothing(server: Hub, learners: list) -> None:
    """Both learners go idle with a cluster and segments open: the culler (started now, so that it never
    stops a server in the middle of a long silent cell) stops their servers, and what their kernels made
    in /dev/shm goes with them, as do their processes."""
    with _culling(server):
        for learner in learners:
            server.wait_server(learner.name, ready=False, timeout=CULL_WAIT_S)
    deadline = time.monotonic() + 60
    while any(_owned_segments(x.uid) or x.processes() for x in learners) and time.monotonic() < deadline:
        time.sleep(0.2)
    for learner in learners:
        left = _owned_segments(learner.uid)
        assert not left, f"{learner.name} left {left}, mapped by {_mapping(left)}; the hub said:\n{_hook_lines(server)}"
        left = [_cmdline(pid) for pid in learner.processes()]
        assert not left, f"{learner.name} still runs {left}"


@contextlib.contextmanager
def _culling(server: Hub):
    """jupyterhub-idle-culler, as the hub's service ``idle-culler``, while the block runs."""
    log = server.base / "culler.log"
    with open(log, "w") as out:
        culler = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub_idle_culler", f"--url={server.url}/hub/api",
             f"--timeout={CULL_AFTER_S}", "--cull-every=1"],
            env={**os.environ, "JUPYTERHUB_API_TOKEN": server.culler_token}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe culler said:\n{log.read_text()[-2000:]}") from None
    finally:
        culler.terminate()
        try:
            culler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            culler.kill()
            culler.wait(timeout=30)


def _mapping(names: list[str]) -> dict[str, list[str]]:
    """The processes that map each of these /dev/shm segments, for a failure message."""
    import psutil

    found: dict[str, list[str]] = {name: [] for name in names}
    for process in psutil.process_iter():
        try:
            paths = {Path(m.path).name for m in process.memory_maps(grouped=True)}
        except (psutil.Error, OSError):
            continue
        for name in names:
            if name in paths:
                found[name].append(_cmdline(process.pid))
    return found


def _hook_lines(server: Hub) -> str:
    """What the hub's post-stop hook and its spawner logged (the whole log is too long to print)."""
    text = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    marks = ("shm clean", "still run", "post_stop", "Stopping", "stopped", "Culling", "Error")
    return "\n".join(line[:300] for line in text.splitlines() if any(m in line for m in marks))[-6000:]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return f"{pid} (gone)"


GATEWAY_SESSION = r"""
import json
import workbench
from workbench.lab.runner import run_experiment

session = workbench.start(cluster="gateway", n_workers=2, timeout=180)
experiment = run_experiment(session, "histogram", ["blocks", "split"], size="ci", repeats=1, progress=False)
print(json.dumps({"name": session.cluster.name, "workers": len(session.workers()),
                  "variants": sorted(set(experiment.results["variant"]))}))
"""

INTRUDE = r"""
import json
from dask_gateway import Gateway

gateway = Gateway()
said = {"listed": [c.name for c in gateway.list_clusters()]}
for what, attempt in (("connect", lambda: gateway.connect(NAME)), ("stop", lambda: gateway.stop_cluster(NAME))):
    try:
        attempt()
        said[what] = "no error"
    except Exception as error:
        said[what] = f"{type(error).__name__}: {error}"
print(json.dumps(said))
"""

LISTED = r"""
import json
from dask_gateway import Gateway

print(json.dumps([c.name for c in Gateway().list_clusters()]))
"""


def test_a_learners_gateway_cluster_runs_a_lesson_app_and_is_theirs_alone(hub):
    server, learners, tokens = hub
    a, b = learners
    server.spawn_all([learner.name for learner in learners])
    said = server.log_path.read_text(errors="replace")
    for learner in learners:  # their second start: the copy they have is kept, file for file
        assert f"workbench course copy for {learner.name}: 0 file(s) copied" in said, _hook_lines(server)
    mine, theirs = (Kernel(server, x.name, tokens[x.name]) for x in (a, b))
    started = _printed(mine.run(GATEWAY_SESSION))
    assert started["workers"] == 2 and started["variants"] == ["blocks", "split"], started
    name = started["name"]

    intruded = _printed(theirs.run(INTRUDE.replace("NAME", repr(name))))
    print("the other learner's attempts:", intruded)
    assert name not in intruded["listed"], intruded
    assert intruded["connect"] != "no error" and intruded["stop"] != "no error", intruded
    assert json.loads(_last_line(mine.run(LISTED))) == [name], "the other learner's stop reached the cluster"

    assert not [o for o in mine.run("session.close()") if o["msg_type"] == "error"]
    assert json.loads(_last_line(mine.run(LISTED))) == [], "the session did not stop its gateway cluster"
    deadline = time.monotonic() + 60
    while _gateway_processes(a) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _gateway_processes(a), _gateway_processes(a)
    server.stop_all([learner.name for learner in learners])


def _last_line(outputs: list[dict]) -> str:
    errors = [o for o in outputs if o["msg_type"] == "error"]
    assert not errors, f"{errors[0]['ename']}: {errors[0]['evalue']}"
    return "".join(o["text"] for o in outputs if o["msg_type"] == "stream").strip().splitlines()[-1]


def _gateway_processes(learner) -> list[str]:
    """The learner's scheduler and worker processes started by the gateway (not the kernel's own)."""
    return [c for c in map(_cmdline, learner.processes()) if "dask scheduler" in c or "dask worker" in c]


def test_the_clean_waits_for_the_stopped_servers_processes_only():
    """A server's kernels and workers carry its user and server name: the clean waits for them to exit
    (a segment they still map is not free), not for the user's other processes, another server's, or
    a zombie's. Their API token is no mark (a real hub's kernels were seen with another one), so a
    kernel with another token is still waited for."""
    import asyncio

    from workbench import hub

    user = f"learner-{secrets.token_hex(4)}"
    env = {**os.environ, "JUPYTERHUB_USER": user, "JUPYTERHUB_SERVER_NAME": "", "JUPYTERHUB_API_TOKEN": "rewritten"}
    wait = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    kernel = subprocess.Popen(wait, stdin=subprocess.PIPE, env=env)
    other = subprocess.Popen(wait, stdin=subprocess.PIPE)
    named = subprocess.Popen(wait, stdin=subprocess.PIPE, env={**env, "JUPYTERHUB_SERVER_NAME": "gpu"})
    try:
        assert hub.server_processes(os.getuid(), user, "") == [kernel.pid]
        assert hub.server_processes(os.getuid(), user, "gpu") == [named.pid]
        threading.Timer(0.5, kernel.stdin.close).start()  # the kernel exits a moment after its server
        assert asyncio.run(hub.server_processes_exit(os.getuid(), user, "")) == []
        assert kernel.wait(timeout=30) == 0 and other.poll() is None and named.poll() is None
        exited = subprocess.Popen([sys.executable, "-c", "pass"], env=env)  # not waited for: a zombie once it ends
        deadline = time.monotonic() + 30
        while not Path(f"/proc/{exited.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)  # a poll interval of a bounded wait on a state
        assert hub.server_processes(os.getuid(), user, "") == []  # a zombie maps nothing: not waited for
        exited.wait(timeout=30)
    finally:
        for process in (kernel, other, named):
            process.kill()
            process.wait(timeout=30)


def test_the_clean_keeps_what_another_running_server_of_the_learner_shares_by_name(monkeypatch):
    """Issue 47, item 6: the clean after a stop ran `shm clean --all`, which deleted the segments that
    another of the learner's running (named) servers shared by name and did not map at that moment. It
    now adds --all only when no other server of the learner's runs: one whose processes carry the
    learner's name and another server name, or one the hub holds active. The plain clean frees what the
    stopped server's kernels left (their owner records name dead processes: tests/test_shm_owners.py)."""
    import asyncio
    import logging
    import pwd
    import types

    from workbench import hub

    ran: list[list[str]] = []

    async def as_learner(spawner, argv, seconds, wrap):  # noqa: ANN001, ANN202 - what the hub would run
        ran.append(argv)
        return 0, ""

    monkeypatch.setattr(hub, "_as_learner", as_learner)
    me = pwd.getpwuid(os.getuid()).pw_name  # clean_after_stop looks the learner up
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name=me), name="", log=logging.getLogger(__name__))
    env = {**os.environ, "JUPYTERHUB_USER": me, "JUPYTERHUB_SERVER_NAME": "gpu"}
    named = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env)
    try:
        assert hub.other_servers(spawner, os.getuid(), me, "") == ["gpu"]
        asyncio.run(hub.clean_after_stop(spawner))
        assert ran.pop()[-2:] == ["shm", "clean"]  # no --all
    finally:
        named.kill()
        named.wait(timeout=30)
    asyncio.run(hub.clean_after_stop(spawner))  # the learner's last server: the segments shared by name go too
    assert ran.pop()[-3:] == ["shm", "clean", "--all"]
    spawner.user.spawners = {"": spawner, "gpu": types.SimpleNamespace(active=True), "old": types.SimpleNamespace()}
    assert hub.other_servers(spawner, os.getuid(), me, "") == ["gpu"]  # the hub's own view counts too
    asyncio.run(hub.clean_after_stop(spawner))
    assert "--all" not in ran.pop()
