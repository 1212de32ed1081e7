"""``workbench bench lessons``: each lesson's Run All timed against its budget, and the instructor
guide's table, which is that benchmark's output (never typed by hand). No time is asserted: a test
that can fail by timing is a defect; the benchmark prints its goals, met or not."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from workbench import cli
from workbench.bench.report import Report
from workbench.teach import run_times as lessons
from workbench.teach import syllabus

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "course" / "instructor-guide.md"


def _lesson_folder(folder: Path) -> Path:
    """A folder with one short lesson, ``00-welcome.ipynb``: a parameters cell and two code cells (what
    ``--notebooks`` times as it would an instructor's edited copy; lesson 00 itself runs in
    test_notebooks)."""
    import nbformat

    folder.mkdir()
    cells = [
        nbformat.v4.new_code_cell("size = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import time\n\ntime.sleep(0.2)  # the slowest cell"),
        nbformat.v4.new_code_cell("print(size)"),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / "00-welcome.ipynb")
    return folder


@pytest.mark.notebook
@pytest.mark.timeout(600)
def test_bench_lessons_runs_a_lesson_at_ci_and_prints_it_against_its_budget(tmp_path, capsys):
    """Through the command line, as an instructor runs it on a folder of lessons: the lesson executed,
    its time and status, its slowest cells, a goal against the ci budget, the machine, the progress;
    then the same report as the guide's Markdown table, read back."""
    folder = _lesson_folder(tmp_path / "mine")
    out = tmp_path / "executed"
    argv = ["bench", "lessons", "--only", "00", "--json", "--out", str(out), "--notebooks", str(folder)]
    status = cli.main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    report, err = Report.from_json(json.loads(captured.out)), captured.err
    assert "bench lessons: size ci, expected about" in err and "00-welcome: running at size ci" in err
    assert "lessons [####################] 1/1 00-welcome" in err  # progress as it goes
    [row] = report.rows
    assert (row["lesson"], row["title"], row["status"], row["errors"]) == ("00", "welcome", "ok", [])
    assert row["seconds"] > 0 and row["minutes"] == syllabus.lessons()["00"].minutes
    assert 1 <= len(row["slowest"]) <= lessons.SLOWEST
    assert row["slowest"] == sorted(row["slowest"], key=lambda c: -c["seconds"])
    assert row["slowest"][0]["seconds"] >= 0.2  # the cell that sleeps
    assert (out / "00-welcome.ipynb").exists()  # --out keeps the executed copy
    [g] = report.goals
    assert g["goal"] == "lesson 00's Run All at size ci <= 60 s" and g["measured"] == row["seconds"]
    assert g["threshold"] == lessons.BUDGET_S["ci"] and g["better"] == "lower" and g["unit"] == "s"
    assert g["met"] == (row["seconds"] <= 60)
    assert report.machine["cpu"] and len(report.parts["load"]["before"]) == 3
    text = lessons.format_report(report)
    assert "00 welcome" in text and "budget per lesson: 60 s" in text and "goal: lesson 00's Run All" in text
    table = lessons.read_table(lessons.markdown_table(report))
    assert table["size"] == "ci" and table["cpu"] == report.machine["cpu"]
    assert table["lessons"] == {"00": {"title": "welcome", "seconds": round(row["seconds"]), "status": "ok"}}


