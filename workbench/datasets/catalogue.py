"""The seed datasets of the workbench, each at three sizes and deterministic from a seed.

* ``ci``: seconds, for tests; ``lab``: about a minute of work, for class; ``full``: the reference
  papers' shapes scaled to one 24 GB machine.
* A dataset holds named arrays (``points``, ``labels``, ``A`` ...) and a few parameters (bins,
  number of centres ...). Arrays are produced block by block, as numpy blocks or as a Dask array
  whose tasks generate their own block on the worker, so nothing is materialised in one process.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from workbench.datasets.streams import uniform_region

SIZES = ("ci", "lab", "full")

Region = tuple[slice, ...]
Fill = Callable[[Region], np.ndarray]


@dataclass(frozen=True)
class ArraySpec:
    """One array of a dataset: its shape, dtype, default block shape and how to make any region."""

    shape: tuple[int, ...]
    dtype: np.dtype
    block: tuple[int, ...]
    fill: Fill

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Dataset:
    """A named, sized, seeded dataset: a dict of arrays plus the parameters its applications use."""

    name: str
    size: str
    seed: int
    description: str
    arrays: dict[str, ArraySpec]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays together (what a run must move or keep somewhere)."""
        return sum(spec.nbytes for spec in self.arrays.values())

    def spec(self, array: str) -> ArraySpec:
        """The spec of ``array``; a clear error naming the arrays there are."""
        try:
            return self.arrays[array]
        except KeyError:
            raise KeyError(f"dataset {self.name!r} has no array {array!r}; it has {sorted(self.arrays)}") from None

    def chunks(self, array: str, block: int | tuple[int, ...] | None = None) -> tuple[tuple[int, ...], ...]:
        """Dask-style chunks for ``array``: ``block`` rows per block (an int) or a block shape."""
        from dask.array.core import normalize_chunks

        spec = self.spec(array)
        if block is None:
            block = spec.block
        elif isinstance(block, (int, np.integer)):
            if block < 1:
                raise ValueError(f"block must be a positive number of rows, got {block}")
            block = (int(block),) + spec.shape[1:]
        return normalize_chunks(block, spec.shape, dtype=spec.dtype)

    def block(self, array: str, region: Region) -> np.ndarray:
        """The values of ``array`` in ``region`` (a tuple of slices with start and stop)."""
        spec = self.spec(array)
        return spec.fill(region).astype(spec.dtype, copy=False)

    def blocks(
        self, array: str, block: int | tuple[int, ...] | None = None
    ) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
        """Yield ``(block_index, values)`` for every block, one at a time."""
        chunks = self.chunks(array, block)
        offsets = [np.concatenate([[0], np.cumsum(c)]).astype(int) for c in chunks]
        for index in itertools.product(*(range(len(c)) for c in chunks)):
            region = tuple(slice(o[i], o[i + 1]) for o, i in zip(offsets, index))
            yield index, self.block(array, region)

    def load(self, array: str) -> np.ndarray:
        """The whole array in this process; meant for the small sizes and for checking."""
        spec = self.spec(array)
        return self.block(array, tuple(slice(0, n) for n in spec.shape))

    def to_dask(self, array: str, block: int | tuple[int, ...] | None = None):
        """A Dask array whose tasks each generate one block where they run."""
        import dask.array as da
        from dask.base import tokenize

        spec = self.spec(array)
        chunks = self.chunks(array, block)
        name = f"{self.name}-{array}-" + tokenize(self.name, self.size, self.seed, array, chunks)
        return da.map_blocks(
            partial(_dask_block, spec.fill, spec.dtype),
            chunks=chunks,
            dtype=spec.dtype,
            meta=np.empty((0,) * len(spec.shape), dtype=spec.dtype),
            name=name,
        )


def _dask_block(fill: Fill, dtype: np.dtype, block_info: dict | None = None) -> np.ndarray:
    location = block_info[None]["array-location"]
    return fill(tuple(slice(start, stop) for start, stop in location)).astype(dtype, copy=False)


