"""The exercises of every lesson and the one entry point a notebook calls: :func:`check`.

An exercise is declared once, next to its check, in ``workbench/teach/lessonNN.py``::

    @exercise("03.2", answers=("slowdown_histogram", "slowdown_knn"), concept="...", hint="...")
    def _(slowdown_histogram, slowdown_knn, sweep, knn):
        ...
        return passed("...") or not_yet("what is wrong", "what to try")

The notebook's check cell calls ``check("03.2", slowdown_histogram=..., sweep=sweep, ...)``. The
learner's stub leaves each answer as ``...``; a check then says which answers are missing. Whatever
the learner's code raises while it is checked becomes a "not yet" naming the error, so a check never
stops a notebook that runs all its cells.

Help is graded, so that feedback teaches without handing over the answer: a "not yet" shows the
exercise's ``concept`` (the idea, in words); :func:`hint` adds the ``hint`` (which API or data to
use); only :func:`reveal` shows the code, from the solutions manual (``workbench/teach/solutions``).
"""

from __future__ import annotations

import importlib
import inspect
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.names import did_you_mean
from workbench.runtime import failures
from workbench.teach.answers import AnswerError
from workbench.teach.feedback import NOT_YET, Feedback, Status

LESSON_MODULES = {
    "00": "lesson00",
    "01": "lesson01",
    "02": "lesson02",
    "03": "lesson03",
    "04": "lesson04",
    "05": "lesson05",
    "06": "lesson06",
    "07": "lesson07",
    "08": "capstone",
    "09": "lesson09",
    "10": "lesson10",
}
ID_PATTERN = re.compile(r"(\d\d)\.(\d+)")


@dataclass(frozen=True)
class Exercise:
    """A declared exercise: its id, the names of the learner's answers, its graded help, and its check.

    concept: the idea the exercise practises, in words (no API, no code): shown with every "not yet".
    hint: which function, column or data to use (not the code): shown by :func:`hint`.
    """

    id: str
    answers: tuple[str, ...]
    concept: str
    hint: str
    function: Callable[..., tuple[Status, str, str]]

    @property
    def lesson(self) -> str:
        """The two-digit lesson number."""
        return self.id.split(".")[0]


_EXERCISES: dict[str, Exercise] = {}


def exercise(id: str, answers: tuple[str, ...], concept: str, hint: str) -> Callable[[Callable[..., Any]], Exercise]:
    """Declare the check of exercise ``id`` (decorator); ``answers`` are the learner's names."""
    if not ID_PATTERN.fullmatch(id) or id.split(".")[0] not in LESSON_MODULES:
        raise ValueError(f"an exercise id is 'NN.K' with NN one of {sorted(LESSON_MODULES)}, got {id!r}")
    if not concept.strip() or not hint.strip():
        raise ValueError(f"exercise {id}: give both a concept (the idea, in words) and a hint (the API to use)")

    def declare(function: Callable[..., Any]) -> Exercise:
        missing = [a for a in answers if a not in inspect.signature(function).parameters]
        if missing:
            raise TypeError(f"exercise {id}: the check takes no parameter for the answers {missing}")
        declared = Exercise(id, tuple(answers), concept, hint, function)
        _EXERCISES[id] = declared
        return declared

    return declare


def _load(lesson: str) -> None:
    importlib.import_module(f"workbench.teach.{LESSON_MODULES[lesson]}")


def exercises(lesson: str | None = None) -> list[Exercise]:
    """The declared exercises, in id order (of one lesson when ``lesson`` is given)."""
    for number in [lesson] if lesson else LESSON_MODULES:
        if number not in LESSON_MODULES:
            raise ValueError(f"no lesson {number!r}; lessons are {sorted(LESSON_MODULES)}")
        _load(number)
    chosen = [e for e in _EXERCISES.values() if lesson is None or e.lesson == lesson]
    return sorted(chosen, key=lambda e: (e.lesson, int(e.id.split(".")[1])))


def get(id: str) -> Exercise:
    """The exercise ``id``; an unknown id is refused with the ids that exist."""
    match = ID_PATTERN.fullmatch(str(id))
    if match and match.group(1) in LESSON_MODULES:
        _load(match.group(1))
    if id not in _EXERCISES:
        known = [e.id for e in exercises()]
        hint = did_you_mean(id, known)
        raise ValueError(f"no exercise {id!r}" + (f"; {hint}" if hint else "") + f" Exercises: {known}")
    return _EXERCISES[id]


def _describe(error: BaseException) -> str:
    """What went wrong while checking, in one sentence (an error whose text cannot be made is named only)."""
    name = type(error).__name__
    if name == "KilledWorker":
        return "your function killed the worker process that ran it (os._exit, sys.exit or a crash); Dask restarted it"
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 (an exception whose __str__ fails)
        text = failures.UNSHOWN
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (line {frames[-1].lineno} of {frames[-1].name})" if frames else ""
    return f"checking your answer raised {name}: {text[:500]}{where}"


def check(id: str, **values: Any) -> Feedback:
    """Check exercise ``id`` with the learner's answers and the lesson's data (keyword arguments).

    Returns a :class:`Feedback` (the notebook shows it). An answer still ``...`` (the stub), or any
    error raised while checking the learner's code, gives "not yet" with what to do; it never raises.
    """
    declared = get(id)
    parameters = inspect.signature(declared.function).parameters
    unknown = sorted(set(values) - set(parameters))
    absent = sorted(set(parameters) - set(values))
    if unknown or absent:  # the check cell itself is wrong: an author's mistake, said plainly
        raise TypeError(
            f"check({id!r}) takes {list(parameters)}; "
            + (f"unexpected {unknown}" if unknown else "")
            + ("; " if unknown and absent else "")
            + (f"missing {absent}" if absent else "")
        )
    missing = [name for name in declared.answers if values[name] is Ellipsis]
    if missing:
        return Feedback(
            id,
            NOT_YET,
            "no answer yet for " + ", ".join(f"`{m}`" for m in missing) + " (still `...`)",
            declared.concept,
        )
    try:
        status, message, hint = declared.function(**values)
    except AnswerError as error:  # an answer of the wrong kind: the message says what was expected
        return Feedback(id, NOT_YET, str(error), declared.concept)
    except Exception as error:  # the learner's code failed while being checked: say where, do not stop
        return Feedback(id, NOT_YET, _describe(error), declared.concept)
    return Feedback(id, status, message, hint or (declared.concept if status == NOT_YET else ""))
