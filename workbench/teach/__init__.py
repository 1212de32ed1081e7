"""Self-checking exercises: each lesson's exercises have a check that answers with what is wrong
and the idea behind it, not just pass or fail (``check("03.2", ...)`` in the lesson's check cell),
and graded help when asked (``hint("03.2")``, then ``reveal("03.2")``: :mod:`workbench.teach.manual`).

Layered on top, like ``viz``: it may import ``lab``, ``apps``, ``bench``, ``runtime`` and ``memory``; nothing
imports it but the notebooks and the tests.
"""

from __future__ import annotations

from workbench.teach.feedback import MIME, NOT_YET, PASSED, Feedback
from workbench.teach.manual import hint, reveal
from workbench.teach.registry import Exercise, check, exercise, exercises, get

__all__ = [
    "MIME",
    "NOT_YET",
    "PASSED",
    "Exercise",
    "Feedback",
    "check",
    "exercise",
    "exercises",
    "get",
    "hint",
    "reveal",
]
