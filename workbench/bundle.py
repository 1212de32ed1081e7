"""``workbench bundle DIR``: every wheel the workbench needs, for a named Python and platform, in one
folder that installs with no package index (``pip install --no-index --find-links DIR``).

HPC compute nodes and many classroom machines reach no package index. A bundle is made on a machine
that does (a login node, a laptop) and carried to the one that does not. It holds the workbench's
own wheel (built from this checkout), the wheel of every dependency for the target (``pip download
--only-binary=:all:`` with the target's Python version, ABI and platform tags), ``pip`` and
``setuptools`` (so an editable install of a checkout works offline too), and three files that say
what it is: ``bundle.json`` (the target, the extras, every file with its SHA-256),
``requirements.txt`` (what was resolved, pinned) and ``INSTALL.txt`` (the commands on the node).

A constraints file (``constraints=``) pins what the resolver may choose: ``make test-oldest`` bundles
the oldest versions the project supports this way (``ci/oldest.txt``) and installs them offline.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.doctor import DISTRIBUTION

MANIFEST = "bundle.json"
REQUIREMENTS = "requirements.txt"
INSTALL = "INSTALL.txt"
# What the bundle adds beside the workbench: an installer, and the build backend pyproject.toml names.
TOOLS = ("pip", "setuptools>=77")
PYTHON = re.compile(r"3\.(\d+)")
WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-.*\.whl$")
PIP_TIMEOUT_S = 1800  # a whole download or build; pip's own --timeout bounds each connection
# What pip's --find-links installs from (pip's own list): a bundle's folder holds no such file but its wheels.
ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz")
ARCHIVES += (".tar.lzma",)
# A wheel's CPython tag (cp312-cp312), which names the one Python version it installs on; abi3 wheels install
# on that version and every later one.
# A manylinux platform tag (PEP 600's manylinux_2_28_x86_64, or a legacy alias) and the glibc it needs.
MANYLINUX = re.compile(r"manylinux(?:_2_(?P<glibc>\d+)|(?P<legacy>1|2010|2014))_(?P<arch>\w+)")
LEGACY_GLIBC = {"1": 5, "2010": 12, "2014": 17}
CPYTHON_TAG = re.compile(r"-cp3(?P<minor>\d+)-(?P<abi>cp3\d+m?|abi3|none)-[^-]+\.whl$")


class BundleError(ValueError):
    """What was asked cannot be bundled (a bad Python version or platform, a folder that is not a bundle,
    no checkout to build from); the message says what to do."""


@dataclass(frozen=True)
class Bundle:
    """A bundle on disk: its folder, the target it was made for and the files it holds."""

    directory: Path
    python: str
    platforms: tuple[str, ...]
    extras: tuple[str, ...]
    files: dict[str, str]  # wheel file name -> sha256

    def install_command(self, python: str = "python3") -> str:
        """The command that installs the workbench from this folder with no package index."""
        what = DISTRIBUTION + (f"[{','.join(self.extras)}]" if self.extras else "")
        return f'{python} -m pip install --no-index --find-links {self.directory} "{what}"'


def this_python() -> str:
    """This interpreter's version as a bundle names it ("3.11")."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def this_platforms() -> tuple[str, ...]:
    """The platform tags pip accepts here, most specific first (``manylinux_2_36_x86_64``, ...,
    ``linux_x86_64``): a bundle for this machine's kind."""
    from packaging import tags

    seen: dict[str, None] = {}
    for tag in tags.sys_tags():
        if tag.platform != "any":
            seen.setdefault(tag.platform, None)
    return tuple(seen) or (sysconfig.get_platform().replace("-", "_").replace(".", "_"),)


def check_python(python: str) -> str:
    """``python`` as "3.N", N the minor version, refused below the project's 3.11."""
    match = PYTHON.fullmatch(python.strip())
    if not match:
        raise BundleError(f"--python is a Python version such as 3.11 or 3.12, got {python!r}")
    if int(match.group(1)) < 11:
        raise BundleError(f"the workbench needs Python 3.11 or newer, got {python}: name the node's python3.11+")
    return python.strip()


