"""A real single-node Slurm for the tests: Debian's slurmctld and slurmd (``slurm-wlm``, installed by
``.ci/run``) run in the foreground with a generated ``slurm.conf`` in a temporary directory.

The configuration needs no cgroups, no systemd and no accounting database: ``proctrack/linuxproc``,
``task/none``, ``select/cons_tres``; ``auth/none`` where this Slurm has it (no munged to start),
otherwise munge with a key generated in the directory. Every state, spool, pid and log file lives
there; the ports are free ones, so a site's own Slurm on the machine is never touched. The one node
is this machine by its hostname, with its cores and memory. ``$SLURM_CONF`` (set by the test) points
``sbatch``, ``squeue`` and ``scancel`` at it.

Where the daemons cannot run (not root, a package missing, a daemon that exits), :func:`local_slurm`
raises :class:`SlurmUnavailable` saying exactly why, with the tail of the daemon's log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")
PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib64/slurm")


class SlurmUnavailable(RuntimeError):
    """The Slurm daemons cannot run here; the message says why (a test skips with it)."""


@dataclass
class LocalSlurm:
    """A running single-node Slurm: its configuration file, its node, and its daemons."""

    directory: Path
    conf: Path
    node: str
    processes: dict[str, subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point Slurm's commands at this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 30) -> str:
        """Run a Slurm client command against this Slurm; its stdout."""
        done = subprocess.run(
            args, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def queue(self) -> list[str]:
        """The jobs in the queue: one ``id state name`` line each."""
        return self.command("squeue", "--noheader", "--format=%i %T %j").split("\n")[:-1] or []

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of both daemons' logs, for a failure message."""
        parts = []
        for name in DAEMONS:
            log = self.directory / f"{name}.log"
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["(no log)"]
            parts.append(f"--- {name}.log (last {lines} lines)\n" + "\n".join(text))
        return "\n".join(parts)


def _plugin_dir() -> Path | None:
    return next((Path(d) for d in PLUGIN_DIRS if Path(d, "select_cons_tres.so").exists()), None)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def write_conf(directory: Path, auth: str) -> tuple[Path, str]:
    """A ``slurm.conf`` for one node, this machine, with everything under ``directory``; (path, node name)."""
    node = socket.gethostname()
    cpus = os.cpu_count() or 1
    memory_mb = psutil.virtual_memory().total // 2**20
    ctld_port, slurmd_port = _free_ports(2)
    for sub in ("state", "spool"):
        (directory / sub).mkdir(exist_ok=True)
    lines = [
        "ClusterName=workbench-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"AuthType=auth/{auth}",
        f"CredType=cred/{auth}",
        *([f"AuthInfo=socket={directory / 'munge.socket'}"] if auth == "munge" else []),
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=2",  # a finished job leaves squeue 2 s later (the test polls for an empty queue)
        f"StateSaveLocation={directory / 'state'}",
        f"SlurmdSpoolDir={directory / 'spool'}",
        f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
        f"SlurmdPidFile={directory / 'slurmd.pid'}",
        f"SlurmctldLogFile={directory / 'slurmctld.log'}",
        f"SlurmdLogFile={directory / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = directory / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    # slurmd reads cgroup.conf when it exists next to slurm.conf: none here, and no cgroup plugin is named.
    return conf, node


def _start_munge(directory: Path) -> subprocess.Popen:
    """munged in the foreground with a key generated in ``directory`` (Slurm's auth/munge talks to its socket)."""
    key = directory / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    process = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={directory / 'munge.socket'}",
            f"--pid-file={directory / 'munged.pid'}",
            f"--log-file={directory / 'munged.log'}",
            f"--seed-file={directory / 'munged.seed'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _wait_until(lambda: (directory / "munge.socket").exists(), 10, "munged made no socket", process, directory)
    return process


def _wait_until(condition, timeout: float, what: str, process: subprocess.Popen, directory: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            state = f"exited with {process.returncode}" if process.poll() is not None else f"not within {timeout} s"
            raise SlurmUnavailable(f"{what} ({state})")
        time.sleep(0.1)


def stop(processes: dict[str, subprocess.Popen], timeout: float = 20) -> list[str]:
    """Stop the daemons (SIGTERM, then SIGKILL past ``timeout``), last started first; those still alive."""
    for process in reversed(list(processes.values())):
        if process.poll() is None:
            process.terminate()
    alive = []
    for name, process in reversed(list(processes.items())):
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                alive.append(f"{name} (pid {process.pid})")
    return alive


def unavailable_reason() -> str | None:
    """Why this machine cannot run the test's Slurm (None: it can try)."""
    if os.geteuid() != 0:
        return "the Slurm daemons run as root here (SlurmUser=root) and this test is not root"
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH: install Debian's slurm-wlm (.ci/run does it as root)"
    if _plugin_dir() is None:
        return f"no Slurm plugin directory with select_cons_tres.so among {PLUGIN_DIRS}"
    return None


@contextlib.contextmanager
def local_slurm(directory: Path, timeout: float = 60) -> Iterator[LocalSlurm]:
    """Start slurmctld and slurmd on ``directory``'s generated configuration, wait (at most ``timeout``
    s) until ``sinfo`` shows the node idle, and stop both daemons (checked gone) on exit."""
    reason = unavailable_reason()
    if reason:
        raise SlurmUnavailable(reason)
    auth = "none" if Path(_plugin_dir(), "auth_none.so").exists() else "munge"
    if auth == "munge" and shutil.which("munged") is None:
        raise SlurmUnavailable("this Slurm has no auth/none and munged is not on PATH: install Debian's munge")
    conf, node = write_conf(directory, auth)
    processes: dict[str, subprocess.Popen] = {}
    slurm = LocalSlurm(directory, conf, node, processes)
    env = {**os.environ, **slurm.env}
    try:
        if auth == "munge":
            processes["munged"] = _start_munge(directory)
        # -D: the foreground (no systemd, no daemonising; the test owns the process); -i: ignore stale state.
        for name, flags in (("slurmctld", ["-D", "-i"]), ("slurmd", ["-D"])):
            with open(directory / f"{name}.out", "wb") as out:  # the daemon keeps its own copy of the file
                processes[name] = subprocess.Popen(
                    [name, *flags, "-f", str(conf)],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        deadline = time.monotonic() + timeout
        state = ""
        while state != "idle":
            for name, process in processes.items():
                if process.poll() is not None:
                    out = (directory / f"{name}.out").read_text(errors="replace")[-2000:]
                    raise SlurmUnavailable(
                        f"{name} exited with {process.returncode} at start-up:\n{out}\n{slurm.log_tail()}"
                    )
            if time.monotonic() > deadline:
                raise SlurmUnavailable(
                    f"sinfo did not show {node} idle within {timeout} s (last state {state!r})\n{slurm.log_tail()}"
                )
            done = subprocess.run(
                ["sinfo", "--noheader", "--nodes", node, "--format=%T"],
                env=env,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            state = done.stdout.strip() if done.returncode == 0 else ""
            if state != "idle":
                time.sleep(0.2)
        yield slurm
    finally:
        alive = stop(processes)
        if alive:
            raise RuntimeError(f"Slurm daemons still running after SIGKILL: {', '.join(alive)}")
