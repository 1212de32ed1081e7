"""A class on one server: two Unix users run the workbench at the same time on this machine.

The test creates two users (homes in a temporary directory), and each runs
tests/two_users_learner.py: its own cluster (dashboard on), shared segments (lesson 02's fixed
name among them), tier files and store objects in the default places. While both run, it checks
that nothing collides (segment files, tier files, store directories, scheduler and dashboard
ports), that each learner's attempts to read, attach, overwrite or delete the other's things all
fail with a clear error, and that ``workbench shm clean --all`` and ``workbench doctor`` run as one
learner touch and report only that learner's own. Needs root, ``useradd`` and ``unshare``.

Python may live where other users cannot reach it (``/root/.pyenv`` under a 0700 ``/root``), and so
may the checkout: each learner runs in a mount namespace of its own where every such directory is
replaced by a 0755 tmpfs holding read-only bind mounts of the paths the learner needs; the host's
permissions are never changed. Then it drops to the learner's user (``setpriv``).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from workbench.memory import shm

REPO = Path(__file__).resolve().parents[1]
LEARNER = Path(__file__).with_name("two_users_learner.py")
READY_WAIT_S = 240.0
COMMAND_WAIT_S = 180.0


def _why_not() -> str | None:
    """Why two users cannot be made and run here, or None."""
    if sys.platform != "linux" or not shm.SHM_DIR.is_dir():
        return "needs Linux with /dev/shm"
    if os.geteuid() != 0:
        return "needs root to create the two users (useradd) and their mount namespaces (unshare)"
    missing = [tool for tool in ("useradd", "userdel", "unshare", "setpriv", "mount") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (util-linux, passwd)"
    probe = subprocess.run(["unshare", "--mount", "--fork", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare --mount is refused here ({probe.stderr.strip()}): a container without CAP_SYS_ADMIN?"
    return None


def _blocked(path: Path) -> Path | None:
    """The outermost directory on the way to ``path`` that other users cannot pass (no o+x), or None."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return parent
    return None


def _namespace_script(stage: Path) -> str:
    """Shell lines that, in a fresh mount namespace, re-expose what the learner needs (the
    interpreter, the venv, the checkout) through 0755 tmpfs mounts over each blocked directory."""
    needed = {Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.prefix, REPO)}
    by_blocked: dict[Path, list[Path]] = {}
    for path in sorted(needed):
        blocked = _blocked(path)
        if blocked is not None:
            by_blocked.setdefault(blocked, []).append(path)
    lines = ["set -e"]
    for number, (blocked, paths) in enumerate(sorted(by_blocked.items())):
        held = []
        for index, path in enumerate(paths):
            hold = stage / f"hold-{number}-{index}"
            hold.mkdir(exist_ok=True)  # one per learner, reused by each of its namespaces
            lines.append(f"mount --rbind {shlex.quote(str(path))} {shlex.quote(str(hold))}")
            held.append((hold, path))
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m lwb-two-users {shlex.quote(str(blocked))}")
        for hold, path in held:
            lines.append(f"mkdir -p {shlex.quote(str(path))}")
            lines.append(f"mount --move {shlex.quote(str(hold))} {shlex.quote(str(path))}")
            lines.append(f"mount -o remount,bind,ro {shlex.quote(str(path))}")
    return "\n".join(lines)


