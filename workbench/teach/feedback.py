"""What a check says to a learner: passed, or "not yet" with what is wrong and a hint.

A :class:`Feedback` renders as a coloured box in JupyterLab (its Markdown formatted: `names` as code)
and as one line of plain text elsewhere, and carries a machine-readable copy (:data:`MIME`) so that
CI can read every check's verdict from an executed notebook without parsing prose.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from typing import Any, Literal

from workbench.teach.markup import to_html, to_plain

MIME = "application/vnd.locality-workbench.check+json"
PASSED = "passed"
NOT_YET = "not yet"

Status = Literal["passed", "not yet"]


@dataclass(frozen=True)
class Feedback:
    """One check's verdict on one exercise.

    exercise: the exercise id ("03.2": lesson 03, exercise 2).
    status: "passed" or "not yet" (a check never raises at the learner: it says what is wrong).
    message: what was found, in figures where there are figures (Markdown: `name` for a name in code).
    hint: the next thing to try (empty when passed; Markdown too).
    """

    exercise: str
    status: Status
    message: str
    hint: str = ""

    @property
    def passed(self) -> bool:
        """Whether the answer passed."""
        return self.status == PASSED

    @property
    def more(self) -> str:
        """Where more help is, after a "not yet" (empty when passed)."""
        if self.passed:
            return ""
        return f"more help: `hint({self.exercise!r})` names what to use; `reveal({self.exercise!r})` shows a solution"

    def __str__(self) -> str:
        mark = "✔" if self.passed else "✘"
        text = f"{mark} exercise {self.exercise}: {self.status} — {_line(self.message)}"
        text += f"\n  hint: {_line(self.hint)}" if self.hint else ""
        return text + (f"\n  {_line(self.more)}" if self.more else "")

    def _repr_html_(self) -> str:
        colour, mark = ("#e6f4ea", "✔") if self.passed else ("#fef7e0", "✘")
        hint = f"<div><b>Hint:</b> {to_html(self.hint)}</div>" if self.hint else ""
        hint += f"<div><i>{to_html(self.more)}</i></div>" if self.more else ""
        return (
            f'<div class="lwb-check lwb-check-{self.status.replace(" ", "-")}" '
            f'style="background:{colour};border-radius:4px;padding:6px 10px;margin:4px 0">'
            f"<b>{mark} Exercise {html.escape(self.exercise)}: {html.escape(self.status)}</b>"
            f"<div>{to_html(self.message)}</div>{hint}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": str(self), "text/html": self._repr_html_(), MIME: asdict(self)}


def _line(text: str) -> str:
    """Markdown as one line of plain text (its marks dropped)."""
    return " ".join(to_plain(text, width=None).split())


def passed(message: str) -> tuple[Status, str, str]:
    """A check function's verdict: the answer is right (``message`` says what was confirmed)."""
    return PASSED, message, ""


def not_yet(message: str, hint: str = "") -> tuple[Status, str, str]:
    """A check function's verdict: the answer is not right yet; ``message`` says what is wrong."""
    return NOT_YET, message, hint
