"""Tier directories on a server two Unix users share (issue 35, item 5), as another uid: the
per-user directory ``/tmp/workbench-tiers-<uid>`` has a name anyone can predict. Another user who
makes it first (or puts a symlink there) must not get the learner's tier files, and a learner
whose umask is 000 must not get a directory others can move files out of. Users and namespaces
are made as tests/test_two_users.py makes them (needs root, ``useradd`` and ``unshare``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path

from test_two_users import two_learners  # noqa: F401 (the fixture: two users made for the test)

PLACE = """
import json, numpy as np
from workbench.memory import tiers
try:
    placed = tiers.place("lesson05-mapped", np.full(256, 5.0), "mapped")
except tiers.TierError as error:
    print(json.dumps({"refused": str(error)}))
else:
    print(json.dumps({"placed": str(placed.path)}))
"""

MEDDLE = """
import json, os, sys
base = sys.argv[1]
outcomes = {}
for what, action in (
    ("move their tier directory away", lambda: os.rename(base + "/mapped", base + "/moved")),
    ("plant a directory of mine", lambda: os.mkdir(base + "/planted")),
    ("list their tier files", lambda: os.listdir(base + "/mapped")),
):
    try:
        action()
        outcomes[what] = "ok"
    except OSError as error:
        outcomes[what] = type(error).__name__
print(json.dumps(outcomes))
"""


def _last_json(done) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _base(uid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"workbench-tiers-{uid}"


def test_a_tier_directory_another_user_made_first_or_linked_is_refused(two_learners):  # noqa: F811
    a, b = two_learners
    base = _base(a.uid)
    made = b.run(sys.executable, "-c", f"import os; os.umask(0); os.mkdir({str(base)!r}, 0o777)")  # b is first
    assert made.returncode == 0, made.stderr
    outcome = _last_json(a.run(sys.executable, "-c", PLACE))
    assert "refused" in outcome, f"{a.name}'s tier file went into {b.name}'s directory: {outcome}"
    assert f"belongs to user {b.uid}, not to you ({a.uid})" in outcome["refused"]
    assert "WORKBENCH_TIER_DIR" in outcome["refused"]  # what to do
    assert not any(p.lstat().st_uid == a.uid for p in base.rglob("*")), "something of the learner's is in it"

    # b replaces it with a symlink to a directory of b's
    trap = Path(tempfile.gettempdir()) / f"lwb-trap-{b.name}"
    swapped = b.run(
        sys.executable, "-c", f"import os; os.rmdir({str(base)!r}); os.umask(0); os.mkdir({str(trap)!r}, 0o777); "
        f"os.symlink({str(trap)!r}, {str(base)!r})",
    )  # fmt: skip
    assert swapped.returncode == 0, swapped.stderr
    outcome = _last_json(a.run(sys.executable, "-c", PLACE))
    assert "refused" in outcome and "symbolic link" in outcome["refused"], outcome
    assert list(trap.iterdir()) == []


def test_a_learner_with_umask_000_gets_tier_directories_no_one_else_can_touch(two_learners):  # noqa: F811
    a, b = two_learners
    base = _base(a.uid)
    outcome = _last_json(a.run("sh", "-c", 'umask 000; exec "$0" -c "$1"', sys.executable, PLACE))
    assert "placed" in outcome, outcome
    for path in (base, base / "mapped", Path(outcome["placed"])):
        info = os.lstat(path)
        assert info.st_uid == a.uid and not info.st_mode & 0o077, f"{path} is {stat.filemode(info.st_mode)}"
    outcomes = _last_json(b.run(sys.executable, "-c", MEDDLE, str(base)))
    assert outcomes == dict.fromkeys(outcomes, "PermissionError") and len(outcomes) == 3, outcomes
    assert Path(outcome["placed"]).exists()
