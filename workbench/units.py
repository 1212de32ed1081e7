"""Quantities as people read them: one way to write a number of bytes, and one to write a ratio, for
messages, progress steps, reports, benchmarks and lessons."""

from __future__ import annotations

UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def size_text(nbytes: int) -> str:
    """Bytes in binary units, to two decimals where they are not whole: ``8 B``, ``64 KiB``, ``1.25
    MiB``, ``800 MiB``, ``2 GiB``, ``12345.68 GiB``."""
    for unit, scale in UNITS:
        if nbytes >= scale:
            return f"{nbytes / scale:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{int(nbytes)} B"


def ratio_text(ratio: float) -> str:
    """A ratio as the benchmarks and lessons print it, three significant digits and an ``x``:
    ``29.5x``, ``5.81x``, ``1.05x``, ``0.172x``."""
    return f"{ratio:.3g}x"
