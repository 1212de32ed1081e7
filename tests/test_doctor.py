"""``workbench doctor``: every line on this machine passes or names its fix; each failure path says what to do."""

from __future__ import annotations

import ast
import platform
import re
from pathlib import Path

import psutil
import pytest

from workbench import doctor
from workbench.cli import main


def test_doctor_on_this_machine_passes_or_names_each_fix(capsys):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    checks = doctor.run()
    names = [c.name for c in checks]
    assert names[:7] == ["operating system", "cores", "memory", "/dev/shm", "your segments", "learners", "numba cache"]
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
    assert lines[-1] == "1 to fix: b (more in docs/course/troubleshooting.md)" and "fix: do x" in lines[1]


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


@pytest.mark.parametrize(("system", "arch"), [("Darwin", "arm64"), ("Windows", "AMD64")])
def test_off_linux_the_doctor_fails_the_os_and_lists_what_will_not_work(monkeypatch, system, arch):
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: arch)
    checks = {c.name: c for c in doctor.run(quick=True)}
    os_check = checks["operating system"]
    assert not os_check.ok and os_check.found.startswith(f"{system} ({arch}), not Linux")
    for item in doctor.LINUX_ONLY:  # every Linux-only measurement, with where it is used and what happens
        assert f"{item.measurement} ({item.where}): {item.elsewhere}" in os_check.found
    assert "Binder" in os_check.fix and "WSL2" in os_check.fix and "docs/course/setup.md" in os_check.fix
    no_shm = doctor.check_shm(None)
    assert not no_shm.ok and "macOS and Windows have no /dev/shm" in no_shm.fix
    lines = []
    assert not doctor.report(list(checks.values()), lines.append)
    assert "operating system" in lines[-1]


def test_on_linux_the_os_check_passes(monkeypatch):
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    check = doctor.check_os()
    assert check.ok and check.found.startswith("Linux ") and "(aarch64)" in check.found
    assert "tmpfs" in doctor.check_shm(None).fix
    assert doctor.check_os("Linux", "x86_64").ok and not doctor.check_os("FreeBSD", "amd64").ok


# The marks of a Linux-only interface in the package's code (not in its docstrings or comments).
LINUX_PATHS = re.compile(r"/proc/|/sys/|/dev/shm")
LINUX_CALLS = {"posix_fadvise", "POSIX_FADV_DONTNEED", "MAP_POPULATE", "MADV_HUGEPAGE", "sched_setaffinity",
               "sched_getaffinity", "pss"}  # fmt: skip
# Files that use a Linux interface for no measurement of the course.
NOT_MEASUREMENTS = {
    "workbench/doctor.py": "names them in its own messages",
    "workbench/cli.py": "names /dev/shm in a help text",
    "workbench/teach/teardown.py": "names /dev/shm in what it tells the learner; reads it through memory.shm",
}
ROOT = Path(__file__).resolve().parents[1]


