"""A learner's own copy of the course: the lessons and the course pages, laid out as the repository has them.

On a server that learners share (a JupyterHub), the workbench is installed once, from a checkout
every user can read (``pip install -e /opt/locality-workbench``); each learner works in a copy in
their home, made by ``workbench course copy`` (the hub runs it as the learner before their server
starts: :func:`workbench.hub.copy_course_before_start`). The copy keeps the repository's layout,
``notebooks/`` beside ``docs/course/``, so the lessons' links (``../docs/course/bibliography.md``)
and the course pages' (``../../notebooks/00-welcome.ipynb``) open in the learner's JupyterLab as
they do on GitHub and on the course site.

A file the learner already has is never replaced: their answers and notes stay. A lesson or page
added to the checkout since the last copy is copied at the next one; a lesson changed there reaches
a learner who has it only if they delete or rename their copy first (then it is copied again).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout the workbench runs from (an editable install)
COURSE_FILES = ("notebooks/[0-9][0-9]-*.ipynb", "docs/course/*.md")  # what a learner's copy holds
COPY_NAME = "locality-workbench"  # the copy's folder in the learner's home


class CourseError(Exception):
    """The course's files cannot be found or copied; the message says what to do."""


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_course` did: the files it copied and those the learner already had (kept)."""

    destination: Path
    copied: tuple[str, ...]
    kept: tuple[str, ...]

    def summary(self) -> str:
        """One line for the learner (or the hub's log)."""
        return (
            f"{len(self.copied)} file(s) copied to {self.destination}, {len(self.kept)} you already had kept; "
            f"open {self.destination / 'notebooks'} in JupyterLab"
        )


def default_destination() -> Path:
    """``~/locality-workbench``: where the hub's default URL opens a learner's JupyterLab."""
    return Path.home() / COPY_NAME


def course_files(source: Path = ROOT) -> list[str]:
    """The course's files under ``source``, as paths relative to it (lessons first, then the pages).

    CourseError when there are none: the workbench was installed from a package, not from a checkout."""
    found = [path.relative_to(source).as_posix() for pattern in COURSE_FILES for path in sorted(source.glob(pattern))]
    if not any(name.startswith("notebooks/") for name in found):
        raise CourseError(
            f"no lessons in {source / 'notebooks'}: the workbench must be installed from a checkout of the repository "
            "(git clone ...; pip install -e CHECKOUT), or name the checkout with --source"
        )
    return found


def copy_course(destination: Path | None = None, source: Path = ROOT) -> Copied:
    """Copy the lessons and the course pages of ``source`` into ``destination`` (default
    :func:`default_destination`), each file the learner does not have yet; a file that is there,
    changed or not, is kept. Folders are made with the learner's umask; files are the learner's."""
    destination = Path(destination).expanduser() if destination is not None else default_destination()
    names = course_files(source)
    if destination.resolve() == source.resolve():
        raise CourseError(f"{destination} is the checkout itself: copy the course somewhere else")
    copied, kept = [], []
    for name in names:
        target = destination / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write = target.open("xb")  # "x": never over a file the learner has
        except FileExistsError:
            kept.append(name)
            continue
        except OSError as error:
            raise CourseError(f"cannot copy {name} to {target}: {error.strerror or error}") from error
        try:
            with write, (source / name).open("rb") as read:
                shutil.copyfileobj(read, write)
        except OSError as error:
            target.unlink(missing_ok=True)  # no half file, which the next copy would keep
            raise CourseError(f"cannot copy {name} to {target}: {error.strerror or error}") from error
        copied.append(name)
    return Copied(destination, tuple(copied), tuple(kept))
