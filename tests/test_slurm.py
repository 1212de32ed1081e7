"""The ``slurm`` cluster kind on a real single-node Slurm (Debian's slurm-wlm, started by
``tests/slurm_helpers.py`` as root): workers submitted as jobs through dask-jobqueue, an application
run on them, the jobs gone from ``squeue`` when the session closes; the cluster talks TLS with credentials
of its own and refuses a client without them; a job that never starts fails the start within its timeout
and is cancelled; ``$WORKBENCH_CLUSTER=slurm`` reaches ``workbench run``.
Where the daemons cannot run, every test here skips saying why (with the daemons' logs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cluster_helpers import connects, refusal
from slurm_helpers import SlurmUnavailable, local_slurm

import workbench
from workbench import datasets, kernels
from workbench.apps import histogram
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.clusters import SlurmOptions

pytestmark = pytest.mark.timeout(300)
SLOW_SBATCH_S = 3  # an sbatch that answers this long after it was called: past a start's 2 s timeout


def _slurmstepds() -> set[int]:
    return {
        p.pid
        for p in psutil.process_iter(["name", "status"])
        if p.info["name"] == "slurmstepd" and p.info["status"] != psutil.STATUS_ZOMBIE
    }


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node Slurm; its daemons (and every job step they ran) checked gone afterwards."""
    before = _slurmstepds()
    try:
        manager = local_slurm(tmp_path_factory.mktemp("slurm"))
        running = manager.__enter__()
    except SlurmUnavailable as why:
        pytest.skip(f"no Slurm here: {why}")
    try:
        yield running
    finally:
        manager.__exit__(None, None, None)  # stops both daemons; raises when one outlives SIGKILL
        assert all(p.poll() is not None for p in running.processes.values())
        deadline = time.monotonic() + 30
        while (left := _slurmstepds() - before) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"job steps left running after slurmd stopped: {left}"


@pytest.fixture
def slurm_env(slurm, monkeypatch):
    """Slurm's commands pointed at the test's Slurm; a WORKBENCH_NODE_ID here that the jobs must not inherit."""
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("WORKBENCH_NODE_ID", "the-submitting-process")
    return slurm


def _wait_for_empty_queue(slurm, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while queue := slurm.queue():
        assert time.monotonic() < deadline, f"squeue still lists jobs {timeout} s after the session closed: {queue}"
        time.sleep(0.2)


def test_workers_as_slurm_jobs_run_an_application_and_leave_no_job(slurm_env, tmp_path):
    options = SlurmOptions(jobs=2, cores=1, memory="1GiB", interface="lo", log_directory=str(tmp_path / "logs"))
    started = time.monotonic()
    with workbench.start(cluster="slurm", slurm=options, timeout=120) as session:
        up = time.monotonic() - started
        workers = session.workers()
        assert len(workers) == 2 and session.describe()["owned"]
        jobs = session.run(os.getenv, "SLURM_JOB_ID")
        assert len(set(jobs.values())) == 2 and None not in jobs.values(), f"each worker is its own job: {jobs}"
        running = {line.split()[0]: line.split()[1] for line in slurm_env.queue()}
        assert {running.get(job) for job in jobs.values()} == {"RUNNING"}, running
        # node id = the job's hostname, not the WORKBENCH_NODE_ID of the process that submitted it
        assert set(session.worker_nodes().values()) == {socket.gethostname()}
        assert set(session.run(os.getenv, "NUMBA_NUM_THREADS").values()) == {"1"}

        ds = datasets.get("histogram", "ci", seed=3)
        points = PlacedBlocks(session, ds.to_dask("points", 20_000))
        expected = kernels.histogramdd(ds.load("points"), ds.params["bins"], ds.params["range"])
        for name in ("blocks", "split"):
            with strategies.get(name).open(session, points) as plan:
                counts = plan.reduce(histogram.WORK, ds.params["bins"], ds.params["range"])
            np.testing.assert_array_equal(counts, expected, err_msg=name)
    print(f"two Slurm workers up in {up:.1f} s")
    assert not set(jobs.values()) & {line.split()[0] for line in slurm_env.queue()}, "close waits for its jobs"
    _wait_for_empty_queue(slurm_env)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir())  # the jobs' logs went where asked


