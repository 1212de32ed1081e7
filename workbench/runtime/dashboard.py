"""Where a local cluster's scheduler serves its HTTP pages (the Dask dashboard, health, metrics).

Three places, chosen by ``start(dashboard=...)`` or ``$WORKBENCH_DASHBOARD``:

- ``"off"`` (the default): no bokeh dashboard; the scheduler's HTTP server still answers health and
  metrics, on a free port of the loopback interface only (never the network).
- ``"port"`` (``True``, "1", "on"): the bokeh dashboard on that loopback port, for one person's
  machine (``make lab``, Binder), where JupyterLab reaches it at ``/proxy/PORT/status``.
- ``"socket"``: for a server that learners share (a JupyterHub). A port on the loopback interface is
  open to every local user, so another learner could read the dashboard without any token. Here the
  scheduler listens on no TCP port for HTTP at all: it serves a Unix socket in a directory only its
  user can enter (:func:`socket_path`, mode 0600 in 0700), and the learner's own Jupyter server
  proxies it at ``/user/NAME/lwb-dashboard/status`` (jupyter-server-proxy, through this package's
  ``jupyter_serverproxy_servers`` entry point, :func:`server_proxy`), behind the hub's login and token.
  The workers' HTTP servers serve no route there either. The newest session of a user owns the
  socket; a session that closes removes it only if it is still its own.

The scheduler that does this is :class:`SocketScheduler`; the cluster that starts it is
:class:`SocketLocalCluster`, a ``LocalCluster`` whose scheduler class is swapped on its way to
``SpecCluster``. Both rest on how Dask builds a scheduler's HTTP server, which is not a public API:
they are made with :mod:`workbench.runtime.dask_seam` (``SocketHTTPScheduler``,
``local_cluster_with_scheduler``), whose contract tests fail when Dask changes it; this module says
where the socket is and who may reach it.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any

import dask
from tornado.netutil import bind_unix_socket

import workbench.runtime.dask_seam as dask_seam
import workbench.settings as settings_names
from workbench.settings import Settings

DASHBOARD_ENV = settings_names.DASHBOARD
OFF, PORT, SOCKET = "off", "port", "socket"
PLACES = (OFF, PORT, SOCKET)
PROXY_NAME = "lwb-dashboard"  # the learner's Jupyter server serves the socket at <base url>lwb-dashboard/
SOCKET_DIR_ENV = settings_names.DASHBOARD_DIR  # where the socket's private directory is made (default: the temp dir)
# Workers' HTTP routes (health, metrics) in socket mode: none. A local worker gets it as its nanny's
# config (a worker process has read its environment's Dask settings before the nanny's env applies);
# a Slurm job, whose worker starts fresh, from its environment.
NO_WORKER_ROUTES_ENV = {"DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}
_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sun_path less its terminating NUL)


def no_worker_routes() -> dict[str, Any]:
    """A nanny's ``config`` for a worker that serves no HTTP route: Dask's own settings with
    ``distributed.worker.http.routes`` emptied (the nanny replaces whole top-level sections)."""
    return {"distributed": dask.config.merge(dask.config.get("distributed"), {"worker": {"http": {"routes": []}}})}


def dashboard_place(value: bool | str | None, settings: Settings | None = None) -> str:
    """The place of the dashboard, one of :data:`PLACES`: ``value`` (True, False or a place's name),
    else ``$WORKBENCH_DASHBOARD`` in ``settings`` (default: the environment now), else "off". ValueError
    naming the choices for anything else."""
    where = f"${DASHBOARD_ENV}" if value is None else "dashboard"
    if value is None:
        value = (settings or Settings.read()).given(DASHBOARD_ENV) or ""
    if isinstance(value, bool):
        return PORT if value else OFF
    word = str(value).strip().lower()
    if word in ("", "0", "false", "no", OFF):
        return OFF
    if word in ("1", "true", "yes", "on", PORT):
        return PORT
    if word == SOCKET:
        return SOCKET
    raise ValueError(
        f"{where} is off, port (True, 1 or on: a port on the loopback interface) or socket (a Unix socket "
        f"of yours, for servers that learners share), got {value!r}"
    )


def socket_directory(settings: Settings | None = None) -> Path:
    """The directory holding this user's dashboard socket (not made here): ``lwb-UID-dashboard`` in
    ``$WORKBENCH_DASHBOARD_DIR`` of ``settings`` (default: the environment now), else in the temporary
    directory."""
    parent = (settings or Settings.read()).given(SOCKET_DIR_ENV) or tempfile.gettempdir()
    if not os.path.isabs(parent):  # the Jupyter server and the kernel resolve it from different directories
        raise ValueError(f"${SOCKET_DIR_ENV} must be an absolute path, got {parent!r}")
    return Path(parent) / f"lwb-{os.geteuid()}-dashboard"


def socket_path(settings: Settings | None = None) -> Path:
    """This user's dashboard socket: what :class:`SocketScheduler` binds and :func:`server_proxy` proxies."""
    return socket_directory(settings) / "dashboard.sock"


def server_proxy() -> dict[str, Any]:
    """jupyter-server-proxy's configuration of the ``lwb-dashboard`` route (this package's entry point in
    the ``jupyter_serverproxy_servers`` group): the learner's Jupyter server, which runs as the learner,
    proxies requests under ``<base url>lwb-dashboard/`` to :func:`socket_path`, websockets included,
    for the users its own authentication lets in. Nothing is started; with no session serving the
    socket, the route answers an error."""
    return {
        "unix_socket": str(socket_path()),
        "launcher_entry": {"enabled": False},
        "new_browser_tab": False,
    }


def proxy_link(settings: Settings | None = None) -> str:
    """The dashboard's address for the learner's browser: under the Jupyter server's base URL
    (``$JUPYTERHUB_SERVICE_PREFIX``, "/user/NAME/", on a hub, in ``settings``; default: the environment now)."""
    prefix = (settings or Settings.read()).given(settings_names.HUB_PREFIX) or "/"
    return f"{prefix.rstrip('/')}/{PROXY_NAME}/status"


def private_socket_directory(directory: Path) -> None:
    """Make ``directory`` this user's only (see ``workbench.memory.tiers.private_directory``), or
    refuse it with a ValueError that says what is there and what to do: another user may have made
    it first (its name is predictable), or put a link or a file there."""
    from workbench.memory.tiers import TierError, private_directory

    try:
        private_directory(directory)
    except TierError:
        try:
            info = os.lstat(directory)
            what = f"{stat.filemode(info.st_mode)}, owner {info.st_uid}"
        except OSError as error:
            what = error.strerror or str(error)
        raise ValueError(
            f"the dashboard socket's directory {directory} is not a private directory of yours ({what}): remove "
            f"it if it is yours, or set ${SOCKET_DIR_ENV} to an absolute path of a directory of your own"
        ) from None


def _fresh_name(path: Path) -> Path:
    """Where a new socket is bound before it replaces ``path``: a name of this process's beside it."""
    return path.with_name(f".{os.getpid()}.sock")


def check_socket_path(path: Path) -> None:
    """ValueError, before anything starts, when ``path`` (or the name bound first) is too long for a Unix socket."""
    if len(os.fsencode(_fresh_name(path))) > _SOCKET_PATH_MAX or len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        raise ValueError(
            f"the dashboard socket's path {path} is longer than a Unix socket allows ({_SOCKET_PATH_MAX} bytes): "
            f"set ${SOCKET_DIR_ENV} to a shorter directory of your own"
        )


def check_socket_place(path: Path) -> None:
    """ValueError unless a socket can be bound at ``path``: a path Unix allows, in a directory of the
    user's only (made 0700 here). Start-up checks it before anything starts; the bind again."""
    check_socket_path(path)
    private_socket_directory(path.parent)


def bind_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (mode 0600, in a directory of the user's only, made 0700),
    replacing a socket left there (by an older session of the user's, live or dead) atomically."""
    check_socket_place(path)
    fresh = _fresh_name(path)
    listening = bind_unix_socket(str(fresh), mode=0o600)
    try:
        os.replace(fresh, path)  # a directory only this user enters: no one else can swap it meanwhile
    except BaseException:
        listening.close()
        fresh.unlink(missing_ok=True)
        raise
    return listening


class SocketScheduler(dask_seam.SocketHTTPScheduler):
    """A scheduler whose HTTP server (dashboard, health, metrics) listens on :func:`socket_path`
    and on no TCP port; it removes the socket when it closes, if the socket is still its own."""

    def bind_http(self) -> tuple[socket.socket, str]:
        """The listening socket at :func:`socket_path` (see :func:`bind_socket`) and its path."""
        path = socket_path()
        listening = bind_socket(path)
        self._dashboard_socket = (path, os.stat(path).st_ino)
        return listening, str(path)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the scheduler, then remove its socket unless a newer session took the path."""
        try:
            await super().close(*args, **kwargs)
        finally:
            _remove_if_own(*getattr(self, "_dashboard_socket", (None, None)))


def _remove_if_own(path: Path | None, inode: int | None) -> None:
    """Remove the socket at ``path`` if it is still the one bound (``inode``), not a newer session's."""
    try:
        if path is not None and os.stat(path).st_ino == inode:
            path.unlink()
    except FileNotFoundError:
        pass


class SocketLocalCluster(dask_seam.local_cluster_with_scheduler(SocketScheduler)):  # type: ignore[misc]
    """A LocalCluster whose scheduler serves HTTP on the user's dashboard socket (:class:`SocketScheduler`)."""
