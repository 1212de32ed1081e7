"""Live panels: a few controls and a Run button that measures on the session's cluster."""
from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import pandas as pd
from bokeh.io import show

from workbench.lab.sweep import histogram_block_sweep
from workbench.runtime.session import Session
from workbench.viz.timing import block_sweep_figure

BLOCK_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class BlockSweepPanel:
    """Pick a number of blocks, press Run: the histogram runs and joins the growing figure.

    ``panel.widget`` is what a notebook displays; ``panel.run()`` does what the button does, so
    the panel can be scripted and tested. ``panel.runs`` holds every measured run.
    """

    def __init__(self, session: Session, size: str = "ci", choices: Sequence[int] = BLOCK_CHOICES):
        self.session = session
        self.size = size
        self.runs = pd.DataFrame(columns=["blocks", "block_rows", "repeat", "seconds"])
        self.blocks = widgets.SelectionSlider(options=list(choices), value=choices[len(choices) // 2], description="blocks")
        self.repeats = widgets.IntSlider(value=3, min=1, max=10, description="repeats")
        self.button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.status = widgets.HTML(value="Choose a number of blocks and press <b>Run</b>.")
        self.output = widgets.Output()
        self.button.on_click(lambda _: self.run())
        self.widget = widgets.VBox([widgets.HBox([self.blocks, self.repeats, self.button]), self.status, self.output])

    def run(self) -> pd.DataFrame:
        """Measure the chosen number of blocks, add the runs to the figure, return all runs."""
        self.button.disabled = True
        self.status.value = f"running {self.blocks.value} blocks x {self.repeats.value} ..."
        try:
            new = histogram_block_sweep(self.session, self.size, blocks=(self.blocks.value,), repeats=self.repeats.value)
            self.runs = new if self.runs.empty else pd.concat([self.runs, new], ignore_index=True)
            with self.output:
                self.output.clear_output(wait=True)
                show(block_sweep_figure(self.runs))
            self.status.value = f"{self.blocks.value} blocks: median {new['seconds'].median():.4f} s"
        except Exception as error:  # shown in the panel: a click has no traceback to read
            self.status.value = f"<b>error:</b> {error}"
            raise
        finally:
            self.button.disabled = False
        return self.runs
