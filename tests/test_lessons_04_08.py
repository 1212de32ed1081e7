"""Lessons 04–08: checks refuse answers nobody computed from the lesson's data, "not yet" messages
never state the expected value, every planted wrong answer is refused whatever the data, every API
an exercise needs is shown before it, and the eager baseline of lesson 06 sends worker to worker."""

from __future__ import annotations

import re
import time
import types
from pathlib import Path

import nbformat
import numpy as np
import pytest

from workbench.bench.channels import bounce
from workbench.lab import capstone
from workbench.lab import execution_models as em
from workbench.memory import tiers
from workbench.runtime.channels import run_group
from workbench.teach import NOT_YET, check, get
from workbench.teach.answers import fmt

ROOT = Path(__file__).resolve().parents[1]
LESSONS = {
    "04": "04-active-store.ipynb",
    "05": "05-memory-tiers.ipynb",
    "06": "06-array-channels.ipynb",
    "07": "07-execution-models.ipynb",
    "08": "08-capstone.ipynb",
}
CURVES = {
    "channels": [{"nbytes": n, "MBps": m} for n, m in ((8, 2.0), (4096, 500.0), (2**24, 6000.0))],
    "eager": [{"nbytes": n, "MBps": m} for n, m in ((8, 0.01), (4096, 2.0), (2**24, 1200.0))],
}
TABLES = [{"model": "processes", "tasks": 1, "vmpte_kib": 132, "bytes": 64 * 2**20}]


def _not_yet_without(feedback, *figures: float) -> None:
    """A "not yet" whose message and hint state none of ``figures`` (as the checks format them)."""
    assert feedback.status == NOT_YET, feedback
    for figure in figures:
        for text in (fmt(figure), f"{figure:g}"):
            assert text not in feedback.message and text not in feedback.hint, (text, str(feedback))


def _record(n_mib: int, faults_per_page: float = 1.0) -> dict:
    pages = n_mib * 256
    return {
        "mode": "4k pages",
        "bytes": n_mib * 2**20,
        "pages": pages,
        "faults": int(pages * faults_per_page),
        "faults_per_page": int(pages * faults_per_page) / pages,
        "ns_per_page": 250.0,
    }


# -- typed values refused ------------------------------------------------------------------------------
def test_typed_cache_stats_are_refused_and_real_caches_are_read():
    typed = {"hits": 0, "misses": 0, "bypasses": 2}
    feedback = check("05.1", small_cache=typed, big_cache={"hits": 1, "misses": 1, "bypasses": 0})
    assert feedback.status == NOT_YET and "tiers.DramCache" in feedback.message
    small, big = tiers.DramCache(2**20), tiers.DramCache(8 * 2**20)
    placed = tiers.place("test-lesson05-cache", np.ones(500_000), "cached", cache=small, replace=True)
    try:
        placed.array.sum()
        assert check("05.1", small_cache=small, big_cache=big).status == NOT_YET  # one read: no evidence
        placed.array.sum()
        placed.cache = big
        placed.array.sum()
        assert check("05.1", small_cache=small, big_cache=big).status == NOT_YET  # the big cache: no hit yet
        placed.array.sum()
        assert check("05.1", small_cache=small, big_cache=big).passed
        wrong_budget = check("05.1", small_cache=tiers.DramCache(2 * 2**20), big_cache=big)
        assert wrong_budget.status == NOT_YET and "1048576 bytes" in wrong_budget.message
    finally:
        tiers.free("test-lesson05-cache", "cached")


def test_typed_tiers_are_refused_when_the_objects_say_otherwise():
    pair = [types.SimpleNamespace(tier=lambda: "mapped"), types.SimpleNamespace(tier=lambda: "mapped")]
    feedback = check("05.3", pair=pair, tiers_after_reads=["dram", "mapped"])
    assert feedback.status == NOT_YET and "say they are on" in feedback.message
    assert check("05.3", pair=..., tiers_after_reads=["dram", "mapped"]).status == NOT_YET
    both = [types.SimpleNamespace(tier=lambda: "dram")] * 2
    assert "fit only one" in check("05.3", pair=both, tiers_after_reads=["dram", "dram"]).message
    never_dynamic = check("05.3", pair=pair, tiers_after_reads=["mapped", "mapped"])
    assert never_dynamic.status == NOT_YET and "placed 'dynamic'" in never_dynamic.message
    right = [types.SimpleNamespace(tier=lambda: "dram"), types.SimpleNamespace(tier=lambda: "mapped")]
    assert check("05.3", pair=right, tiers_after_reads=["dram", "mapped"]).passed