# -- how each array's values are made ----------------------------------------------------------
def _uniform(seed: int, stream: int, shape: tuple[int, ...], region: Region) -> np.ndarray:
    return uniform_region(seed, stream, shape, region)


def _two_class_labels(seed: int, n: int, region: Region) -> np.ndarray:
    return (uniform_region(seed, 1, (n,), region) < 0.5).astype(np.int8)


def _two_class_points(seed: int, shape: tuple[int, int], shift: float, region: Region) -> np.ndarray:
    """Class 1 is class 0's unit box moved by ``shift`` on every axis: overlapping, not separable."""
    labels = _two_class_labels(seed, shape[0], region[:1])
    return uniform_region(seed, 0, shape, region) + shift * labels[:, None]


def _uniform_spec(seed: int, stream: int, shape: tuple[int, ...], block: tuple[int, ...]) -> ArraySpec:
    return ArraySpec(shape, np.dtype(np.float64), block, partial(_uniform, seed, stream, shape))


# -- the catalogue ------------------------------------------------------------------------------
# Shapes per size. "full" follows the papers where one machine allows: k-means 4,194,304 points x 64
# dims (PyCOMPSs Table I, 2 GB); matmul 8 x 8 blocks (Table II, blocks of 2048, not 4096, so the
# three matrices fit in 24 GB); histogram 5-D points as in the thesis (ch. 4-5).
SHAPES: dict[str, dict[str, dict[str, int]]] = {
    "kmeans": {
        "ci": dict(points=65_536, dims=8, centres=4, block=8_192),
        "lab": dict(points=1_048_576, dims=16, centres=4, block=65_536),
        "full": dict(points=4_194_304, dims=64, centres=4, block=262_144),
    },
    "histogram": {
        "ci": dict(points=200_000, dims=5, bins=8, block=25_000),
        "lab": dict(points=10_000_000, dims=5, bins=8, block=625_000),
        "full": dict(points=100_000_000, dims=5, bins=8, block=3_125_000),
    },
    "matmul": {
        "ci": dict(blocks=4, block_size=64),
        "lab": dict(blocks=4, block_size=512),
        "full": dict(blocks=8, block_size=2_048),
    },
    "knn": {
        "ci": dict(points=20_000, queries=2_000, neighbours=5, block=2_500),
        "lab": dict(points=1_000_000, queries=10_000, neighbours=5, block=62_500),
        "full": dict(points=10_000_000, queries=100_000, neighbours=5, block=625_000),
    },
    "histogram1d": {
        "ci": dict(points=1_048_576, bins=64, block=131_072),
        "lab": dict(points=16_777_216, bins=64, block=1_048_576),
        "full": dict(points=134_217_728, bins=64, block=8_388_608),
    },
    "matadd": {
        "ci": dict(rows=1_024, cols=512, block=128),
        "lab": dict(rows=8_192, cols=2_048, block=512),
        "full": dict(rows=16_384, cols=8_192, block=1_024),
    },
    "prk": {  # the PRK make their data in place by formula: the catalogue holds their sizes
        "ci": dict(length=65_536, order=256, n=256, iterations=3),
        "lab": dict(length=4_194_304, order=2_048, n=2_048, iterations=10),
        "full": dict(length=16_777_216, order=8_192, n=8_192, iterations=10),
    },
    "sensors": {  # the capstone's pipeline: readings of many sensors, each with its calibration row
        "ci": dict(points=100_000, dims=8, sensors=10_000, queries=200, centres=4, block=12_500),
        "lab": dict(points=2_000_000, dims=8, sensors=250_000, queries=1_000, centres=4, block=250_000),
        "full": dict(points=20_000_000, dims=8, sensors=2_000_000, queries=10_000, centres=4, block=2_500_000),
    },
    "csvm": {
        "ci": dict(points=4_000, dims=8, block=500),
        "lab": dict(points=40_000, dims=16, block=5_000),
        "full": dict(points=400_000, dims=32, block=25_000),
    },
}

