"""Bytes as people read them: one writing for messages, progress steps, reports and pages."""

from __future__ import annotations

import pytest

from workbench.units import size_text


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (8, "8 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (64 * 2**10, "64 KiB"),
        (5 * 2**20 // 4, "1.25 MiB"),  # an L2 cache
        (800 * 2**20, "800 MiB"),
        (2**30 - 1, "1024 MiB"),  # rounds up within its unit, never to "1e+03"
        (3 * 2**30, "3 GiB"),
        (4 * 2**40, "4096 GiB"),
        (12345 * 2**30 + 2**29 + 2**28, "12345.75 GiB"),  # two decimals at any magnitude
    ],
)
def test_size_text_writes_whole_units_plainly_and_others_to_two_decimals(nbytes, text):
    assert size_text(nbytes) == text