def test_typed_faults_per_page_need_the_measurements_they_came_from():
    typed = {4: 1.0, 16: 1.0, 64: 1.0}
    assert "no answer yet" in check("07.1", touches=..., faults_per_page=typed).message
    made_up = [{**_record(n), "pages": 1000} for n in (4, 16, 64)]  # figures that disagree with each other
    assert "not one that em.first_touch measured" in check("07.1", touches=made_up, faults_per_page=typed).message
    measured = [_record(4), _record(16), _record(64, faults_per_page=1.02)]
    feedback = check("07.1", touches=measured, faults_per_page=typed)
    assert feedback.status == NOT_YET and "your measurement of 64 MiB" in feedback.message
    populated = [{**r, "mode": "MAP_POPULATE"} for r in measured]
    assert "'4k pages'" in check("07.1", touches=populated, faults_per_page=typed).message
    read_off = {n: r["faults_per_page"] for n, r in zip((4, 16, 64), measured)}
    assert check("07.1", touches=measured, faults_per_page=read_off).passed


def test_first_touch_measured_here_passes_07_1():
    touches = [em.first_touch(n * 2**20, "4k pages") for n in (4, 16, 64)]
    answer = {n: r["faults_per_page"] for n, r in zip((4, 16, 64), touches)}
    feedback = check("07.1", touches=touches, faults_per_page=answer)
    assert feedback.passed or "far from one per page" in feedback.message, feedback  # a busy machine adds faults
    counted = check("07.1", touches=touches, faults_per_page={n: r["faults"] for n, r in zip((4, 16, 64), touches)})
    assert counted.status == NOT_YET and "that is the faults" in counted.message


def test_typed_round_ratios_are_refused():
    for smallest, largest in ((100.0, 5.0), (250.0, 5.0), (1.0, 1.0)):  # 250: the ratio at another payload
        _not_yet_without(check("06.2", ratio_at_smallest=smallest, ratio_at_largest=largest, curves=CURVES), 200)
    assert "not channels / eager at 16777216 B" in check("06.2", ratio_at_smallest=200, ratio_at_largest=4.0,
                                                         curves=CURVES).message  # fmt: skip
    assert check("06.2", ratio_at_smallest=200.0, ratio_at_largest=5.0, curves=CURVES).passed
    _not_yet_without(check("07.2", processes_mib=100.0, threads_mib=10.0, tables=TABLES), 8.25, 132)


# -- "not yet" says what is wrong, never the value expected ---------------------------------------------
def test_not_yet_messages_do_not_state_the_expected_value():
    contention = {"rows": [{"tasks": 4, "processes_per_s": 30000.0, "threads_per_s": 12000.0}]}
    _not_yet_without(check("07.3", processes_over_threads=2.0, contention=contention), 2.5)
    inverted = check("07.3", processes_over_threads=0.4, contention=contention)
    _not_yet_without(inverted, 2.5)
    assert "you divided threads by processes" in inverted.message
    shared = check("07.2", processes_mib=8.25, threads_mib=8.25, tables=TABLES)
    _not_yet_without(shared, 132)
    assert "one shared set" in shared.message
    km = types.SimpleNamespace(
        points=lambda: [{"iterations": 4}],
        summary=lambda: __import__("pandas").DataFrame({"variant": ["non-active", "active"], "MB_moved": [40.0, 0.4]}),
    )
    swapped = check("04.2", nonactive_mb_per_iteration=0.1, active_mb_per_iteration=10.0, km=km)
    _not_yet_without(swapped, 10.0)
    assert "the other variant's figure" in swapped.message
    whole = check("04.2", nonactive_mb_per_iteration=40.0, active_mb_per_iteration=0.1, km=km)
    assert "divide by the 4 iterations" in whole.message
    _not_yet_without(whole, 10.0)


def test_the_help_of_08_1_does_not_name_the_answer():
    help_text = get("08.1").hint + get("08.1").concept
    assert "broadcast" not in help_text and str(capstone.CALIBRATION) not in help_text
    for option in capstone.CALIBRATION:
        assert f"'{option}'" not in help_text and f'"{option}"' not in help_text, option


