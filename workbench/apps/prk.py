"""The Parallel Research Kernels through array channels: vector reduce, transpose, star stencil.

Each is an SPMD program: one block per rank (the rank's part of the problem, made where it runs,
as the PRK initialise in place), a block function that takes the rank's context and talks to the
other ranks through channels, and a merge of the ranks' results. They run under ``channels``
(in place: shared memory on a node, sockets between nodes) and ``eager`` (every message a new
array sent worker to worker by Dask), and each answer is verified by the PRK's own check (``workbench.kernels.prk``).

* ``prk-reduce``: every rank's vector += 1, then the vectors summed into the root's (binomial
  tree, in place), ``iterations + 1`` times; every root element must be ``reduce_expected``.
* ``prk-transpose``: ``B += A.T; A += 1`` on an ``order x order`` matrix distributed by column
  blocks: each iteration every rank sends each other rank one tile (an all-to-all of shifts).
* ``prk-stencil``: a star stencil of radius 2 on an ``n x n`` grid distributed by row blocks,
  halo rows exchanged with both neighbours each iteration; the norm must be ``2 (iterations + 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from workbench import kernels
from workbench.apps.registry import Application, PlacedData, register
from workbench.datasets import Dataset
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.channels import Rank
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork

STRATEGIES = ["channels", "eager"]
RADIUS = 2


def _ranks(session: Session, params: dict[str, Any]) -> int:
    ranks = int(params.get("ranks", len(session.workers())))
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    return ranks


def _one_block_per_rank(session: Session, ranks: int) -> PlacedBlocks:
    """A block per rank holding its rank number (the data itself is made by each rank, in place)."""
    return PlacedBlocks(session, da.arange(ranks, chunks=1, dtype=np.int64).reshape(ranks, 1).rechunk((1, 1)))


@dataclass(kw_only=True)
class PrkData(PlacedData):
    """One block per rank; the kernel's size and iterations are the blocks' arguments."""

    ranks: int


def prepare(session: Session, dataset: Dataset, params: dict[str, Any], size_key: str) -> PrkData:
    """``ranks`` blocks (default: one per worker); ``size_key`` (length, order, n) and iterations as arguments."""
    ranks = _ranks(session, params)
    size = int(params.get(size_key, dataset.params[size_key]))
    iterations = int(params.get("iterations", dataset.params["iterations"]))
    if size < 1 or iterations < 0:
        raise ValueError(f"{size_key} must be positive and iterations >= 0, got {size} and {iterations}")
    return PrkData(blocks=_one_block_per_rank(session, ranks), args=(size, iterations), ranks=ranks)


# -- vector reduce ---------------------------------------------------------------------------------
def reduce_rank(block: np.ndarray, length: int, iterations: int, *, rank: Rank) -> float | None:
    """PRK reduce on one rank: its vector += 1, then summed into rank 0's, ``iterations + 1`` times.
    Returns the root's error against ``reduce_expected`` (None on the other ranks)."""
    channel = rank.channel("reduce", length, np.float64)
    local = np.ones(length)
    with rank.timed("iterations"):
        for _ in range(iterations + 1):
            local += 1.0
            np.copyto(channel.buffer, local)
            result = channel.reduce("sum", root=0)
            if result is not None:
                np.copyto(local, result)  # the root keeps the sum as its vector
    if rank.rank != 0:
        return None
    return float(np.abs(local - kernels.prk.reduce_expected(iterations, rank.size)).max())


def root_result(partials: list[Any]) -> Any:
    """The one result that is not None (the root's), or None."""
    found = [p for p in partials if p is not None]
    return found[0] if found else None


