"""A benchmark's progress on stderr: its expected time up front, then a bar per phase as it goes.

Every ``workbench bench NAME`` prints here, also with ``--json`` (the report goes to stdout, this to
stderr), so a person sees at once how long to wait and, at each step, how far it got::

    bench tiers: size lab, expected about 2 min on 2 cores
    bench tiers: applications [######..............] 3/10 kmeans big/big (41 s)

On a terminal a phase's bar is redrawn in place; elsewhere (a pipe, a log, ``bench all``) each
step is a line of its own. :meth:`Progress.quiet` is the one a run uses when nobody watches.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 20


def duration(seconds: float) -> str:
    """Seconds as people say them: ``41 s``, ``3 min``, ``1 h 5 min`` (to the nearest minute, half up)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(int(seconds / 60 + 0.5), 60)
    return f"{minutes} min" if not hours else f"{hours} h {minutes} min"


def run_time(seconds: float | None) -> str:
    """How long a whole run took (``665 s in all``), or that it stopped before its end (it has none)."""
    return "stopped before the end" if seconds is None else f"{seconds:.0f} s in all"


class Phase:
    """One phase of a benchmark: ``total`` steps, a bar redrawn (or a line printed) at each :meth:`step`."""

    def __init__(self, progress: Progress, name: str, total: int):
        self.progress, self.name, self.total, self.done = progress, name, max(1, total), 0

    def step(self, label: str = "") -> None:
        """One step done (``label``: what it was)."""
        self.done = min(self.total, self.done + 1)
        filled = BAR_WIDTH * self.done // self.total
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        elapsed = duration(self.progress.elapsed())
        self.progress.bar(f"{self.name} [{bar}] {self.done}/{self.total} {label} ({elapsed})".replace("  ", " "))

    def __enter__(self) -> Phase:
        self.progress.say(f"{self.name}: {self.total} step{'s' if self.total != 1 else ''}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.end_bar()


class Progress:
    """Where one benchmark's progress goes: ``write`` gets text (stderr by default)."""

    def __init__(
        self,
        name: str,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ):
        self.name, self.clock, self.enabled = name, clock, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.started = clock()
        self.redraw = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self._open_bar = False

    @classmethod
    def quiet(cls, name: str = "") -> Progress:
        """A progress that prints nothing (a run called from code, a test)."""
        return cls(name, enabled=False)

    def elapsed(self) -> float:
        """Seconds since the benchmark started."""
        return self.clock() - self.started

    def expect(
        self, size: str, seconds: float, cores: int = 2, estimated: bool = False, extra: tuple[float, str] | None = None
    ) -> None:
        """Say the expected time up front (``seconds``: measured at ``size`` on ``cores`` cores, or
        ``estimated`` where that size was not timed); ``extra``: how many seconds more this run takes,
        and why (numba compiling what its cache does not hold)."""
        how = " (an estimate: this size was not timed)" if estimated else ""
        more = f", plus about {duration(extra[0])} {extra[1]}" if extra else ""
        self.say(f"size {size}, expected about {duration(seconds)} on {cores} cores{how}{more}")

    def phase(self, name: str, total: int) -> Phase:
        """A phase of ``total`` steps, used as ``with progress.phase(...) as p: ... p.step()``."""
        return Phase(self, name, total)

    def say(self, line: str) -> None:
        """One line of progress."""
        if not self.enabled:
            return
        self.end_bar()
        self.stream.write(f"bench {self.name}: {line}\n")
        self.stream.flush()

    def bar(self, text: str) -> None:
        """A bar: redrawn in place on a terminal, a line of its own elsewhere."""
        if not self.enabled:
            return
        if self.redraw:
            self.stream.write(f"\r\033[Kbench {self.name}: {text}")
            self._open_bar = True
        else:
            self.stream.write(f"bench {self.name}: {text}\n")
        self.stream.flush()

    def end_bar(self) -> None:
        """End a bar redrawn in place with a newline (before any other line)."""
        if self._open_bar:
            self.stream.write("\n")
            self.stream.flush()
            self._open_bar = False
