"""``workbench course copy``: a learner's copy of the lessons and the course pages, in the repository's
layout (so their links open), that never replaces a file the learner has. The hub runs it as each
learner before their server starts (tests/test_hub.py runs that under a real hub)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_course_docs import LESSONS, PAGES, broken_links

from workbench import cli, hub
from workbench.teach import course

ROOT = Path(__file__).resolve().parents[1]


def test_the_copy_holds_the_lessons_and_the_pages_as_the_repository_lays_them_out(tmp_path):
    done = course.copy_course(tmp_path / "mine")
    wanted = [p.relative_to(ROOT).as_posix() for p in [*LESSONS, *PAGES]]
    assert sorted(done.copied) == sorted(wanted) and done.kept == ()
    for name in wanted:
        assert (tmp_path / "mine" / name).read_bytes() == (ROOT / name).read_bytes(), name
    # every relative link of a lesson or a page opens its file in the copy, as in the repository
    copied = {tmp_path / "mine" / name for name in wanted}
    for page in copied:
        assert broken_links(page, tmp_path / "mine", copied) == [], page.name
    assert f"{len(wanted)} file(s) copied" in done.summary()


def test_a_file_the_learner_has_is_kept_and_a_missing_one_is_copied_again(tmp_path):
    course.copy_course(tmp_path)
    answered = tmp_path / "notebooks" / "00-welcome.ipynb"
    answered.write_text("the learner's answers")
    (tmp_path / "notebooks" / "03-splitter.ipynb").unlink()
    again = course.copy_course(tmp_path)
    assert again.copied == ("notebooks/03-splitter.ipynb",)
    assert "notebooks/00-welcome.ipynb" in again.kept and answered.read_text() == "the learner's answers"


def test_a_copy_without_a_checkout_or_into_the_checkout_is_refused(tmp_path):
    with pytest.raises(course.CourseError, match="installed from a checkout"):
        course.copy_course(tmp_path / "mine", source=tmp_path)
    with pytest.raises(course.CourseError, match="the checkout itself"):
        course.copy_course(ROOT)
    assert not (tmp_path / "mine").exists()


def test_the_command_copies_and_says_what_it_did(tmp_path, capsys):
    assert cli.main(["course", "copy", "--to", str(tmp_path / "c")]) == 0
    assert f"copied to {tmp_path / 'c'}" in capsys.readouterr().out
    assert cli.main(["course", "copy", "--to", str(tmp_path / "c"), "--source", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert "no lessons in" in said and said.count("\n") == 1  # one line, no traceback


def test_the_hub_runs_the_command_into_the_place_its_default_url_opens():
    command = hub.copy_command("/home/ada")
    assert command[:3] == [sys.executable, "-m", "workbench.cli"]
    assert command[3:] == ["course", "copy", "--to", "/home/ada/locality-workbench"]
    assert hub.COURSE_URL == "/lab/tree/locality-workbench/notebooks"