# -- transpose -----------------------------------------------------------------------------------
def transpose_rank(block: np.ndarray, order: int, iterations: int, *, rank: Rank) -> float:
    """PRK transpose on one rank's column block: all-to-all of tiles by shifts, ``B += A.T; A += 1``.
    Returns this column block's error sum (``transpose_error``'s terms)."""
    ranks, me = rank.size, rank.rank
    if order % ranks:
        raise ValueError(f"prk-transpose needs an order divisible by the ranks: {order} is not divisible by {ranks}")
    width = order // ranks
    columns = slice(me * width, (me + 1) * width)
    a = np.arange(order * order, dtype=np.float64).reshape(order, order)[:, columns].copy()  # A[i, j] = i*order + j
    b = np.zeros_like(a)
    channel = rank.channel("tile", (width, width), np.float64)
    with rank.timed("iterations"):
        for _ in range(iterations + 1):
            for shift in range(ranks):
                dest, src = (me + shift) % ranks, (me - shift) % ranks
                np.copyto(channel.buffer, a[dest * width : (dest + 1) * width, :])  # A[c_dest, c_me] for dest
                tile = channel.buffer if shift == 0 else channel.exchange(dest, src)  # A[c_me, c_src] from src
                b[src * width : (src + 1) * width, :] += tile.T
            a += 1.0
    i = np.arange(order, dtype=np.float64)[:, None]
    j = np.arange(me * width, (me + 1) * width, dtype=np.float64)[None, :]
    expected = (order * j + i) * (iterations + 1) + iterations * (iterations + 1) / 2.0
    return float(np.abs(b - expected).sum())


def add_errors(partials: list[float]) -> float:
    """The ranks' error sums, added."""
    return float(sum(partials))


# -- star stencil ----------------------------------------------------------------------------------
def stencil_rank(block: np.ndarray, n: int, iterations: int, *, rank: Rank) -> float:
    """PRK star stencil (radius 2) on one rank's rows, halos exchanged with both neighbours.
    Returns this block's sum of |B| over the grid's interior."""
    ranks, me, r = rank.size, rank.rank, RADIUS
    bounds = np.linspace(0, n, ranks + 1).astype(int)
    first, last = int(bounds[me]), int(bounds[me + 1])
    if last - first < r:
        raise ValueError(f"prk-stencil needs at least {r} rows per rank: n = {n} is too small for {ranks} ranks")
    rows = np.arange(first - r, last + r, dtype=np.float64)[:, None]
    a = rows + np.arange(n, dtype=np.float64)[None, :]  # A[i, j] = i + j, with halo rows
    b = np.zeros_like(a)
    step = np.zeros_like(a)
    up = rank.channel("halo-up", (r, n), np.float64)
    down = rank.channel("halo-down", (r, n), np.float64)
    above = me - 1 if me > 0 else None
    below = me + 1 if me < ranks - 1 else None
    interior = (np.arange(first - r, last + r) >= r) & (np.arange(first - r, last + r) < n - r)
    interior[:r] = interior[-r:] = False  # halo rows are the neighbours' to update
    with rank.timed("iterations"):
        _stencil_iterations(a, b, step, up, down, above, below, interior, iterations, r)
    return float(np.abs(b[interior][:, r : n - r]).sum())


def _stencil_iterations(
    a: np.ndarray,
    b: np.ndarray,
    step: np.ndarray,
    up: Any,
    down: Any,
    above: int | None,
    below: int | None,
    interior: np.ndarray,
    iterations: int,
    r: int,
) -> None:
    """The stencil's timed loop: halo exchanges both ways, the stencil, A += 1."""
    for _ in range(iterations + 1):
        np.copyto(up.buffer, a[r : 2 * r])  # my first rows go up, the rows below me come in
        got = up.exchange(above, below)
        if below is not None:
            a[-r:] = got
        np.copyto(down.buffer, a[-2 * r : -r])  # my last rows go down, the rows above me come in
        got = down.exchange(below, above)
        if above is not None:
            a[:r] = got
        step[:] = 0.0
        kernels.prk.stencil_star_rows(a, step, r)
        b[interior] += step[interior]
        a += 1.0


