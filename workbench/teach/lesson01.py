"""Checks of lesson 01 · A locality tour: bytes moved against the data's size."""

from __future__ import annotations

from typing import Any

import datasets
from workbench.teach.answers import close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise


def histogram_partial_bytes(experiment: Any) -> int:
    """Bytes of one partial histogram (int64 counts, bins per dimension to the power of dimensions)."""
    params = datasets.get("histogram", experiment.metadata["size"]).params
    return int(params["bins"]) ** len(params["range"]) * 8


@exercise(
    "01.1",
    answers=("moved_fewest_mb", "moved_most_mb", "blocks_to_outweigh"),
    hint="experiment.summary() has MB_moved per variant and blocks_per_worker; one partial histogram is "
    "8**5 int64 counts, and the data's size is experiment.metadata['dataset_bytes']",
)
def bytes_moved(moved_fewest_mb: Any, moved_most_mb: Any, blocks_to_outweigh: Any, experiment: Any) -> tuple:
    """MB moved by *blocks* at the fewest and most blocks, and the block count where partials outweigh the data."""
    moved = experiment.summary().query("variant == 'blocks'").set_index("blocks_per_worker")["MB_moved"]
    fewest, most = float(moved.loc[moved.index.min()]), float(moved.loc[moved.index.max()])
    for name, value, expected in (("moved_fewest_mb", moved_fewest_mb, fewest), ("moved_most_mb", moved_most_mb, most)):
        got = number(value, name)
        if not close(got, expected, 0.05) and abs(got - expected) > 0.01:
            wrong_unit = close(got / 1e6, expected, 0.05)
            return not_yet(
                f"{name} is {fmt(got)}, but summary() says the blocks variant moved {fmt(expected)} MB"
                + (" (you gave bytes, the answer is in MB)" if wrong_unit else ""),
                "take MB_moved of the rows where variant == 'blocks', at the smallest and largest blocks_per_worker",
            )
    data_bytes = float(experiment.metadata["dataset_bytes"])
    expected_blocks = data_bytes / histogram_partial_bytes(experiment)
    got_blocks = number(blocks_to_outweigh, "blocks_to_outweigh")
    if not close(got_blocks, expected_blocks, 0.25):
        return not_yet(
            f"blocks_to_outweigh is {fmt(got_blocks)}, but {fmt(data_bytes / 1e6)} MB of data / "
            f"{histogram_partial_bytes(experiment) / 1e3:.0f} kB per partial = {fmt(expected_blocks)} blocks",
            "each block sends one partial histogram; divide the data's bytes by one partial's bytes",
        )
    return passed(
        f"blocks moved {fmt(fewest)} MB at the fewest blocks and {fmt(most)} MB at the most; the data is "
        f"{fmt(data_bytes / 1e6)} MB, so beyond about {fmt(expected_blocks)} blocks the partials outweigh it"
    )
