"""Choosing a cluster kind, the Slurm options' checks (no Slurm needed: each is refused before anything
starts), and the per-learner memory cap ``$WORKBENCH_MAX_MEMORY`` on a local cluster."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import stat
import sys
from pathlib import Path

import pytest
from cluster_helpers import connects, refusal

import workbench
from workbench.runtime import clusters
from workbench.runtime.clusters import ClusterRequest, LocalKind, SlurmOptions
from workbench.settings import Settings


@pytest.fixture
def fake_slurm_commands(tmp_path, monkeypatch):
    """sbatch, squeue and scancel on PATH that fail if ever run (the checks must refuse first)."""
    for name in ("sbatch", "squeue", "scancel"):
        path = tmp_path / name
        path.write_text("#!/bin/sh\necho 'not a real Slurm' >&2\nexit 1\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(jobs=0), "jobs must be a positive number of Slurm jobs"),
        (dict(cores=0), "cores must be a positive number of cores per job"),
        (dict(memory="lots"), "memory must be an amount per job such as '2GiB'"),
        (dict(walltime="1h"), "walltime must be HH:MM:SS (or D-HH:MM:SS)"),
        (dict(walltime="10:99:00"), "walltime must be HH:MM:SS"),
        (dict(interface="no-such-nic0"), "is not a network interface of this machine"),
        (dict(directives="--qos=debug"), "directives must be a list of sbatch options"),
    ],
)
def test_bad_slurm_options_say_what_to_give(kwargs, words):
    with pytest.raises(ValueError) as info:
        SlurmOptions(**kwargs)
    assert words in str(info.value)


def test_slurm_options_from_the_environment():
    environ = {
        "WORKBENCH_SLURM_JOBS": "3",
        "WORKBENCH_SLURM_CORES": "2",
        "WORKBENCH_SLURM_WALLTIME": "1-00:00:00",
        "WORKBENCH_SLURM_PARTITION": "short",
        "WORKBENCH_SLURM_DIRECTIVES": "--qos=debug '--constraint=a b'",
        "WORKBENCH_SLURM_ACCOUNT": "",  # empty: the default
    }
    options = SlurmOptions.from_settings(Settings(environ))
    assert (options.jobs, options.cores, options.walltime, options.partition) == (3, 2, "1-00:00:00", "short")
    assert options.directives == ("--qos=debug", "--constraint=a b") and options.account is None
    with pytest.raises(ValueError, match="WORKBENCH_SLURM_PARTITON is not a Slurm setting"):
        SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_PARTITON": "short"}))
    with pytest.raises(ValueError, match="WORKBENCH_SLURM_JOBS is a whole number"):
        SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_JOBS": "two"}))


def test_slurm_without_sbatch_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm command there
    with pytest.raises(ValueError) as info:
        workbench.start(cluster="slurm", slurm=SlurmOptions(jobs=1))
    assert "sbatch, squeue, scancel is not on PATH" in str(info.value) and "Slurm login node" in str(info.value)


def test_slurm_without_dask_jobqueue_says_how_to_install_it(fake_slurm_commands, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import fails as if it were not installed
    with pytest.raises(ValueError, match="needs dask-jobqueue.*pip install dask-jobqueue"):
        workbench.start(cluster="slurm", slurm=SlurmOptions(jobs=1))


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(slurm=SlurmOptions(jobs=2), n_workers=3), "n_workers=3 but 2 job(s) of 1 worker(s) make 2"),
        (dict(slurm=SlurmOptions(cores=3), threads_per_worker=2), "do not split into workers of 2 threads"),
        (dict(slurm=SlurmOptions(cores=2), n_workers=3), "n_workers=3 is not a whole number of jobs of 2 workers"),
        (dict(slurm=SlurmOptions(), nodes=["a", "b"]), "a Slurm worker's node is its job's host"),
        (dict(cluster="local", slurm=SlurmOptions()), "give cluster='slurm' or no slurm="),
        (dict(cluster="slurm", address="tcp://127.0.0.1:1"), "address= joins a running scheduler"),
        (dict(cluster="nonesuch"), "no cluster kind 'nonesuch'"),
        (dict(cluster="scheduler"), "give start(address='tcp://host:8786') or set $WORKBENCH_SCHEDULER"),
        (dict(slurm={"jobs": 2}), "slurm must be a SlurmOptions"),
    ],
)
def test_bad_cluster_choices_are_refused_before_anything_starts(fake_slurm_commands, kwargs, words):
    with pytest.raises(ValueError) as info:
        workbench.start(**kwargs)
    assert words in str(info.value)


def test_the_environment_names_the_kind(fake_slurm_commands, monkeypatch):
    monkeypatch.setenv(clusters.CLUSTER_ENV, "slurm")
    monkeypatch.setenv("WORKBENCH_SLURM_WALLTIME", "forever")  # the slurm kind reads its settings: refused
    with pytest.raises(ValueError, match="walltime must be HH:MM:SS"):
        workbench.start()
    monkeypatch.setenv("WORKBENCH_SCHEDULER", "tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="ask for two clusters: unset one of them"):
        workbench.start()


def _request(environ=None, **kwargs) -> ClusterRequest:
    if environ is not None:
        kwargs["settings"] = Settings(environ)
    return ClusterRequest(
        **{"n_workers": 2, "threads_per_worker": 1, "memory_limit": "auto", "dashboard": "off", "timeout": 10, **kwargs}
    )


def test_the_per_learner_cap_shares_auto_memory_and_refuses_more():
    local = LocalKind()
    cap = {clusters.MAX_MEMORY_ENV: "1GiB"}
    assert local.memory_limit(_request(environ=cap)) == 2**29  # "auto": the cap shared by 2 workers
    assert local.memory_limit(_request(environ=cap, n_workers=None, nodes=("a", "a", "b", "b"))) == 2**28
    assert local.memory_limit(_request(environ=cap, memory_limit="512MiB")) == 2**29  # exactly the cap: allowed
    with pytest.raises(ValueError) as info:
        local.memory_limit(_request(environ=cap, memory_limit="1GiB"))
    assert "2 x 1.00 GiB of memory, above the per-learner cap $WORKBENCH_MAX_MEMORY=1.00 GiB" in str(info.value)
    with pytest.raises(ValueError, match="no limit of memory, above the per-learner cap"):
        local.memory_limit(_request(environ=cap, memory_limit=0))  # Dask's 0: no limit at all
    with pytest.raises(ValueError, match=r"is an amount of memory: digits 0-9 and a unit \(e.g. '4GiB'"):
        local.memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "half"}))
    assert local.memory_limit(_request(environ={}, memory_limit="3GiB")) == "3GiB"  # no cap: as asked


def test_a_capped_local_cluster_gets_its_share_and_a_request_above_it_is_refused(monkeypatch):
    monkeypatch.setenv(clusters.MAX_MEMORY_ENV, "1GiB")
    with pytest.raises(ValueError, match="above the per-learner cap"):
        workbench.start(n_workers=2, memory_limit="600MiB")
    with workbench.start(n_workers=2, timeout=60) as session:
        assert [w["memory_limit"] for w in session.describe()["workers"]] == [2**29, 2**29]


def test_a_local_cluster_talks_tls_and_refuses_a_client_without_its_credentials():
    """Another user of the machine cannot connect to a learner's scheduler (a client there runs code as the learner)."""
    from distributed.security import Security

    with workbench.start(n_workers=1, timeout=60) as session:
        address = session.client.scheduler.address
        assert address.startswith("tls://") and all(w.startswith("tls://") for w in session.workers())
        assert session.client.submit(sum, [1, 2], pure=False).result(timeout=30) == 3
        assert re.search("TLS|ssl|SSL", refusal(address, Security().get_connection_args("client")))


