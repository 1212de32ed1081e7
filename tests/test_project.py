"""The project's own files agree with each other: dependencies, commands, lesson shape."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_dependencies() -> set[str]:
    """The project's dependencies and its test extra's, an extra of the project itself (the test extra
    names ``locality-workbench[test-core]``) read as what it stands for."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = {_name(r) for r in project["dependencies"]}
    for requirement in extras["test"]:
        if _name(requirement) == project["name"]:
            inner = re.search(r"\[(.*)\]", requirement).group(1)
            names |= {_name(r) for extra in inner.split(",") for r in extras[extra.strip()]}
        else:
            names.add(_name(requirement))
    return names


def _conda_dependencies(path: Path) -> set[str]:
    env = yaml.safe_load(path.read_text())
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, str) and _name(dep) not in {"python", "pip"}:
            names.add(_name(dep))
    return names


@pytest.mark.parametrize("env_file", ["environment.yml", "binder/environment.yml"])
def test_dependency_lists_agree(env_file):
    assert _conda_dependencies(ROOT / env_file) == _pyproject_dependencies()


def test_binder_installs_the_project_and_starts_small():
    assert "pip install --no-deps -e ." in (ROOT / "binder/postBuild").read_text()
    assert "WORKBENCH_SIZE" in (ROOT / "binder/start").read_text()


def test_ci_runs_make_test_and_make_has_the_two_commands():
    assert "make test" in (ROOT / ".ci/run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab:", "test:", "clean:"):
        assert re.search(rf"^{target}", makefile, re.M), target
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme


