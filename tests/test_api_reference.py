"""The API reference (workbench.teach.api_reference): every public name documented, and on the page."""

from __future__ import annotations

import re
import sys

import workbench
from workbench.teach import api_reference


def test_every_public_name_has_a_docstring():
    assert api_reference.missing_docstrings() == []


def test_the_public_modules_are_those_that_declare_all():
    modules = api_reference.public_modules()
    assert {"workbench", "workbench.kernels", "workbench.datasets", "workbench.runtime.store"} <= set(modules)
    assert "workbench.runtime.session" not in modules  # its names are exported by workbench


def test_the_page_shows_each_exported_name_with_its_signature_and_docstring():
    page = api_reference.markdown(["workbench", "workbench.kernels"])
    for name in workbench.__all__:
        assert f"### `workbench.{name}`" in page, name
    assert "```python\nstart(" in page and "n_workers" in page
    assert workbench.start.__doc__.strip().split("\n")[0][:40] in page
    assert not re.search(r"(?<!`)``(?!`)", page) and ":func:`" not in page  # reStructuredText made Markdown


def test_an_undocumented_export_is_named(tmp_path, monkeypatch):
    package = tmp_path / "madeup"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""A made-up public module."""\n__all__ = ["documented", "bare", "Shape", "LIMIT"]\nLIMIT = 3\n'
        'def documented():\n    """Says what."""\n\ndef bare():\n    pass\n\n'
        'class Shape:\n    """A shape."""\n\n    def area(self):\n        return 0\n\n'
        "    def _hidden(self):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert api_reference.public_modules(package) == ["madeup"]
        assert api_reference.missing_docstrings(["madeup"]) == ["madeup.bare", "madeup.Shape.area"]
        page = api_reference.markdown(["madeup"])
        assert "LIMIT = 3" in page and "class Shape()" in page and "- `area(self)`: (no docstring)" in page
    finally:
        sys.modules.pop("madeup", None)