class Learner:
    """A Unix user made for the test, and how to run a command as it."""

    def __init__(self, base: Path, letter: str):
        self.name = f"lwb{secrets.token_hex(3)}{letter}"
        self.home = base / self.name
        subprocess.run(
            ["useradd", "--home-dir", str(self.home), "--create-home", "--user-group", "--no-log-init",
             "--shell", "/bin/sh", self.name],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.home.chmod(0o755)  # as many servers make homes: the workbench's own files must be private anyway
        record = subprocess.run(["id", "-u", self.name], check=True, capture_output=True, text=True, timeout=30)
        self.uid = int(record.stdout)
        self.gid = int(subprocess.run(["id", "-g", self.name], capture_output=True, text=True, timeout=30).stdout)
        self.stage = base / f"stage-{self.name}"
        self.stage.mkdir()
        self.serving: subprocess.Popen | None = None

    def command(self, *argv: str) -> list[str]:
        """``argv`` run as this user in a mount namespace that reaches the interpreter and checkout."""
        env = {
            "HOME": str(self.home),
            "USER": self.name,
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "NUMBA_CACHE_DIR": str(self.home / ".cache" / "numba"),
            "WORKBENCH_DASHBOARD": "1",
            "PYTHONDONTWRITEBYTECODE": "1",  # the checkout is read-only to the learner
        }
        drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "env", "-i"]
        drop += [f"{k}={v}" for k, v in env.items()] + list(argv)
        script = _namespace_script(self.stage) + f"\ncd {shlex.quote(str(self.home))}\nexec {shlex.join(drop)}"
        return ["unshare", "--mount", "--fork", "sh", "-c", script]

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*argv), capture_output=True, text=True, timeout=COMMAND_WAIT_S)

    def serve(self) -> None:
        log = open(self.home.parent / f"{self.name}.log", "w")  # noqa: SIM115 (closed with the process)
        self.serving = subprocess.Popen(
            self.command(sys.executable, str(LEARNER), "serve", str(self.home)),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def log(self) -> str:
        path = self.home.parent / f"{self.name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def wait_for(self, file_name: str, timeout: float) -> Path:
        path = self.home / file_name
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.serving is not None and self.serving.poll() is not None and not path.exists():
                raise AssertionError(f"{self.name} stopped (status {self.serving.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} wrote no {file_name} within {timeout} s:\n{self.log()}")
            time.sleep(0.1)
        return path

    def processes(self) -> list[int]:
        """Ids of the live processes of this user (from /proc)."""
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and proc.stat().st_uid == self.uid:
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def remove(self) -> None:
        """Stop what this user runs, then remove the user and everything it left (homes aside: the caller's)."""
        if self.serving is not None and self.serving.poll() is None:
            os.killpg(self.serving.pid, signal.SIGKILL)
            self.serving.wait(timeout=30)
        for pid in self.processes():  # a worker that left the process group: this user's, by id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 60
        while self.processes() and time.monotonic() < deadline:  # killed ones are still exiting
            time.sleep(0.1)
        removed = subprocess.run(["userdel", self.name], capture_output=True, text=True, timeout=60)
        if removed.returncode != 0:  # a process that outlived the wait: userdel --force then
            subprocess.run(["userdel", "--force", self.name], capture_output=True, timeout=60)
        for entry in [*shm.SHM_DIR.iterdir(), *Path(tempfile.gettempdir()).iterdir()]:
            try:
                if entry.lstat().st_uid == self.uid:  # only what this test's user made
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except FileNotFoundError:
                pass


@pytest.fixture
def two_learners():
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="lwb-two-users-", dir="/tmp"))
    base.chmod(0o755)
    learners: list[Learner] = []
    try:
        learners.append(Learner(base, "a"))
        learners.append(Learner(base, "b"))
        probe = learners[0].run(sys.executable, "-c", "import workbench")
        if probe.returncode != 0:
            pytest.skip(f"a second user cannot run the workbench's Python even in a mount namespace: {probe.stderr}")
        yield learners
    finally:
        for learner in learners:
            learner.remove()
        shutil.rmtree(base, ignore_errors=True)


def _refused(outcome: str) -> bool:
    """An attempt met a clear refusal: a permission error, or the workbench's own saying why, or a
    cluster that talks TLS with credentials the intruder does not have."""
    return (
        outcome.startswith(("PermissionError", "SharedMemoryError", "TierError"))
        or "permission denied" in outcome.lower()  # the store's catalogue reader says it in a RuntimeError
        or outcome.startswith("TypeError: TLS expects a `ssl_context`")  # Dask: a tls:// address, no credentials
    )


