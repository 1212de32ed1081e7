"""Counter-based uniform streams: any region of a dataset is generated on its own, identically.

Each array is one PCG64 stream of uniform doubles in row-major order. A block jumps to its first
element with ``advance`` (O(log n)) and draws only its own values, so the content of a dataset does
not depend on the block size chosen, and no process ever holds more than the block it makes.
"""

from __future__ import annotations

import numpy as np


def _generator(seed: int, stream: int, skip: int) -> np.random.Generator:
    bit_generator = np.random.PCG64(np.random.SeedSequence([seed, stream]))
    bit_generator.advance(int(skip))  # one 64-bit draw per double: element i is draw i (numpy ints are refused)
    return np.random.Generator(bit_generator)


def uniform_region(seed: int, stream: int, shape: tuple[int, ...], region: tuple[slice, ...]) -> np.ndarray:
    """Elements ``region`` (slices with explicit start/stop) of a row-major uniform [0, 1) array.

    Supports 1-D and 2-D arrays; whole-width row ranges are one draw, column windows one per row.
    """
    if len(shape) == 1:
        (rows,) = region
        return _generator(seed, stream, rows.start).random(rows.stop - rows.start)
    rows, cols = region
    width = shape[1]
    n_rows, n_cols = rows.stop - rows.start, cols.stop - cols.start
    if cols.start == 0 and cols.stop == width:
        values = _generator(seed, stream, rows.start * width).random(n_rows * width)
        return values.reshape(n_rows, width)
    out = np.empty((n_rows, n_cols))
    generator = _generator(seed, stream, rows.start * width + cols.start)
    gap = width - n_cols
    for r in range(n_rows):
        out[r] = generator.random(n_cols)
        generator.bit_generator.advance(int(gap))
    return out
