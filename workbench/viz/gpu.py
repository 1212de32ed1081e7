"""Figures and the live panel of lesson 10 · Keep it on the device: the rates of the bus and of the
device's memory, and the bytes k-means copies to the device iteration by iteration, kept there or
copied in every time.

The panel's Run measures with :func:`kmeans_by_iteration`: the same two ways as
:func:`workbench.lab.gpu_experiments.kmeans_placement`, for any number of iterations, recording the
bytes and seconds after each one. Under numba's simulator the bytes are right and the seconds mean
nothing; every figure says so in its title. Nothing here imports numba's CUDA module at import time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool

from workbench.lab import gpu_experiments
from workbench.memory import gpu, tiers
from workbench.viz.panels import controls_row, redraw, run_button, running
from workbench.viz.style import PALETTE, byte_ticks, bytes_text, colours, legend_outside, new_figure

SIMULATED_NOTE = " (SIMULATED: times mean nothing)"
WAYS = ("resident", "copied")  # points placed on the device once; points copied in at every iteration


def rate_figure(bus: Mapping[str, Any], floor: Mapping[str, Any], histogram: Mapping[str, Any], simulated: bool):
    """Horizontal bars, log scale, of the rates measured in lesson 10: the bus each way (from pageable and
    from pinned host memory), the device's triad (its memory bandwidth) and the histogram kernel."""
    rows = [
        ("host to device, pageable", bus["pageable_to_device_gbs"], "the bus: staged through a driver buffer"),
        ("host to device, pinned", bus["pinned_to_device_gbs"], "the bus: DMA from page-locked memory"),
        ("device to host", bus["to_host_gbs"], "the bus, back"),
        ("device memory (triad)", floor["gbs"], "STREAM triad on the device: the floor"),
        ("histogram kernel", histogram["gbs"], "values read per second by the kernel"),
    ]
    labels = [label for label, _, _ in rows]
    source = ColumnDataSource(
        dict(
            label=labels,
            gbs=[float(value) for _, value, _ in rows],
            what=[what for _, _, what in rows],
            color=[PALETTE[0]] * 3 + [PALETTE[1], PALETTE[2]],
        )
    )
    smallest = min((v for v in source.data["gbs"] if v > 0), default=1e-6)
    fig = new_figure(
        y_range=labels[::-1],
        x_axis_type="log",
        height=260,
        title="GB/s, measured now" + (SIMULATED_NOTE if simulated else ""),
        x_axis_label="GB/s (log)",
        toolbar_location=None,
    )
    fig.hbar(y="label", right="gbs", left=smallest / 2, height=0.7, color="color", source=source)
    fig.add_tools(HoverTool(tooltips=[("", "@label"), ("rate", "@gbs{0.000} GB/s"), ("what", "@what")]))
    return fig


def kmeans_by_iteration(size: str, iterations: int) -> list[dict[str, Any]]:
    """k-means on the device for ``iterations`` iterations two ways, at ``size``'s points (as
    :func:`~workbench.lab.gpu_experiments.kmeans_placement`): ``resident``, the points placed on the
    ``gpu`` tier once, and ``copied``, the points copied in at every iteration. One record per way and
    iteration: the bytes of points moved to the device so far (the tier's count) and the seconds so far."""
    if int(iterations) < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    cuda, s = gpu.cuda(), gpu_experiments.size_named(size)
    points = np.random.default_rng(10).random((s.points, s.dims))
    name = f"lesson10-panel-{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, Any]] = []
    try:
        for way in WAYS:
            centres = points[: s.centres].copy()
            before = tiers.current().device.transfers.snapshot()
            cuda.synchronize()
            start = time.perf_counter()
            placed = tiers.place(name, points, "gpu") if way == "resident" else None
            for iteration in range(1, int(iterations) + 1):
                on_device = placed.device if placed is not None else tiers.current().device.to_device(name, points)
                centres = gpu_experiments.kmeans_step(on_device, centres)
                cuda.synchronize()
                moved = tiers.current().device.transfers - before
                rows.append(
                    {
                        "way": way,
                        "iteration": iteration,
                        "bytes_to_device": moved.to_device,
                        "copies_to_device": moved.copies_to_device,
                        "seconds": time.perf_counter() - start,
                    }
                )
            tiers.free(name, "gpu")
    finally:
        tiers.free(name, "gpu")
    return rows