# -- planted wrong answers are refused whatever the data ------------------------------------------------
@pytest.mark.parametrize("rates", [(1000.0, 1000.0), (1000.0, 980.0), (50000.0, 2000.0)])
def test_the_planted_wrong_answer_of_07_3_is_refused_even_when_the_rates_are_equal(rates):
    contention = {"rows": [{"tasks": 8, "processes_per_s": rates[0], "threads_per_s": rates[1]}]}
    difference = rates[0] - rates[1]  # the manual's wrong answer: the difference, not the ratio
    assert check("07.3", processes_over_threads=difference, contention=contention).status == NOT_YET


@pytest.mark.parametrize("largest_ratio", [1.3, 3.0, 40.0])
def test_the_planted_wrong_answer_of_06_2_is_refused_for_any_gap(largest_ratio):
    curves = {
        "channels": [{"nbytes": 8, "MBps": 3.0}, {"nbytes": 2**20, "MBps": 3000.0 * largest_ratio}],
        "eager": [{"nbytes": 8, "MBps": 0.01}, {"nbytes": 2**20, "MBps": 3000.0}],
    }
    ratios = [300.0, largest_ratio]
    feedback = check("06.2", ratio_at_smallest=1 / ratios[0], ratio_at_largest=1 / ratios[1], curves=curves)
    assert feedback.status == NOT_YET and "upside down" in feedback.message


# -- every API an exercise needs is shown before it; references exist ------------------------------------
SHOWN_BEFORE = {
    "04.3": (".info()", ".delete()", 'alias="'),
    "05.1": ("cache=", "tiers.DramCache(", ".stats()"),
    "05.3": ("store.rebalance(budget=", "store.place(", "ArrayBlock(", '"dynamic"', ".tier()", "apply.value("),
    "06.1": ("rank.channel(", ".put(", ".take("),
    "06.3": (".allreduce(", ".reduce("),
    "07.1": ("em.first_touch(",),
}


def _cells(lesson: str) -> list:
    return nbformat.read(ROOT / "notebooks" / LESSONS[lesson], as_version=4).cells


@pytest.mark.parametrize("exercise_id", sorted(SHOWN_BEFORE))
def test_every_api_an_exercise_needs_is_shown_before_it(exercise_id):
    cells = _cells(exercise_id[:2])
    first_exercise = next(i for i, c in enumerate(cells) if "exercise" in c.metadata.get("tags", []))
    taught = "\n".join(c.source for c in cells[:first_exercise] if c.cell_type == "code")
    missing = [api for api in SHOWN_BEFORE[exercise_id] if api not in taught]
    assert not missing, f"{exercise_id} needs {missing}, never run in a code cell before the exercises"


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_further_reading_points_at_files_in_the_repository(lesson):
    text = "\n".join(c.source for c in _cells(lesson) if c.cell_type == "markdown")
    assert "references/" not in text, "a path outside the repository"
    for target in re.findall(r"\]\((\.\./[^)#]+)", text):
        assert (ROOT / "notebooks" / target).resolve().exists(), target


def test_the_capstone_says_where_help_is_and_holds_no_hidden_solutions():
    text = "\n".join(c.source for c in _cells("08") if c.cell_type == "markdown")
    assert 'hint("08.1")' in text and 'reveal("08.1")' in text
    assert "hidden solution" not in text


def test_statements_an_hpc_audience_would_challenge_are_gone():
    channels = "\n".join(c.source for c in _cells("06"))
    assert "stays in the caches" not in channels and "pickled per message through Dask" not in channels
    assert "MPI_Reduce" in channels
    models = "\n".join(c.source for c in _cells("07"))
    assert "Dask defaults to processes" not in models and "nogil=True" in models


# -- lesson 06's eager baseline: worker to worker, nothing left behind -----------------------------------
def _eager_pingpong(rank, nbytes, rounds):
    channel = rank.channel("pp", nbytes, np.uint8)
    channel.buffer[:] = rank.rank + 1
    bounce(rank, channel, rounds)  # the benchmark's ping-pong loop
    return int(channel.buffer[0]), rank.worker


