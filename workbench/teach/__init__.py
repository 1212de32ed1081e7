"""Self-checking exercises: each lesson's exercises have a check that answers with what is wrong
and a hint, not just pass or fail (``check("03.2", ...)`` in the lesson's check cell).

Layered on top, like ``viz``: it may import ``lab``, ``apps``, ``runtime`` and ``memory``; nothing
imports it but the notebooks and the tests.
"""

from __future__ import annotations

from workbench.teach.feedback import MIME, NOT_YET, PASSED, Feedback
from workbench.teach.registry import Exercise, check, exercise, exercises, get

__all__ = ["MIME", "NOT_YET", "PASSED", "Exercise", "Feedback", "check", "exercise", "exercises", "get"]
