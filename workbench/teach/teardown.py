"""Every lesson's last cell: a button that closes what the lesson opened, and the same when the kernel shuts down.

A lesson used to close its cluster in its last cell, so a Run All closed it too: the dashboard's panes,
opened while the cells ran, then showed a dead cluster ("Dashboard not connected"). Now Run All ends
at :func:`teardown`, which closes nothing by itself. It shows a button; pressing it runs the lesson's
closers (its store, its temporary directories), closes the session's cluster and says what the lesson
left in ``/dev/shm`` (nothing, the lesson template asks). Until then the same closing is registered
to run when the kernel shuts down or restarts (:mod:`workbench.runtime.shutdown`), so a learner who
never presses it, and papermill, which never does, leave nothing behind either.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Callable, Collection
from typing import Any

from workbench.memory import shm
from workbench.runtime.session import Session
from workbench.runtime.shutdown import at_kernel_shutdown

INTRO = (
    "Run All stops here and leaves this lesson's cluster running, so its dashboard (the links under the "
    "session cell) keeps showing it. When you are done, press the button: it closes what the lesson "
    "opened and the cluster, then says what is left in <code>/dev/shm</code>. Shutting the kernel down "
    "or restarting it does the same."
)


def left_in_shm(before: Collection[str] | None = None) -> list[str]:
    """This user's segments in /dev/shm that a lesson left: those not in ``before`` (the names
    listed when the lesson started) when given, else those whose owner is this process (what this
    kernel's sessions made for it, on any of its workers)."""
    if not shm.SHM_DIR.is_dir():
        return []
    found = shm.list_segments()
    if before is not None:
        return sorted({s.name for s in found} - set(before))
    return sorted(s.name for s in found if s.owner_pid == os.getpid())


class Teardown:
    """What :func:`teardown` returns: the button and what it closes, once (the closers in order, the
    session, then ``after``); shown in a notebook as its widget."""

    def __init__(
        self,
        session: Session,
        closers: tuple[Callable[[], object], ...],
        shm_before: Collection[str] | None,
        after: Callable[[], object] | None,
    ) -> None:
        import ipywidgets as widgets

        self.session, self.closers, self.shm_before, self.after = session, closers, shm_before, after
        self._lock = threading.Lock()
        self._done = False
        self.button = widgets.Button(
            description="Close the cluster", icon="power-off", tooltip="close what this lesson opened"
        )
        self.said = widgets.HTML()
        self.button.on_click(self._pressed)
        self.widget = widgets.VBox([widgets.HTML(f"<p>{INTRO}</p>"), self.button, self.said])
        self.cancel = at_kernel_shutdown(self.close, "the lesson's teardown")

    def _pressed(self, _: Any) -> None:
        self.button.disabled = True
        self.said.value = "closing ..."
        self.said.value = "<br>".join(html.escape(line) for line in self.close())

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def close(self) -> list[str]:
        """Run the closers (each even if one before it raised), close the session, run ``after``;
        the lines to show: what failed, what ``after`` said, what is left in /dev/shm. Only the first
        call closes anything (the button's or the kernel's shutdown's)."""
        with self._lock:
            if self._done:
                return []
            self._done = True
        if self.cancel is not None:
            self.cancel()
        lines: list[str] = []
        for closer in self.closers:
            try:
                closer()
            except Exception as error:  # the others still close
                lines.append(f"{_name(closer)} failed: {error!r}")
        try:
            self.session.close()
            lines.append("The cluster is closed: its workers have stopped.")
        except Exception as error:
            lines.append(f"closing the cluster failed: {error!r}")
        if self.after is not None:
            said = self.after()
            if said is not None:
                lines.append(str(said))
        left = left_in_shm(self.shm_before)
        lines.append(f"Left in /dev/shm: {', '.join(left)}." if left else "Nothing of this lesson is left in /dev/shm.")
        return lines


def _name(closer: Callable[[], object]) -> str:
    return getattr(closer, "__qualname__", None) or repr(closer)


def teardown(
    session: Session,
    *closers: Callable[[], object],
    shm_before: Collection[str] | None = None,
    after: Callable[[], object] | None = None,
) -> Teardown:
    """The lesson's last cell: a "Close the cluster" button, and the same closing at the kernel's shutdown.

    Pressing it calls ``closers`` in order (``store.close``, ``directory.cleanup``: whatever the
    lesson opened besides the session), closes ``session``, calls ``after`` (its result, if not None,
    is shown: e.g. what a lesson checks once everything is closed) and shows what is left in
    /dev/shm (:func:`left_in_shm`, against ``shm_before`` when given). Nothing is closed until the
    button is pressed or the kernel shuts down, whichever comes first.
    """
    if not isinstance(session, Session):
        raise TypeError(f"teardown takes the lesson's workbench session first, got {type(session).__name__}")
    for closer in closers:
        if not callable(closer):
            raise TypeError(
                f"teardown's closers are functions to call (e.g. store.close, without brackets), got {closer!r}"
            )
    return Teardown(session, closers, shm_before, after)