def test_tls_can_be_turned_off_and_a_wrong_setting_is_refused(monkeypatch):
    from workbench.runtime.clusters import TLS_ENV, local_security

    assert local_security(Settings({TLS_ENV: "0"})) is None
    assert local_security(Settings({})) is not None
    with pytest.raises(ValueError, match="WORKBENCH_TLS is 1 .* or 0"):
        local_security(Settings({TLS_ENV: "maybe"}))


@pytest.mark.parametrize("setting", ["account", "partition", "log_directory", "directives"])
@pytest.mark.parametrize("line_break", ["\n", "\r", "\x00"], ids=["LF", "CR", "NUL"])
def test_a_line_break_in_a_slurm_setting_is_refused(setting, line_break):
    """Issue 35, item 8: a line break ends the #SBATCH line in the job script; what follows becomes a
    command, and sbatch reads no #SBATCH line after it."""
    value = f"short{line_break}touch /tmp/owned"
    with pytest.raises(ValueError) as info:
        SlurmOptions(**{setting: (value,) if setting == "directives" else value})
    assert f"{setting} {value!r} has a control character" in str(info.value)
    assert "give it on one line" in str(info.value)
    key = f"WORKBENCH_SLURM_{setting.upper()}"
    quoted = shlex.quote(value) if setting == "directives" else value  # one directive holding the break
    with pytest.raises(ValueError, match=rf"\${key} .* has a control character"):
        SlurmOptions.from_settings(Settings({key: quoted}))


