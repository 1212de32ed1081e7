"""The k-means (Lloyd) partial step for one block of points, or for many blocks in one call.

Each block reports, for the current centres, the label of every point (nearest centre, ties to the
lowest index as ``numpy.argmin``) and the per-centre sums and counts; a reduction over blocks then
gives the new centres as ``sums / counts``. This is the ``partial_sum`` task of the PyCOMPSs k-means.

A NaN distance never wins: a centre with a NaN coordinate attracts no point, and a point whose
distances are all NaN (a NaN coordinate) goes to centre 0. ``numpy.argmin`` alone would pick the
first NaN, so the reference masks NaN distances as +inf to state the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable

import numba
import numpy as np
from numba import njit, prange

from workbench.kernels._checks import as_array, read_array, require_float, require_ndim

NO_LABELS = np.empty(0, dtype=np.int64)  # labels argument of a call that wants sums and counts only


@njit(nogil=True, cache=True, inline="always")
def _nearest(points, i, centres):
    """Index of the centre nearest point ``i``: first of the smallest, a NaN distance never wins."""
    best = 0
    best_d2 = np.inf
    for k in range(centres.shape[0]):
        d2 = 0.0
        for j in range(points.shape[1]):
            diff = points[i, j] - centres[k, j]
            d2 += diff * diff
        if d2 < best_d2:  # False for NaN: such a centre is never taken
            best_d2 = d2
            best = k
    return best


@njit(nogil=True, cache=True, inline="always")
def _label_range(points, start, stop, centres, labels, sums, counts):
    """Add points ``start:stop`` to their nearest centre's ``sums`` and ``counts``; label them
    unless ``labels`` is empty (the blocks entry point needs no labels)."""
    write_labels = labels.size > 0
    for i in range(start, stop):
        k = _nearest(points, i, centres)
        if write_labels:
            labels[i] = k
        counts[k] += 1
        for j in range(points.shape[1]):
            sums[k, j] += points[i, j]


@njit(nogil=True, cache=True)
def _partial_serial(points, centres, labels, sums, counts):
    """Add this block's sums and counts to ``sums`` and ``counts``, on the calling thread.

    The block's own total is formed first and then added, so a running total over blocks equals,
    to the last bit, the sum of the per-block results that ``kmeans_partial`` returns.
    """
    block_sums = np.zeros(sums.shape)
    block_counts = np.zeros(counts.size, dtype=np.int64)
    _label_range(points, 0, points.shape[0], centres, labels, block_sums, block_counts)
    sums += block_sums
    counts += block_counts


@njit(nogil=True, cache=True, parallel=True)
def _partial(points, centres, labels, sums, counts, n_chunks):
    """``_label_range`` over ``n_chunks`` parallel chunks; their tables summed first, then added."""
    n = points.shape[0]
    chunk = (n + n_chunks - 1) // n_chunks
    local_sums = np.zeros((n_chunks,) + sums.shape)
    local_counts = np.zeros((n_chunks, counts.size), dtype=np.int64)
    for c in prange(n_chunks):
        _label_range(points, c * chunk, min(n, (c + 1) * chunk), centres, labels, local_sums[c], local_counts[c])
    for c in range(1, n_chunks):
        local_sums[0] += local_sums[c]
        local_counts[0] += local_counts[c]
    sums += local_sums[0]
    counts += local_counts[0]


def _add_block(
    points: np.ndarray, centres: np.ndarray, labels: np.ndarray, sums: np.ndarray, counts: np.ndarray, parallel: bool
) -> None:
    """One block into the tables: on this thread (never waking numba's thread pool), or in chunks."""
    if parallel and numba.get_num_threads() > 1:
        _partial(points, centres, labels, sums, counts, numba.get_num_threads())
    else:
        _partial_serial(points, centres, labels, sums, counts)


def _centres(centres: object) -> np.ndarray:
    """Centres as the kernel reads them: (k, d), k >= 1, C-contiguous native float64."""
    centres = as_array("centres", centres)
    require_ndim("centres", centres, 2)
    require_float("centres", centres)
    if centres.shape[0] == 0:
        raise ValueError("centres must hold at least one centre, got shape (0, d)")
    return np.ascontiguousarray(centres, dtype=np.float64)  # also native byte order


def _points(name: str, value: object, centres: np.ndarray) -> np.ndarray:
    """Points as the kernel reads them: (n, d) with the centres' d, C-contiguous native float32/64."""
    points = read_array(name, value, 2, floats_only=True)
    if points.shape[1] != centres.shape[1]:
        raise ValueError(
            f"centres must have shape ({centres.shape[0]}, {points.shape[1]}) to match {name}, got {centres.shape}"
        )
    return np.ascontiguousarray(points)


def _check(points: object, centres: object) -> tuple[np.ndarray, np.ndarray]:
    points = as_array("points", points)
    centres = _centres(centres)
    return _points("points", points, centres), centres


def _tables(centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(centres.shape), np.zeros(centres.shape[0], dtype=np.int64)


def kmeans_partial(
    points: np.ndarray, centres: np.ndarray, *, parallel: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Label each point with its nearest centre; return ``(labels, sums, counts)``.

    ``points`` is (n, d), ``centres`` is (k, d). ``sums`` (k, d, float64) and ``counts`` (k, int64)
    are what this block contributes to the next centres.
    """
    points, centres = _check(points, centres)
    labels = np.empty(points.shape[0], dtype=np.int64)
    sums, counts = _tables(centres)
    _add_block(points, centres, labels, sums, counts, parallel)
    return labels, sums, counts


def kmeans_partial_blocks(
    blocks: Iterable[np.ndarray], centres: np.ndarray, *, parallel: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(sums, counts)`` of all ``blocks``: the sum of ``kmeans_partial``'s per-block sums and counts.

    One call for a whole partition: the centres are checked and converted once, no labels are
    written, and every block adds straight into one pair of tables (no per-block results to
    allocate and add). Blocks may differ in length and be float32 or float64; no blocks give zeros.
    ``parallel=True`` splits each block over the numba threads.
    """
    centres = _centres(centres)
    if isinstance(blocks, np.ndarray):
        raise TypeError(
            "blocks must be a sequence of 2-D arrays, got one ndarray; call kmeans_partial for a single block"
        )
    sums, counts = _tables(centres)
    for b, block in enumerate(blocks):
        _add_block(_points(f"blocks[{b}]", block, centres), centres, NO_LABELS, sums, counts, parallel)
    return sums, counts


def kmeans_partial_reference(points: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy's answer: full distance matrix, argmin, then per-centre sums and counts."""
    points, centres = _check(points, centres)
    k = centres.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN distances follow the rule below
        d2 = ((points[:, None, :].astype(np.float64) - centres[None, :, :]) ** 2).sum(axis=2)
    d2[np.isnan(d2)] = np.inf  # a NaN distance never wins (see the module docstring)
    labels = np.argmin(d2, axis=1).astype(np.int64) if len(points) else np.empty(0, np.int64)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    sums = np.zeros(centres.shape)
    np.add.at(sums, labels, points)
    return labels, sums, counts


def kmeans_update(sums: np.ndarray, counts: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """New centres from reduced sums and counts; a centre with no points keeps its place."""
    centres = previous.astype(np.float64, copy=True)
    filled = counts > 0
    centres[filled] = sums[filled] / counts[filled, None]
    return centres
