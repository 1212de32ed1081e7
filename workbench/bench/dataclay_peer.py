"""dataClay 4.3.1 as the active store's peer: start it, time a null active call, stop it.

Optional (``pip install 'locality-workbench[dataclay]'`` and Debian's ``redis-server``): the
benchmark starts a private Redis (metadata key-value store), dataClay's metadata service and one
backend on free local ports, runs the client in a separate process (dataClay keeps its own event
loop and global state), and stops everything, whatever happens. Without them it reports why it
skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.settings import Settings

START_SECONDS = 60.0


def unavailable_reason() -> str | None:
    """Why dataClay cannot run here, or None when it can."""
    if importlib.util.find_spec("dataclay") is None:
        return "the dataclay package is not installed (pip install 'locality-workbench[dataclay]')"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian: apt-get install redis-server)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, name: str, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} while starting: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{name} did not listen on port {port} within {START_SECONDS} s")


@contextlib.contextmanager
def running_dataclay() -> Iterator[dict[str, Any]]:
    """Redis, the metadata service and one backend, on free ports; all stopped on exit."""
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="workbench-dataclay-") as directory:
        root = Path(directory)
        redis_port, metadata_port, backend_port = _free_port(), _free_port(), _free_port()
        env = {
            **Settings.read().environ,
            "DATACLAY_KV_HOST": "127.0.0.1",
            "DATACLAY_KV_PORT": str(redis_port),
            "DATACLAY_METADATA_HOST": "127.0.0.1",
            "DATACLAY_METADATA_PORT": str(metadata_port),
            "DATACLAY_BACKEND_HOST": "127.0.0.1",
            "DATACLAY_BACKEND_PORT": str(backend_port),
            "DATACLAY_BACKEND_LISTEN_ADDRESS": "127.0.0.1",
            "DATACLAY_METADATA_LISTEN_ADDRESS": "127.0.0.1",
            "DATACLAY_STORAGE_PATH": str(root / "storage"),
            "DATACLAY_LOGLEVEL": "WARNING",
        }
        try:
            for name, command, port in (
                (
                    "redis-server",
                    [
                        "redis-server",
                        "--port",
                        str(redis_port),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ],
                    redis_port,
                ),
                ("dataclay metadata", [sys.executable, "-m", "dataclay.metadata"], metadata_port),
                ("dataclay backend", [sys.executable, "-m", "dataclay.backend"], backend_port),
            ):
                log = root / f"{name.replace(' ', '-')}.log"
                processes.append(
                    subprocess.Popen(command, env=env, cwd=root, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
                )
                _wait_for_port(port, processes[-1], name, log)
            yield {"host": "127.0.0.1", "port": metadata_port, "env": env, "directory": root}
        finally:
            for process in reversed(processes):
                process.terminate()
            for process in reversed(processes):
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=15)


def measure(calls: int = 2000) -> dict[str, Any]:
    """Latency and throughput of dataClay's null active call; ``available: False`` with a reason if it cannot run."""
    reason = unavailable_reason()
    if reason is not None:
        return {"available": False, "reason": reason}
    try:
        with running_dataclay() as service:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "workbench.bench.dataclay_peer",
                    "--host",
                    service["host"],
                    "--port",
                    str(service["port"]),
                    "--calls",
                    str(calls),
                ],
                env=service["env"],
                capture_output=True,
                text=True,
                timeout=600,
            )
        if done.returncode != 0:
            return {"available": False, "reason": f"the dataClay client failed: {done.stderr.strip()[-1500:]}"}
        return {"available": True, "version": _version(), **json.loads(done.stdout.strip().splitlines()[-1])}
    except (RuntimeError, TimeoutError, OSError, subprocess.TimeoutExpired) as error:
        return {"available": False, "reason": f"dataClay did not start: {error}"}


def _version() -> str:
    from importlib.metadata import version

    return version("dataclay")


def _client(host: str, port: int, calls: int) -> dict[str, float]:
    """Runs in its own process: persist one object, time sequential and concurrent null calls."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from dataclay import Client

    from workbench.bench.dataclay_model import DataClayNull

    client = Client(host=host, port=port, dataset="workbench")
    client.start()
    try:
        obj = DataClayNull()
        obj.make_persistent()
        for _ in range(20):
            obj.nothing()
        start = time.perf_counter()
        for _ in range(calls):
            obj.nothing()
        latency = (time.perf_counter() - start) / calls

        def in_flight(n: int) -> None:
            # dataClay's calls are synchronous: threads keep several in flight. Each call runs in a
            # copy of this thread's context, where dataClay keeps its session.
            for future in [pool.submit(contextvars.copy_context().run, obj.nothing) for _ in range(n)]:
                future.result(timeout=60)

        with ThreadPoolExecutor(8) as pool:
            in_flight(20)
            start = time.perf_counter()
            in_flight(calls)
            throughput = (time.perf_counter() - start) / calls
    finally:
        client.stop()
    return {"latency_ms": latency * 1e3, "throughput_ms": throughput * 1e3}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="dataClay null-call client (run by workbench bench store)")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    print(json.dumps(_client(arguments.host, arguments.port, arguments.calls)))
