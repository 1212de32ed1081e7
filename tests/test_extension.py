"""A lesson's extension: run at once at size ci (so CI executes its code), a button at lab and full
that Run All does not press; the button says how long, runs the experiment and shows its output."""

from __future__ import annotations

import pandas as pd
import pytest
from bokeh.plotting import figure

from workbench.teach import extension as ext

NAME = "03 kNN fit sweep"


def test_at_ci_the_extension_runs_where_it_stands(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(ext, "display", shown.append)
    table = pd.DataFrame({"x": [1]})
    assert ext.extension(NAME, lambda: (table, None, "a report"), "ci") is None
    assert shown == [table] and capsys.readouterr().out == "a report\n"  # text printed, not its repr


@pytest.mark.parametrize("size", ["lab", "full"])
def test_at_lab_and_full_it_is_a_button_that_runs_nothing_until_pressed(size):
    ran = []
    widget = ext.extension(NAME, lambda: ran.append(1), size)
    button = widget.children[0].children[0]
    assert button.description == f"Run this extension ({ext.about(ext.ABOUT_S[NAME][size])})"
    assert "Run All does not run it" in widget.children[0].children[1].value
    assert ran == []
    button.click()
    assert ran == [1]


def test_a_click_shows_what_the_experiment_returns_and_says_when_it_is_done(monkeypatch):
    shown, drawn = [], []
    monkeypatch.setattr(ext, "display", shown.append)
    monkeypatch.setattr("bokeh.io.show", drawn.append)
    plot = figure()
    table = pd.DataFrame({"x": [1]})
    one = ext.Extension(NAME, lambda: (plot, table), 60)
    one.run()
    assert drawn == [plot] and shown == [table]
    assert "done in" in one.status.value and not one.button.disabled


def test_a_failed_run_says_so_and_frees_the_button():
    def broken():
        raise RuntimeError("no workers")

    one = ext.Extension(NAME, broken, 60)
    with pytest.raises(RuntimeError, match="no workers"):  # outside IPython the Output widget lets it through
        one.run()
    assert "failed" in one.status.value and not one.button.disabled


def test_a_closed_session_is_said_not_run_into():
    class Closed:
        def closed(self) -> bool:
            return True

    ran = []
    one = ext.Extension(NAME, lambda: ran.append(1), 60, session=Closed())
    one.run()
    assert ran == [] and "cluster is closed" in one.status.value and "workbench.start()" in one.status.value


def test_names_and_sizes_are_checked_and_the_wait_is_said_as_people_say_it():
    with pytest.raises(ValueError, match="no extension 'nosuch': the extensions are 02 Table II, 03 kNN fit sweep"):
        ext.extension("nosuch", lambda: None, "lab")
    with pytest.raises(ValueError, match="size must be one of"):
        ext.extension(NAME, lambda: None, "huge")
    assert [ext.about(s) for s in (3, 44, 89, 90, 200)] == ["about 10 s", "about 40 s", "about 90 s", "about 2 min",
                                                              "about 3 min"]  # fmt: skip
