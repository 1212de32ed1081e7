"""A Paraver-like Gantt chart of a trace: one row per worker thread, one colour per action."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool

from workbench.viz.style import COLOURS, MORE, PALETTE, bytes_text, legend_outside, new_figure

# The colour each action prefers, so that the same action looks the same in every figure of a lesson;
# actions that are seldom in one figure together may share one (action_colours separates them then).
ACTION_COLOURS = {
    "compute": PALETTE[0],  # blue
    "transfer": PALETTE[3],  # vermillion
    "put": PALETTE[2],  # bluish green
    "take": PALETTE[4],  # sky blue
    "wait": PALETTE[1],  # orange
    "steal": PALETTE[5],  # reddish purple
    "replicate": PALETTE[6],  # yellow
    "deserialize": MORE[0],  # indigo
    "disk-read": MORE[1],  # olive
    "disk-write": MORE[2],  # wine
    "file-read": MORE[1],
    "file-write": MORE[2],
    "shm-create": PALETTE[2],
    "shm-attach": PALETTE[4],
    "table-hit": PALETTE[6],
    "tier-read": MORE[3],  # teal
    "tier-write": MORE[5],  # rose
    "place": MORE[4],  # sand
    "promote": PALETTE[1],
    "demote": PALETTE[5],
    "evict": MORE[6],  # grey
}
PHASE = "phase:"  # the client's own phases (``Recorder.phase``): drawn light, under the events
PHASE_ALPHA = 0.45
# The client's phases seen together get two colours of their own (light, under the events): sand, teal.
PHASE_COLOURS = {
    "phase:first-iteration": MORE[4],
    "phase:later-iterations": MORE[3],
    "phase:compute": MORE[4],
    "phase:fetch": MORE[3],
    "phase:split": MORE[4],
    "phase:rechunk": MORE[4],
    "phase:group": MORE[4],
    "phase:cool": MORE[4],
}


def action_colours(actions: Iterable[str]) -> dict[str, str]:
    """A distinct colour for each action of one figure: its own (:data:`ACTION_COLOURS`,
    :data:`PHASE_COLOURS`) where no action before it took that colour, else the first colour of
    :data:`~workbench.viz.style.COLOURS` not yet taken (an action the tables do not know)."""
    chosen: dict[str, str] = {}
    for action in dict.fromkeys(actions):
        preferred = ACTION_COLOURS.get(action) or PHASE_COLOURS.get(action)
        taken = set(chosen.values())
        if preferred is None or preferred in taken:
            free = [c for c in COLOURS if c not in taken]
            if not free:
                raise ValueError(f"more than {len(COLOURS)} actions in one figure: {sorted(chosen)}")
            preferred = free[0]
        chosen[action] = preferred
    return chosen


def _ordered(actions: Iterable[str]) -> list[str]:
    """Known actions in the table's order, then the others by name, then the client's phases."""
    actions = set(actions)
    known = [a for a in ACTION_COLOURS if a in actions]
    other = sorted(a for a in actions if a not in ACTION_COLOURS and not a.startswith(PHASE))
    return known + other + sorted(a for a in actions if a.startswith(PHASE))


def short_workers(addresses: Iterable[str]) -> dict[str, str]:
    """Row labels for worker addresses: ``tcp://127.0.0.1:40001`` becomes ``:40001`` when every address
    has the same protocol and host (one machine), else stays whole; other names (``client``) stay."""
    addresses = list(dict.fromkeys(str(a) for a in addresses))
    hosts = {a.rsplit(":", 1)[0] for a in addresses if "://" in a and ":" in a.split("://", 1)[1]}
    if len(hosts) != 1:
        return {a: a for a in addresses}
    return {a: (":" + a.rsplit(":", 1)[1] if "://" in a else a) for a in addresses}


def gantt(frame: pd.DataFrame, title: str = "trace"):
    """Bars from start to stop for each record, one colour per action (legend beside the plot); hover
    shows task, action, duration, bytes and where the bytes came from.

    Rows are ``worker / thread`` (the worker's port when all are on one machine); time is in
    milliseconds from the first record. The client's own phases are light bars on the client row.
    """
    names = short_workers(frame["worker"]) if not frame.empty else {}
    labels = [f"{names[str(w)]} / {t}" for w, t in zip(frame["worker"], frame["thread"])] if not frame.empty else []
    rows = sorted(set(labels)) or ["(empty)"]
    fig = new_figure(
        y_range=rows,
        height=max(180, 36 * len(rows) + 110),
        title=title,
        x_axis_label="milliseconds since the first record",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
    )
    fig.ygrid.grid_line_color = None
    if frame.empty:
        return fig
    origin = frame["start"].min()
    data = pd.DataFrame(
        dict(
            row=labels,
            left=((frame["start"] - origin) * 1e3).to_list(),
            right=((frame["stop"] - origin) * 1e3).to_list(),
            duration=((frame["stop"] - frame["start"]) * 1e3).to_list(),
            action=frame["action"].to_list(),
            task=frame["task"].to_list(),
            moved=[bytes_text(b) if b else "" for b in frame["bytes"]],
            source=frame["source"].to_list(),
        )
    )
    order = _ordered(data["action"])
    palette = action_colours(order)
    bars = []
    for action in order:
        mine = data[data["action"] == action]
        phase = action.startswith(PHASE)
        bars.append(
            fig.hbar(
                y="row",
                left="left",
                right="right",
                height=0.7 if not phase else 0.9,
                fill_color=palette[action],
                line_color=palette[action],
                fill_alpha=PHASE_ALPHA if phase else 1.0,
                line_alpha=PHASE_ALPHA if phase else 1.0,
                level="underlay" if phase else "glyph",
                source=ColumnDataSource({name: mine[name].to_list() for name in mine.columns}),
                legend_label=action,
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=bars,
            tooltips=[
                ("task", "@task"),
                ("action", "@action"),
                ("ms", "@duration{0.000}"),
                ("bytes", "@moved"),
                ("from", "@source"),
            ],
        )
    )
    fig.legend.click_policy = "hide"
    legend_outside(fig, "right")  # beside the plot: bars stay visible
    return fig