def test_a_slurm_cluster_talks_tls_and_refuses_an_outside_client(slurm_env, tmp_path):
    """Issue 35, item 1: a Slurm cluster talked plain TCP, and any user who could reach its scheduler ran
    code as the learner. Its scheduler and workers (the jobs) now take only its own credentials, which
    the jobs read from files only the user can read, gone after the session."""
    from distributed.security import Security

    logs = tmp_path / "logs"
    options = SlurmOptions(jobs=1, cores=1, memory="1GiB", interface="lo", log_directory=str(logs))
    with workbench.start(cluster="slurm", slurm=options, timeout=120) as session:
        address, (worker,) = session.client.scheduler.address, session.workers()
        assert address.startswith("tls://") and worker.startswith("tls://"), (address, worker)
        assert session.gather(session.client.submit(sum, [1, 2], pure=False)) == 3
        (credentials,) = [p for p in logs.iterdir() if p.is_dir()]
        assert stat.S_IMODE(credentials.stat().st_mode) == 0o700
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in credentials.iterdir()} == {
            "cert.pem": 0o600,
            "key.pem": 0o600,
        }
        assert re.search("TLS|ssl|SSL", refusal(address, Security().get_connection_args("client")))  # no credentials
        anonymous = ssl.create_default_context()  # TLS without a certificate, trusting any server
        anonymous.check_hostname, anonymous.verify_mode = False, ssl.CERT_NONE
        stranger = Security.temporary().get_connection_args("client")  # credentials of another cluster
        for target in (address, worker):
            assert connects(target, session.cluster.security.get_connection_args("client")), target
            assert not connects(target, {"ssl_context": anonymous}), f"{target} answered a client without a certificate"
            assert not connects(target, stranger), f"{target} answered another cluster's credentials"
            assert not connects("tcp://" + target.removeprefix("tls://"), {}), f"{target} answered plain TCP"
    assert not [p for p in logs.iterdir() if p.is_dir()], "the credentials outlived the session"
    _wait_for_empty_queue(slurm_env)


def test_a_job_that_never_starts_fails_the_start_in_time_and_is_cancelled(slurm_env, tmp_path, monkeypatch):
    # sbatch answers only after the start's timeout (a busy Slurm): the error still names the job, which
    # it could not do before the submission ended, and the job is cancelled
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "sbatch").write_text(f'#!/bin/sh\nsleep {SLOW_SBATCH_S}\nexec {shutil.which("sbatch")} "$@"\n')
    (slow / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
    options = SlurmOptions(jobs=1, directives=("--begin=now+1hour",), interface="lo", log_directory=str(tmp_path))
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        workbench.start(cluster="slurm", slurm=options, timeout=2)
    assert time.monotonic() - started < 60
    message = str(info.value)
    assert "not up within 2" in message and "PENDING (BeginTime)" in message, message
    assert "job " in message and "cancelled" in message
    assert slurm_env.queue() == [], "the job that never started was left in the queue"


def test_workbench_run_uses_the_slurm_cluster_named_by_the_environment(slurm_env, tmp_path):
    env = {
        **os.environ,
        "WORKBENCH_CLUSTER": "slurm",
        "WORKBENCH_SLURM_JOBS": "2",
        "WORKBENCH_SLURM_MEMORY": "1GiB",
        "WORKBENCH_SLURM_INTERFACE": "lo",
        "WORKBENCH_SLURM_LOG_DIRECTORY": str(tmp_path / "logs"),
    }
    command = [sys.executable, "-m", "workbench.cli", "run", "histogram", "--size", "ci", "--repeat", "1"]
    command += ["--variants", "blocks,split", "--no-trace", "--json", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert {r["variant"] for r in results["results"]} == {"blocks", "split"}
    assert len(list(Path(tmp_path / "logs").glob("*.err"))) == 2, "two jobs ran the workers"
    _wait_for_empty_queue(slurm_env)


def test_a_job_slurm_refuses_fails_the_start_at_once_saying_why(slurm_env, tmp_path):
    options = SlurmOptions(jobs=1, partition="no-such-partition", interface="lo", log_directory=str(tmp_path))
    started = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        workbench.start(cluster="slurm", slurm=options, timeout=60)
    assert time.monotonic() - started < 30, "a refused sbatch must not wait for the session's timeout"
    assert "Slurm refused the workers' job" in str(info.value) and "invalid partition" in str(info.value).lower()
    assert slurm_env.queue() == []
