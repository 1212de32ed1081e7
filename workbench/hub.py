"""What a JupyterHub that runs the course configures: the learner's shared memory freed when the
learner's server stops (culled when idle, stopped by the learner or by an admin).

A kernel that ends normally closes its session and the workbench removes what the session made; a
segment the learner made by name (``shm.share("lesson02-readings", ...)``) is kept until deleted, as
a file would be, and a kernel killed mid-lesson cannot delete anything. ``/dev/shm`` is memory: on a
class server, what a stopped learner left there would hold RAM until the next reboot. So the hub
runs ``workbench shm clean --all`` as the learner after their server stops: it removes every segment
of that user that no live process maps, and nothing of anyone else's. In ``jupyterhub_config.py``::

    from workbench.hub import clean_after_stop
    c.Spawner.post_stop_hook = clean_after_stop

(docs/course/deploy.md; tests/test_hub.py runs it under a real hub.)
"""

from __future__ import annotations

import asyncio
import os
import pwd
import sys
from collections.abc import Callable
from typing import Any

CLEAN_SECONDS = 60.0  # the clean reads /dev/shm and /proc: seconds on a busy server, bounded here
EXIT_SECONDS = 30.0  # for the stopped server's kernels and workers to exit before the clean
POLL_SECONDS = 0.2


def clean_command() -> list[str]:
    """The command the hub runs as the learner once their server stopped."""
    return [sys.executable, "-m", "workbench.cli", "shm", "clean", "--all"]


def as_user(name: str) -> Callable[[], None]:
    """A ``preexec_fn`` that drops a root process to user ``name`` (groups, gid, then uid)."""
    record = pwd.getpwnam(name)

    def drop() -> None:
        os.initgroups(name, record.pw_gid)
        os.setgid(record.pw_gid)
        os.setuid(record.pw_uid)

    return drop


def server_processes(uid: int, token: str) -> list[int]:
    """The processes of user ``uid`` that a server started with API token ``token`` left running (its
    kernels, their workers): each inherited the token in ``$JUPYTERHUB_API_TOKEN``."""
    import psutil

    found = []
    for process in psutil.process_iter(["uids"]):
        try:
            if process.info["uids"].real == uid and process.environ().get("JUPYTERHUB_API_TOKEN") == token:
                found.append(process.pid)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or a process whose environment this hub cannot read
    return found


async def server_processes_exit(uid: int, token: str | None) -> list[int]:
    """Wait, at most :data:`EXIT_SECONDS`, until the stopped server's processes have exited: JupyterHub
    stops the server, and its kernels and their Dask workers follow it, a moment later. A segment they
    still map is not free, so a clean before they are gone would keep it. Returns those still running."""
    if not token:
        return []
    clock = asyncio.get_running_loop().time
    deadline = clock() + EXIT_SECONDS
    while (left := await asyncio.to_thread(server_processes, uid, token)) and clock() < deadline:
        await asyncio.sleep(POLL_SECONDS)
    return left


async def clean_after_stop(spawner: Any, wrap: Callable[[list[str]], list[str]] | None = None) -> None:
    """JupyterHub's ``Spawner.post_stop_hook``: once the stopped server's kernels and workers have
    exited (:func:`server_processes_exit`), run :func:`clean_command` as its user, within
    :data:`CLEAN_SECONDS`; what it removed, or why it failed, goes to the hub's log. A
    hub that does not run as root runs it as itself (its single user). ``wrap``: for a spawner whose
    servers start through a command that drops to the user itself (a mount namespace, a container's
    exec), that wrapper around the clean command, which then runs as given."""
    name = spawner.user.name
    left = await server_processes_exit(pwd.getpwnam(name).pw_uid, getattr(spawner, "api_token", None))
    if left:
        spawner.log.warning("%s's processes %s still run %.0f s after their server stopped", name, left, EXIT_SECONDS)
    argv = wrap(clean_command()) if wrap is not None else clean_command()
    drop = as_user(name) if os.geteuid() == 0 and wrap is None else None
    home = pwd.getpwnam(name).pw_dir
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "USER": name}
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, preexec_fn=drop, env=env, cwd="/"
    )
    try:
        said, _ = await asyncio.wait_for(process.communicate(), CLEAN_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        spawner.log.warning("workbench shm clean for %s did not finish within %.0f s", name, CLEAN_SECONDS)
        return
    text = said.decode(errors="replace").strip()
    if process.returncode:
        spawner.log.warning("workbench shm clean for %s failed (%s): %s", name, process.returncode, text[-500:])
    else:
        spawner.log.info("workbench shm clean for %s: %s", name, text[-500:] or "nothing to remove")
