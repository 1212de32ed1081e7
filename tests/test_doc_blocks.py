"""The glue that runs the documentation's code blocks (tests/doc_blocks.py) catches what it should.

Two made-up pages run in a pytest of their own: a block that fails, a python block during which Dask
logs an error, a shell block that exits 0 with a traceback or an ERROR record on stderr, one that
outlives its time limit, a skipped block with its reason; and what
the first page changed (an environment variable, a registered strategy, a process left running, its
working directory) must be gone when the second page runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, {str(TESTS)!r})
from doc_blocks import markdown_sybil, skip_at_block

pytest_collect_file = markdown_sybil(Path(__file__).parent, ("*.md",), shell_timeout=3).pytest()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    skip_at_block(item, outcome.get_result())
"""

PAGE_A = """# a page

<!-- invisible-code-block: python
import os
from pathlib import Path

os.environ["LWB_DOC_GLUE"] = "set by page a"
start_dir = os.getcwd()
-->

```python
from workbench.runtime.strategies import Strategy, register
from workbench.runtime.strategies.blocks import DaskPlan


class Registered(Strategy):
    name = "doc-glue-registered"
    description = "registered by page a"
    plan = DaskPlan


register(Registered())
assert Path(start_dir) == repository / "notebooks", start_dir
```

```python
assert 1 + 1 == 3, "a python block that fails"
```

```python
import logging

logging.getLogger("distributed.core").error("a scheduler-side error a notebook would show")
```

```bash
.venv/bin/python -c "import os, sys; print(os.path.realpath(sys.prefix))" > prefix.txt
echo "$LWB_DOC_GLUE" > seen.txt
sleep 300 &
echo $! > left.pid
```

```bash
echo about to fail; false; echo not reached
```

```bash
echo 'Traceback (most recent call last):' >&2
```

```bash
echo '2026-01-01 10:00:00,000 - distributed.core - ERROR - lost' >&2
```

```bash
echo 'a warning is no error' >&2
```

```bash
sleep 30
```

<!-- skip: next "needs a machine this test does not have" -->

```python
raise AssertionError("a skipped block ran")
```

<!-- invisible-code-block: python
made = [(repository / name).read_text().strip() for name in ("prefix.txt", "seen.txt", "left.pid")]
Path(os.environ["LWB_DOC_REPORT"]).write_text("\\n".join([str(repository), *made]))
-->
"""

PAGE_B = """# b page, run after a

```python
import os

from workbench.runtime import strategies

assert "LWB_DOC_GLUE" not in os.environ, "page a's environment variable outlived it"
assert "doc-glue-registered" not in strategies.names(), "page a's strategy outlived it"
```
"""


def test_the_glue_fails_skips_and_cleans_up(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "a.md").write_text(PAGE_A)
    (tmp_path / "b.md").write_text(PAGE_B)
    report = tmp_path / "report.txt"
    env = {**os.environ, "LWB_DOC_REPORT": str(report)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "a.md", "b.md"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    failed = re.findall(r"^FAILED a\.md::sybil:docs,line:(\d+)", output, re.MULTILINE)
    lines = PAGE_A.splitlines()
    failed_blocks = [lines[int(n)] for n in failed]  # the first line of each failing block's code
    assert failed_blocks == [
        'assert 1 + 1 == 3, "a python block that fails"',
        "import logging",
        "echo about to fail; false; echo not reached",
        "echo 'Traceback (most recent call last):' >&2",
        "echo '2026-01-01 10:00:00,000 - distributed.core - ERROR - lost' >&2",
        "sleep 30",
    ], output
    assert "exited with status 1" in output and "about to fail" in output and "not reached" not in output
    assert "an error was logged while it ran:\ndistributed.core - ERROR - a scheduler-side error" in output
    assert "exited 0, but its standard error holds an error" in output
    assert "did not finish within 3 s" in output
    assert re.search(r"SKIPPED \[1\] a\.md:\d+: needs a machine this test does not have", output), output
    assert not re.search(r"^ERROR [ab]\.md", output, re.MULTILINE), f"a page's setup or teardown failed:\n{output}"
    assert re.search(r"^PASSED b\.md", output, re.MULTILINE), f"page b should see page a undone:\n{output}"

    repository, prefix, seen, pid = report.read_text().splitlines()
    assert Path(prefix).resolve() == Path(sys.prefix).resolve(), ".venv/bin/ is the environment running the tests"
    assert seen == "set by page a", "a bash block sees the environment the page's python blocks set"
    assert not Path(repository).exists(), "the page's directory outlived it"
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE, (
        "the process a bash block left running outlived its page"
    )
