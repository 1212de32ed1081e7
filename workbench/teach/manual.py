"""The solutions manual and the learner's graded help: :func:`hint` (which API or data to use) and
:func:`reveal` (a worked solution), called from a notebook when a learner asks for them.

Lesson notebooks hold no solution cells, so Run All can never overwrite a learner's answer with the
solution. Each lesson's solutions live in ``workbench/teach/solutions/lessonNN.md``, a page an
instructor can read as a solutions manual::

    ## 03.2
    Why this is the answer (prose: what reveal shows above the solution).
    ```python
    <the solution: runs in the notebook's namespace, just before the check cell>
    ```
    A wrong answer a learner might give (prose for instructors: reveal never shows it).
    ```python wrong
    <a wrong but plausible answer: its check must say "not yet">
    ```

CI runs every lesson twice from this manual (:mod:`workbench.teach.execute`): with each solution
injected before its check (every check passes) and, as a learner who got it wrong, with each
``wrong`` block instead (every check says "not yet").
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from importlib import resources

from workbench.teach.markup import to_html, to_plain
from workbench.teach.registry import LESSON_MODULES, get

_SECTION = re.compile(r"^## (\d\d\.\d+)[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^```python([ \t]+wrong)?[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


class ManualError(ValueError):
    """A solutions page is malformed: the message names the page, the exercise and what is missing."""


@dataclass(frozen=True)
class Solution:
    """One exercise's entry in the solutions manual.

    explanation: why the answer is right (Markdown prose before the solution: what :func:`reveal` shows).
    code: the solution cell.
    wrong: a wrong answer a learner might give (the learner run of CI injects it; its check says "not yet").
    wrong_note: what is wrong in ``wrong`` (the prose after the solution, for instructors reading the page).
    """

    exercise: str
    explanation: str
    code: str
    wrong: str
    wrong_note: str = ""


def _page(lesson: str) -> str:
    if lesson not in LESSON_MODULES:
        raise ValueError(f"no lesson {lesson!r}; lessons are {sorted(LESSON_MODULES)}")
    name = f"lesson{lesson}.md"
    page = resources.files("workbench.teach").joinpath("solutions", name)
    if not page.is_file():
        raise ManualError(f"lesson {lesson} has no solutions page (workbench/teach/solutions/{name})")
    return page.read_text(encoding="utf-8")


def parse(text: str, source: str = "the page") -> dict[str, Solution]:
    """The solutions of one manual page, by exercise id; a section without exactly one solution block
    and one ``wrong`` block after it is refused (:class:`ManualError`), so CI cannot silently skip an
    exercise. The prose before the solution is its explanation; the prose after it is about the wrong
    answer, kept apart (``wrong_note``) so that :func:`reveal` never shows it beside the solution."""
    found: dict[str, Solution] = {}
    heads = list(_SECTION.finditer(text))
    for head, following in zip(heads, heads[1:] + [None], strict=True):
        body = text[head.end() : following.start() if following else len(text)]
        blocks = list(_FENCE.finditer(body))
        code = [b for b in blocks if not b.group(1)]
        wrong = [b for b in blocks if b.group(1)]
        if len(code) != 1 or len(wrong) != 1:
            raise ManualError(
                f"{source}, exercise {head.group(1)}: needs one ```python block (the solution) and one "
                f"```python wrong block (a wrong answer); found {len(code)} and {len(wrong)}"
            )
        if wrong[0].start() < code[0].start():
            raise ManualError(
                f"{source}, exercise {head.group(1)}: the ```python wrong block comes before the solution; "
                "put the solution first (the prose before it is what reveal shows), then the wrong answer"
            )
        explanation = body[: code[0].start()].strip()
        note = _FENCE.sub("", body[code[0].end() :]).strip()
        found[head.group(1)] = Solution(
            head.group(1), explanation, code[0].group(2).rstrip(), wrong[0].group(2).rstrip(), note
        )
    return found


def solutions(lesson: str) -> dict[str, Solution]:
    """Every solution of ``lesson`` ("03"), by exercise id."""
    return parse(_page(lesson), f"workbench/teach/solutions/lesson{lesson}.md")


def solution(id: str) -> Solution:
    """The manual's entry for exercise ``id`` (an unknown id is refused with the ids that exist)."""
    declared = get(id)
    entries = solutions(declared.lesson)
    if id not in entries:
        raise ManualError(f"the solutions page of lesson {declared.lesson} has no section '## {id}'")
    return entries[id]


@dataclass(frozen=True)
class Help:
    """Help shown in a notebook: a title, prose (Markdown: formatted in JupyterLab, plain text in a
    terminal) and optionally code."""

    title: str
    text: str
    code: str = ""

    def __str__(self) -> str:
        return f"{self.title}\n{to_plain(self.text)}" + (f"\n\n{self.code}" if self.code else "")

    def _repr_html_(self) -> str:
        code = f"<pre><code>{html.escape(self.code)}</code></pre>" if self.code else ""
        return (
            '<div class="lwb-help" style="background:#eef3fb;border-radius:4px;padding:6px 10px;margin:4px 0">'
            f"<b>{html.escape(self.title)}</b><div>{to_html(self.text)}</div>{code}</div>"
        )


def hint(id: str) -> Help:
    """The second step of help for exercise ``id``: the idea again, and which API or data to use (no code).
    The code itself is one step further: :func:`reveal`."""
    declared = get(id)
    return Help(
        f"Exercise {id}: a hint",
        f"{declared.concept} — {declared.hint}. Still stuck? `reveal({id!r})` shows a worked solution.",
    )


def reveal(id: str) -> Help:
    """A worked solution of exercise ``id``, with why it is right. Try :func:`hint` first: the check
    cell tells you what is wrong each time you run it."""
    entry = solution(id)
    return Help(f"Exercise {id}: a solution", entry.explanation, entry.code)