def test_a_folder_without_lessons_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "notes.ipynb").write_text("{}")
    assert cli.main(["bench", "lessons", "--notebooks", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"workbench: --notebooks {tmp_path}: no lessons (NN-name.ipynb) there")
    with pytest.raises(ValueError, match="no lessons"):
        lessons.run("ci", notebooks_dir=tmp_path / "missing")


def test_the_instructor_guides_run_times_are_the_benchmarks_table_at_lab_on_a_named_machine():
    text = GUIDE.read_text()
    section = text.split("## Lesson run times at size lab", 1)[1]
    if lessons.BEGIN not in text:
        # not yet measured on this version: the page says so and names the command, and holds no
        # hand-typed table in its place
        assert "Not measured on this version" in section and lessons.COMMAND in section.replace("\n", " ")
        assert "| lesson |" not in section, "a run-time table that is not the benchmark's output"
        return
    table = lessons.read_table(text)
    assert table["size"] == "lab" and table["cpu"].strip() and table["cores"] >= 1
    assert list(table["lessons"]) == [p.name[:2] for p in lessons.notebooks()], "one row per lesson, in order"
    for number, row in table["lessons"].items():
        assert row["title"] == lessons.notebooks([number])[0].stem[3:]


def _report(seconds: dict[str, float], status: str = "ok", load: float = 0.5) -> Report:
    rows = [
        {"lesson": n, "title": f"lesson-{n}", "seconds": s, "status": status, "errors": [], "minutes": 40,
         "slowest": [{"cell": 4, "seconds": s / 2, "first_line": "sweep = run(a | b, `x`)"}]}
        for n, s in seconds.items()
    ]  # fmt: skip
    machine = {"cpu": "Some CPU @ 2.0GHz"}
    load_average = {"before": [load, 0, 0], "after": [load, 0, 0]}
    parts = {"budget_s": 150.0, "total_s": sum(seconds.values()), "markdown": True, "load": load_average}
    return Report("lessons", "lab", rows=rows, parts=parts, counts={"cores": 2}, machine=machine)


def test_the_table_says_the_machine_its_load_and_each_lesson_and_reads_back():
    quiet = lessons.format_report(_report({"00": 23.4, "03": 97.0}))
    assert quiet.startswith(lessons.BEGIN) and quiet.rstrip().endswith(lessons.END)
    assert "on Some CPU @ 2.0GHz, 2 cores, load average 0.5 at the start, 0.5 at the end (a quiet machine)" in quiet
    assert "| 03 lesson-03 | 97 s | 150 s | 40 | 48 s: `sweep = run(a / b, x)` |" in quiet  # no stray | or `
    assert lessons.read_table(quiet)["lessons"]["00"] == {"title": "lesson-00", "seconds": 23.0, "status": "ok"}
    busy = lessons.format_report(_report({"00": 60.0}, status="timed out", load=9.0))
    assert "above its 2 cores: other work shared the machine" in busy and "| 60 s (timed out) |" in busy
    assert lessons.read_table(busy)["lessons"]["00"]["status"] == "timed out"


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t.replace(lessons.BEGIN, ""), "no table of lesson run times"),
        (lambda t: t.replace("Measured by", "Timed by"), "does not name the machine"),
        (lambda t: t.replace("| slowest cell |", "| note |"), "header is not the benchmark's"),
        (lambda t: t.replace("| 23 s |", "| about 23 s |"), "a row is not in the benchmark's shape"),
    ],
)
def test_a_table_not_in_the_benchmarks_shape_is_refused_with_what_is_wrong(edit, words):
    text = lessons.markdown_table(_report({"00": 23.0}))
    with pytest.raises(ValueError, match=words):
        lessons.read_table(edit(text))


def test_a_lesson_that_did_not_finish_has_no_figure_and_its_goal_is_not_met(monkeypatch):
    monkeypatch.setattr(
        lessons,
        "time_lesson",
        lambda path, size, out: {"lesson": path.name[:2], "title": path.stem[3:], "notebook": path.name,
                                 "seconds": 5.0, "status": "timed out", "errors": ["CellTimeoutError: ..."],
                                 "slowest": []},
    )  # fmt: skip
    report = lessons.run("lab", only=["00", "03"])
    assert [r["lesson"] for r in report.rows] == ["00", "03"]
    assert all(math.isnan(g["measured"]) and not g["met"] for g in report.goals)
    assert report.goals[0]["bound"] == "it did not run to its end (timed out)"
    assert "TIMED OUT" in lessons.format_report(dataclasses.replace(report, parts={**report.parts, "markdown": False}))
    assert lessons.run("full", only=["00"]).goals == ()  # full has no budget: no goal
    with pytest.raises(ValueError, match="no lesson 42: the lessons are 00, 01"):
        lessons.notebooks(["42"])


def test_bench_all_leaves_the_lessons_out_unless_only_names_them(capsys):
    planned = cli._planned(argparse.Namespace(only=None, size=None, lessons=None))
    assert "lessons" not in [p.name for p in planned]
    assert f"bench all: lessons left out: {cli.BENCHMARKS['lessons'].only_when_named}" in capsys.readouterr().err
    [named] = cli._planned(argparse.Namespace(only=["lessons"], size=None, lessons=None))
    assert (named.name, named.size) == ("lessons", "ci")
    assert named.command()[-5:] == ["bench", "lessons", "--json", "--size", "ci"]


def test_the_headless_output_widget_keeps_what_it_captures_and_sends_nothing_on_the_shell_socket():
    """nbclient's stand-in for an Output widget echoes each captured output to the kernel on the shell
    socket, on which nbclient is waiting for the cell's reply: a send there can hide the reply until
    the cell's time limit (a panel's Run cell of 3 s took 300 s). The lessons' engine does not echo."""
    from types import SimpleNamespace

    from nbclient.output_widget import OutputWidget
    from papermill.engines import papermill_engines

    from workbench.teach.execute import ENGINE, headless_engine

    engine, headless = headless_engine()
    assert papermill_engines.get_engine(ENGINE) is engine
    message = {
        "msg_type": "stream",
        "header": {"msg_type": "stream"},
        "parent_header": {"msg_id": "cell"},
        "content": {"name": "stdout", "text": "running 32 blocks per worker"},
    }
    sends = {}
    for kind in (OutputWidget, headless):
        sent: list = []
        client = SimpleNamespace(
            shell_channel=SimpleNamespace(send=sent.append),
            session=SimpleNamespace(msg=lambda kind, content, parent, metadata: {"content": content}),
        )
        executor = SimpleNamespace(widget_state={"panel": {}})
        widget = kind("panel", {"outputs": []}, client, executor)
        widget.output([], message, None, 0)
        assert executor.widget_state["panel"]["outputs"][0]["text"] == "running 32 blocks per worker"
        sends[kind] = len(sent)
    assert sends == {OutputWidget: 1, headless: 0}
