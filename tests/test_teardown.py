"""Issue 46, item 6: a lesson's last cell closes nothing by itself (Run All would close the cluster
under the dashboard's panes); its button does, and so does the kernel's shutdown, leaving nothing
behind (workbench.teach.teardown, workbench.runtime.shutdown)."""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.memory import owners, shm
from workbench.runtime import shutdown
from workbench.teach.teardown import left_in_shm, teardown

GONE_WAIT_S = 60.0


def test_the_button_closes_what_the_lesson_named_then_the_cluster(tmp_path):
    pytest.importorskip("ipywidgets")
    order = []
    directory = tempfile.TemporaryDirectory(dir=tmp_path)
    with workbench.start(n_workers=1, timeout=60) as session:
        plan = teardown(
            session,
            lambda: order.append("store"),
            lambda: 1 / 0,  # a closer that fails: the others still run, and it is said
            directory.cleanup,
            after=lambda: f"after: the session is closed: {session.closed}",
        )
        with pytest.raises(TypeError, match="functions to call"):
            teardown(session, None)  # store.close() where store.close was meant
        with pytest.raises(TypeError, match="workbench session first"):
            teardown(object())
        assert not session.closed and Path(directory.name).is_dir(), "showing the button closes nothing"
        assert plan.cancel is None and shutdown.registered() == [], "outside a kernel nothing waits for a shutdown"
        plan.button.click()
        said = plan.said.value
        assert session.closed and not Path(directory.name).exists() and order == ["store"]
        assert plan.button.disabled
        assert "ZeroDivisionError" in said and "The cluster is closed" in said
        assert "after: the session is closed: True" in said
        assert "Nothing of this lesson is left in /dev/shm." in said
        assert plan.close() == [], "it closes once"


@pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="needs Linux with /dev/shm")
def test_what_is_left_in_shm_is_what_this_process_owns_or_what_is_new():
    name = f"teardown-test-{os.getpid()}"
    before = {s.name for s in shm.list_segments()}
    shm.share(name, np.ones(4), owner=owners.this_process())
    try:
        assert name in left_in_shm() and name in left_in_shm(before)
        assert name not in left_in_shm(before | {name})
    finally:
        shm.delete(name)
    assert name not in left_in_shm()


KERNEL_CELL = """
import json, os, tempfile
import numpy as np
import workbench
from workbench.memory import owners, shm
from workbench.teach.teardown import teardown

session = workbench.start(n_workers=1, timeout=60)
lesson_files = tempfile.TemporaryDirectory(prefix="lesson-files-")  # in the kernel's TMPDIR
open(os.path.join(lesson_files.name, "data"), "w").write("x")
segment = "teardown-kernel-{pid}"
shm.share(segment, np.ones(8), owner=owners.this_process())  # as a lesson's RRO copies are
closed = teardown(
    session,
    lambda: shm.delete(segment),
    lesson_files.cleanup,
    after=lambda: open({marker!r}, "w").write(json.dumps(session.closed)),
)
print(json.dumps(list(session.run(os.getpid).values())))
"""


def _stream_text(client, msg_id: str) -> str:
    """What the cell ``msg_id`` printed, once the kernel is idle again; its error, if any, fails the test."""
    text = []
    while True:
        message = client.get_iopub_msg(timeout=300)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "error":
            pytest.fail(f"the cell raised {content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"]))
        if kind == "stream":
            text.append(content["text"])
        if kind == "status" and content["execution_state"] == "idle":
            return "".join(text)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in (b"Z", b"X")


@pytest.mark.timeout(300)
def test_a_kernels_shutdown_closes_its_lesson_before_the_kernel_replies(tmp_path):
    """The kernel closes the lesson's things and its cluster while it handles the shutdown request,
    before its reply (Jupyter sends SIGTERM 2.5 s after asking, so exit handlers never ran): the
    reply is waited for here, so the test does not depend on that deadline."""
    manager_module = pytest.importorskip("jupyter_client.manager")
    kernel_tmp = tmp_path / "tmp"
    kernel_tmp.mkdir()
    marker = tmp_path / "closed-at-shutdown.json"
    manager = manager_module.KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(tmp_path), env={**os.environ, "TMPDIR": str(kernel_tmp)})
    client = manager.client()
    client.start_channels()
    workers: list[int] = []
    try:
        client.wait_for_ready(timeout=120)
        code = textwrap.dedent(KERNEL_CELL).format(pid=os.getpid(), marker=str(marker))
        workers = json.loads(_stream_text(client, client.execute(code)).strip().splitlines()[-1])
        segment = f"teardown-kernel-{os.getpid()}"
        assert shm.exists(segment) and any((kernel_tmp).glob("lesson-files-*"))

        request = client.shutdown()  # what Jupyter and papermill send first; do_shutdown runs before the reply
        while True:
            reply = client.get_control_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == request:
                break
        assert reply["content"]["status"] == "ok"
        assert json.loads(marker.read_text()) is True, "the session was closed at the kernel's shutdown"
        assert not shm.exists(segment), "the lesson's segment is gone"
        assert sorted(p.name for p in kernel_tmp.iterdir()) in ([], ["dask-scratch-space"])
        deadline = time.monotonic() + GONE_WAIT_S
        while not all(_gone(pid) for pid in workers):
            assert time.monotonic() < deadline, f"worker processes still alive: {workers}"
            time.sleep(0.05)  # a poll of a bounded wait on the processes' state
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        shm.delete_prefix(f"teardown-kernel-{os.getpid()}")  # a failure above must not leak it