def _group_state(dask_worker=None):
    from workbench.runtime.worker_state import worker_state

    return {"actors": len(dask_worker.state.actors), "inboxes": len(worker_state(dask_worker).inboxes)}


def test_the_eager_baseline_sends_worker_to_worker_and_leaves_nothing(session):
    workers = session.workers()[:2]
    results = run_group(session, _eager_pingpong, [(4096, 5)] * 2, workers=workers, eager=True).results
    assert [r[0] for r in results] == [1, 1] and [r[1] for r in results] == workers  # rank 1's 2s were replaced

    def queues(dask_scheduler=None):
        extension = dask_scheduler.extensions.get("queues")
        return 0 if extension is None else len(extension.queues)

    assert session.client.run_on_scheduler(queues) == 0  # no message went through a scheduler queue
    deadline = time.monotonic() + 30  # the inbox actors go when the scheduler has forgotten their tasks
    while any(state != {"actors": 0, "inboxes": 0} for state in session.client.run(_group_state).values()):
        assert time.monotonic() < deadline, session.client.run(_group_state)
        time.sleep(0.05)


@pytest.mark.parametrize("size", ["ci", "lab", "full"])
def test_lesson_06s_panel_opens_on_channels_against_eager_over_two_ranks(size):
    """The panel cell of lesson 06, run as the notebook runs it: the vector reduce over 2 ranks, channels
    against eager (on 1 rank no vector moves: nothing to tell apart)."""
    from workbench.viz.panels import ExperimentPanel

    cells = nbformat.read(ROOT / "notebooks" / LESSONS["06"], as_version=4).cells
    (cell,) = [c for c in cells if c.cell_type == "code" and "ExperimentPanel(" in c.source]
    session = types.SimpleNamespace(cluster=None, workers=lambda: ["tcp://a:1", "tcp://b:2"])
    namespace = {"ExperimentPanel": ExperimentPanel, "session": session, "size": size}
    exec(compile(cell.source, "lesson 06's panel cell", "exec"), namespace)  # noqa: S102 (the lesson's own cell)
    panel = namespace["panel"]
    assert panel.app.value == "prk-reduce" and panel.variants.value == ("channels", "eager")
    assert panel.knobs["ranks"].value >= 2, panel.knobs["ranks"].value


def test_a_panel_refuses_a_start_its_application_does_not_offer():
    from workbench.viz.panels import ExperimentPanel

    session = types.SimpleNamespace(cluster=None, workers=lambda: ["tcp://a:1", "tcp://b:2"])
    with pytest.raises(ValueError, match=r"prk-reduce's ranks offers \[1, 2, 3, 4\], not 9"):
        ExperimentPanel(session, "ci", app="prk-reduce", start={"ranks": 9})
    with pytest.raises(ValueError, match="no knob 'rank'.*'ranks', 'length'"):
        ExperimentPanel(session, "ci", app="prk-reduce", start={"rank": 2})
    with pytest.raises(ValueError, match=r"no variants \['mpi'\]; it has \['channels', 'eager'\]"):
        ExperimentPanel(session, "ci", app="prk-reduce", variants=("channels", "mpi"))


def test_lesson_08s_diagnosis_takes_a_pipeline_only():
    from workbench.teach.capstone import diagnose

    with pytest.raises(TypeError, match="pipeline must be a capstone.Pipeline, got ellipsis"):
        diagnose(session=None, pipeline=...)  # refused before any cluster is touched


def test_lesson_08s_diagnosis_summary_says_what_was_named_missed_and_not_planted():
    from workbench.locality import THRESHOLDS
    from workbench.teach.capstone import PLANTED_KINDS, diagnosis_summary

    report = types.SimpleNamespace(kinds=lambda: ["repeated-argument", "gather-to-client", "remote-reads", "spill"])
    lines = diagnosis_summary(report).splitlines()
    assert lines[0] == (
        "the diagnosis named 3 of the 4 planted problems: repeated-argument, gather-to-client, remote-reads"
    )
    assert lines[1].startswith("not named: tiny-tasks (its evidence in this run stayed under a threshold: ")
    assert all(name in lines[1] for name in THRESHOLDS["tiny-tasks"])
    assert lines[2:] == ["named, not planted: spill"]
    assert set(PLANTED_KINDS) <= set(THRESHOLDS)  # every planted kind is one the diagnosis knows