def _close(a: Any, b: Any) -> bool:
    return a is not None and b is not None and bool(np.isclose(a, b, rtol=1e-12, atol=1e-9))


def check_reduce(error: float | None, data: PrkData) -> None:
    """The root's vector is the PRK's expected value everywhere."""
    if error is None or error > 1e-8:
        raise AssertionError(f"prk-reduce: the root's vector is off by {error} (the PRK accepts 1e-8)")


def check_transpose(error: float, data: PrkData) -> None:
    """The transposed matrix is the PRK's closed form (error sum < 1e-8)."""
    if not error < 1e-8:
        raise AssertionError(f"prk-transpose: error {error} (the PRK accepts < 1e-8)")


def check_stencil(total: float, data: PrkData) -> None:
    """The norm of B is the PRK's closed form."""
    n, iterations = data.args
    norm = total / (n - 2 * RADIUS) ** 2
    expected = kernels.prk.stencil_expected_norm(iterations)
    if abs(norm - expected) > 1e-8 * expected:
        raise AssertionError(f"prk-stencil: norm {norm}, the PRK expects {expected}")


COMMON = dict(strategies=STRATEGIES, baseline="eager", needs=frozenset({"ranks"}))  # rank= in every block call
RANKS = {"ranks": "SPMD ranks (default: one per worker; several share a worker when more)"}

REDUCE = register(
    Application(
        name="prk-reduce",
        description="PRK vector reduce through channels: a binomial tree into rank 0, in place",
        dataset="prk",
        prepare=lambda session, dataset, params: prepare(session, dataset, params, "length"),
        work=BlockWork(block=reduce_rank, merge=root_result),
        grids={"ci": {"ranks": [2, 3]}, "lab": {"ranks": [1, 2, 4]}, "full": {"ranks": [1, 2, 4, 8]}},
        parameters={**RANKS, "length": "elements of each vector", "iterations": "timed iterations (after one warm-up)"},
        same_answer=lambda a, b: a is not None and b is not None and a < 1e-8 and b < 1e-8,
        check=check_reduce,
        knobs={"ranks": [1, 2, 3, 4], "length": [1 << 10, 1 << 16, 1 << 20, 1 << 22]},
        **COMMON,
    )
)
TRANSPOSE = register(
    Application(
        name="prk-transpose",
        description="PRK transpose through channels: column blocks, an all-to-all of tiles per iteration",
        dataset="prk",
        prepare=lambda session, dataset, params: prepare(session, dataset, params, "order"),
        work=BlockWork(block=transpose_rank, merge=add_errors),
        grids={"ci": {"ranks": [2, 4]}, "lab": {"ranks": [1, 2, 4]}, "full": {"ranks": [1, 2, 4, 8]}},
        parameters={**RANKS, "order": "rows (= columns) of the matrix", "iterations": "timed iterations"},
        same_answer=lambda a, b: a < 1e-8 and b < 1e-8,
        check=check_transpose,
        knobs={"ranks": [1, 2, 4], "order": [256, 512, 1024, 2048]},
        **COMMON,
    )
)
STENCIL = register(
    Application(
        name="prk-stencil",
        description="PRK star stencil through channels: row blocks, halo rows exchanged each iteration",
        dataset="prk",
        prepare=lambda session, dataset, params: prepare(session, dataset, params, "n"),
        work=BlockWork(block=stencil_rank, merge=add_errors),
        grids={"ci": {"ranks": [2, 3]}, "lab": {"ranks": [1, 2, 4]}, "full": {"ranks": [1, 2, 4, 8]}},
        parameters={**RANKS, "n": "rows (= columns) of the grid", "iterations": "timed iterations"},
        same_answer=lambda a, b: _close(a, b),
        check=check_stencil,
        knobs={"ranks": [1, 2, 3, 4], "n": [256, 512, 1024, 2048]},
        **COMMON,
    )
)

APPS = (REDUCE, TRANSPOSE, STENCIL)
