"""What the browser tests share: where their screenshots go, and the skip where Chromium is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workbench.teach.site import CHROMIUM  # Debian's Chromium

ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "artifacts" / "browser"

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Chromium at {CHROMIUM}: 'apt-get install chromium' (.ci/run does it) enables the browser test",
)