def check_platforms(platforms: Sequence[str]) -> tuple[str, ...]:
    """Platform tags as pip's ``--platform`` takes them (``manylinux2014_x86_64``, ``linux_aarch64``)."""
    bad = [p for p in platforms if not re.fullmatch(r"[a-z0-9_]+", p)]
    if bad or not platforms:
        raise BundleError(
            f"a platform is a wheel platform tag such as manylinux2014_x86_64 or manylinux_2_28_aarch64, got "
            f"{', '.join(map(repr, bad)) or 'none'}: see 'python -m pip debug --verbose' on the node for its tags"
        )
    return tuple(platforms)


def _glibc(tag: str) -> tuple[int | None, str]:
    """The glibc minor version a manylinux platform tag needs (None: not a manylinux tag) and its arch."""
    match = MANYLINUX.fullmatch(tag)
    if not match:
        return None, ""
    return (LEGACY_GLIBC[match["legacy"]] if match["legacy"] else int(match["glibc"])), match["arch"]


def with_older_manylinux(platforms: Sequence[str]) -> tuple[str, ...]:
    """``platforms`` with, after each manylinux tag, the older manylinux tags a node of that glibc also
    runs (as pip does for its own machine): pip's ``--platform`` takes a tag literally, and
    ``manylinux_2_28_x86_64`` alone would refuse every wheel tagged only ``manylinux2014_x86_64``."""
    seen: dict[str, None] = {}
    for platform in platforms:
        seen.setdefault(platform, None)
        glibc, arch = _glibc(platform)
        for minor in range(glibc or 0, 4, -1):
            seen.setdefault(f"manylinux_2_{minor}_{arch}", None)
            legacy = {17: "2014", 12: "2010", 5: "1"}.get(minor)
            if legacy:
                seen.setdefault(f"manylinux{legacy}_{arch}", None)
    return tuple(seen)


def glibc_needed(files: Sequence[str]) -> int | None:
    """The newest glibc minor version (2.N) a wheel among ``files`` needs: a wheel runs where any of its
    platform tags does, so each needs its oldest manylinux tag's glibc; None where none needs one."""
    needed = None
    for name in files:
        match = WHEEL.match(name)
        tags = name.removesuffix(".whl").split("-")[-1].split(".") if match else []
        floors = [_glibc(tag)[0] for tag in tags]
        if floors and None not in floors:
            needed = max(needed or 0, min(f for f in floors if f is not None))
    return needed


def checkout() -> Path:
    """The checkout this workbench runs from (its ``pyproject.toml`` names the project), which the
    bundle's own wheel is built from."""
    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or f'name = "{DISTRIBUTION}"' not in pyproject.read_text():
        raise BundleError(
            f"this workbench runs from {root}, which is not a checkout of {DISTRIBUTION} (no pyproject.toml "
            "naming it): make a bundle from the repository (git clone, then 'make wheelhouse')"
        )
    return root


def _installable(path: Path) -> bool:
    """Whether pip's ``--find-links`` would install from ``path`` (a wheel, an sdist, any archive)."""
    return path.name.lower().endswith(ARCHIVES)


