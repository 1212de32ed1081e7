"""Self-checking exercises: every check says "not yet" to a wrong answer, with what is wrong; the
registry refuses author mistakes and never lets a learner's error stop the notebook.

WRONG holds, for every declared exercise, a wrong answer and a phrase its message must contain: a
check that cannot fail would have no entry that passes this test.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import types

import numpy as np
import pandas as pd
import pytest

from workbench.lab import capstone
from workbench.teach import (
    MIME,
    NOT_YET,
    PASSED,
    Feedback,
    check,
    exercise,
    exercises,
    get,
    hint,
    manual,
    markup,
    reveal,
)
from workbench.teach import registry as teach_registry


def _runs():
    blocks = np.repeat([2, 8, 32], 3)
    return pd.DataFrame({"blocks": blocks, "seconds": 0.01 + 0.002 * blocks})


KERNEL = pd.DataFrame({"variant": ["numba, 1 thread"], "seconds": [0.1]})


class FakeExperiment:
    """The few queries of an Experiment that the checks read."""

    def __init__(self, rows: list[dict], metadata: dict | None = None, iterations: int = 1):
        self.frame = pd.DataFrame(rows)
        self.results = self.frame
        self.metadata = metadata or {}
        self.iterations = iterations

    def summary(self):
        return self.frame

    def runs(self):
        return self.frame

    def moved(self):
        return self.frame.set_index(["blocks_per_worker", "variant"])[["seconds", "tasks"]]

    def points(self):
        return [{"iterations": self.iterations}]


def _sweep(split_tasks=(3, 3), blocks_tasks=(3, 65), blocks_s=(1.0, 4.0)):
    return FakeExperiment(
        [
            {"blocks_per_worker": 1, "variant": "split", "seconds": 1.0, "tasks": split_tasks[0], "MB_moved": 0.0},
            {"blocks_per_worker": 32, "variant": "split", "seconds": 1.0, "tasks": split_tasks[1], "MB_moved": 0.0},
            {
                "blocks_per_worker": 1,
                "variant": "blocks",
                "seconds": blocks_s[0],
                "tasks": blocks_tasks[0],
                "MB_moved": 0.5,
            },
            {
                "blocks_per_worker": 32,
                "variant": "blocks",
                "seconds": blocks_s[1],
                "tasks": blocks_tasks[1],
                "MB_moved": 2.0,
            },
        ],
        {"size": "ci", "dataset_bytes": 8_000_000},
    )


TABLE1 = pd.DataFrame(
    {"sweep": ["dims"] * 3, "value": [8, 64, 128], "ci_low_pct": [-5, -30, -40], "ci_high_pct": [4, -10, -20]}
)
TIERS = FakeExperiment(
    [
        {"variant": "dram", "seconds": 1.0},
        {"variant": "mapped", "seconds": 1.1},
        {"variant": "mapped-cold", "seconds": 2.0},
    ]
)
CURVES = {
    "channels": [{"nbytes": n, "MBps": m} for n, m in ((8, 1.0), (1024, 100.0), (2**20, 3000.0))],
    "eager": [{"nbytes": n, "MBps": m} for n, m in ((8, 1.0), (1024, 80.0), (2**20, 300.0))],
}
TABLES = [{"model": "processes", "tasks": 1, "vmpte_kib": 132, "bytes": 64 * 2**20}]
TOUCHES = [
    {"mode": "4k pages", "bytes": n << 20, "pages": n << 8, "faults": n << 8, "faults_per_page": 1.0, "ns_per_page": 9}
    for n in (4, 16, 64)
]
PAIR = [types.SimpleNamespace(tier=lambda: "mapped"), types.SimpleNamespace(tier=lambda: "dram")]  # two stored objects
CONTENTION = {
    "rows": [
        {"tasks": 1, "processes_per_s": 10.0, "threads_per_s": 10.0},
        {"tasks": 4, "processes_per_s": 40.0, "threads_per_s": 10.0},
    ]
}


def _sum_everywhere(rank):
    return 0.0


def _no_reduction(rank):
    return (0, None, 0)


class _NotPersistent:
    pass


# exercise -> (answers and context, phrase the "not yet" message must contain); "session" and
# "planted_run" are filled in from fixtures.
WALKS = [  # lesson 09's walks table: seconds of a row and a column walk at two orders
    {"order": order, "walk": walk, "seconds": seconds, "stride_bytes": 8 if walk == "rows" else order * 8}
    for order, walk, seconds in (
        (1000, "rows", 0.001),
        (1000, "columns", 0.007),
        (1024, "rows", 0.001),
        (1024, "columns", 0.05),
    )
]
TILES = [{"order": 1024, "tile": tile, "seconds": s} for tile, s in ((8, 0.01), (64, 0.02), (1024, 0.04))]
PLACEMENT = {  # lesson 10's gpu_experiments.kmeans_placement at size ci (byte counts: the simulator's are exact)
    "points_bytes": 16_384,
    "iterations": 3,
    "resident_bytes_to_device": 16_384,
    "copied_bytes_to_device": 49_152,
}
STORE_RUN = {"active_bytes_off_device": 0, "non_active_bytes_off_device": 16_384, "values_bytes": 16_384}
COPIED_FULL = 32_000_000 * 4 * 8 * 10  # size full: points x dims x 8 bytes, once per iteration
WRONG = {
    "00.1": (dict(per_task_ms=0.002, tasks_to_match_kernel=50, runs=_runs(), kernel_times=KERNEL), "that is seconds"),
    "01.1": (
        dict(moved_fewest_mb=0.5, moved_most_mb=2e6, blocks_to_outweigh=30, experiment=_sweep()),
        "you gave bytes",
    ),
    "02.1": (dict(first_significant_dims=8, table1=TABLE1), "includes 0"),
    "02.2": (dict(attached_sum=_sum_everywhere, session="session"), "shared array sums to"),
    "03.1": (dict(follows_workers="blocks", follows_blocks="split", sweep=_sweep()), "does not follow the workers"),
    "03.2": (
        dict(slowdown_histogram=0.25, slowdown_knn=4.0, suffers_more="knn", sweep=_sweep(), knn=_sweep()),
        "you divided split by blocks",
    ),
    "04.1": (dict(Sensor2=_NotPersistent, store=None), "derived from Sensor"),
    "04.2": (
        dict(
            nonactive_mb_per_iteration=30.0,
            active_mb_per_iteration=0.01,
            km=FakeExperiment(
                [{"variant": "non-active", "MB_moved": 30.0}, {"variant": "active", "MB_moved": 0.01}], iterations=3
            ),
        ),
        "divide by the 3 iterations",
    ),
    "04.3": (
        dict(probe_info={"workers": ["a"], "aliases": ["probe"]}, alias_still_there=False, store=None),
        "replicate()",
    ),
    "05.1": (dict(small_cache={"hits": 0}, big_cache={"hits": 1}), "should be the tiers.DramCache object"),
    "05.2": (dict(small=TIERS, cold_penalty_small=1.1, cold_penalty_big=2.0, hook=TIERS), "not mapped-cold over dram"),
    "05.3": (dict(pair=PAIR, tiers_after_reads=["mapped", "dram"]), "read the first object three times"),
    "06.1": (dict(fan_out=_sum_everywhere, session="session"), "should each return 1000.0"),
    "06.2": (dict(ratio_at_smallest=1.0, ratio_at_largest=0.1, curves=CURVES), "upside down"),
    "06.3": (dict(extremes=_no_reduction, session="session"), "allreduce('max') gave"),
    "07.1": (dict(touches=TOUCHES, faults_per_page={4: 1.0, 16: 1.0, 64: 0.002}), "of 64 MiB"),
    "07.2": (dict(processes_mib=8.25, threads_mib=8.25, tables=TABLES), "processes_mib is"),
    "07.3": (dict(processes_over_threads=0.25, contention=CONTENTION), "you divided threads by processes"),
    "08.1": (dict(calibration="argument", planted_run="planted_run", session="session"), "travels inside every task"),
    "08.2": (
        dict(blocks_per_worker=32, kmeans_strategy="blocks", planted_run="planted_run", session="session"),
        "too little work",
    ),
    "08.3": (dict(statistics_strategy="fetch", planted_run="planted_run", session="session"), "to the client"),
    "08.4": (dict(queries_strategy="non-active", planted_run="planted_run", session="session"), "travel to the code"),
    "08.5": (
        dict(
            fixed=capstone.Pipeline(calibration="broadcast", statistics="blocks", kmeans="split", queries="active"),
            planted_run="planted_run",
            session="session",
        ),
        "once per worker",
    ),
    "08.6": (dict(diagnosis="seen"), "should be the report of observe(session)"),
    "09.1": (dict(column_slowdown=7.0, column_stride_bytes=1000, walks=WALKS), "counts elements, not bytes"),
    "09.2": (dict(best_tile=1024, tiled_speedup=1.0, tiles=TILES), "that is the untiled transpose"),
    "09.3": (dict(worker_cores={"tcp://nowhere:1": {0}}, session="session"), "name every worker"),
    "10.1": (
        dict(resident_bytes=16_384, copied_bytes=16_384, copied_bytes_full=COPIED_FULL, placement=PLACEMENT),
        "one copy of the points",
    ),
    "10.2": (dict(moves_values="active", bytes_off_device=0, store_run=STORE_RUN), "where the values lie"),
    "10.3": (dict(make_room="lesson10-points"), "should be a function"),  # the device cases: tests/test_lesson10.py
}


@pytest.fixture(scope="module")
def planted_run(session):
    return capstone.run(session, "ci", capstone.PLANTED)


def test_every_exercise_has_a_wrong_answer_here():
    assert sorted(WRONG) == [e.id for e in exercises()]


@pytest.mark.parametrize("exercise_id", sorted(WRONG))
def test_a_wrong_answer_is_not_yet_with_what_is_wrong(exercise_id, session, planted_run):
    values, phrase = WRONG[exercise_id]
    fixtures = {"session": session, "planted_run": planted_run}
    values = {k: fixtures.get(v, v) if isinstance(v, str) else v for k, v in values.items()}
    feedback = check(exercise_id, **values)
    assert feedback.status == NOT_YET, feedback
    assert phrase in feedback.message, feedback.message
    assert feedback.hint  # something to try next
    stub = check(exercise_id, **{**values, **{a: ... for a in get(exercise_id).answers}})
    assert stub.status == NOT_YET and "no answer yet" in stub.message


def test_right_answers_pass_for_the_answer_checks():
    assert check("00.1", per_task_ms=2.0, tasks_to_match_kernel=50, runs=_runs(), kernel_times=KERNEL).passed
    assert check("02.1", first_significant_dims=64, table1=TABLE1).passed
    assert check(
        "03.2",
        slowdown_histogram=4.0,
        slowdown_knn=2.0,
        suffers_more="histogram",
        sweep=_sweep(),
        knn=_sweep(blocks_s=(1.0, 2.0)),
    ).passed
    assert check("06.2", ratio_at_smallest=1.0, ratio_at_largest=10.0, curves=CURVES).passed
    assert check("07.3", processes_over_threads=4.0, contention=CONTENTION).passed
    assert check(
        "10.1", resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=COPIED_FULL, placement=PLACEMENT
    ).passed
    assert check("10.2", moves_values="fetch", bytes_off_device=16_384, store_run=STORE_RUN).passed


def test_the_learners_errors_become_not_yet_and_never_raise(session, planted_run):
    def broken(rank):
        raise ZeroDivisionError("oops")

    feedback = check("06.1", fan_out=broken, session=session)
    assert feedback.status == NOT_YET and "ZeroDivisionError" in feedback.message or "oops" in feedback.message
    assert check("07.3", processes_over_threads="fast", contention=CONTENTION).message.startswith(
        "`processes_over_threads` should be a number"
    )
    bad_knob = check("08.2", blocks_per_worker=0, kmeans_strategy="split", planted_run=planted_run, session=session)
    assert bad_knob.status == NOT_YET and "blocks_per_worker must be" in bad_knob.message
    unknown = check("08.3", statistics_strategy="teleport", planted_run=planted_run, session=session)
    assert unknown.status == NOT_YET and "should be one of" in unknown.message


def test_a_capstone_run_of_one_stage_measures_it_and_takes_the_others_from_the_planted_run(session, planted_run):
    fixed = capstone.PLANTED.replace(statistics="blocks")
    one = capstone.run(session, "ci", fixed, stages=("statistics",), reuse=planted_run)
    assert list(one.stages["reused"]) == [False, True, True]
    for stage in ("kmeans", "queries"):  # the planted run's rows and traces, not run again
        assert one.stages.loc[stage].drop("reused").equals(planted_run.stages.loc[stage].drop("reused"))
        assert one.traces[stage] is planted_run.traces[stage]
    assert one.stages.loc["statistics", "strategy"] == "blocks"
    assert one.stages.loc["statistics", "MB_to_client"] < planted_run.stages.loc["statistics", "MB_to_client"]
    assert capstone.same_answers(planted_run, one) == []
    assert not planted_run.stages["reused"].any()
    with pytest.raises(ValueError, match="needs reuse="):
        capstone.run(session, "ci", fixed, stages=("statistics",))
    with pytest.raises(ValueError, match="stages must be some of"):
        capstone.run(session, "ci", fixed, stages=("statistic",), reuse=planted_run)
    with pytest.raises(ValueError, match="other data"):
        capstone.run(session, "ci", fixed, seed=1, stages=("statistics",), reuse=planted_run)


def test_the_registry_refuses_author_mistakes():
    with pytest.raises(ValueError, match="did you mean '03.2'"):
        check("03.22")
    with pytest.raises(TypeError, match="missing"):
        check("07.3", processes_over_threads=1.0)
    with pytest.raises(TypeError, match="unexpected"):
        check("07.3", processes_over_threads=1.0, contention=CONTENTION, extra=1)
    with pytest.raises(ValueError, match="NN.K"):
        exercise("9.1", answers=(), concept="an idea", hint="an API")
    with pytest.raises(ValueError, match="both a concept"):
        exercise("00.9", answers=(), concept=" ", hint="an API")
    with pytest.raises(TypeError, match="no parameter for the answers"):
        exercise("00.9", answers=("missing",), concept="an idea", hint="an API")(lambda other: None)
    assert "00.9" not in teach_registry._EXERCISES


def test_feedback_renders_for_people_and_for_ci():
    feedback = Feedback("01.1", PASSED, "<b>fine</b>", "")
    bundle = feedback._repr_mimebundle_()
    assert json.loads(json.dumps(bundle[MIME])) == {
        "exercise": "01.1",
        "status": "passed",
        "message": "<b>fine</b>",
        "hint": "",
    }
    assert "&lt;b&gt;fine" in bundle["text/html"]  # escaped
    assert str(feedback).startswith("✔ exercise 01.1: passed")
    assert "hint: do x" in str(Feedback("01.1", NOT_YET, "no", "do x"))
    # its Markdown as formatted text in JupyterLab, its marks dropped in the plain form
    marked = Feedback("01.1", NOT_YET, "`mb` is *bytes*, not MB", "divide by **2\\*\\*20**")
    page = marked._repr_html_()
    assert "<code>mb</code> is <em>bytes</em>" in page and "<strong>2**20</strong>" in page
    assert "<code>hint('01.1')</code>" in page and "`" not in page
    assert str(marked).splitlines() == [
        "✘ exercise 01.1: not yet — mb is bytes, not MB",
        "  hint: divide by 2**20",
        "  more help: hint('01.1') names what to use; reveal('01.1') shows a solution",
    ]


def test_markdown_becomes_formatted_html_and_readable_plain_text():
    text = "Read `moved()` *first*:\n\n- one <b>row</b>\n- **two**\n  - nested\n\n1. then\n2. done\n\n"
    text += "```python\nx = 1\n```"
    assert markup.to_html(text) == (
        "<p>Read <code>moved()</code> <em>first</em>:</p>\n<ul>\n<li>one &lt;b&gt;row&lt;/b&gt;</li>\n"
        "<li><strong>two</strong>\n<ul>\n<li>nested</li>\n</ul>\n</li>\n</ul>\n<ol>\n<li>then</li>\n<li>done</li>\n"
        '</ol>\n<pre><code class="language-python">x = 1\n</code></pre>'
    )
    assert markup.to_plain(text) == (
        "Read moved() first:\n\n- one <b>row</b>\n- two\n   - nested\n\n1. then\n2. done\n\n    x = 1"
    )
    assert markup.to_html("one *line*") == "one <em>line</em>"  # no paragraph around one line of help
    long = "word " * 30 + "the one-task-per-worker run"
    assert all(len(line) <= 100 for line in markup.to_plain(long).splitlines())
    assert "one-task-per-worker" in markup.to_plain(long)  # never broken at a hyphen
    assert markup.to_plain(long, width=None) == long.strip()


def test_every_lesson_has_an_answer_cell_and_a_check_per_exercise_and_no_solution_cells():
    import re
    from pathlib import Path

    import nbformat

    notebooks = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]-*.ipynb"))
    assert [p.name[:2] for p in notebooks] == sorted(teach_registry.LESSON_MODULES)
    for path in notebooks:
        cells = nbformat.read(path, as_version=4).cells
        tags = [c.metadata.get("tags", []) for c in cells]
        assert not [i for i, t in enumerate(tags) if "solution" in t], f"{path.name}: Run All would run a solution"
        checks = [i for i, t in enumerate(tags) if "check" in t]
        ids = [re.match(r'check\(\s*"(\d\d\.\d+)"', cells[i].source).group(1) for i in checks]
        assert ids == [e.id for e in exercises(path.name[:2])], path.name
        for i in checks:  # the learner's answer cell, then the check
            assert "exercise" in tags[i - 1], (path.name, i)
            assert "..." in cells[i - 1].source, (path.name, i)  # the learner's stub to replace


@pytest.mark.parametrize("lesson", sorted(teach_registry.LESSON_MODULES))
def test_help_is_graded_and_the_code_only_comes_from_reveal(lesson):
    entries = manual.solutions(lesson)
    assert sorted(entries) == sorted(e.id for e in exercises(lesson)), "the manual covers every exercise, no more"
    for declared in exercises(lesson):
        entry = entries[declared.id]
        assert entry.explanation and entry.code and entry.wrong, declared.id
        assert "`" not in declared.concept and "=" not in declared.concept, f"{declared.id}: the concept is words"
        code_lines = [line.strip() for line in entry.code.splitlines() if len(line.strip()) >= 12]
        for text in (declared.concept, declared.hint):
            given_away = [line for line in code_lines if line in text]
            assert not given_away, f"{declared.id}: the hint shows the solution's code {given_away}"
        first = check(declared.id, **{name: ... for name in inspect.signature(declared.function).parameters})
        assert first.hint == declared.concept and f"reveal({declared.id!r})" in first.more
        assert " ".join(declared.hint.split()) in " ".join(str(hint(declared.id)).split())  # wrapped at 100
        assert entry.code in str(reveal(declared.id))


def test_the_manual_refuses_a_section_without_its_solution_or_wrong_answer():
    page = "## 03.1\nwhy\n```python\nx = 1\n```\n## 03.2\n```python\ny = 2\n```\n```python wrong\ny = 3\n```\n"
    with pytest.raises(manual.ManualError, match=r"03\.1.*found 1 and 0"):
        manual.parse(page)
    parsed = manual.parse(page.replace("## 03.2", "A wrong answer (x = 2):\n```python wrong\nx = 2\n```\n## 03.2"))
    assert parsed["03.2"] == manual.Solution("03.2", "", "y = 2", "y = 3")
    assert parsed["03.1"].explanation == "why" and parsed["03.1"].wrong == "x = 2"
    assert parsed["03.1"].wrong_note == "A wrong answer (x = 2):"  # kept apart from the explanation
    upside_down = "## 03.1\nwhy\n```python wrong\nx = 2\n```\n```python\nx = 1\n```\n"
    with pytest.raises(manual.ManualError, match=r"03\.1.*wrong block comes before the solution"):
        manual.parse(upside_down)


@pytest.mark.parametrize("lesson", sorted(teach_registry.LESSON_MODULES))
def test_reveal_shows_the_solution_as_the_solution_and_help_as_formatted_text(lesson):
    for declared in exercises(lesson):
        entry = manual.solution(declared.id)
        shown = reveal(declared.id)
        plain, page = str(shown), shown._repr_html_()
        # the manual's words on its wrong answer are kept, apart; reveal shows neither them nor the wrong code
        assert entry.wrong_note and entry.wrong_note not in entry.explanation, declared.id
        for form in (plain, page):
            assert "wrong answer" not in form.lower() and entry.wrong_note[:40] not in form, declared.id
        if entry.wrong not in entry.code:
            assert entry.wrong not in plain, declared.id
        assert plain == f"Exercise {declared.id}: a solution\n{markup.to_plain(entry.explanation)}\n\n{entry.code}"
        assert markup.to_html(entry.explanation) in page and html.escape(entry.code) in page, declared.id
        # Markdown formatted: no backtick or ** left outside the code (the manual writes `names`)
        for help_page in (page, hint(declared.id)._repr_html_()):
            prose = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", help_page, flags=re.DOTALL)
            assert "`" not in prose and "**" not in prose, (declared.id, prose)
        assert (
            "`" not in plain.removesuffix(entry.code)
            and f"<code>reveal('{declared.id}')</code>" in hint(declared.id)._repr_html_()
        )


def test_each_mode_injects_the_manuals_cell_before_its_check():
    import nbformat

    from workbench.teach.execute import solutions_view, with_answers

    source = nbformat.v4.new_notebook()
    source.cells = [
        nbformat.v4.new_code_cell("x = ...", metadata={"tags": ["exercise"]}),
        nbformat.v4.new_code_cell(
            'check("07.3", processes_over_threads=x, contention=c)', metadata={"tags": ["check"]}
        ),
    ]
    entry = manual.solution("07.3")
    solved = with_answers(source, "07", "solutions")
    assert [c.source for c in solved.cells] == ["x = ...", entry.code, source.cells[1].source]
    assert "hide-cell" in solved.cells[1].metadata["tags"]
    assert with_answers(source, "07", "learner").cells[1].source == entry.wrong
    both = with_answers(source, "07", "both")
    check_cell = source.cells[1].source
    assert [c.source for c in both.cells] == ["x = ...", entry.wrong, check_cell, entry.code, check_cell]
    assert [c.metadata.get("tags") for c in both.cells[1:]] == [
        ["learner-answer"],
        ["check", "learner-answer"],
        ["solution", "hide-cell"],
        ["check"],
    ]
    assert [c.source for c in solutions_view(both).cells] == [c.source for c in solved.cells]
    source.cells[1].source = 'check("07.9", x=x)'
    with pytest.raises(manual.ManualError, match="07.9"):
        with_answers(source, "07", "solutions")


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def _raise_unprintable(rank):
    raise _Unprintable()


def test_adversarial_answers_get_not_yet_with_a_reason(session):
    assert not check("06.2", ratio_at_smallest=1.0, ratio_at_largest=1.25, curves=CURVES).passed
    flat = pd.DataFrame({"blocks": [2, 2, 8, 8], "seconds": [0.02, 0.02, 0.01, 0.01]})  # slope below 0
    feedback = check("00.1", per_task_ms=-1.67, tasks_to_match_kernel="banana", runs=flat, kernel_times=KERNEL)
    assert not feedback.passed and "should be a number" in feedback.message
    other_alias = {"workers": ["a", "b"], "aliases": ["other"], "nbytes": 8, "version": 0}
    assert not check("04.3", probe_info=other_alias, alias_still_there=False, store=None).passed
    as_strings = {"workers": "ab", "aliases": "probe", "nbytes": 8, "version": 0}
    assert not check("04.3", probe_info=as_strings, alias_still_there=False, store=None).passed
    store = types.SimpleNamespace(aliases=lambda: {}, backends=lambda: ["a", "b"])
    right = {"workers": ["a", "b"], "aliases": ["probe"], "version": 0}  # no nbytes: still readable
    assert check("04.3", probe_info=right, alias_still_there=np.False_, store=store).passed
    assert not check("05.3", pair=PAIR, tiers_after_reads=("dram", None)).passed
    for value in ("4.0", b"4", np.True_, 10**400):
        assert check("07.3", processes_over_threads=value, contention=CONTENTION).status == NOT_YET, value
    assert not check("07.1", touches=TOUCHES, faults_per_page={4: 1.0, "16": 1.0, 64: 1.0}).passed
    broken = check("06.1", fan_out=_raise_unprintable, session=session)
    # the rank's error, named, not raised (its text cannot be made: the check says so and names its type)
    assert broken.status == NOT_YET and "could not be shown" in broken.message and "_Unprintable" in broken.message
    assert "could not be shown" in teach_registry._describe(_Unprintable())


def _report_of(tasks: list[str]) -> object:
    """A locality report of one finished task per name (too little evidence for any finding)."""
    from workbench.locality import Report

    records = [
        {"worker": "w1", "thread": 1, "task": t, "key": f"{t}-0", "action": "compute", "start": 0.0, "stop": 0.01}
        for t in tasks
    ]
    frame = pd.DataFrame(records).assign(bytes=8, source="", node="n")
    return Report(frame, counts={"tasks": len(tasks), "graphs": 1}, start=0.0, stop=0.1)


def test_the_diagnosis_exercise_wants_the_pipelines_report_not_any_clean_work_nor_the_observation(session):
    from workbench.locality import observe

    other = check("08.6", diagnosis=_report_of(["sum", "ones"]))  # some other clean Dask work
    assert other.status == NOT_YET and "not the capstone pipeline" in other.message, other
    assert check("08.6", diagnosis=_report_of(["cluster_sums", "add_partials", "merge_nearest"])).passed
    with observe(session) as seen:
        pass
    itself = check("08.6", diagnosis=seen)
    assert itself.status == NOT_YET and "give its report, `seen.report`" in itself.message, itself
