"""A class server where kernels are killed (issue 35, item 4): five learners' kernels (one user,
as under one JupyterHub account or five notebooks of one learner) publish RRO copies in /dev/shm
and are killed with SIGKILL mid-lesson; a sixth session starts. Nothing of the five is left, and
neither the sixth's own copies nor those of a live process are touched, by that start nor by
``workbench shm clean``.

Only segments whose names this test made are looked at: other tests (and other users) may have
files in /dev/shm at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.memory import shm
from workbench.runtime import tasks

KERNEL = Path(__file__).with_name("class_server_kernel.py")
KERNELS = 5
READY_WAIT_S = 300.0
GONE_WAIT_S = 60.0


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie has: it maps nothing any more)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return text.rpartition(b")")[2].split()[0] in (b"Z", b"X")


def _ours(prefixes: list[str]) -> list[str]:
    """This user's files in /dev/shm whose segment names start with one of ``prefixes`` (their locks
    and partial files included)."""
    return sorted(
        entry.name
        for entry in os.scandir(shm.SHM_DIR)
        if entry.name.startswith(shm.PREFIX) and entry.name[len(shm.PREFIX) :].startswith(tuple(prefixes))
    )


LIVE_OTHER = """
import sys, numpy as np
from workbench.memory import owners, shm
view = shm.share(sys.argv[1], np.ones(1000), owner=owners.this_process())
print("ready", flush=True)
sys.stdin.read()
shm.delete(sys.argv[1])
"""


@pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="needs Linux with /dev/shm")
def test_five_killed_kernels_leave_nothing_and_a_sixth_session_keeps_what_lives(tmp_path):
    kernels: list[subprocess.Popen[bytes]] = []
    prefixes: list[str] = []
    live_name = f"rro-live{os.getpid()}-table"
    live = subprocess.Popen(
        [sys.executable, "-c", LIVE_OTHER, live_name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        for number in range(KERNELS):
            log = open(tmp_path / f"kernel{number}.log", "wb")  # noqa: SIM115 (closed with the process)
            kernels.append(
                subprocess.Popen(
                    [sys.executable, str(KERNEL), str(tmp_path / f"ready{number}.json"), f"far{number}"],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        assert live.stdout is not None and live.stdout.readline().strip() == "ready"
        ready = []
        deadline = time.monotonic() + READY_WAIT_S
        for number, kernel in enumerate(kernels):
            path = tmp_path / f"ready{number}.json"
            while not path.exists():
                log = (tmp_path / f"kernel{number}.log").read_text(errors="replace")[-3000:]
                assert kernel.poll() is None, f"kernel {number} stopped:\n{log}"
                assert time.monotonic() < deadline, f"kernel {number} was not ready in {READY_WAIT_S} s:\n{log}"
                time.sleep(0.1)
            ready.append(json.loads(path.read_text()))
        prefixes += [r["prefix"] for r in ready]
        published = sorted(shm.PREFIX + s for r in ready for s in r["segments"])
        assert len(published) == 2 * KERNELS and _ours(prefixes) == published  # one by the kernel, one by a worker
        listed = {i.name: i for i in shm.list_segments() if i.name.startswith(tuple(prefixes))}
        assert all(i.lifetime == "owner" and i.owner_alive and not i.reclaimable for i in listed.values())
        assert not set(shm.reclaim()) & set(listed)  # live kernels: nothing of theirs is taken

        for kernel in kernels:  # mid-lesson: a Jupyter restart, an OOM kill, a cell timeout
            kernel.send_signal(signal.SIGKILL)
        for kernel in kernels:
            kernel.wait(timeout=GONE_WAIT_S)
        deadline = time.monotonic() + GONE_WAIT_S
        workers = [pid for r in ready for pid in r["workers"]]
        while not all(_gone(pid) for pid in workers):  # they exit when their kernel's pipe closes
            assert time.monotonic() < deadline, f"workers still alive: {[p for p in workers if not _gone(p)]}"
            time.sleep(0.05)
        assert _ours(prefixes) == published  # nothing removed them: they would stay for good

        with workbench.start(n_workers=1, timeout=120) as session:  # the sixth
            assert _ours(prefixes) == [], "the sixth start() left the killed kernels' segments"
            assert shm.exists(live_name)  # a live process's: untouched
            with tasks.TaskRuntime(session, "rro") as runtime:
                segments, running = runtime.convert(tasks.RRO, np.arange(1000.0))[tasks._RRO_MARK]
                session.wait(running)
                own = sorted(shm.PREFIX + s for s in segments.values())
                assert _ours([runtime.segment_prefix]) == own
                cleaned = subprocess.run(
                    [sys.executable, "-m", "workbench.cli", "shm", "clean", "--prefix", "rro-"],
                    capture_output=True,
                    text=True,
                    timeout=GONE_WAIT_S,
                )
                assert cleaned.returncode == 0, cleaned.stderr
                assert not set(shm.reclaim()) & {live_name, *segments.values()}
                assert _ours([runtime.segment_prefix]) == own  # the sixth's own: untouched
                assert shm.attach(live_name).sum() == 1000.0
            assert _ours([runtime.segment_prefix]) == []  # and removed by its own close, as before
    finally:
        for kernel in kernels:
            if kernel.poll() is None:
                kernel.kill()
            kernel.wait(timeout=GONE_WAIT_S)
            if kernel.stdin is not None:
                kernel.stdin.close()
        for prefix in prefixes:  # a failure above must not leak what the test made
            shm.delete_prefix(prefix)
        if live.stdin is not None:
            live.stdin.close()
        live.wait(timeout=GONE_WAIT_S)
        if live.stdout is not None:
            live.stdout.close()
    assert not shm.exists(live_name)