def linux_uses(path: Path) -> set[str]:
    """The Linux-only paths and calls ``path``'s code uses."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found |= set(LINUX_PATHS.findall(node.value))
        elif isinstance(node, ast.Attribute) and node.attr in LINUX_CALLS:
            found.add(node.attr)
    return found


def test_the_linux_only_table_covers_every_module_that_uses_a_linux_interface(tmp_path):
    users = {
        path.relative_to(ROOT).as_posix()
        for package in ("workbench", "kernels", "datasets")
        for path in (ROOT / package).rglob("*.py")
        if linux_uses(path)
    }
    listed = {module for item in doctor.LINUX_ONLY for module in item.modules}
    assert users - set(NOT_MEASUREMENTS) == listed, "add the module to doctor.LINUX_ONLY and setup.md, or drop it"
    probe = tmp_path / "probe.py"
    probe.write_text('"""Reads /proc/ in a docstring only."""\nimport os\nos.posix_fadvise(0, 0, 0, 4)\n')
    assert linux_uses(probe) == {"posix_fadvise"}


def test_learners_that_fit_is_limited_by_the_scarcest_resource():
    needs = doctor.LEARNER_NEEDS["lab"]
    assert doctor.learners_that_fit("lab", 32, 10 * needs.memory, 100 * needs.shm) == (10, "memory")
    assert doctor.learners_that_fit("lab", 4, 10 * needs.memory, 100 * needs.shm) == (4, "cores")
    assert doctor.learners_that_fit("lab", 32, 10 * needs.memory, 3 * needs.shm) == (3, "/dev/shm")
    assert doctor.learners_that_fit("ci", 4, 100 * doctor.GIB, None) == (0, "/dev/shm")  # no /dev/shm: none
    with pytest.raises(ValueError, match="size must be one of"):
        doctor.learners_that_fit("huge", 4, doctor.GIB, doctor.GIB)


def test_the_learners_line_says_what_the_machine_holds_and_whether_n_fit():
    lab, ci = doctor.LEARNER_NEEDS["lab"], doctor.LEARNER_NEEDS["ci"]
    space = {"free": 4 * lab.shm, "total": 4 * lab.shm}
    held = doctor.check_learners(8, 4 * lab.memory, space)
    assert held.ok and "holds 4 at size lab" in held.found and "at size ci" in held.found
    assert f"{lab.memory / doctor.GIB:.1f} GiB free memory" in held.found  # the per-learner figures used
    assert doctor.check_learners(8, 4 * lab.memory, space, learners=4).ok
    too_many = doctor.check_learners(8, 4 * lab.memory, space, learners=6)  # 6 fit at ci, not at lab
    assert not too_many.ok and "(they fit at size ci)" in too_many.found and "WORKBENCH_SIZE=ci" in too_many.fix
    assert 6 * ci.memory <= 4 * lab.memory
    far_too_many = doctor.check_learners(8, 4 * lab.memory, space, learners=30)
    assert not far_too_many.ok and "nor at size ci" in far_too_many.found and "30 core(s)" in far_too_many.fix
    with pytest.raises(ValueError, match="positive number"):
        doctor.check_learners(8, lab.memory, space, learners=0)


def test_doctor_learners_option_on_the_command_line(capsys):
    from workbench import cli

    status = cli.main(["doctor", "--quick", "--learners", "100000"])
    out = capsys.readouterr().out
    assert status == 1 and "FAIL learners: 100000 do not fit at size lab" in out and "fix: for 100000" in out
    assert "your segments: " in out and shm_prefix() in out
    assert cli.main(["doctor", "--quick", "--learners", "0"]) == 2
    assert "--learners must be a positive number" in capsys.readouterr().err


def shm_prefix() -> str:
    from workbench.memory import shm

    return f"under {shm.PREFIX}*"


def test_the_gpu_line_names_the_devices_or_says_the_kernels_are_simulated():
    found = doctor.check_gpu([("NVIDIA H100 80GB HBM3", 85_000_000_000)], simulated=False)
    assert found.ok and "NVIDIA H100 80GB HBM3 (79.16 GiB)" in found.found and "lesson 10" in found.found
    for simulated, how in ((False, "none that numba's CUDA target sees"), (True, "runs numba's CUDA simulator")):
        line = doctor.check_gpu([], simulated=simulated)
        assert line.ok and how in line.found and "NUMBA_ENABLE_CUDASIM=1" in line.found
        assert "runs simulated" in line.found
    from workbench.kernels import gpu

    assert gpu.devices() == [] or all(total > 0 for _, total in gpu.devices())  # this machine's own answer


def test_another_distribution_that_installs_workbench_is_named():
    assert doctor.check_import_name({"workbench": ["locality-workbench"], "numpy": ["numpy"]}).ok
    clash = doctor.check_import_name({"workbench": ["locality_workbench", "workbench"]})
    assert not clash.ok and "workbench also installs" in clash.found and "pip uninstall workbench" in clash.fix
    assert doctor.check_import_name().ok  # this environment: the workbench alone
