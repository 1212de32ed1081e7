"""Names a person typed: the one close-match suggestion that every "no such name" error gives.

An application's variant or parameter, a store alias or active method, a strategy, an exercise, a
shared segment, a command-line choice: each error that refuses a name asks :func:`did_you_mean`,
so a typo gets the same help wherever it is made. A name read from a file someone else may have
written is shown through :func:`printable`, so it can never drive the terminal it is printed on.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, known: Iterable[str], n: int = 1) -> str:
    """``"did you mean 'active'?"`` for the names of ``known`` closest to ``name`` (up to ``n``, joined
    by "or"; difflib's similarity of 0.6 or more), or ``""`` when none is close."""
    close = difflib.get_close_matches(str(name), list(known), n=n)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a terminal's escape sequence, a line break,
    a bidirectional override) written as its Python escape (``\\x1b``), the others as they are."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
