"""``workbench bundle``: what it asks pip for, what it refuses, and how it checks a bundle it is handed.

The real thing (a bundle downloaded, installed with no package index inside a network namespace with
no network, and the smoke subset run there) is ``make test-oldest``, which CI runs after ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from workbench import bundle, cli

ROOT = Path(__file__).resolve().parents[1]


def _fake_bundle(directory: Path, files: dict[str, bytes]) -> None:
    """A folder that looks as ``bundle.write`` leaves it, with ``files`` as its wheels."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    manifest = {
        "distribution": "locality-workbench",
        "python": "3.11",
        "platforms": ["manylinux2014_x86_64"],
        "extras": [],
        "files": bundle.wheels(directory),
    }
    (directory / bundle.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("python", "words"),
    [("3.10", "needs Python 3.11 or newer"), ("python3", "a Python version such as 3.11"), ("3", "such as 3.11")],
)
def test_a_python_the_workbench_cannot_run_on_is_refused(python, words):
    with pytest.raises(bundle.BundleError, match=words):
        bundle.check_python(python)


def test_a_platform_that_is_not_a_wheel_tag_is_refused_naming_how_to_find_the_nodes():
    with pytest.raises(bundle.BundleError, match="pip debug --verbose"):
        bundle.check_platforms(["linux-x86_64"])
    assert bundle.check_platforms(["manylinux2014_x86_64"]) == ("manylinux2014_x86_64",)


def test_this_machines_platforms_are_what_pip_accepts_here():
    platforms = bundle.this_platforms()
    assert platforms and "any" not in platforms
    assert all(bundle.check_platforms([p]) for p in platforms)


def test_pip_is_asked_for_binary_wheels_of_the_target_with_the_extras_and_constraints(tmp_path):
    wheel = tmp_path / "locality_workbench-0.1.0-py3-none-any.whl"
    arguments = bundle.download_arguments(
        tmp_path, wheel, "3.12", ["manylinux_2_28_x86_64", "manylinux2014_x86_64"], ["gpu"], tmp_path / "c.txt"
    )
    assert arguments[:4] == ["download", "--dest", str(tmp_path), "--only-binary=:all:"]
    pairs = list(zip(arguments, arguments[1:], strict=False))
    assert ("--python-version", "3.12") in pairs and ("--abi", "cp312") in pairs
    assert ("--platform", "manylinux_2_28_x86_64") in pairs and ("--platform", "manylinux2014_x86_64") in pairs
    assert ("--constraint", str(tmp_path / "c.txt")) in pairs
    assert f"{wheel}[gpu]" in arguments and "pip" in arguments and "setuptools>=77" in arguments


