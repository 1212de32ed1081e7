"""Notebook set-up: bokeh renders with BokehJS inlined, because there may be no internet."""

from __future__ import annotations


def setup_notebook() -> None:
    """Send BokehJS into the notebook itself (no CDN), once per kernel."""
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(INLINE, hide_banner=True)