DESCRIPTIONS = {
    "kmeans": "uniform random points in [0, 1)^dims and initial centres (PyCOMPSs k-means, Table I)",
    "histogram": "uniform random 5-D points in [0, 1)^5, binned 8 per axis (thesis histogram)",
    "matmul": "two square matrices A and B of uniform values in blocks (PyCOMPSs matmul, Table II)",
    "knn": "a 3-D point cloud to fit and query points, uniform in the unit cube (thesis kNN)",
    "csvm": "two overlapping classes of points with labels 0/1 (thesis Cascade SVM)",
    "histogram1d": "uniform random values in [0, 1), binned 64 ways (thesis ch. 6 histogram)",
    "matadd": "two matrices A and B of uniform values in row blocks (thesis ch. 6 matrix addition)",
    "sensors": "readings of many sensors (column 0: the sensor id, then dims values), a calibration table "
    "(offsets then gains, one row per sensor), query rows and initial centres (the capstone pipeline)",
    "prk": "Parallel Research Kernels sizes (vector length, transpose order, stencil grid): data made by formula",
}


def _build(name: str, size: str, seed: int, overrides: dict[str, int]) -> Dataset:
    s = {**SHAPES[name][size], **overrides}
    if name == "kmeans":
        arrays = {
            "points": _uniform_spec(seed, 0, (s["points"], s["dims"]), (s["block"], s["dims"])),
            "centres": _uniform_spec(seed, 1, (s["centres"], s["dims"]), (s["centres"], s["dims"])),
        }
        params = dict(centres=s["centres"], iterations=10, epsilon=1e-9)
    elif name == "histogram":
        arrays = {"points": _uniform_spec(seed, 0, (s["points"], s["dims"]), (s["block"], s["dims"]))}
        params = dict(bins=s["bins"], range=[(0.0, 1.0)] * s["dims"])
    elif name == "matmul":
        n, b = s["blocks"] * s["block_size"], s["block_size"]
        arrays = {"A": _uniform_spec(seed, 0, (n, n), (b, b)), "B": _uniform_spec(seed, 1, (n, n), (b, b))}
        params = dict(blocks=s["blocks"], block_size=b)
    elif name == "knn":
        arrays = {
            "points": _uniform_spec(seed, 0, (s["points"], 3), (s["block"], 3)),
            "queries": _uniform_spec(seed, 1, (s["queries"], 3), (s["queries"], 3)),
        }
        params = dict(neighbours=s["neighbours"])
    elif name == "histogram1d":
        arrays = {"points": _uniform_spec(seed, 0, (s["points"],), (s["block"],))}
        params = dict(bins=s["bins"], range=(0.0, 1.0))
    elif name == "matadd":
        shape, block = (s["rows"], s["cols"]), (s["block"], s["cols"])
        arrays = {"A": _uniform_spec(seed, 0, shape, block), "B": _uniform_spec(seed, 1, shape, block)}
        params = {}
    elif name == "prk":
        arrays = {}
        params = dict(s)
    elif name == "csvm":
        n, d = s["points"], s["dims"]
        arrays = {
            "points": ArraySpec(
                (n, d), np.dtype(np.float64), (s["block"], d), partial(_two_class_points, seed, (n, d), 0.35)
            ),
            "labels": ArraySpec((n,), np.dtype(np.int8), (s["block"],), partial(_two_class_labels, seed, n)),
        }
        params = dict(shift=0.35)
    elif name == "sensors":
        n, d, m = s["points"], s["dims"], s["sensors"]
        arrays = {
            "readings": ArraySpec(
                (n, d + 1), np.dtype(np.float64), (s["block"], d + 1), partial(_sensor_rows, seed, 0, (n, d + 1), m)
            ),
            "calibration": ArraySpec(
                (2 * m, d), np.dtype(np.float64), (2 * m, d), partial(_calibration_rows, seed, (2 * m, d))
            ),
            "queries": ArraySpec(
                (s["queries"], d + 1),
                np.dtype(np.float64),
                (s["queries"], d + 1),
                partial(_sensor_rows, seed, 2, (s["queries"], d + 1), m),
            ),
            "centres": _uniform_spec(seed, 3, (s["centres"], d), (s["centres"], d)),
        }
        params = dict(sensors=m, centres=s["centres"], neighbours=5, iterations=3)
    else:  # pragma: no cover - names are checked by get()
        raise AssertionError(name)
    return Dataset(name, size, seed, DESCRIPTIONS[name], arrays, params)


