"""A lesson's extension: an optional, long experiment that Run All does not wait for.

A lesson's long sweeps that its exercises do not need (lesson 02's Table II; lesson 03's kNN fit
sweep, weak scaling and balance; lesson 04's weak scaling and the store as it fills) would double a class's Run All at
size lab. :func:`extension` shows them as a button instead: "Run this extension (about 40 s)";
a click runs the experiment and shows its tables and figures below the button. At size ci (CI,
Binder) it runs at once, so every test run still executes the extension's code.

How long each one takes is said up front (:data:`ABOUT_S`, seconds on 2 cores by size): a learner
decides knowing the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets
from IPython.display import display

# Seconds each extension takes on 2 quiet cores, by size: estimates, from the runs each makes and the
# time of one such run at lab measured on a 2-core VM under a load of 20 to 30 (which stretched every
# time about tenfold), rounded up; ci runs them at once.
ABOUT_S: Mapping[str, Mapping[str, float]] = {
    # 02: measured at lab (47 s, both points to the most rounds, 2 quiet cores); full's 512 products of
    # 2048-blocks and 8,000 of 512-blocks are estimated from one product's time
    "02 Table II": {"lab": 60, "full": 3600},
    "03 kNN fit sweep": {"lab": 60, "full": 600},
    "03 weak scaling": {"lab": 60, "full": 300},
    "03 balance": {"lab": 60, "full": 300},
    "04 weak scaling": {"lab": 150, "full": 600},
    "04 the store as it fills": {"lab": 40, "full": 120},
}
RUNS_AT_ONCE = ("ci",)  # the sizes at which an extension runs where it stands (tests and Binder)


def about(seconds: float) -> str:
    """How long, as a button says it: ``about 40 s``, ``about 3 min``."""
    if seconds < 90:
        return f"about {max(10, round(seconds / 10) * 10):.0f} s"
    return f"about {round(seconds / 60):.0f} min"


def show_result(result: Any) -> None:
    """Show what an extension returned: a bokeh figure or layout with bokeh's ``show``, text printed, a
    table (or anything else) with IPython's ``display``, a tuple or list item by item; None shows nothing."""
    from bokeh.io import show
    from bokeh.model import Model

    if result is None:
        return
    if isinstance(result, (tuple, list)):
        for item in result:
            show_result(item)
    elif isinstance(result, Model):
        show(result)
    elif isinstance(result, str):
        print(result)
    else:
        display(result)


class Extension:
    """An extension's button, status line and output; ``widget`` is what its cell shows, ``run()``
    does what a click does (so a script or a test can press it)."""

    def __init__(self, name: str, experiment: Callable[[], Any], seconds: float, session: Any = None):
        self.name, self.experiment, self.seconds, self.session = name, experiment, seconds, session
        self.button = widgets.Button(
            description=f"Run this extension ({about(seconds)})",
            button_style="info",
            icon="play",
            layout=widgets.Layout(width="auto"),
        )
        self.button.on_click(lambda _: self.run())
        self.status = widgets.HTML(value=f"<i>{name}</i>: optional; Run All does not run it.")
        self.output = widgets.Output()
        self.widget = widgets.VBox([widgets.HBox([self.button, self.status]), self.output])

    def run(self) -> None:
        """Run the experiment and show what it returns in the output (an error there, with its traceback)."""
        if self.session is not None and self.session.closed():
            self.status.value = (
                "<b>The lesson's cluster is closed</b> (its last cell closes it): run the cell that starts "
                "it (<code>workbench.start()</code>), then this cell again."
            )
            return
        self.button.disabled = True
        self.status.value = f"running <i>{self.name}</i> ({about(self.seconds)}) ..."
        started = time.perf_counter()
        failed = True
        try:
            with self.output:  # an error is shown in the output, with its traceback, and goes no further
                self.output.clear_output()
                show_result(self.experiment())
                failed = False
        finally:
            self.button.disabled = False
            took = time.perf_counter() - started
            self.status.value = f"<i>{self.name}</i>: " + (
                "<b>failed</b> (the error is below)" if failed else f"done in {took:.0f} s"
            )


def extension(name: str, experiment: Callable[[], Any], size: str, session: Any = None) -> widgets.VBox | None:
    """Lesson extension ``name`` (a key of :data:`ABOUT_S`): at size ci, ``experiment()`` runs now and
    what it returns is shown (a figure, a table, or a tuple of them); at lab and full, a button that
    runs it when clicked is returned, for the cell to show. ``session``: the cluster it runs on,
    checked at the click (a closed one is said, not run into)."""
    if name not in ABOUT_S:
        raise ValueError(f"no extension {name!r}: the extensions are {', '.join(ABOUT_S)}")
    if size in RUNS_AT_ONCE:
        show_result(experiment())
        return None
    if size not in ABOUT_S[name]:
        raise ValueError(f"size must be one of {[*RUNS_AT_ONCE, *ABOUT_S[name]]}, got {size!r}")
    return Extension(name, experiment, ABOUT_S[name][size], session).widget
