"""The learner's help as formatted text: the Markdown of a hint, a check's verdict or a solution's
explanation (backticks, *emphasis*, lists) as HTML for JupyterLab, and as plain text for a terminal.

One parser (markdown-it-py, CommonMark) reads the text for both forms, so what is code, emphasis or a
list item is decided once. Raw HTML in the text is shown as text, never as markup: a check's message
can quote a learner's value (:func:`to_html` escapes it).
"""

from __future__ import annotations

import textwrap

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark", {"html": False})
WIDTH = 100  # the plain form's lines (the project's manuals wrap at 100 columns too)


def to_html(text: str) -> str:
    """``text`` (Markdown) as HTML; one paragraph comes without its ``<p>`` (it sits inside a line of help)."""
    tokens = _PARSER.parse(text)
    if [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]:
        return _PARSER.renderer.render(tokens[1].children or [], _PARSER.options, {}).strip()
    return _PARSER.renderer.render(tokens, _PARSER.options, {}).strip()


def _inline(token: Token) -> str:
    """An inline token's words, its marks dropped (a link keeps its address, after its text)."""
    words = []
    href = ""
    for child in token.children or []:
        if child.type in ("text", "code_inline", "html_inline"):
            words.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            words.append(" " if child.type == "softbreak" else "\n")
        elif child.type == "link_open":
            href = str(child.attrs.get("href", ""))
        elif child.type == "link_close" and href:
            words.append(f" ({href})")
        elif child.type == "image":
            words.append(child.content)
    return "".join(words)


def _fill(line: str, width: int | None, lead: str, rest: str) -> str:
    """One line of words wrapped at ``width`` (never inside a word or at its hyphens), first line led by ``lead``."""
    if width is None:
        return lead + line.strip()
    return textwrap.fill(
        line, width, initial_indent=lead, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )


def to_plain(text: str, width: int | None = WIDTH) -> str:
    """``text`` (Markdown) as plain text: marks dropped, paragraphs wrapped at ``width`` (``None``: each
    paragraph one line), list items as "- " or "1. ", code blocks indented by four spaces."""
    blocks: list[tuple[str, bool]] = []  # each block, and whether it follows the one before on the next line
    lists: list[str] = []  # the open lists, innermost last: "-" or "."
    marker = ""  # the marker of the list item whose first paragraph comes next
    tight = False  # the paragraph now open is a tight list's next item (no blank line before it)
    fresh = False  # the next paragraph is the first of a list
    for token in _PARSER.parse(text):
        if token.type in ("bullet_list_open", "ordered_list_open"):
            fresh = not lists  # a new list is apart from what comes before it, another list included
            lists.append("-" if token.type == "bullet_list_open" else ".")
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif token.type == "list_item_open":
            marker = "- " if lists[-1] == "-" else f"{token.info}. "
        elif token.type == "paragraph_open":
            tight = bool(lists) and token.hidden and not fresh
            fresh = False
        elif token.type == "inline":
            indent = "   " * (len(lists) - 1) if lists else ""
            lead, rest = indent + marker, indent + " " * len(marker)
            if lists and not marker:  # a later paragraph of the item
                lead = rest = indent + "   "
            lines = _inline(token).split("\n")  # a hard break (two spaces or a backslash) ends a line
            wrapped = [_fill(line, width, lead if i == 0 else rest, rest) for i, line in enumerate(lines)]
            blocks.append(("\n".join(wrapped), tight))
            marker, tight = "", False
        elif token.type in ("fence", "code_block"):
            blocks.append((textwrap.indent(token.content.rstrip("\n"), "    "), False))
        elif token.type == "html_block":
            blocks.append((token.content.rstrip("\n"), False))
        elif token.type == "hr":
            blocks.append(("---", False))
    # a tight list's items follow each other; other blocks are apart by a blank line
    out = ""
    for i, (block, next_line) in enumerate(blocks):
        if i:
            out += "\n" if next_line else "\n\n"
        out += block
    return out