def _sensor_rows(seed: int, stream: int, shape: tuple[int, int], sensors: int, region: Region) -> np.ndarray:
    """Rows of readings: column 0 a sensor id in [0, sensors), the others uniform [0, 1)."""
    rows = uniform_region(seed, stream, shape, (region[0], slice(0, shape[1])))
    rows[:, 0] = np.floor(rows[:, 0] * sensors)
    return rows[:, region[1]]


def _calibration_rows(seed: int, shape: tuple[int, int], region: Region) -> np.ndarray:
    """The calibration table: the first half of the rows offsets in [-0.5, 0.5), the second gains in [0.5, 1.5)."""
    values = uniform_region(seed, 4, shape, (region[0], slice(0, shape[1])))
    first = np.arange(region[0].start, region[0].stop) < shape[0] // 2
    values[first] -= 0.5
    values[~first] += 0.5
    return values[:, region[1]]


def block_costs(n_blocks: int, skew: float) -> np.ndarray:
    """A cost factor per block (integers >= 1) with a heavy head: block 0 costs ``skew`` times the last,
    falling geometrically along the rows, as the expensive region of a simulation grid does. ``skew``
    1 is balanced. The imbalance experiments multiply each block's work by its factor."""
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 1:
        raise ValueError(f"n_blocks must be a positive integer, got {n_blocks!r}")
    if isinstance(skew, bool) or not isinstance(skew, (int, float, np.integer, np.floating)) or not 1 <= skew <= 1e4:
        raise ValueError(f"skew must be a number from 1 (balanced) to 10000, got {skew!r}")
    position = np.arange(n_blocks) / max(1, n_blocks - 1)
    return np.maximum(1, np.rint(float(skew) ** (1.0 - position))).astype(np.int64)


def names() -> list[str]:
    """The datasets in the catalogue."""
    return sorted(SHAPES)


def get(name: str, size: str = "ci", seed: int = 0, **shape: int) -> Dataset:
    """The dataset ``name`` at ``size`` (``ci``, ``lab`` or ``full``) generated from ``seed``.

    Keyword arguments override the size's shape (``get("kmeans", "lab", dims=128)``): the
    reproduction sweeps vary one of them at a time.
    """
    if name not in SHAPES:
        hint = difflib.get_close_matches(name, SHAPES, n=1)
        suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
        raise KeyError(f"no dataset {name!r}; the catalogue has {names()}.{suggestion}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    known = SHAPES[name][size]
    for key, value in shape.items():
        if key not in known:
            raise ValueError(f"dataset {name!r} has no shape parameter {key!r}; it has {sorted(known)}")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return _build(name, size, int(seed), {k: int(v) for k, v in shape.items()})


def describe(size: str = "ci") -> list[dict[str, Any]]:
    """One row per dataset at ``size``: name, arrays with shapes, and bytes."""
    rows = []
    for name in names():
        ds = get(name, size)
        rows.append(
            dict(
                dataset=name,
                size=size,
                arrays={k: v.shape for k, v in ds.arrays.items()},
                nbytes=ds.nbytes,
                description=ds.description,
            )
        )
    return rows
