"""``workbench doctor``: every line on this machine passes or names its fix; each failure path says what to do."""

from __future__ import annotations

import psutil

from workbench import doctor
from workbench.cli import main


def test_doctor_on_this_machine_passes_or_names_each_fix(capsys):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    checks = doctor.run()
    names = [c.name for c in checks]
    assert names[:4] == ["cores", "memory", "/dev/shm", "numba cache"]
    assert {"JupyterLab", "Dask dashboard", "dashboard in JupyterLab"} <= set(names)
    for check in checks:
        assert check.ok or check.fix, check
    # the servers it started are gone
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
    status = main(["doctor", "--quick"])
    out = capsys.readouterr().out
    quick = doctor.run(quick=True)
    assert status == (0 if all(c.ok for c in quick) else 1)
    assert out.count("\n") >= len(quick) and ("ready for the course" in out or "to fix" in out)


def test_each_failure_names_its_fix(tmp_path):
    small_shm = doctor.check_shm({"total": 64 * 2**20, "free": 60 * 2**20})
    assert not small_shm.ok and "--shm-size" in small_shm.fix and "0.06 GiB free" in small_shm.found
    assert not doctor.check_shm(None).ok and "tmpfs" in doctor.check_shm(None).fix
    assert not doctor.check_cores(1).ok and "2 cores" in doctor.check_cores(1).fix
    assert not doctor.check_cores(None).ok
    assert not doctor.check_memory(2**30).ok and "size='ci'" in doctor.check_memory(2**30).fix
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = doctor.check_numba_cache(str(blocker / "numba"))
    assert not cache.ok and "not writable" in cache.found and "NUMBA_CACHE_DIR" in cache.fix
    assert "is a file" in doctor.check_numba_cache(str(blocker)).found
    assert "relative" in doctor.check_numba_cache("cache/numba").found
    assert not doctor.check_numba_cache(None).ok
    assert doctor.check_numba_cache(str(tmp_path / "fresh" / "numba")).ok
    extensions = doctor.check_lab_extensions([tmp_path])
    assert not extensions.ok and "dask-labextension" in extensions.found and "pip install" in extensions.fix
    line = small_shm.line()
    assert line.startswith("FAIL /dev/shm") and "fix:" in line


def test_report_says_ready_only_when_everything_passed():
    lines = []
    assert doctor.report([doctor.Check("a", True, "fine")], lines.append)
    assert lines[-1] == "ready for the course"
    lines.clear()
    assert not doctor.report([doctor.Check("a", True, "fine"), doctor.Check("b", False, "bad", "do x")], lines.append)
    assert lines[-1] == "1 to fix: b" and "fix: do x" in lines[1]


def test_a_terminated_doctor_leaves_no_jupyterlab_behind():
    import os
    import signal
    import subprocess
    import sys
    import time

    doctor_process = subprocess.Popen([sys.executable, "-m", "workbench.cli", "doctor"], stdout=subprocess.DEVNULL)
    parent = psutil.Process(doctor_process.pid)
    try:
        deadline = time.monotonic() + 60
        lab = []
        while not lab:  # bounded wait for the state: the doctor's JupyterLab is running
            assert time.monotonic() < deadline and doctor_process.poll() is None, "the doctor never started JupyterLab"
            lab = [p for p in parent.children(recursive=True) if "jupyter" in " ".join(p.cmdline())]
            time.sleep(0.1)
        os.kill(doctor_process.pid, signal.SIGTERM)
        doctor_process.wait(timeout=60)
        gone, alive = psutil.wait_procs(lab, timeout=45)
        assert not alive, f"JupyterLab left running: {[p.pid for p in alive]}"
    finally:
        if doctor_process.poll() is None:
            doctor_process.kill()
            doctor_process.wait(timeout=10)
