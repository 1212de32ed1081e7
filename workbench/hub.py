"""What a JupyterHub that runs the course configures: each learner's copy of the course made before
their server starts, and the learner's shared memory freed when the learner's server stops (culled
when idle, stopped by the learner or by an admin).

The copy: the hub runs ``workbench course copy`` as the learner (:func:`copy_course_before_start`),
which copies the lessons and the course pages of the checkout the workbench is installed from into
``~/locality-workbench/`` (:mod:`workbench.teach.course`; a file the learner has is kept), and
JupyterLab opens there (:data:`COURSE_URL`).

The clean: a kernel that ends normally closes its session and the workbench removes what the session made; a
segment the learner made by name (``shm.share("lesson02-readings", ...)``) is kept until deleted, as
a file would be, and a kernel killed mid-lesson cannot delete anything. ``/dev/shm`` is memory: on a
class server, what a stopped learner left there would hold RAM until the next reboot. So the hub
runs ``workbench shm clean`` as the learner after their server stops: it removes what the stopped
server's kernels left (segments whose owners are all dead, channel mailboxes, partial files), and
nothing of anyone else's. A segment shared by name names no owner: another of the learner's servers
(JupyterHub's named servers) may share it and attach it again at any time, so ``--all`` (every segment
of that user that no live process maps) is added only when the learner has no other server running
(:func:`clean_command`, :func:`other_servers`). In ``jupyterhub_config.py``::

    from workbench.hub import COURSE_URL, clean_after_stop, copy_course_before_start
    c.Spawner.pre_spawn_hook = copy_course_before_start
    c.Spawner.default_url = COURSE_URL
    c.Spawner.post_stop_hook = clean_after_stop

(docs/course/deploy.md; tests/test_hub.py runs it under a real hub.)
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.settings import Settings
from workbench.teach.course import COPY_NAME

COPY_SECONDS = 60.0  # the course's files into a learner's home: well under a second, bounded here
CLEAN_SECONDS = 60.0  # the clean reads /dev/shm and /proc: seconds on a busy server, bounded here
EXIT_SECONDS = 30.0  # for the stopped server's kernels and workers to exit before the clean
POLL_SECONDS = 0.2
KEPT = re.compile(r"kept .*: in use by process (?P<pids>\d+(?:, \d+)*)$")  # workbench shm clean's line


def clean_command(everything: bool = True) -> list[str]:
    """The command the hub runs as the learner once their server stopped: ``workbench shm clean``, and
    with ``everything`` (no other server of the learner's runs) ``--all``: the segments shared by name too."""
    return [sys.executable, "-m", "workbench.cli", "shm", "clean", *(["--all"] if everything else [])]


def as_user(name: str) -> Callable[[], None]:
    """A ``preexec_fn`` that drops a root process to user ``name`` (groups, gid, then uid)."""
    record = pwd.getpwnam(name)

    def drop() -> None:
        os.initgroups(name, record.pw_gid)
        os.setgid(record.pw_gid)
        os.setuid(record.pw_uid)

    return drop


def server_processes(uid: int, user: str, server: str) -> list[int]:
    """The processes of user ``uid`` that JupyterHub user ``user``'s server named ``server`` ("" for the
    default one) left running (its kernels, their workers): each inherited ``$JUPYTERHUB_USER`` and
    ``$JUPYTERHUB_SERVER_NAME`` from it (its API token is no mark: under a real hub, tests/test_hub.py
    found kernels whose ``$JUPYTERHUB_API_TOKEN`` was not the spawner's, and the clean then ran while
    they still mapped a segment). A process of the user part-way through exiting counts too, whatever
    its environment says, until it is a zombie: its memory, segments included, is unmapped only at the
    end of its exit."""
    import psutil

    found = []
    for process in psutil.process_iter(["uids", "status"]):
        try:
            if process.info["uids"].real != uid or process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            environment = process.environ()
            ours = (environment.get("JUPYTERHUB_USER"), environment.get("JUPYTERHUB_SERVER_NAME", "")) == (user, server)
            if ours or _exiting(process.pid):
                found.append(process.pid)
        except (psutil.Error, OSError):  # gone meanwhile, or not this hub's to read
            if _exiting(process.pid):
                found.append(process.pid)
    return found


def other_servers(spawner: Any, uid: int, user: str, server: str) -> list[str]:
    """The names of user ``user``'s servers other than ``server`` that still run ("" for the default
    one): those the hub holds active (``spawner.user.spawners``), and those whose processes of user
    ``uid`` still run (their ``$JUPYTERHUB_SERVER_NAME``; a server the hub lost track of still maps and
    attaches segments)."""
    import psutil

    running = {
        name
        for name, other in (getattr(getattr(spawner, "user", None), "spawners", None) or {}).items()
        if name != server and getattr(other, "active", False)
    }
    for process in psutil.process_iter(["uids", "status"]):
        try:
            if process.info["uids"].real != uid or process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            environment = process.environ()
            if environment.get("JUPYTERHUB_USER") == user and environment.get("JUPYTERHUB_SERVER_NAME", "") != server:
                running.add(environment.get("JUPYTERHUB_SERVER_NAME", ""))
        except (psutil.Error, OSError):  # gone meanwhile, or not this hub's to read
            continue
    return sorted(running)


PF_EXITING = 0x00000004  # the kernel's flag of a process in exit (linux/sched.h), in /proc/PID/stat


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces): state first,
    flags at index 6."""
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()


def _exiting(pid: int) -> bool:
    """Whether ``pid`` is part-way through exiting (not yet a zombie)."""
    try:
        fields = _stat(pid)
        return fields[0] != b"Z" and bool(int(fields[6]) & PF_EXITING)
    except (OSError, IndexError, ValueError):
        return False


async def server_processes_exit(uid: int, user: str, server: str) -> list[int]:
    """Wait, at most :data:`EXIT_SECONDS`, until the stopped server's processes have exited
    (:func:`server_processes`): JupyterHub stops the server, and its kernels and their Dask workers
    follow it, a moment later. A segment they still map is not free, so a clean before they are gone
    would keep it. Returns those still running."""
    clock = asyncio.get_running_loop().time
    deadline = clock() + EXIT_SECONDS
    while (left := await asyncio.to_thread(server_processes, uid, user, server)) and clock() < deadline:
        await asyncio.sleep(POLL_SECONDS)
    return left


async def _as_learner(
    spawner: Any, argv: list[str], seconds: float, wrap: Callable[[list[str]], list[str]] | None
) -> tuple[int, str] | None:
    """Run ``argv`` as the spawner's user (dropped from root, or through ``wrap``), HOME theirs, within
    ``seconds``: (exit status, what it printed), or None when it ran out of time (then it is killed)."""
    name = spawner.user.name
    argv = wrap(argv) if wrap is not None else argv
    drop = as_user(name) if os.geteuid() == 0 and wrap is None else None
    home = pwd.getpwnam(name).pw_dir
    now = Settings.read()
    env = {"PATH": now.given("PATH") or "/usr/bin:/bin", "HOME": home, "USER": name}
    if now.given("PYTHONPATH") is not None:  # as JupyterHub's spawners keep it (Spawner.env_keep): the same workbench
        env["PYTHONPATH"] = now.environ["PYTHONPATH"]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, preexec_fn=drop, env=env, cwd="/"
    )
    try:
        said, _ = await asyncio.wait_for(process.communicate(), seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    return process.returncode, said.decode(errors="replace").strip()


async def clean_after_stop(spawner: Any, wrap: Callable[[list[str]], list[str]] | None = None) -> None:
    """JupyterHub's ``Spawner.post_stop_hook``: once the stopped server's kernels and workers have
    exited (:func:`server_processes_exit`), run :func:`clean_command` as its user, within
    :data:`CLEAN_SECONDS`: with ``--all`` only when no other server of the user's runs
    (:func:`other_servers`), whose segments shared by name it would delete. What it removed, or why it
    failed, goes to the hub's log. A hub that does not run as root runs it as itself (its single
    user). ``wrap``: for a spawner whose servers start through a command that drops to the user itself
    (a mount namespace, a container's exec), that wrapper around the clean command, which then runs as
    given."""
    name, server = spawner.user.name, getattr(spawner, "name", "") or ""
    uid = pwd.getpwnam(name).pw_uid
    left = await server_processes_exit(uid, name, server)
    if left:
        spawner.log.warning("%s's processes %s still run %.0f s after their server stopped", name, left, EXIT_SECONDS)
    others = await asyncio.to_thread(other_servers, spawner, uid, name, server)
    if others:
        spawner.log.info(
            "%s's segments shared by name are kept: their server(s) %s still run", name, ", ".join(map(repr, others))
        )
    done = await _as_learner(spawner, clean_command(everything=not others), CLEAN_SECONDS, wrap)
    if done is None:
        spawner.log.warning("workbench shm clean for %s did not finish within %.0f s", name, CLEAN_SECONDS)
        return
    status, text = done
    holders = [pid for line in text.splitlines() if (m := KEPT.match(line)) for pid in m["pids"].split(", ")]
    if holders:  # kept: say what still held it (a process that outlived the wait)
        text += "; " + "; ".join(_describe(int(pid)) for pid in holders)
    if status:
        spawner.log.warning("workbench shm clean for %s failed (%s): %s", name, status, text[-500:])
    else:
        spawner.log.info("workbench shm clean for %s: %s", name, text[-500:] or "nothing to remove")


def copy_command(home: str) -> list[str]:
    """The command the hub runs as the learner before their server starts: the course into their home
    (``workbench course copy``, :mod:`workbench.teach.course`), at the place :data:`COURSE_URL` opens."""
    return [sys.executable, "-m", "workbench.cli", "course", "copy", "--to", f"{home}/{COPY_NAME}"]


COURSE_URL = f"/lab/tree/{COPY_NAME}/notebooks"  # Spawner.default_url: JupyterLab opens on the lessons


async def copy_course_before_start(spawner: Any, wrap: Callable[[list[str]], list[str]] | None = None) -> None:
    """JupyterHub's ``Spawner.pre_spawn_hook``: copy the lessons and the course pages into the learner's
    home, as the learner (:func:`copy_command`, within :data:`COPY_SECONDS`), before their server starts;
    a file the learner has is kept. What it copied, or why it failed, goes to the hub's log; a failure
    does not stop the server (the learner can run ``workbench course copy`` in a terminal). ``wrap``: as
    for :func:`clean_after_stop`."""
    name = spawner.user.name
    done = await _as_learner(spawner, copy_command(pwd.getpwnam(name).pw_dir), COPY_SECONDS, wrap)
    if done is None:
        spawner.log.warning("workbench course copy for %s did not finish within %.0f s", name, COPY_SECONDS)
    elif done[0]:
        spawner.log.warning("workbench course copy for %s failed (%s): %s", name, done[0], done[1][-500:])
    else:
        spawner.log.info("workbench course copy for %s: %s", name, done[1][-500:])


def _describe(pid: int) -> str:
    """``pid``'s command, state and the server it came from, for the hub's log."""
    try:
        stat = _stat(pid)
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
        environment = dict(
            e.decode(errors="replace").split("=", 1)
            for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"=" in e
        )
        came = f"{environment.get('JUPYTERHUB_USER', '?')}/{environment.get('JUPYTERHUB_SERVER_NAME', '')}"
        return f"process {pid}: state {stat[0].decode()}, flags {int(stat[6]):#x}, server {came}, {command or '?'}"
    except (OSError, IndexError, ValueError) as error:
        return f"process {pid}: {type(error).__name__}"
