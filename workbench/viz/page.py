"""The look of the workbench's standalone HTML pages, one for all of them: the results page of
``workbench bench all`` (:mod:`workbench.bench.page`) and the experiment report of ``workbench
report`` (:mod:`workbench.viz.report`) are made with these, so they read alike.

A page is a column of bokeh models: text blocks (:func:`text_div`, all the same width), tables
spaced as :data:`TABLE` says (:func:`spaced_table` for a table pandas wrote) and figures;
:func:`document` makes it one HTML file that opens offline (BokehJS inlined) or loads BokehJS from
one file the caller names (the course site's copy).
"""

from __future__ import annotations

import html
import re
from typing import Any

from bokeh.embed import components, file_html
from bokeh.models import Div
from bokeh.resources import INLINE

WIDTH = 1000  # pixels of every text block
TABLE = "style='border-spacing: 14px 2px; text-align: left'"  # a table's cells apart, left-aligned


def text_div(text: str) -> Div:
    """A block of HTML (its untrusted parts escaped by the caller) at the page's width. Bokeh typesets
    TeX between $$ (or \\[ \\], \\( \\)) in a Div unless told not to: a results file's text is shown as the
    text it is."""
    return Div(text=text, width=WIDTH, disable_math=True)


def spaced_table(table_html: str) -> str:
    """A table pandas wrote (``DataFrame.to_html``) with the page's table style on its first ``<table>``."""
    return re.sub(r"<table\b[^>]*>", f"<table {TABLE}>", table_html, count=1)


def document(layout: Any, title: str, bokeh_src: str | None = None) -> str:
    """The page as one HTML file: BokehJS inlined, or loaded from ``bokeh_src`` (one file with the widgets')."""
    if bokeh_src is None:
        return file_html(layout, resources=INLINE, title=title)
    script, div = components(layout)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f'<script type="text/javascript" src="{html.escape(bokeh_src)}"></script>\n{script}\n</head>\n'
        f"<body>\n{div}\n</body>\n</html>\n"
    )