def test_a_walltime_with_a_trailing_line_break_is_refused():
    with pytest.raises(ValueError, match="walltime must be HH:MM:SS"):
        SlurmOptions(walltime="01:00:00\n")


def test_an_amount_of_memory_no_integer_holds_names_its_setting():
    """Issue 35, item 10: "1e400" made dask's parse_bytes raise a bare OverflowError."""
    with pytest.raises(ValueError, match=r"\$WORKBENCH_MAX_MEMORY is an amount of memory.* got '1e400'"):
        clusters.max_memory(Settings({clusters.MAX_MEMORY_ENV: "1e400"}))
    with pytest.raises(ValueError, match="memory must be an amount per job such as '2GiB', got '1e400GiB'"):
        SlurmOptions(memory="1e400GiB")
    with pytest.raises(ValueError, match=r"\$WORKBENCH_SLURM_MEMORY is an amount of memory.* got '1e400GiB'"):
        SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_MEMORY": "1e400GiB"}))
    with pytest.raises(ValueError, match="memory_limit must be 'auto' or an amount such as '2GiB', got '1e400GiB'"):
        LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "1GiB"}, memory_limit="1e400GiB"))


def _slurm_request(tmp_path, environ) -> ClusterRequest:
    options = SlurmOptions(jobs=1, interface="lo", log_directory=str(tmp_path / "logs"))
    return _request(n_workers=None, slurm=options, environ=environ)


def test_a_slurm_cluster_has_tls_credentials_of_its_own_that_only_the_user_reads(tmp_path):
    """Issue 35, item 1 (no Slurm needed: no job is submitted): the scheduler talks TLS, the job script
    names private credential files (never the key itself), a client without them is refused, and
    the files are gone once the cluster closes. The real-Slurm test checks the jobs use them."""
    from distributed import Client
    from distributed.security import Security

    cluster = clusters.SlurmKind().cluster(_slurm_request(tmp_path, environ={}))
    try:
        directory = Path(cluster.credentials_directory)
        script = cluster.job_script()
        assert cluster.scheduler_address.startswith("tls://")
        assert "--protocol tls://" in script and f"--tls-key {directory / 'key.pem'}" in script
        assert "PRIVATE KEY" not in script and "CERTIFICATE" not in script
        assert directory.parent == tmp_path / "logs" and stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()} == {
            "cert.pem": 0o600,
            "key.pem": 0o600,
        }
        no_credentials = Security().get_connection_args("client")
        assert re.search("TLS|ssl|SSL", refusal(cluster.scheduler_address, no_credentials))
        # a stranger's own credentials: the scheduler does not trust them
        assert not connects(cluster.scheduler_address, Security.temporary().get_connection_args("client"))
        with Client(cluster, timeout=30) as client:  # the cluster's own credentials
            assert client.scheduler_info()["address"] == cluster.scheduler_address
    finally:
        cluster.close(timeout=30)
    assert not directory.exists(), "the credentials outlived the cluster"


