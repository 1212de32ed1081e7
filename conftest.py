"""The code blocks of README.md and docs/ are tests (sybil; the glue is tests/doc_blocks.py).

This file sits at the repository root because pytest asks a directory's conftest files, and only
those, about the files in it: README.md is here. The test suite's own fixtures are in tests/.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))  # where pytest puts it for tests/ too (its conftest's directory)

from doc_blocks import markdown_sybil, skip_at_block  # noqa: E402

pytest_collect_file = markdown_sybil(ROOT).pytest()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped block is reported at its page and line, with its reason."""
    outcome = yield
    skip_at_block(item, outcome.get_result())
