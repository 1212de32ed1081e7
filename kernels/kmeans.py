"""The k-means (Lloyd) partial step for one block of points.

Each block reports, for the current centres, the label of every point (nearest centre, ties to the
lowest index as ``numpy.argmin``) and the per-centre sums and counts; a reduction over blocks then
gives the new centres as ``sums / counts``. This is the ``partial_sum`` task of the PyCOMPSs k-means.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from kernels._checks import as_array, require_float, require_ndim, require_shape


@njit(nogil=True, cache=True, inline="always")
def _nearest(points, i, centres):
    best = 0
    best_d2 = np.inf
    for k in range(centres.shape[0]):
        d2 = 0.0
        for j in range(points.shape[1]):
            diff = points[i, j] - centres[k, j]
            d2 += diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = k
    return best


@njit(nogil=True, cache=True, parallel=True)
def _partial(points, centres, labels, sums, counts, n_chunks):
    n = points.shape[0]
    chunk = (n + n_chunks - 1) // n_chunks
    local_sums = np.zeros((n_chunks,) + sums.shape)
    local_counts = np.zeros((n_chunks, counts.size), dtype=np.int64)
    for c in prange(n_chunks):
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            k = _nearest(points, i, centres)
            labels[i] = k
            local_counts[c, k] += 1
            for j in range(points.shape[1]):
                local_sums[c, k, j] += points[i, j]
    for c in range(n_chunks):
        sums += local_sums[c]
        counts += local_counts[c]


def _check(points: object, centres: object) -> tuple[np.ndarray, np.ndarray]:
    points = as_array("points", points)
    centres = as_array("centres", centres)
    require_ndim("points", points, 2)
    require_ndim("centres", centres, 2)
    require_float("points", points)
    require_float("centres", centres)
    if centres.shape[0] == 0:
        raise ValueError("centres must hold at least one centre, got shape (0, d)")
    require_shape("centres", centres, (centres.shape[0], points.shape[1]))
    return np.ascontiguousarray(points), np.ascontiguousarray(centres, dtype=np.float64)


def kmeans_partial(
    points: np.ndarray, centres: np.ndarray, *, parallel: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Label each point with its nearest centre; return ``(labels, sums, counts)``.

    ``points`` is (n, d), ``centres`` is (k, d). ``sums`` (k, d, float64) and ``counts`` (k, int64)
    are what this block contributes to the next centres.
    """
    points, centres = _check(points, centres)
    k, d = centres.shape
    labels = np.empty(points.shape[0], dtype=np.int64)
    sums = np.zeros((k, d))
    counts = np.zeros(k, dtype=np.int64)
    _partial(points, centres, labels, sums, counts, numba.get_num_threads() if parallel else 1)
    return labels, sums, counts


def kmeans_partial_reference(
    points: np.ndarray, centres: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy's answer: full distance matrix, argmin, then per-centre sums and counts."""
    points, centres = _check(points, centres)
    k = centres.shape[0]
    d2 = ((points[:, None, :].astype(np.float64) - centres[None, :, :]) ** 2).sum(axis=2)
    labels = np.argmin(d2, axis=1).astype(np.int64) if len(points) else np.empty(0, np.int64)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    sums = np.zeros(centres.shape)
    np.add.at(sums, labels, points)
    return labels, sums, counts


def kmeans_update(
    sums: np.ndarray, counts: np.ndarray, previous: np.ndarray
) -> np.ndarray:
    """New centres from reduced sums and counts; a centre with no points keeps its place."""
    centres = previous.astype(np.float64, copy=True)
    filled = counts > 0
    centres[filled] = sums[filled] / counts[filled, None]
    return centres