def test_two_learners_on_one_server_neither_collide_nor_reach_each_other(two_learners):
    a, b = two_learners
    a.serve()
    b.serve()  # at the same time
    ready = {}
    for learner in (a, b):
        ready[learner.name] = json.loads(learner.wait_for("ready.json", READY_WAIT_S).read_text())
    ra, rb = ready[a.name], ready[b.name]

    # nothing collides: each learner has its own segment files, tier files, store, ports
    assert ra["segments"] == rb["segments"]  # the same names in the code (lesson 02's fixed one)...
    assert not set(ra["segment_paths"]) & set(rb["segment_paths"])  # ...are different files
    for key in ("tier_files", "store_files"):
        assert ra[key] and rb[key] and not set(ra[key]) & set(rb[key])
    assert ra["store_dir"] != rb["store_dir"] and ra["store_dir"].startswith(str(a.home))
    assert ra["scheduler"] != rb["scheduler"]
    assert ra["dashboard_port"] and rb["dashboard_port"] and ra["dashboard_port"] != rb["dashboard_port"]
    for learner, record in ((a, ra), (b, rb)):
        for path in record["segment_paths"] + record["tier_files"] + record["store_files"]:
            info = os.stat(path)
            assert info.st_uid == learner.uid, path
            assert not info.st_mode & 0o077, f"{path} is {stat.filemode(info.st_mode)}: other users may read it"
        assert not os.stat(record["store_dir"]).st_mode & 0o077

    # neither reaches the other's: every attempt fails with a clear error
    for intruder, victim in ((b, a), (a, b)):
        theirs = intruder.home / "theirs.json"
        theirs.write_text(json.dumps(ready[victim.name]))
        theirs.chmod(0o644)
        attempt = intruder.run(sys.executable, str(LEARNER), "intrude", str(theirs))
        assert attempt.returncode == 0, attempt.stderr
        outcomes = json.loads(attempt.stdout.strip().splitlines()[-1])
        # what deploy.md says is not protected, as measured: another user reads the dashboard's pages
        assert outcomes.pop("read their dashboard (not protected)") == "ok"
        breaches = {what: outcome for what, outcome in outcomes.items() if not _refused(outcome)}
        assert not breaches, f"{intruder.name} reached {victim.name}'s: {breaches}"
        assert any("belongs to user" in o or "Permission denied" in o for o in outcomes.values())

    # clean --all and doctor as one learner: only its own
    a_files_before = sorted(os.listdir(shm.SHM_DIR))
    cleaned = b.run(sys.executable, "-m", "workbench.cli", "shm", "clean", "--all")
    assert cleaned.returncode == 0, cleaned.stderr
    assert all(os.path.exists(p) for p in ra["segment_paths"]), "b's clean --all removed a's segments"
    assert a.name not in cleaned.stdout and str(a.uid) not in cleaned.stdout.replace(rb["prefix"], "")
    listed = b.run(sys.executable, "-m", "workbench.cli", "shm", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {Path(i["path"]).name.startswith(rb["prefix"]) for i in json.loads(listed.stdout)} <= {True}
    doctor = b.run(sys.executable, "-m", "workbench.cli", "doctor", "--quick", "--learners", "1")
    assert f"under {rb['prefix']}*" in doctor.stdout, doctor.stdout + doctor.stderr
    assert ra["prefix"] not in doctor.stdout
    assert "learners:" in doctor.stdout
    assert [f for f in a_files_before if f.startswith(ra["prefix"])] == sorted(
        f for f in os.listdir(shm.SHM_DIR) if f.startswith(ra["prefix"])
    )

    # both close: everything of theirs is gone
    for learner in (a, b):
        (learner.home / "stop").write_text("")
    for learner in (a, b):
        learner.wait_for("done", READY_WAIT_S)
        assert learner.serving is not None and learner.serving.wait(timeout=COMMAND_WAIT_S) == 0, learner.log()
        left = [f for f in os.listdir(shm.SHM_DIR) if f.startswith(ready[learner.name]["prefix"])]
        assert not left, f"{learner.name} left {left} in /dev/shm"