def test_make_lab_installs_no_test_extra_and_make_test_adds_it_once(tmp_path):
    """The Makefile's installs, with a stand-in for .venv's python that records each call: `make lab`
    installs the project alone; `make test` after it adds the test extra once; on a fresh clone
    `make test` installs both."""
    import shutil
    import subprocess

    def make(repository: Path, *args: str) -> str:
        done = subprocess.run(["make", *args], cwd=repository, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    learner, fresh = tmp_path / "learner", tmp_path / "fresh"
    for repository in (learner, fresh):
        repository.mkdir()
        shutil.copy(ROOT / "Makefile", repository)
        shutil.copy(ROOT / "pyproject.toml", repository)
    python = learner / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls"\n')
    python.chmod(0o755)
    calls = python.parent / "calls"
    lab = make(learner, "-n", "lab")  # what make lab runs, without running JupyterLab
    assert re.search(r"pip install --quiet +-e \.$", lab, re.M) and "[test]" not in lab and "jupyter lab" in lab
    offline = make(learner, "-n", "lab", "WHEELS=wheels")  # a bundle carried to a node: no index asked
    assert f"pip install --quiet --no-index --find-links {learner / 'wheels'} -e ." in offline
    make(learner, "install")
    assert calls.read_text().splitlines() == ["-m pip install --quiet -e ."]
    assert "pip install" not in make(learner, "-n", "lab")
    test = make(learner, "-n", "test")
    assert "pip install" in test and '-e ".[test]"' in test and "-e .\n" not in test
    make(learner, "install-test")
    make(learner, "install-test")
    assert calls.read_text().splitlines() == ["-m pip install --quiet -e .", "-m pip install --quiet -e .[test]"]
    test = make(learner, "-n", "test")
    assert "pip install" not in test and "ruff check" in test and "-m pytest" in test
    fresh_test = make(fresh, "-n", "test")  # a fresh clone: the venv, the project, then the extra
    assert "-m venv .venv" in fresh_test and re.search(r"-e \.$", fresh_test, re.M) and '-e ".[test]"' in fresh_test


def test_kernels_never_import_the_runtime():
    """The kernels import only each other and the settings module (which imports nothing of the workbench)."""
    for path in (ROOT / "workbench" / "kernels").rglob("*.py"):
        text = path.read_text()
        imports = re.findall(r"^\s*(?:from|import)\s+(workbench(?:\.\w+)*)", text, re.M)
        assert all(name.startswith("workbench.kernels") or name == "workbench.settings" for name in imports), (
            path,
            imports,
        )
    settings = (ROOT / "workbench" / "settings.py").read_text()
    assert not re.findall(r"^\s*(?:from|import)\s+workbench", settings, re.M), "workbench.settings imports the package"


def test_the_kernels_and_datasets_import_without_the_runtime():
    """``import workbench`` loads nothing, so the kernels and the datasets come without Dask."""
    code = (
        "import sys\n"
        "import workbench.kernels, workbench.datasets\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('distributed', 'workbench.runtime')))\n"
        "assert not loaded, loaded\n"
        "import workbench\n"
        "assert callable(workbench.start) and 'distributed' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_distribution_that_owns_datasets_and_kernels_installs_beside_the_workbench(tmp_path):
    """Hugging Face's ``datasets`` and PyPI's ``kernels`` own those top-level names: a stand-in for
    them, installed by pip into the environment's path, and the workbench import side by side."""
    source = tmp_path / "standin"
    for package in ("datasets", "kernels"):
        (source / package).mkdir(parents=True)
        (source / package / "__init__.py").write_text(f"OWNER = 'stand-in {package}'\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "standin-owner"\nversion = "1.0"\n[tool.setuptools]\npackages = ["datasets", "kernels"]\n'
    )
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation"]
    subprocess.run([*install, "--target", str(site), str(source)], check=True, timeout=300)
    code = (
        "import datasets, kernels, workbench.datasets, workbench.kernels\n"
        "assert (datasets.OWNER, kernels.OWNER) == ('stand-in datasets', 'stand-in kernels')\n"
        "assert workbench.datasets.get('histogram', 'ci').spec('points').shape[0] > 0\n"
        "assert callable(workbench.kernels.histogram1d)\n"
    )
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])  # the stand-in first
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env={**os.environ, "PYTHONPATH": path})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_follows_the_lesson_template(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"  # papermill needs both
    assert nb["metadata"]["language_info"]["name"] == "python"
    cells = nb["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code), "commit notebooks without outputs"
    title = "".join(cells[0]["source"])
    assert re.match(r"# \d\d · ", title), "title cell: '# NN · Title'"
    for heading in ("**Objectives**", "**Time:**", "**Prerequisites:**"):
        assert heading in title, heading
    parameters = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(parameters) == 1 and "size" in "".join(parameters[0]["source"])
    text = "\n".join("".join(c["source"]) for c in cells)
    assert "## Key points" in text and "## Exercise" in text
    assert not [c for c in code if "solution" in c["metadata"].get("tags", [])], "solutions live in the manual"
    assert "hint(" in text and "reveal(" in text, "the exercise intro says how to ask for help"
    assert "teardown(session" in "".join(code[-1]["source"]), "the last cell offers to close the session (teardown)"


def test_every_jupyterlab_the_project_starts_has_no_news_toast():
    """make lab, Binder and the browser test put jupyter-config/ first, and JupyterLab reads it there."""
    import json
    import os
    import subprocess
    import sys

    assert "$(LAB_CONFIG) $(LAB_DASK) $(BIN)/jupyter lab" in (ROOT / "Makefile").read_text()
    assert "jupyter-config" in (ROOT / "binder/start").read_text()
    assert "jupyter-config" in (ROOT / "workbench/doctor.py").read_text()  # it starts the browser tests' labs
    assert "doctor.jupyter_lab" in (ROOT / "tests/browser_helpers.py").read_text()  # the browser tests' labs
    assert "lesson_lab(" in (ROOT / "tests/test_browser.py").read_text()
    probe = (
        "import json; from jupyterlab_server.config import get_page_config; "
        "print(json.dumps(get_page_config([])['disabledExtensions']))"
    )
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config")}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert "@jupyterlab/apputils-extension:announcements" in json.loads(out.stdout.strip().splitlines()[-1])


def test_binder_postbuild_installs_the_project_in_a_fresh_environment(tmp_path):
    """binder/postBuild run as repo2docker runs it: in a fresh virtual environment whose
    dependencies are present (as the conda environment's are), it installs the project, and
    binder/start then gives a kernel the course's settings."""
    import os
    import subprocess
    import sys
    import sysconfig
    import venv

    env_dir = tmp_path / "binder-env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the conda environment's packages: this suite's, seen through a .pth file (nothing copied)
    (Path(site) / "binder-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        **os.environ,
        "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("PYTHONPATH", None)
    env.pop("WORKBENCH_SIZE", None)
    env.pop("WORKBENCH_DASHBOARD", None)
    done = subprocess.run(
        ["bash", str(ROOT / "binder" / "postBuild")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    probe = (
        "import os, workbench, dask; from distributed.utils import format_dashboard_link; "
        "print(workbench.__file__, workbench.resolve_size(), os.environ['WORKBENCH_DASHBOARD'], "
        "format_dashboard_link('h', 8787))"
    )
    env["JUPYTERHUB_SERVICE_PREFIX"] = "/user/learner/"
    done = subprocess.run(
        ["bash", str(ROOT / "binder" / "start"), str(python), "-c", probe],
        cwd=tmp_path,  # not the project's directory: the import must come from what postBuild installed
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    where, size, dashboard, link = done.stdout.split()
    assert Path(where).is_relative_to(ROOT) and sys.prefix not in where
    assert (size, dashboard, link) == ("ci", "1", "/user/learner/proxy/8787/status")


TIER_MODULES = {"memory/tiers.py", "memory/tier_base.py", "memory/gpu.py"}  # the tiers and their one registry
RESULT_READERS = ("bench/", "teach/")  # read measured rows and learners' answers by the tier names they show


def _tier_name_comparisons(source: str, names: set[str]) -> list[int]:
    """The lines where ``source`` compares something (``==``, ``!=``, ``in``, ``not in``) with one of
    ``names`` written out (a source that holds none of them quoted is not parsed)."""
    if not any(f"{quote}{name}{quote}" in source for name in names for quote in "\"'"):
        return []

    def literals(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(literals(e) for e in node.elts))
        return set()

    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare) and set().union(*map(literals, (node.left, *node.comparators))) & names
    ]


def test_only_the_tier_modules_compare_tier_names():
    """Placement, the store and the strategies ask a tier's flags and methods (``tiers.lookup(name)``),
    never its name: a new tier touches its own module and the registry only. Benchmarks and lessons
    read results by the tier names they show, and may."""
    from workbench.memory import tiers

    names = set(tiers.TIERS)
    assert _tier_name_comparisons('if tier == "disk" or kind in ("gpu",):\n    pass\n', names) == [1, 1]
    package = ROOT / "workbench"
    found = [
        f"{relative}:{line}"
        for path in sorted(package.rglob("*.py"))
        if (relative := path.relative_to(package).as_posix()) not in TIER_MODULES
        and not relative.startswith(RESULT_READERS)
        for line in _tier_name_comparisons(path.read_text(), names)
    ]
    assert not found, f"tier names compared outside the tier modules (ask the tier's flags): {found}"
