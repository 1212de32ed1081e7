"""The workbench's settings (workbench/settings.py, issue 50): one reader of the environment, a snapshot
a session keeps, and two sessions in one process each with its own."""

from __future__ import annotations

import ast
import json
import os
import pickle
from pathlib import Path

import pytest

import workbench
from workbench import settings
from workbench.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"


def _environment_uses(path: Path) -> list[str]:
    """Where ``path`` reads or writes the process's environment: ``os.environ``, ``os.getenv``,
    ``os.putenv``, ``os.unsetenv`` or those names imported from ``os``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in ("environ", "getenv", "putenv", "unsetenv", "environb"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} from os import {a.name}"
                for a in node.names
                if a.name in ("environ", "getenv", "putenv", "unsetenv", "environb")
            ]
    return found


def test_no_module_but_the_settings_module_reads_or_writes_the_environment():
    uses = {
        str(p.relative_to(ROOT)): _environment_uses(p) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "settings.py"
    }
    stray = [u for found in uses.values() for u in found]
    assert not stray, "read the environment through workbench.settings (Settings.read(), export):\n" + "\n".join(stray)
    assert _environment_uses(PACKAGE / "settings.py"), "the settings module is where the environment is read"


def test_a_snapshot_keeps_what_the_environment_said_when_it_was_read(monkeypatch):
    monkeypatch.setenv(settings.SIZE, "  ci ")
    monkeypatch.delenv(settings.TLS, raising=False)
    taken = Settings.read()
    monkeypatch.setenv(settings.SIZE, "full")
    monkeypatch.setenv(settings.TLS, "0")
    assert taken.get(settings.SIZE) == "ci" and taken.given(settings.SIZE) == "  ci "
    assert taken.get(settings.TLS) == "" and taken.given(settings.TLS) is None
    assert taken.get(settings.TLS, "1") == "1"
    with pytest.raises(TypeError):
        taken.environ[settings.SIZE] = "lab"  # read-only
    assert Settings.read().get(settings.SIZE) == "full" == settings.now(settings.SIZE)  # a point read, as get reads
    monkeypatch.setenv(settings.TLS, "  ")
    assert settings.now(settings.TLS) == "" and settings.now(settings.TLS, "1") == "1"
    mine = Settings({"WORKBENCH_SLURM_JOBS": "2", "WORKBENCH_SLURM_CORES": " ", "PATH": "/bin"})
    assert mine.prefixed(settings.SLURM_PREFIX) == {"WORKBENCH_SLURM_JOBS": "2"}
    assert mine.child_environment(EXTRA="1") == {**mine.environ, "EXTRA": "1"}
    assert hash(mine) == hash(Settings(dict(mine.environ))) and mine == Settings(dict(mine.environ))
    assert len({mine, Settings(dict(mine.environ)), Settings({})}) == 2  # a request holding one is hashable too


def test_settings_that_are_not_a_mapping_of_strings_are_refused_where_made_and_at_start(monkeypatch):
    with pytest.raises(TypeError, match=r"Settings takes a mapping .* got a NoneType"):
        Settings(None)
    with pytest.raises(TypeError, match=r"'WORKBENCH_TLS' is a int \(0\); give it as a string"):
        Settings({settings.TLS: 0})
    monkeypatch.setenv("WORKBENCH_TEST_SECRET", "token-1234")
    for given in (os.environ, {settings.TLS: "0"}):
        with pytest.raises(ValueError, match=r"settings must be a workbench.settings.Settings, got a") as info:
            workbench.start(n_workers=1, settings=given, timeout=60)
        assert "token-1234" not in str(info.value) and "Settings({**os.environ" in str(info.value)


def test_settings_pickle_as_their_mapping():
    mine = Settings({settings.TLS: "0"})
    back = pickle.loads(pickle.dumps(mine))
    assert back == mine and back.get(settings.TLS) == "0"
    with pytest.raises(TypeError):
        back.environ[settings.TLS] = "1"  # read-only again


def test_export_sets_only_what_is_unset_unless_told_and_unexport_puts_it_back(monkeypatch):
    name = "WORKBENCH_TEST_EXPORT"
    monkeypatch.delenv(name, raising=False)
    assert settings.export(name, "a") == "a"
    assert settings.export(name, "b") == "a"  # set already: kept
    assert settings.export(name, "b", replace=True) == "b"
    settings.unexport(name, "a")
    assert os.environ[name] == "a"
    settings.unexport(name, None)
    assert name not in os.environ


def test_every_name_of_the_workbench_has_its_meaning():
    names = {v for k, v in vars(settings).items() if k.isupper() and isinstance(v, str) and k != "NAMES"}
    described = {n.removesuffix("<FIELD>") for n in settings.NAMES}
    assert names == described, names ^ described


def test_two_sessions_in_one_process_keep_their_own_settings(monkeypatch):
    """Session A with plain TCP, a per-learner cap and a DRAM budget, session B with TLS and none of
    them, both open at once: each cluster and its workers are as its own settings say, and what the
    process's environment says later reaches neither."""
    for name in (settings.TLS, settings.MAX_MEMORY, settings.DRAM_BUDGET):
        monkeypatch.delenv(name, raising=False)
    plain = Settings({**os.environ, settings.TLS: "0", settings.MAX_MEMORY: "1GiB", settings.DRAM_BUDGET: "1048576"})
    with workbench.start(n_workers=1, settings=plain, timeout=60) as a:
        monkeypatch.setenv(settings.TLS, "maybe")  # what a later cell sets: a session already open ignores it
        with pytest.raises(ValueError, match=r"\$WORKBENCH_TLS is 1 .* got 'maybe'"):
            workbench.start(n_workers=1, timeout=60)  # a new session reads the environment, and refuses it
        with workbench.start(n_workers=1, settings=Settings({**os.environ, settings.TLS: "1"}), timeout=60) as b:
            assert a.client.scheduler.address.startswith("tcp://")
            assert b.client.scheduler.address.startswith("tls://")
            assert a.settings.get(settings.MAX_MEMORY) == "1GiB" and b.settings.get(settings.MAX_MEMORY) == ""
            limits = {
                name: sorted(w["memory_limit"] for w in s.client.scheduler_info()["workers"].values())
                for name, s in (("a", a), ("b", b))
            }
            assert limits["a"] == [2**30], limits  # A's cap, on its one worker
            assert limits["b"] != [2**30], limits

            def budget() -> str:
                return Settings.read().get(settings.DRAM_BUDGET)

            assert list(a.run(budget).values()) == ["1048576"]  # carried to A's workers...
            assert list(b.run(budget).values()) == [""]  # ...and not to B's
        assert a.settings.get(settings.TLS) == "0"
    with pytest.raises(ValueError, match="settings must be a workbench.settings.Settings"):
        workbench.start(n_workers=1, settings={settings.TLS: "0"})