def bytes_figure(rows: Sequence[Mapping[str, Any]], simulated: bool = False):
    """Bytes of points moved to the device against the iteration, one line per way
    (:func:`kmeans_by_iteration` records)."""
    fig = new_figure(
        title="bytes of points moved to the device so far",
        x_axis_label="iteration",
        y_axis_label="bytes moved",
        toolbar_location=None,
    )
    for colour, way in zip(colours(len(WAYS)), WAYS, strict=True):
        mine = [r for r in rows if r["way"] == way]
        source = ColumnDataSource(
            dict(
                iteration=[r["iteration"] for r in mine],
                moved=[r["bytes_to_device"] for r in mine],
                moved_text=[bytes_text(r["bytes_to_device"]) for r in mine],
                seconds=[r["seconds"] for r in mine],
            )
        )
        fig.line("iteration", "moved", source=source, line_width=2, color=colour, legend_label=way)
        fig.scatter("iteration", "moved", source=source, size=7, color=colour)
    seconds = "@seconds{0.000} s" + (" (simulated)" if simulated else "")
    fig.add_tools(HoverTool(tooltips=[("iteration", "@iteration"), ("bytes", "@moved_text"), ("so far", seconds)]))
    ticks, labels = byte_ticks(max((r["bytes_to_device"] for r in rows), default=0))
    fig.yaxis.ticker = FixedTicker(ticks=ticks)
    fig.yaxis.major_label_overrides = labels
    legend_outside(fig, "right")
    fig.y_range.start = 0
    fig.xaxis.ticker = FixedTicker(ticks=iteration_ticks([r["iteration"] for r in rows]))
    return fig


def iteration_ticks(iterations: Sequence[int], most: int = 10) -> list[int]:
    """Ticks for an axis of iterations: whole iterations only (bokeh's own ticker puts one at 1.5),
    every one up to ``most`` ticks, else every second, third, ... from the first."""
    shown = sorted({int(i) for i in iterations})
    step = -(-len(shown) // most) if shown else 1
    return shown[::step]


class PlacementPanel:
    """Pick a number of k-means iterations, press Run: both ways run on the device and the figure shows the
    bytes each moved to the device after every iteration (lesson 10). ``panel.run()`` does what the button
    does; ``panel.rows`` holds the last run's records."""

    def __init__(self, size: str, simulated: bool, iterations: int = 4, most: int = 20):
        self.size, self.simulated = size, simulated
        self.rows: list[dict[str, Any]] = []
        self.iterations = widgets.IntSlider(value=iterations, min=1, max=most, description="iterations")
        self.button = run_button(self.run)
        self.status = widgets.HTML(value="Choose the number of iterations, then press <b>Run</b>.")
        self.output = widgets.Output()
        self.widget = widgets.VBox([controls_row([self.iterations, self.button]), self.status, self.output])

    def run(self) -> list[dict[str, Any]]:
        """Run both ways for the chosen iterations; show the figure and the last iteration's table."""
        n = self.iterations.value
        with running(self.button, self.status, f"running k-means both ways for {n} iterations ..."):
            self.rows = kmeans_by_iteration(self.size, n)
            last = pd.DataFrame([r for r in self.rows if r["iteration"] == n]).set_index("way")
            last = last.rename(columns={"seconds": "seconds" + (" (simulated)" if self.simulated else "")})
            redraw(self.output, bytes_figure(self.rows, self.simulated), last)
            moved = last["bytes_to_device"]
            self.status.value = (
                f"after {n} iterations: copied {moved['copied']:,} bytes, resident {moved['resident']:,} bytes "
                f"({moved['copied'] / moved['resident']:.0f}x)"
            )
        return self.rows
