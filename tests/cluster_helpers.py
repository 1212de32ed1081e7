"""What the tests of command-line clusters share: starting and stopping their processes, bounded
waits, running an application's variants through the ``workbench`` command, and the checks that
nothing is left behind (store registrations, processes) and that RRO made one copy per node.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.apps import registry
from workbench.runtime import trace as tracing

BIN = Path(sys.executable).parent
START_TIMEOUT = 90  # seconds for the scheduler file to appear and the workers to register
MARKER_ENV = "WORKBENCH_TEST_CLUSTER"  # names a test cluster's directory in its processes' environment
# Small grids: the point is that every variant runs and agrees (the runner checks answers).
RUNS = {
    "histogram": ["--param", "blocks_per_worker=4"],
    "kmeans": ["--param", "dims=8", "--param", "iterations=2"],
    "skewed-kmeans": ["--param", "skew=4", "--param", "blocks_per_worker=4", "--param", "repetitions=2"],
    "matmul": ["--param", "blocks=2", "--param", "block_size=64"],
    "csvm": ["--param", "blocks_per_worker=2"],
    "knn": ["--param", "blocks_per_worker=2"],
    "histogram1d": ["--param", "points=262144", "--param", "block=32768"],
    "matadd": ["--param", "rows=256", "--param", "block=64"],
    # ranks on two nodes talk over sockets; two ranks on one node through shared memory
    "prk-reduce": ["--param", "ranks=2,3", "--param", "length=4096"],
    "prk-transpose": ["--param", "ranks=2", "--param", "order=64"],
    "prk-stencil": ["--param", "ranks=3", "--param", "n=64"],
}


def wait_for(condition: Callable[[], Any], what: str, timeout: float = START_TIMEOUT) -> None:
    """Poll ``condition`` until it is true (bounded: a cluster that does not come up fails the test)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout} s")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def stop(processes: Sequence[subprocess.Popen]) -> None:
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


def processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line or environment names ``marker`` (this cluster's own)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()) or marker in proc.environ().get(
                MARKER_ENV, ""
            ):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


