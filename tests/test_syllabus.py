"""One source of truth for the course's times: each lesson's minutes live in its notebook's metadata,
the title cell says the same, and the syllabus's schedule is generated from them (so its clock times,
and what a shorter course saves, add up). The instructor guide's measured run times fit the minutes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from workbench.teach import syllabus

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "course" / "instructor-guide.md"


def test_the_syllabus_schedule_is_the_one_generated_from_the_lessons_metadata():
    text = syllabus.SYLLABUS.read_text()
    assert syllabus.replace_schedule(text, syllabus.render()) == text, (
        "the syllabus's schedule differs from the lessons' metadata: run python -m workbench.teach.syllabus --write"
    )


def test_every_lesson_states_its_minutes_once_and_the_day_adds_up():
    lessons = syllabus.lessons()
    schedule = syllabus.render()
    for number, info in lessons.items():
        assert f"| {info.teaching} / {info.exercises} |" in schedule, number
    for table in schedule.split("## ")[1:]:  # each day: a row starts when the one before it ends
        rows = re.findall(r"^\| (\d\d):(\d\d) \| ([^|]*) \| ([^|]*) \|", table, re.MULTILINE)
        starts = [int(h) * 60 + int(m) for h, m, _, _ in rows]
        for (start, following), (_, _, _, minutes) in zip(zip(starts, starts[1:]), rows, strict=False):
            spent = sum(int(x) for x in re.findall(r"\d+", minutes))
            assert following - start == spent, (table.splitlines()[0], start, minutes)
    dropped = sum(lessons[n].minutes for n in syllabus.SHORTER_COURSE_DROPS)
    hours, rest = divmod(dropped, 60)
    assert f"({hours} h {rest:02d} min together)" in schedule or f"({rest} min together)" in schedule


def _copy_lessons(tmp_path: Path) -> Path:
    notebooks = tmp_path / "notebooks"
    shutil.copytree(syllabus.NOTEBOOKS, notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return notebooks


def test_a_title_cell_that_disagrees_with_the_metadata_is_refused(tmp_path):
    notebooks = _copy_lessons(tmp_path)
    path = next(notebooks.glob("03-*.ipynb"))
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["workbench"]["minutes"]["teaching"] += 5
    nbformat.write(notebook, path)
    with pytest.raises(ValueError, match="title cell should say"):
        syllabus.render(notebooks)
    del notebook.metadata["workbench"]["question"]
    nbformat.write(notebook, path)
    with pytest.raises(ValueError, match="workbench.question"):
        syllabus.render(notebooks)


def test_a_lesson_missing_from_the_schedule_is_refused(tmp_path):
    notebooks = _copy_lessons(tmp_path)
    shutil.copy(next(notebooks.glob("03-*.ipynb")), notebooks / "99-extra.ipynb")
    with pytest.raises(ValueError, match="the notebooks are"):
        syllabus.render(notebooks)


def test_the_instructor_guide_gives_each_lessons_measured_lab_run_time_within_its_minutes():
    from workbench.teach import run_times as bench_lessons

    text = GUIDE.read_text()
    if bench_lessons.BEGIN not in text:
        pytest.skip("the guide's lab run times are not measured on this version (test_bench_lessons checks it says so)")
    rows = bench_lessons.read_table(text)["lessons"]
    lessons = syllabus.lessons()
    assert sorted(rows) == sorted(lessons), "one measured row per lesson"
    for number, row in rows.items():
        assert row["seconds"] < lessons[number].minutes * 60 / 2, (
            f"lesson {number} runs {row['seconds']} s at size lab: more than half its {lessons[number].minutes} minutes"
        )
