"""Kernel comparisons on one process: numpy against numba on one thread and on all threads."""

from __future__ import annotations

import statistics

import pandas as pd

from workbench import datasets, kernels
from workbench.lab.timing import sample_seconds, time_once


def histogram_kernels(size: str = "ci", repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """Time the 5-D histogram of the ``histogram`` dataset three ways, first call apart.

    Rows: variant, first_call_s (the first numba call compiles or loads the kernel from the cache;
    the second numba variant reuses it), seconds (median of ``repeats``), speedup over numpy, and
    runs_s (every timed call's seconds: what :func:`workbench.lab.stats.claim` compares).
    All three counts are checked to be equal.
    """
    ds = datasets.get("histogram", size, seed)
    points = ds.load("points")
    bins, ranges = ds.params["bins"], ds.params["range"]
    variants = {
        "numpy.histogramdd": lambda: kernels.histogramdd_reference(points, bins, ranges),
        "numba, 1 thread": lambda: kernels.histogramdd(points, bins, ranges),
        "numba, all threads": lambda: kernels.histogramdd(points, bins, ranges, parallel=True),
    }
    answers, first_calls = [], []
    for fn in variants.values():  # the first call of numba compiles (or loads from cache): timed apart
        first_calls.append(time_once(lambda fn=fn: answers.append(fn())))
    if not all((a == answers[0]).all() for a in answers):
        raise AssertionError("numpy and numba histograms differ")
    samples = [sample_seconds(fn, repeats) for fn in variants.values()]
    table = pd.DataFrame(
        [
            dict(variant=name, first_call_s=first, seconds=statistics.median(runs))
            for name, first, runs in zip(variants, first_calls, samples)
        ]
    )
    table["speedup"] = table["seconds"].iloc[0] / table["seconds"]
    table["runs_s"] = samples
    return table
