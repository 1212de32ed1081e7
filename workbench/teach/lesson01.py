"""Checks of lesson 01 · A locality tour: bytes moved against the data's size."""

from __future__ import annotations

from typing import Any

from workbench import datasets
from workbench.teach.answers import close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise


def histogram_partial_bytes(experiment: Any) -> int:
    """Bytes of one partial histogram (int64 counts, bins per dimension to the power of dimensions)."""
    params = datasets.get("histogram", experiment.metadata["size"]).params
    return int(params["bins"]) ** len(params["range"]) * 8


def histogram_bins(experiment: Any) -> int:
    """Bins of one partial histogram (bins per dimension to the power of dimensions)."""
    return histogram_partial_bytes(experiment) // 8


@exercise(
    "01.1",
    answers=("moved_fewest_mb", "moved_most_mb", "blocks_to_outweigh"),
    concept="the data stays where it is; each block sends back one partial result of a fixed size, so the bytes "
    "moved grow with the number of blocks, not with the data, and past some number of blocks the partial results "
    "weigh more than the data itself",
    hint="experiment.summary() has a row per variant and blocks_per_worker with the mean MB_moved; one partial "
    "histogram holds 8 bins in each of 5 dimensions as int64 counts (8 bytes each), and the data's size in bytes "
    "is experiment.metadata['dataset_bytes']",
)
def bytes_moved(moved_fewest_mb: Any, moved_most_mb: Any, blocks_to_outweigh: Any, experiment: Any) -> tuple:
    """MB moved by *blocks* at the fewest and most blocks, and the block count where partials outweigh the data."""
    summary = experiment.summary()
    moved = summary.query("variant == 'blocks'").set_index("blocks_per_worker")["MB_moved"]
    fewest, most = float(moved.loc[moved.index.min()]), float(moved.loc[moved.index.max()])
    other = summary.query("variant != 'blocks'")["MB_moved"].astype(float).tolist()
    for name, value, expected, where in (
        ("moved_fewest_mb", moved_fewest_mb, fewest, "fewest"),
        ("moved_most_mb", moved_most_mb, most, "most"),
    ):
        got = number(value, name)
        if close(got, expected, 0.05) or abs(got - expected) <= 0.01:
            continue
        if close(got / 1e6, expected, 0.05) or close(got / 2**20, expected, 0.05):
            return not_yet(
                f"{name} is {fmt(got)}: you gave bytes, the question asks for MB (millions of bytes)",
                "MB_moved is already in MB",
            )
        if any(close(got, o, 0.05) for o in other):
            return not_yet(
                f"{name} is what another variant moved; the question is about the blocks variant",
                "keep the rows where the variant is 'blocks'",
            )
        side = "high" if got > expected else "low"
        return not_yet(
            f"{name} is too {side}: it is more than 5 % away from the MB_moved of the blocks variant at the {where} "
            "blocks per worker",
            "MB_moved of the rows where the variant is 'blocks', at the smallest and the largest blocks_per_worker",
        )
    data_bytes = float(experiment.metadata["dataset_bytes"])
    partial = histogram_partial_bytes(experiment)
    expected_blocks = data_bytes / partial
    got_blocks = number(blocks_to_outweigh, "blocks_to_outweigh")
    if close(got_blocks, expected_blocks, 0.25):
        return passed(
            f"blocks moved {fmt(fewest)} MB at the fewest blocks and {fmt(most)} MB at the most; the data is "
            f"{fmt(data_bytes / 1e6)} MB, so beyond about {fmt(expected_blocks)} blocks the partials outweigh it"
        )
    workers = len(experiment.metadata.get("cluster", {}).get("workers", [])) or 1
    if close(got_blocks, data_bytes / histogram_bins(experiment), 0.25):
        return not_yet(
            "blocks_to_outweigh divides the data's bytes by the bins of a partial: a partial weighs its bins "
            "times the bytes of one count",
            "each count is an int64",
        )
    if workers > 1 and close(got_blocks, expected_blocks / workers, 0.25):
        return not_yet(
            "blocks_to_outweigh is per worker; the question asks for the blocks in all",
            "multiply by the number of workers, or do not divide by it",
        )
    if any(close(got_blocks, expected_blocks * f, 0.25) for f in (1e6, 1e-6, 1e3, 1e-3)):
        return not_yet(
            "blocks_to_outweigh mixes units: divide bytes by bytes",
            "the data's size is in bytes in experiment.metadata; a partial's size is in bytes too",
        )
    side = "many" if got_blocks > expected_blocks else "few"
    return not_yet(
        f"blocks_to_outweigh is too {side}: it is more than 25 % away from the data's bytes divided by the bytes "
        "of one partial histogram",
        "each block sends one partial histogram; divide the data's bytes by one partial's bytes",
    )