def test_workbench_settings_lists_every_variable_its_meaning_and_value(monkeypatch, capsys):
    from workbench.cli import main

    monkeypatch.setenv(settings.SIZE, "ci")
    monkeypatch.setenv("WORKBENCH_SLURM_JOBS", "2")
    monkeypatch.delenv(settings.TLS, raising=False)
    rows = {row["name"]: row for row in settings.described()}
    assert set(rows) == set(settings.NAMES)
    assert rows[settings.SIZE]["value"] == "ci" and rows[settings.TLS]["value"] is None
    assert rows["WORKBENCH_SLURM_<FIELD>"]["value"] == "WORKBENCH_SLURM_JOBS=2"
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "WORKBENCH_SIZE = 'ci'" in out and "WORKBENCH_TLS = (not set)" in out
    assert main(["settings", "--json"]) == 0
    assert {row["name"] for row in json.loads(capsys.readouterr().out)} == set(settings.NAMES)


def test_numbers_in_settings_are_read_in_the_digits_0_9_alone(monkeypatch):
    """int() read WORKBENCH_SLURM_JOBS='١٢' (Arabic-Indic digits) as 12: every whole number and amount of
    a setting is read by one helper, which takes the digits 0-9 only."""
    from workbench.runtime import clusters
    from workbench.runtime.strategies import tiers as tier_strategies

    assert settings.whole_number("WORKBENCH_SLURM_JOBS", " 12 ") == 12
    for text in ("١٢", "+5", "1_000", "-1", "1.0", "²"):
        with pytest.raises(
            ValueError, match=r"\$WORKBENCH_SLURM_JOBS is a whole number >= 0 written in the digits 0-9"
        ):
            settings.whole_number("WORKBENCH_SLURM_JOBS", text)
    with pytest.raises(ValueError, match=r"\$WORKBENCH_SLURM_JOBS is a whole number >= 1 .*got '١٢'"):
        clusters.SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_JOBS": "١٢"}))
    with pytest.raises(ValueError, match=r"\$WORKBENCH_SLURM_MEMORY is an amount of memory.*got '٢GiB'"):
        clusters.SlurmOptions.from_settings(Settings({"WORKBENCH_SLURM_MEMORY": "٢GiB"}))
    with pytest.raises(ValueError, match=r"\$WORKBENCH_MAX_MEMORY is an amount of memory.*got '١GiB'"):
        clusters.max_memory(Settings({settings.MAX_MEMORY: "١GiB"}))
    assert clusters.max_memory(Settings({settings.MAX_MEMORY: "1.5GiB"})) == 3 * 2**29
    from workbench.memory import tier_set, tiers

    with tier_set.using(tiers.new_set("a test", Settings({settings.DRAM_BUDGET: "١٢"}))):
        with pytest.raises(ValueError, match=r"\$WORKBENCH_DRAM_BUDGET is a whole number >= 0 .*got '١٢'"):
            tier_strategies.settings()


