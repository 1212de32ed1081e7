"""Quantities as people read them: one way to write a number of bytes, for messages, labels and pages."""

from __future__ import annotations

UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def size_text(nbytes: int) -> str:
    """Bytes in binary units, to two decimals where they are not whole: ``8 B``, ``64 KiB``, ``1.25
    MiB``, ``800 MiB``, ``2 GiB``. A power of two reads the same everywhere (goal names hold it)."""
    for unit, scale in UNITS:
        if nbytes >= scale:
            return f"{round(nbytes / scale, 2):g} {unit}"
    return f"{int(nbytes)} B"
