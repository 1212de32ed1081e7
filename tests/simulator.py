"""Run the pytest files of device cases in numba's CUDA simulator, in one pytest process of their own.

``NUMBA_ENABLE_CUDASIM`` must be set before numba's CUDA module is first imported, which the suite's
own process has done (Dask imports it); so the device cases run in a child process with it set. All
of :data:`CASES` run in one child (its start, imports and cluster are paid once), the first time a
test asks for one of them; each test then reads its own file's outcome from the child's JUnit report.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("gpu_sim_cases.py", "gpu_sim_tier_cases.py")  # every file of device cases the suite runs simulated


@functools.cache
def _simulated_run() -> tuple[int, str, dict[str, dict[str, int]]]:
    """The child's exit code, its output, and per case file its cases' counts (passed, failed, skipped)."""
    with tempfile.TemporaryDirectory(prefix="workbench-sim-") as here:
        report = Path(here) / "junit.xml"
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval",
             f"--junitxml={report}", *(str(ROOT / "tests" / cases) for cases in CASES)],
            cwd=ROOT,
            env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )  # fmt: skip
        counts: dict[str, dict[str, int]] = {cases: {"passed": 0, "failed": 0, "skipped": 0} for cases in CASES}
        if report.exists():
            for case in ElementTree.parse(report).iter("testcase"):
                module = case.get("classname", "").rpartition(".")[2] or case.get("classname", "")
                tags = {child.tag for child in case}
                outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
                file = f"{module.split('.')[0]}.py"
                if file in counts:
                    counts[file][outcome] += 1
    return result.returncode, result.stdout[-6000:] + result.stderr[-3000:], counts


def run_simulated(cases: str) -> None:
    """Check that every case of ``tests/<cases>`` (one of :data:`CASES`) passed under the simulator; an
    AssertionError with the child's output if one failed or was skipped (a skipped device case would be
    a check that did not run), or if the child failed before any ran. Without nbval's plugin: the cases
    are Python, and its import (nbformat's JSON-schema formats) takes seconds."""
    assert cases in CASES, f"add {cases} to simulator.CASES"
    returncode, output, counts = _simulated_run()
    mine = counts[cases]
    assert mine["passed"] and not mine["failed"] and not mine["skipped"], f"{cases}: {mine}\n{output}"
    assert returncode == 0 or any(c["failed"] for c in counts.values()), output