def test_workbench_settings_says_which_values_are_invalid_and_why(monkeypatch, capsys):
    """It listed WORKBENCH_SLURM_JOBS=abc, WORKBENCH_GPU_BYTES=lots and WORKBENCH_MAX_MEMORY=1.5 as any
    other value; each is now flagged with its reader's reason, and the command fails."""
    from workbench.cli import main

    for name in (settings.TLS, settings.DRAM_BUDGET):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORKBENCH_SLURM_JOBS", "abc")
    monkeypatch.setenv("WORKBENCH_SLURM_CORES", "2")
    monkeypatch.setenv(settings.GPU_BYTES, "lots")
    monkeypatch.setenv(settings.MAX_MEMORY, "1.5")
    rows = {row["name"]: row for row in settings.described()}
    assert "$WORKBENCH_SLURM_JOBS is a whole number >= 1" in rows["WORKBENCH_SLURM_<FIELD>"]["error"]
    assert "WORKBENCH_SLURM_CORES" not in rows["WORKBENCH_SLURM_<FIELD>"]["error"]
    assert "$WORKBENCH_GPU_BYTES is an amount of memory" in rows[settings.GPU_BYTES]["error"]
    assert "got '1.5'" in rows[settings.MAX_MEMORY]["error"]
    assert rows[settings.TLS]["error"] is None and rows[settings.DRAM_BUDGET]["error"] is None  # unset: the default
    assert main(["settings"]) == 1
    out, err = capsys.readouterr()
    assert "WORKBENCH_GPU_BYTES = 'lots'" in out and "    INVALID: $WORKBENCH_GPU_BYTES is an amount of memory" in out
    assert "invalid: WORKBENCH_MAX_MEMORY, WORKBENCH_SLURM_<FIELD>, WORKBENCH_GPU_BYTES" in err
    assert main(["settings", "--json"]) == 1
    errors = {row["name"]: row["error"] for row in json.loads(capsys.readouterr().out)}
    assert errors[settings.MAX_MEMORY] == rows[settings.MAX_MEMORY]["error"] and errors[settings.SIZE] is None