def test_a_slurm_cluster_without_tls_when_the_environment_says_so(tmp_path):
    cluster = clusters.SlurmKind().cluster(_slurm_request(tmp_path, environ={clusters.TLS_ENV: "0"}))
    try:
        assert cluster.scheduler_address.startswith("tcp://") and cluster.credentials_directory is None
        assert "--tls-" not in cluster.job_script()
    finally:
        cluster.close(timeout=30)
    assert not list((tmp_path / "logs").iterdir())


def test_slurm_credentials_need_a_log_directory_the_worker_command_can_name(tmp_path):
    request = _slurm_request(tmp_path, environ={})
    request = dataclasses.replace(request, slurm=SlurmOptions(jobs=1, log_directory=str(tmp_path / "my logs")))
    with pytest.raises(ValueError, match="choose a log directory whose path has no spaces"):
        clusters.SlurmKind().cluster(request)


@pytest.mark.parametrize("open_up", ["the log directory", "a directory above it"])
def test_slurm_credentials_are_not_kept_where_another_user_could_swap_them(tmp_path, open_up):
    # The scheduler and the client read the credentials by path at every connection: another user
    # who may rename entries of the log directory (or of one above it: writable by others, no sticky
    # bit, as a shared scratch directory can be) could move the private directory away and put one of
    # their own, with a key they hold, in its place, then connect as the learner. Refused, nothing left.
    above = tmp_path / "shared"
    logs = above / "logs"
    logs.mkdir(parents=True)
    (logs if open_up == "the log directory" else above).chmod(0o777)
    with pytest.raises(ValueError, match="lets other users move or replace"):
        clusters.shared_security(str(logs))
    assert not list(logs.iterdir())


@pytest.fixture
def umask_002():
    """The umask of RHEL-family login nodes and of Ubuntu with user-private groups, for the test."""
    before = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_under_umask_002_the_cache_directory_is_made_private_and_the_slurm_kind_keeps_its_credentials_there(
    tmp_path, monkeypatch, umask_002
):
    # Issue 47, item 5: the numba cache (at import) and shared_security made ~/.cache/locality-workbench
    # 0775 under umask 002 (makedirs' mode reaches the last directory only), and shared_security then
    # refused the Slurm kind's own default log directory.
    from workbench import kernels
    from workbench.kernels.cache import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # not there yet: every directory made here
    root = cache_root()
    assert kernels._default_numba_cache_dir() == str(root / "numba")
    assert [_mode(p) for p in (tmp_path / "cache", root, root / "numba")] == [0o700] * 3
    request = _slurm_request(tmp_path, environ={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    request = dataclasses.replace(request, slurm=SlurmOptions(jobs=1))  # the default log directory
    assert clusters.SlurmKind().log_directory(request) == str(root / "slurm")
    _, credentials = clusters.shared_security(clusters.SlurmKind().log_directory(request))  # beside numba's
    assert Path(credentials).parent == root / "slurm" and _mode(root / "slurm") == 0o700
    # shared_security alone (no numba cache made first) makes them private too
    elsewhere = tmp_path / "fresh" / "locality-workbench" / "slurm"
    clusters.shared_security(str(elsewhere))
    assert [_mode(p) for p in (tmp_path / "fresh", elsewhere.parent, elsewhere)] == [0o700] * 3


def test_a_cache_directory_an_older_workbench_left_open_is_made_private_again(tmp_path, monkeypatch, umask_002):
    from workbench.kernels.cache import cache_directory, cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache_root().mkdir(mode=0o775)  # as `mkdir -p` made it under umask 002
    assert _mode(cache_root()) == 0o775
    assert cache_directory("store") == cache_root() / "store"
    assert _mode(cache_root()) == 0o700 and _mode(cache_root() / "store") == 0o700


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(threads_per_worker=2), "start(cluster='gateway') takes neither threads_per_worker nor memory_limit"),
        (dict(memory_limit="2GiB"), "got 1 and '2GiB'"),
    ],
)
def test_a_gateway_cluster_refuses_the_shape_it_would_ignore(monkeypatch, kwargs, words):
    # Issue 47, item 15: before, start(cluster="gateway") dropped them silently
    import dask

    with dask.config.set({"gateway.address": "http://127.0.0.1:1"}):
        with pytest.raises(ValueError) as info:
            workbench.start(cluster="gateway", **kwargs)
        assert words in str(info.value)
        clusters.GatewayKind().check(_request(n_workers=None))  # the defaults pass the check


