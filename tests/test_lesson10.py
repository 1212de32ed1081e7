"""Lesson 10 · Keep it on the device: the device it picks (numba's simulator where there is no GPU,
set before numba's CUDA module is imported, and inherited by the Dask workers), its figures, and its
checks, which judge byte counts only.

What needs a device runs in a Python process of its own under ``NUMBA_ENABLE_CUDASIM=1``
(:func:`simulated_cases`, called by :func:`test_the_device_cases_in_the_simulator`): numba fixes its
CUDA target when ``numba.cuda`` is first imported, and Dask may import it in this suite's process.
Each choice of :func:`~workbench.teach.lesson10.choose_device` runs in a fresh interpreter with a
clean environment, as a lesson's kernel starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from workbench.teach import NOT_YET, check, lesson10

ROOT = Path(__file__).resolve().parents[1]
PLACEMENT = {
    "points_bytes": 16_384,
    "iterations": 3,
    "resident_bytes_to_device": 16_384,
    "copied_bytes_to_device": 49_152,
}
STORE_RUN = {"active_bytes_off_device": 0, "non_active_bytes_off_device": 16_384, "values_bytes": 16_384}
COPIED_FULL = 32_000_000 * 4 * 8 * 10
NO_DRIVER = pytest.mark.skipif(lesson10._driver_here(), reason="an NVIDIA driver is here: the simulator is not chosen")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "WORKBENCH_GPU_BYTES")}
    return {**env, **extra}


def _run(code: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


CHOOSE = """
import json, os, sys
import workbench  # imports numba (not its CUDA module), as the lesson's setup cell does
from workbench.teach import lesson10
{before}
chosen = lesson10.choose_device()
print(json.dumps({{**chosen, "env": os.environ.get("NUMBA_ENABLE_CUDASIM"), "line": lesson10.device_line(chosen)}}))
"""


@NO_DRIVER
def test_without_a_gpu_it_sets_the_simulator_says_so_first_and_the_workers_inherit_it():
    code = CHOOSE.format(before="") + textwrap.dedent(
        """
        if __name__ == "__main__":
            session = workbench.start(n_workers=2)
            try:
                from workbench.kernels import gpu as device_kernels
                print(json.dumps(sorted(set(session.client.run(device_kernels.simulated).values()))))
            finally:
                session.close()
        """
    )
    done = _run(code, _clean_env())
    assert done.returncode == 0, done.stderr[-3000:]
    chosen, workers = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert chosen["simulated"] and chosen["set_simulator"] and chosen["env"] == "1"
    assert "no NVIDIA driver" in chosen["why"]
    assert chosen["line"].startswith("SIMULATED") and "meaningless" in chosen["line"]
    assert workers == [True], "every worker started afterwards runs the simulator too"


@NO_DRIVER
def test_a_variable_set_before_the_lesson_is_kept():
    done = _run(CHOOSE.format(before=""), _clean_env(NUMBA_ENABLE_CUDASIM="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = json.loads(done.stdout.strip().splitlines()[-1])
    assert chosen["simulated"] and not chosen["set_simulator"] and "was set before" in chosen["why"]
    refused = _run(CHOOSE.format(before=""), _clean_env(NUMBA_ENABLE_CUDASIM="0"))
    assert refused.returncode != 0 and "TierError" in refused.stderr and "needs a CUDA device" in refused.stderr


@NO_DRIVER
def test_numba_cuda_imported_first_is_left_alone_and_the_error_says_to_restart():
    done = _run(CHOOSE.format(before="import numba.cuda"), _clean_env())
    assert done.returncode != 0
    assert "TierError" in done.stderr and "restart the kernel" in done.stderr


def test_the_first_line_names_a_real_device_and_its_memory():
    line = lesson10.device_line({"name": "NVIDIA H100 80GB HBM3", "bytes": 80 * 2**30, "simulated": False})
    assert line == "Device: NVIDIA H100 80GB HBM3, 80 GiB of device memory"


def test_the_simulator_runs_the_ci_size_whatever_was_asked():
    assert lesson10.size_for("lab", {"simulated": True}) == "ci"
    assert lesson10.size_for("full", {"simulated": False}) == "full"
    with pytest.raises(ValueError, match="the sizes are ci, lab, full"):
        lesson10.size_for("huge", {"simulated": True})


def test_the_rate_figure_draws_every_rate_and_says_when_it_is_simulated():
    from workbench.viz.gpu import rate_figure

    bus = {"pageable_to_device_gbs": 12.0, "pinned_to_device_gbs": 25.0, "to_host_gbs": 26.0}
    fig = rate_figure(bus, {"gbs": 3000.0}, {"gbs": 1500.0}, simulated=True)
    assert "SIMULATED" in fig.title.text
    assert fig.renderers[0].data_source.data["gbs"] == [12.0, 25.0, 26.0, 3000.0, 1500.0]
    assert "SIMULATED" not in rate_figure(bus, {"gbs": 3000.0}, {"gbs": 1500.0}, simulated=False).title.text


# -- 10.1 and 10.2: byte counts against the lesson's measurements ------------------------------------
@pytest.mark.parametrize(
    ("answers", "phrase"),
    [
        (dict(resident_bytes=49_152, copied_bytes=49_152, copied_bytes_full=COPIED_FULL), "a copy per iteration"),
        (dict(resident_bytes=2_048, copied_bytes=49_152, copied_bytes_full=COPIED_FULL), "float64 values"),
        (dict(resident_bytes=16_384, copied_bytes=49_152 / 8, copied_bytes_full=COPIED_FULL), "float64 values"),
        (dict(resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=COPIED_FULL // 10), "one copy"),
        (dict(resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=10_240), "looks like MB"),
        (dict(resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=10), "looks like GB"),
        (dict(resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=COPIED_FULL // 4), "each point has dims"),
        (dict(resident_bytes=16_384, copied_bytes=49_152, copied_bytes_full=49_152), "this lesson's size"),
        (dict(resident_bytes=16_384, copied_bytes=50_000, copied_bytes_full=COPIED_FULL), "3 iterations"),
        (dict(resident_bytes=16_384.5, copied_bytes=49_152, copied_bytes_full=COPIED_FULL), "whole number"),
    ],
)
def test_10_1_says_what_is_wrong_with_the_bytes(answers, phrase):
    feedback = check("10.1", **answers, placement=PLACEMENT)
    assert feedback.status == NOT_YET and phrase in feedback.message, feedback.message


def test_10_1_is_judged_on_what_was_measured_and_never_states_it():
    odd = {**PLACEMENT, "copied_bytes_to_device": 65_536}  # whatever the tier counted is the answer
    assert check(
        "10.1", resident_bytes=16_384, copied_bytes=65_536, copied_bytes_full=COPIED_FULL, placement=odd
    ).passed
    wrong = check("10.1", resident_bytes=16_384, copied_bytes=50_000, copied_bytes_full=COPIED_FULL, placement=odd)
    assert "65536" not in wrong.message and "65,536" not in wrong.message
    assert not check("10.1", resident_bytes=1, copied_bytes=2, copied_bytes_full=3, placement={"points": 1}).passed


@pytest.mark.parametrize(
    ("answers", "phrase"),
    [
        (dict(moves_values="active", bytes_off_device=16_384), "where the values lie"),
        (dict(moves_values="fetch", bytes_off_device=0), "the active call's figure"),
        (dict(moves_values="fetch", bytes_off_device=2_048), "float64 values"),
        (dict(moves_values="fetch", bytes_off_device=1_000), "is not what one fetch copied"),
        (dict(moves_values="teleport", bytes_off_device=16_384), "should be one of"),
    ],
)
def test_10_2_says_what_is_wrong(answers, phrase):
    feedback = check("10.2", **answers, store_run=STORE_RUN)
    assert feedback.status == NOT_YET and phrase in feedback.message, feedback.message
    assert "16384" not in feedback.message or answers["bytes_off_device"] == 16_384


def test_10_2_passes_the_measured_mover_in_any_spelling():
    assert check("10.2", moves_values=" Fetch ", bytes_off_device=16_384.0, store_run=STORE_RUN).passed


# -- what needs a device: in the simulator, in a process of its own ------------------------------------
def test_the_device_cases_in_the_simulator():
    code = """
    import sys
    sys.path.insert(0, "tests")
    import test_lesson10
    if __name__ == "__main__":
        test_lesson10.simulated_cases()
        print("simulated cases passed")
    """
    done = _run(code, _clean_env(NUMBA_ENABLE_CUDASIM="1"), timeout=600)
    assert done.returncode == 0 and "simulated cases passed" in done.stdout, done.stdout[-3000:] + done.stderr[-4000:]


def _moving(*names: str):
    def make_room():
        for name in names:
            lesson10.tiers.move(lesson10.tiers.open_array(name, "gpu"), "dram")

    return make_room


def simulated_cases() -> None:
    """The checks and helpers that need a device (run under NUMBA_ENABLE_CUDASIM=1, by the test above)."""
    from workbench.lab import gpu_experiments
    from workbench.memory import gpu, tiers
    from workbench.viz.gpu import PlacementPanel, kmeans_by_iteration

    assert lesson10.choose_device()["simulated"]
    old = ("lesson10-labels-old", "lesson10-histogram-old")

    # the full device: set up, and everything undone on exit, however it ends
    os.environ.pop(gpu.GPU_BYTES_ENV, None)
    with lesson10.full_device() as held:
        assert sorted(held) == sorted(lesson10.FULL_DEVICE) == sorted(tiers.names("gpu"))
        device = tiers.current().device
        assert device.limit() == device.used() + lesson10.ROOM  # capped: only ROOM is left
        assert gpu.GPU_BYTES_ENV not in os.environ  # the environment is not written
    assert tiers.names("gpu") == [] and tiers.names("dram") == []
    os.environ[gpu.GPU_BYTES_ENV] = "1GiB"
    try:
        with lesson10.full_device():
            raise KeyError("the learner's error")
    except KeyError:
        pass
    assert tiers.current().device.limit() == 2**30 and tiers.names("gpu") == []  # the limit before it holds again
    assert os.environ.pop(gpu.GPU_BYTES_ENV) == "1GiB" and tiers.current().device.cap() is None

    # 10.3: the solution passes; each wrong way says what is wrong
    assert check("10.3", make_room=_moving(*old)).passed
    cases = {
        "left the device": _moving("lesson10-points"),
        "still refused": _moving("lesson10-labels-old"),
        "loses its values": lambda: [tiers.free(name, "gpu") for name in old],
        "ZeroDivisionError": lambda: 1 / 0,
    }
    for phrase, make_room in cases.items():
        feedback = check("10.3", make_room=make_room)
        assert feedback.status == NOT_YET and phrase in feedback.message, (phrase, feedback.message)
        assert tiers.current().device.cap() is None and tiers.names("gpu") == [], phrase

    def place_it_too():
        _moving(*old)()
        tiers.place(lesson10.NEW_ARRAY[0], np.zeros(lesson10.NEW_ARRAY[1]), "gpu")

    assert check("10.3", make_room=place_it_too).passed
    mine = tiers.place("learners-own", np.zeros(100_000), "gpu")  # the learner's arrays count, and stay
    assert check("10.3", make_room=_moving(*old)).passed and not check("10.3", make_room=_moving(old[0])).passed
    assert tiers.names("gpu") == ["learners-own"]
    tiers.free(mine.name, "gpu")

    # the live panel's measurement: the copied way's bytes grow with the iterations, the resident way's do not
    rows = kmeans_by_iteration("ci", 3)
    ci = gpu_experiments.size_named("ci")
    points_bytes = ci.points * ci.dims * 8
    assert [r["bytes_to_device"] for r in rows if r["way"] == "resident"] == [points_bytes] * 3
    assert [r["bytes_to_device"] for r in rows if r["way"] == "copied"] == [points_bytes * i for i in (1, 2, 3)]
    panel = PlacementPanel("ci", simulated=True, iterations=2)
    panel.run()
    said = f"copied {2 * points_bytes:,} bytes, resident {points_bytes:,} bytes (2x)"
    assert said in panel.status.value and not panel.button.disabled
    assert tiers.names("gpu") == []


def test_the_panels_iteration_axis_shows_whole_iterations_only():
    """The panel's figure ticks its iteration axis at whole iterations (bokeh's own ticker put one at 1.5)."""
    from workbench.viz.gpu import bytes_figure, iteration_ticks

    rows = [
        {"way": way, "iteration": i, "bytes_to_device": 8 * i, "seconds": 0.1 * i}
        for way in ("resident", "copied")
        for i in (1, 2)
    ]
    assert bytes_figure(rows).xaxis[0].ticker.ticks == [1, 2]
    assert iteration_ticks(np.arange(1, 5)) == [1, 2, 3, 4] and all(type(t) is int for t in iteration_ticks([1, 2]))
    assert iteration_ticks(range(1, 21)) == list(range(1, 21, 2)) and iteration_ticks([]) == []