def prepare(directory: Path) -> None:
    """Make ``directory`` ready for a bundle: created when missing, emptied of an earlier bundle's wheels;
    any other folder with files in it is refused (nothing of the user's is overwritten), and so is an
    earlier bundle beside which an archive pip would install from was put (an sdist): the new bundle would
    carry it, unlisted, to the node. Other files (the centre's notes) stay."""
    if directory.exists() and not directory.is_dir():
        raise BundleError(f"{directory} is a file, not a folder: name a new folder for the bundle")
    if directory.is_dir() and any(directory.iterdir()):
        if not (directory / MANIFEST).is_file():
            raise BundleError(
                f"{directory} holds files and is not a bundle (no {MANIFEST}): name a new or empty folder"
            )
        strays = sorted(p.name for p in directory.iterdir() if _installable(p) and p.suffix != ".whl")
        if strays:
            raise BundleError(
                f"{directory} holds {', '.join(strays[:5])}{' ...' if len(strays) > 5 else ''} beside an earlier "
                "bundle, which pip would install from too: move it away or name a new folder"
            )
        for old in directory.iterdir():
            if old.is_file() and (old.suffix == ".whl" or old.name in (MANIFEST, REQUIREMENTS, INSTALL)):
                old.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def _pip(arguments: list[str]) -> None:
    """Run pip of this interpreter; its error output becomes the :class:`BundleError`'s message."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise BundleError(f"pip {arguments[0]} failed:\n{tail}")


def download_arguments(
    directory: Path,
    wheel: Path,
    python: str,
    platforms: Sequence[str],
    extras: Sequence[str],
    constraints: Path | None,
) -> list[str]:
    """pip download's arguments for the workbench's wheel and its dependencies on the target."""
    target = ["--python-version", python, "--implementation", "cp", "--abi", f"cp{python.replace('.', '')}"]
    target += ["--abi", "abi3", "--abi", "none"]
    for platform in platforms:
        target += ["--platform", platform]
    what = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    limits = ["--constraint", str(constraints)] if constraints else []
    return ["download", "--dest", str(directory), "--only-binary=:all:", *target, *limits, what, *TOOLS]


def wheels(directory: Path) -> dict[str, str]:
    """Every wheel in ``directory`` with its SHA-256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.whl"))}


def pinned(files: Sequence[str]) -> list[str]:
    """``name==version`` of each wheel file name (the resolver's choice), sorted by name."""
    lines = []
    for name in files:
        match = WHEEL.match(name)
        if match:
            lines.append(f"{match['name'].replace('_', '-').lower()}=={match['version']}")
    return sorted(lines)