class ClusterProcesses:
    """The processes of one test cluster, each in its own process group with its log in ``directory``."""

    def __init__(self, directory: Path, env: dict[str, str]):
        self.directory, self.env = directory, env
        self.processes: list[subprocess.Popen] = []
        self._logs: list[Any] = []

    def start(self, name: str, command: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``command`` (its output in ``<name>.log``) in a new process group: stopped as a whole."""
        log = open(self.directory / f"{name}.log", "w")
        self._logs.append(log)
        process = subprocess.Popen(
            command, env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(process)
        return process

    def scheduler_address(self, scheduler_file: Path) -> str:
        """The address ``dask scheduler`` wrote to ``scheduler_file`` (a bounded wait for it)."""
        wait_for(
            lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0,
            f"the scheduler did not write its file (see {self.directory}/*.log)",
        )
        return json.loads(scheduler_file.read_text())["address"]

    def stop(self) -> None:
        """Stop every process (see :func:`stop`) and close the logs."""
        try:
            stop(self.processes)
        finally:
            for log in self._logs:
                log.close()

    def wait_gone(self) -> None:
        """Wait (bounded) until no process of this cluster runs: the nanny's workers are gone too."""
        wait_for(
            lambda: not processes_mentioning(str(self.directory)),
            "cluster processes were still running after being stopped",
            30,
        )


def run_workbench(arguments: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The ``workbench`` command, its output captured (bounded: 10 minutes)."""
    return subprocess.run(
        [str(BIN / "workbench"), *arguments], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


class Commands:
    """``workbench`` commands, each in a process of its own forked from one that imported the command
    line once (tests/cli_forks.py): what a command does is what the ``workbench`` script does, less a new
    interpreter and its seconds of imports. A context manager; the forking process is stopped at its end."""

    def __init__(self, env: dict[str, str], cwd: Path, timeout: float = 600):
        self.cwd, self.timeout, self._count = cwd, timeout, 0
        script = Path(__file__).resolve().parent / "cli_forks.py"
        self._process = subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # stopped with its children, as a group
        )
        self.names: list[str] = self._read()["names"]  # the applications a fresh interpreter registers

    def _read(self) -> dict[str, Any]:
        """The forking process's next answer (bounded: a command that hangs fails the test)."""
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            if not selector.select(self.timeout):
                raise TimeoutError(f"a workbench command did not end within {self.timeout} s")
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process (tests/cli_forks.py) ended with {self._process.wait(10)}")
        return json.loads(line)

    def run(self, arguments: list[str]) -> subprocess.CompletedProcess:
        """``workbench ARGUMENTS`` in a forked process; its status and output, as :func:`run_workbench` gives them."""
        self._count += 1
        stdout, stderr = (self.cwd / f".command-{self._count}.{n}" for n in ("out", "err"))
        request = {"argv": arguments, "stdout": str(stdout), "stderr": str(stderr)}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        status = self._read()["status"]
        result = subprocess.CompletedProcess(arguments, status, stdout.read_text(), stderr.read_text())
        stdout.unlink()
        stderr.unlink()
        return result

    def __enter__(self) -> Commands:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._process.stdin.close()  # it ends when its stdin does
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=10)
        finally:
            self._process.stdout.close()


def run_every_variant(
    app: str, out: Path, env: dict[str, str], cwd: Path, options: Sequence[str], commands: Commands | None = None
) -> dict[str, Any]:
    """``workbench run app`` with all its variants, once each (the runner checks the answers agree), by
    the ``workbench`` script or, given ``commands``, forked by it; its JSON document, after checking that
    it succeeded and ran every variant."""
    variants = list(registry.get(app).variants)
    arguments = ["run", app, "--variants", ",".join(variants), "--size", "ci", "--repeat", "1", "--out", str(out)]
    arguments += ["--json", *options]
    result = commands.run(arguments) if commands is not None else run_workbench(arguments, env, cwd)
    assert result.returncode == 0, f"{app}:\n{result.stderr[-4000:]}"
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == set(variants)
    assert not document["metadata"]["cluster"]["owned"]  # it joined the scheduler; it did not start one
    return document


def store_registrations(address: str) -> dict[str, bool]:
    """Whether the scheduler, and each worker, still has the store's plugin and handler."""
    from distributed import Client

    from workbench.runtime.store.protocol import HANDLER, PLUGIN_NAME

    def on_scheduler(dask_scheduler):
        return PLUGIN_NAME in dask_scheduler.plugins or HANDLER in dask_scheduler.handlers

    def on_worker(dask_worker):
        return PLUGIN_NAME in dask_worker.plugins or HANDLER in dask_worker.handlers

    with Client(address, timeout=60) as client:
        return {"scheduler": client.run_on_scheduler(on_scheduler), **client.run(on_worker)}


def check_rro_made_one_copy_per_node(out: Path, nodes: Sequence[str]) -> None:
    """In every rro run, each publish task made its node's segment (none found one already), as many on
    each of ``nodes``."""
    document = json.loads((out / "results.json").read_text())
    rro_runs = [r["run_id"] for r in document["results"] if r["variant"] == "rro"]
    assert rro_runs
    for run_id in rro_runs:
        frame = tracing.read(out / "traces" / f"{run_id}.json")
        publishes = frame[(frame["action"] == "compute") & (frame["task"] == "rro-publish")]
        created = frame[(frame["action"] == "shm-create") & (frame["task"] == "rro-publish")]
        assert len(publishes) > 0 and len(created) == len(publishes), (run_id, len(created), len(publishes))
        per_node = created["node"].value_counts().to_dict()
        assert set(per_node) == set(nodes) and len(set(per_node.values())) == 1, per_node


def connects(address: str, connection_args: dict) -> bool:
    """Whether a Dask connection to ``address`` (with ``connection_args``: the TLS context) gets an answer
    to an ``identity`` request: what any client does before it asks a worker to run code."""
    from distributed.comm import connect

    async def identity() -> None:
        comm = await connect(address, timeout=3, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            await asyncio.wait_for(comm.read(), 10)
        finally:
            await comm.close()

    try:
        asyncio.run(identity())
    except OSError:  # refused, closed during the handshake, or timed out
        return False
    return True


def refusal(address: str, connection_args: dict) -> str:
    """What a Dask connection to ``address`` (with ``connection_args``) fails with, as text; "" when
    it is answered. A comm, not a ``Client``: a Client whose start fails keeps its event loop, and
    closes it from ``__del__`` in whichever thread the garbage collector next runs (a later test's
    new "IO loop" thread, which then misses Dask's 10 s start-up deadline)."""
    try:
        return "" if connects(address, connection_args) else "refused (OSError)"
    except Exception as error:  # a TLS address with no TLS context: TypeError, before any connection
        return f"{type(error).__name__}: {error}"


# A node's shell: a private tmpfs on /dev/shm (the mount lives and dies with the namespace), its own
# hostname ($0), then the command it runs ("$@").
NODE_SHELL = 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname "$0" && exec "$@"'


def node_command(hostname: str, command: list[str]) -> list[str]:
    """``command`` run as a node: its own mount and UTS namespaces, /dev/shm and hostname."""
    return [
        "unshare",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "--fork",
        "sh",
        "-c",
        NODE_SHELL,
        hostname,
        *command,
    ]


def namespaces_refused() -> str | None:
    """Why this machine cannot start a node (``unshare`` missing or refused, a tmpfs that cannot be
    mounted), with the command's own error; None when it can."""
    if shutil.which("unshare") is None:
        return "there is no unshare command (util-linux) on this machine"
    for what, command in (
        ("`unshare --mount --uts --fork true`", ["unshare", "--mount", "--uts", "--fork", "true"]),
        ("a node's set-up (a tmpfs on /dev/shm, a hostname) in new namespaces", node_command("probe", ["true"])),
    ):
        try:
            probe = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return f"{what} did not finish within 30 s"
        if probe.returncode != 0:
            return (
                f"{what} was refused (exit {probe.returncode}, as uid {os.getuid()}): {probe.stderr.strip()!r}; "
                "namespaces need root, or user namespaces, or CAP_SYS_ADMIN in a container"
            )
    return None
