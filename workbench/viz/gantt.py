"""A Paraver-like Gantt chart of a trace: one row per worker thread, one colour per action."""

from __future__ import annotations

import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

# Fixed colours per action, so the same action looks the same in every figure of a lesson.
ACTION_COLOURS = {
    "compute": "#4477aa",
    "transfer": "#ee6677",
    "deserialize": "#ccbb44",
    "disk-read": "#aa3377",
    "disk-write": "#882255",
    "shm-create": "#228833",
    "shm-attach": "#66ccee",
    "table-hit": "#bbbbbb",
    "tier-read": "#997700",
    "tier-write": "#cc6677",
}
OTHER = "#999999"


def colour(action: str) -> str:
    """The colour of a trace action in every figure."""
    if action.startswith("phase:"):
        return "#dddddd"
    return ACTION_COLOURS.get(action, OTHER)


def gantt(frame: pd.DataFrame, title: str = "trace", width: int = 760):
    """Bars from start to stop for each record; hover shows task, action, duration and bytes.

    Rows are ``worker / thread``; time is in milliseconds from the first record. The client's own
    phases are drawn as light bars on the client row.
    """
    rows = sorted({f"{w} / {t}" for w, t in zip(frame["worker"], frame["thread"])}) if not frame.empty else ["(empty)"]
    fig = figure(
        y_range=rows,
        height=max(180, 40 * len(rows) + 80),
        width=width,
        title=title,
        x_axis_label="milliseconds since the first record",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
    )
    if frame.empty:
        return fig
    origin = frame["start"].min()
    data = dict(
        row=[f"{w} / {t}" for w, t in zip(frame["worker"], frame["thread"])],
        left=((frame["start"] - origin) * 1e3).to_list(),
        right=((frame["stop"] - origin) * 1e3).to_list(),
        duration=((frame["stop"] - frame["start"]) * 1e3).to_list(),
        action=frame["action"].to_list(),
        task=frame["task"].to_list(),
        bytes=frame["bytes"].astype(int).to_list(),
        source=frame["source"].to_list(),
        colour=[colour(a) for a in frame["action"]],
    )
    bars = fig.hbar(
        y="row",
        left="left",
        right="right",
        height=0.7,
        fill_color="colour",
        line_color="colour",
        source=ColumnDataSource(data),
        legend_field="action",
    )
    fig.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[
                ("task", "@task"),
                ("action", "@action"),
                ("ms", "@duration{0.000}"),
                ("bytes", "@bytes{0,0}"),
                ("from", "@source"),
            ],
        )
    )
    fig.legend.click_policy = "hide"
    fig.add_layout(fig.legend[0], "right")  # beside the plot: bars stay visible
    fig.ygrid.grid_line_color = None
    return fig