def test_a_folder_with_other_files_is_never_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(bundle.BundleError, match="not a bundle"):
        bundle.prepare(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    with pytest.raises(bundle.BundleError, match="is a file"):
        bundle.prepare(tmp_path / "notes.txt")


def test_an_earlier_bundle_is_replaced_but_what_else_is_in_its_folder_stays(tmp_path):
    _fake_bundle(tmp_path, {"a-1.0-py3-none-any.whl": b"a"})
    (tmp_path / "README-site.txt").write_text("the centre's notes")
    bundle.prepare(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README-site.txt"]


def test_a_bundle_whose_wheels_changed_on_the_way_is_refused(tmp_path):
    _fake_bundle(tmp_path, {"a-1.0-py3-none-any.whl": b"a", "b-2.0-py3-none-any.whl": b"b"})
    assert sorted(bundle.read(tmp_path).files) == ["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]
    (tmp_path / "b-2.0-py3-none-any.whl").write_bytes(b"evil")
    with pytest.raises(bundle.BundleError, match="does not match its manifest.*b-2.0"):
        bundle.read(tmp_path)
    (tmp_path / "b-2.0-py3-none-any.whl").write_bytes(b"b")
    (tmp_path / "c-3.0-py3-none-any.whl").write_bytes(b"c")  # a wheel slipped in
    with pytest.raises(bundle.BundleError, match="c-3.0"):
        bundle.read(tmp_path)


@pytest.mark.parametrize("manifest", ["{", "[]", '{"files": {}}', '{"python": "2.7", "platforms": [], "files": {}}'])
def test_a_manifest_that_is_not_one_is_a_clear_error(tmp_path, manifest):
    (tmp_path / bundle.MANIFEST).write_text(manifest)
    with pytest.raises(bundle.BundleError, match="manifest|Python 3.11|make the bundle again"):
        bundle.read(tmp_path)
    with pytest.raises(bundle.BundleError, match="not a bundle"):
        bundle.read(tmp_path / "elsewhere")


def test_the_pinned_list_names_each_wheel_once_in_pip_spelling():
    files = ["Jinja2-3.1.4-py3-none-any.whl", "numpy-1.26.0-cp311-cp311-manylinux_2_17_x86_64.whl", "x.txt"]
    assert bundle.pinned(files) == ["jinja2==3.1.4", "numpy==1.26.0"]


def test_an_unknown_extra_or_missing_constraints_file_is_refused_before_anything_is_downloaded(tmp_path):
    with pytest.raises(bundle.BundleError, match="no extra gpux.*gpu"):
        bundle.write(tmp_path / "b", extras=["gpux"])
    with pytest.raises(bundle.BundleError, match="constraints file"):
        bundle.write(tmp_path / "b", constraints=tmp_path / "missing.txt")
    assert not (tmp_path / "b").exists()


def test_the_command_line_checks_a_bundle_and_says_what_is_wrong_in_one_line(tmp_path, capsys):
    _fake_bundle(tmp_path / "ok", {"a-1.0-py3-none-any.whl": b"a"})
    assert cli.main(["bundle", str(tmp_path / "ok"), "--check"]) == 0
    assert "1 wheels for Python 3.11" in capsys.readouterr().out
    assert cli.main(["bundle", str(tmp_path / "new"), "--python", "3.9"]) == 2
    said = capsys.readouterr()
    assert "3.11 or newer" in said.err and not said.out and not (tmp_path / "new").exists()
    assert cli.main(["bundle", str(tmp_path / "new"), "--extra", "gpux", "--constraint", str(tmp_path)]) == 2
    said = capsys.readouterr()  # refused before the "minutes" of pip are announced
    assert "no extra gpux" in said.err and not said.out


def test_the_install_text_says_how_to_carry_and_install_it(tmp_path):
    made = bundle.Bundle(tmp_path, "3.11", ("manylinux2014_x86_64",), ("gpu",), {"a-1.0-py3-none-any.whl": "0"})
    text = bundle.install_text(made)
    assert "--no-index --find-links <this folder>" in text and '"locality-workbench[gpu]"' in text
    assert "python3.11 -m venv" in text
    assert "WHEELS=<this folder>" in text  # make lab on the node asks no index


def test_a_manylinux_tag_brings_the_older_tags_a_node_of_that_glibc_runs():
    platforms = bundle.with_older_manylinux(["manylinux_2_28_x86_64"])
    assert platforms[0] == "manylinux_2_28_x86_64"  # pip's --platform takes a tag literally: these are asked too
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(platforms)
    assert "manylinux_2_29_x86_64" not in platforms
    assert bundle.with_older_manylinux(["linux_x86_64"]) == ("linux_x86_64",)


def test_the_install_text_names_the_glibc_the_wheels_need():
    files = {
        "numpy-2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": "0",  # runs from glibc 2.17
        "cryptography-51-cp311-abi3-manylinux_2_34_x86_64.whl": "0",
        "click-8.0-py3-none-any.whl": "0",
    }
    assert bundle.glibc_needed(list(files)) == 34
    made = bundle.Bundle(Path("b"), "3.12", ("manylinux_2_34_x86_64", "manylinux_2_33_x86_64"), (), files)
    assert "glibc 2.34 or newer" in bundle.install_text(made)
    assert bundle.glibc_needed(["click-8.0-py3-none-any.whl"]) is None


def test_an_archive_beside_an_earlier_bundle_is_refused_not_carried_unlisted(tmp_path):
    _fake_bundle(tmp_path, {"a-1.0-py3-none-any.whl": b"a"})
    (tmp_path / "a-9.9.tar.gz").write_bytes(b"an sdist pip --find-links would build and install")
    with pytest.raises(bundle.BundleError, match=r"a-9\.9\.tar\.gz .*pip would install from"):
        bundle.prepare(tmp_path)
    with pytest.raises(bundle.BundleError, match=r"does not match its manifest \(a-9\.9\.tar\.gz\)"):
        bundle.read(tmp_path)


def test_a_link_in_a_bundle_or_a_manifest_that_is_a_folder_is_refused_in_one_line(tmp_path, capsys):
    _fake_bundle(tmp_path / "b", {"a-1.0-py3-none-any.whl": b"a"})
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    (tmp_path / "b" / "a-1.0-py3-none-any.whl").unlink()
    (tmp_path / "b" / "a-1.0-py3-none-any.whl").symlink_to(tmp_path / "a-1.0-py3-none-any.whl")  # same bytes
    with pytest.raises(bundle.BundleError, match="is a link"):
        bundle.read(tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / bundle.MANIFEST).mkdir()
    (tmp_path / "d").write_text("a file")
    for where in ("c", "d"):
        assert cli.main(["bundle", str(tmp_path / where), "--check"]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_manifest_naming_another_python_than_its_wheels_is_refused(tmp_path):
    _fake_bundle(tmp_path, {"numpy-2.0-cp312-cp312-manylinux_2_17_x86_64.whl": b"n", "c-1-cp310-abi3-any.whl": b"c"})
    with pytest.raises(bundle.BundleError, match="names Python 3.11 but numpy-2.0-cp312"):
        bundle.read(tmp_path)


def _offline(tmp_path: Path, venv: Path, **env: str) -> subprocess.CompletedProcess:
    """.ci/offline with an empty bundle, where every ``unshare`` is refused (a stand-in first on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "unshare").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "unshare").chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    command = [str(ROOT / ".ci" / "offline"), str(wheels), str(venv), "locality-workbench", "--", "true"]
    path = f"{bin_dir}:{os.environ['PATH']}"
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": path, **env})


def test_the_offline_check_fails_in_ci_where_no_network_namespace_can_be_made(tmp_path):
    done = _offline(tmp_path, tmp_path / "venv", OFFLINE_REQUIRED="1")
    assert done.returncode == 1 and "OFFLINE_REQUIRED=1" in done.stderr
    assert not (tmp_path / "venv").exists()  # nothing was installed without isolation


def test_the_offline_check_removes_only_a_virtual_environment(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    done = _offline(tmp_path, precious)
    assert done.returncode == 2 and "is not a virtual environment" in done.stderr
    assert (precious / "notes.txt").read_text() == "mine"