def write(
    directory: Path | str,
    python: str | None = None,
    platforms: Sequence[str] | None = None,
    extras: Sequence[str] = (),
    constraints: Path | str | None = None,
    announce: Callable[[str], None] | None = None,
) -> Bundle:
    """Write a bundle into ``directory`` for ``python`` ("3.11"; default this one) on ``platforms``
    (wheel platform tags; default this machine's), with the project's ``extras`` (such as ``gpu``) and
    pip's ``constraints`` file, if given. Needs a package index (run it where one is reachable) and a
    checkout to build the workbench's own wheel from. ``announce`` is told, once everything asked was
    checked, that the minutes of pip begin. Returns the :class:`Bundle`."""
    directory = Path(directory).expanduser().resolve()
    python = check_python(python or this_python())
    platforms = with_older_manylinux(check_platforms(platforms or this_platforms()))
    extras = tuple(sorted({e.strip() for e in extras if e.strip()}))
    root = checkout()
    known = _extras(root)
    unknown = [e for e in extras if e not in known]
    if unknown:
        raise BundleError(f"no extra {', '.join(unknown)} in {DISTRIBUTION}: its extras are {', '.join(known)}")
    if constraints is not None and not Path(constraints).is_file():
        missing = "is a folder" if Path(constraints).is_dir() else "does not exist"
        raise BundleError(f"the constraints file {constraints} {missing}: name a pip constraints file")
    prepare(directory)
    if announce is not None:
        announce(f"bundling for Python {python} (pip wheel, then pip download: minutes) ...")
    _pip(["wheel", "--no-deps", "--wheel-dir", str(directory), str(root)])
    (wheel,) = directory.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl")
    constraint_path = Path(constraints).resolve() if constraints else None
    _pip(download_arguments(directory, wheel, python, platforms, extras, constraint_path))
    files = wheels(directory)
    bundle = Bundle(directory, python, platforms, extras, files)
    manifest = {
        "distribution": DISTRIBUTION,
        "python": python,
        "platforms": list(platforms),
        "extras": list(extras),
        "constraints": str(constraints) if constraints else None,
        "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    (directory / REQUIREMENTS).write_text("\n".join(pinned(list(files))) + "\n")
    (directory / INSTALL).write_text(install_text(bundle))
    return bundle


def _extras(root: Path) -> list[str]:
    """The optional dependencies ``pyproject.toml`` declares."""
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return sorted(project.get("optional-dependencies", {}))


def install_text(bundle: Bundle) -> str:
    """INSTALL.txt: how to carry the bundle and install it on a node with no package index."""
    glibc = glibc_needed(list(bundle.files))
    needs = (
        f"Its wheels need glibc 2.{glibc} or newer on the node ('ldd --version' there says which it has); for an\n"
        "older node make it again naming the node's tag, such as --platform manylinux_2_17_x86_64.\n\n"
        if glibc
        else ""
    )
    more = f" (and {len(bundle.platforms) - 1} more platform tags)" if len(bundle.platforms) > 1 else ""
    return (
        f"Locality Workbench, bundled for Python {bundle.python} on {bundle.platforms[0]}{more}"
        f"{' (extras: ' + ', '.join(bundle.extras) + ')' if bundle.extras else ''}: {len(bundle.files)} wheels.\n\n"
        f"{needs}"
        "Carry this folder to the node (scp -r, rsync, or a shared file system), then on the node:\n\n"
        f"  python{bundle.python} -m venv ~/lwb-venv\n"
        f"  {bundle.install_command('~/lwb-venv/bin/python').replace(str(bundle.directory), '<this folder>')}\n"
        "  ~/lwb-venv/bin/workbench doctor --quick\n\n"
        "The lessons and the benchmarks' sources are in the repository: carry a checkout too and run\n"
        "'make lab VENV=~/lwb-venv WHEELS=<this folder>' (or make bench-node) in it: WHEELS= makes every\n"
        "install there take its wheels from this folder (without it, make asks the package index).\n"
        f"{bundle.directory.name}/{MANIFEST} lists every file with its SHA-256; {REQUIREMENTS} what was resolved.\n"
    )


def read(directory: Path | str) -> Bundle:
    """The bundle in ``directory``, its files checked against its manifest: a file missing, changed or
    added (a wheel or any archive pip would install from), a link in place of a file, or wheels for
    another Python than the manifest names, is refused. The check finds damage on the way (a copy cut
    short, a file renamed or replaced); the manifest is not signed, so it is no defence against someone
    who rewrites the manifest too."""
    directory = Path(directory).expanduser().resolve()
    path = directory / MANIFEST
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise BundleError(f"{path} is not a plain file: make the bundle again")
    try:
        manifest = json.loads(path.read_text())
        files = {str(k): str(v) for k, v in manifest["files"].items()}
        bundle = Bundle(
            directory,
            check_python(str(manifest["python"])),
            check_platforms([str(p) for p in manifest["platforms"]]),
            tuple(str(e) for e in manifest["extras"]),
            files,
        )
    except (FileNotFoundError, NotADirectoryError):
        raise BundleError(f"{directory} is not a bundle (no {MANIFEST}): make one with 'workbench bundle'") from None
    except OSError as error:
        raise BundleError(f"{path} cannot be read ({error.strerror}): make the bundle again") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise BundleError(f"{path} is not a bundle's manifest ({error}): make the bundle again") from None
    entries = sorted((p for p in directory.iterdir() if _installable(p)), key=lambda p: p.name)
    linked = [p.name for p in entries if p.is_symlink() or not p.is_file()]
    if linked:
        raise BundleError(
            f"{', '.join(linked[:5])}{' ...' if len(linked) > 5 else ''} in {directory} is a link or not a plain "
            "file: a bundle holds the files themselves (a link need not survive the copy to the node); make it again"
        )
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in entries}
    if found != files:
        changed = sorted(set(found) ^ set(files) | {n for n in set(found) & set(files) if found[n] != files[n]})
        raise BundleError(
            f"the bundle in {directory} does not match its manifest ({', '.join(changed[:5])}"
            f"{' ...' if len(changed) > 5 else ''}): make it again rather than install what changed"
        )
    minor = int(bundle.python.split(".")[1])
    other = [
        name
        for name in files
        if (tag := CPYTHON_TAG.search(name))
        and (int(tag["minor"]) > minor if tag["abi"] == "abi3" else int(tag["minor"]) != minor)
    ]
    if other:
        raise BundleError(
            f"{path} names Python {bundle.python} but {other[0]} is for another Python: make the bundle again"
        )
    return bundle