def test_a_slurm_cluster_refuses_a_memory_limit_it_would_ignore(fake_slurm_commands):
    with pytest.raises(ValueError, match=r"a Slurm job's memory is shared by its workers: give it as SlurmOptions"):
        workbench.start(slurm=SlurmOptions(jobs=1), memory_limit="2GiB")


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("slurm", "a Slurm session's workers are whole jobs"),
        ("gateway", "a gateway session's workers are the gateway's"),
    ],
)
def test_scaling_a_slurm_or_gateway_session_says_how_that_kind_scales(kind, words):
    from workbench.runtime.session import Session

    session = Session(client=None, cluster=object(), kind=kind)  # refused before either is used
    with pytest.raises(ValueError, match=words):
        session.scale(2)


@pytest.mark.parametrize("memory", [True, "GiB", " ", "\u2028"], ids=["True", "a unit alone", "a space", "U+2028"])
def test_a_memory_amount_without_a_number_is_refused(memory):
    """Dask's parse_bytes reads True as 1 byte and a unit alone as one of it ("GiB": 1 GiB, " ": 1 byte)."""
    with pytest.raises(ValueError, match="memory must be an amount per job"):
        SlurmOptions(memory=memory)
    with pytest.raises(ValueError, match="memory_limit must be 'auto' or an amount"):
        LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "1GiB"}, memory_limit=memory))
    if isinstance(memory, str) and memory.strip():
        with pytest.raises(ValueError, match="is an amount of memory"):
            clusters.max_memory(Settings({clusters.MAX_MEMORY_ENV: memory}))


def test_a_cap_too_small_to_share_is_refused_not_lifted():
    """A cap below two bytes per worker shared as 0 or 1 byte each: Dask's 0 is no limit at all, and its
    1 a fraction of the machine, all of it ("1.5", meant as GiB, was read as 1 byte: one worker got the
    machine; a bare number is whole bytes now, and "1.5" is refused as one)."""
    for cap, n_workers in (("1", 2), ("3", 2), ("1", 1)):
        with pytest.raises(ValueError, match=f"cannot be shared among {n_workers} workers.* at least {2 * n_workers}"):
            LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: cap}, n_workers=n_workers))
    with pytest.raises(ValueError, match=r"\$WORKBENCH_MAX_MEMORY is an amount of memory.* got '1.5'"):
        LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "1.5"}, n_workers=1))
    assert LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "4"})) == 2
    with pytest.raises(ValueError, match="memory_limit=1 is the whole machine to Dask"):
        LocalKind().memory_limit(_request(environ={clusters.MAX_MEMORY_ENV: "1GiB"}, memory_limit="1B"))


def test_slurm_directives_with_a_quote_left_open_name_their_setting():
    with pytest.raises(ValueError, match=r"\$WORKBENCH_SLURM_DIRECTIVES is sbatch .*no closing quotation"):
        SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_DIRECTIVES": "--qos='debug"}))
