"""The course site's API reference: every name the public package exports, from its docstring.

The public package is every module of ``workbench`` that declares ``__all__`` (found in the source,
so nothing is imported to learn which): ``workbench``, ``workbench.kernels``, ``workbench.datasets``,
``workbench.runtime.store``, ... Each exported name is shown with its signature and its docstring;
a class with its public methods. :func:`missing_docstrings` names an exported function, class,
method or module without a docstring (a test holds it empty), and :func:`markdown` is the page
``make site`` puts beside the course (``api.md``), built offline like the rest.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parents[1]  # workbench/
_ALL = re.compile(r"^__all__\s*=", re.MULTILINE)
_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`~?([^`]+)`")


def public_modules(package: Path = PACKAGE) -> list[str]:
    """The modules under ``package`` whose source declares ``__all__``, by name, in order."""
    names = []
    for path in sorted(package.rglob("*.py")):
        if _ALL.search(path.read_text()):
            parts = path.relative_to(package.parent).with_suffix("").parts
            names.append(".".join(parts).removesuffix(".__init__"))
    return names


def _documented(obj: object) -> bool:
    return isinstance(obj, type | ModuleType) or inspect.isroutine(obj)


def _methods(cls: type) -> Iterator[tuple[str, object]]:
    """The public methods and properties a class defines itself (not those it inherits; a dataclass
    field's default, which may be a function, is a value, not a method)."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for name, member in vars(cls).items():
        if name.startswith("_") or name in fields:
            continue
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            yield name, member


def exports(module_name: str) -> list[tuple[str, object]]:
    """``(qualified name, object)`` for each name of ``module_name.__all__``."""
    module = importlib.import_module(module_name)
    return [(f"{module_name}.{name}", getattr(module, name)) for name in module.__all__]


def missing_docstrings(modules: list[str] | None = None) -> list[str]:
    """Every exported module, class, function or method (of an exported class) with no docstring of its own."""
    missing = []
    for module_name in public_modules() if modules is None else modules:
        if not inspect.getdoc(importlib.import_module(module_name)):
            missing.append(module_name)
        for name, obj in exports(module_name):
            if _documented(obj) and not (obj.__doc__ or "").strip():
                missing.append(name)
            if isinstance(obj, type):
                missing += [f"{name}.{m}" for m, member in _methods(obj) if not (member.__doc__ or "").strip()]
    return missing


def _signature(name: str, obj: object) -> str:
    target = obj.fget if isinstance(obj, property) else obj
    try:
        text = str(inspect.signature(target))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return name
    return name if isinstance(obj, property) else f"{name}{text}"


def _text(doc: str | None) -> str:
    """A docstring as Markdown: reStructuredText's double backquotes and roles become code spans."""
    doc = inspect.cleandoc(doc or "(no docstring)")
    return _ROLE.sub(r"`\1`", doc.replace("``", "`"))


def _summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line (a list item's text)."""
    return " ".join(_text(doc).split("\n\n")[0].split())


def _entry(name: str, obj: object, level: str = "###") -> list[str]:
    short = name.rsplit(".", 1)[-1]
    if isinstance(obj, ModuleType):
        return [f"{level} `{name}` (module)", "", _summary(inspect.getdoc(obj)), ""]
    if not _documented(obj) and not isinstance(obj, property):
        return [f"{level} `{name}`", "", f"```python\n{short} = {obj!r}\n```", ""]
    kind = "class " if isinstance(obj, type) else ""
    lines = [f"{level} `{name}`", "", f"```python\n{kind}{_signature(short, obj)}\n```", "", _text(obj.__doc__), ""]
    if isinstance(obj, type):
        for method, member in _methods(obj):
            lines += [f"- `{_signature(method, member)}`: {_summary(member.__doc__)}"]
        lines.append("")
    return lines


def markdown(modules: list[str] | None = None) -> str:
    """The API reference page: each public module's summary, then each name it exports."""
    lines = [
        "# API reference",
        "",
        "Every name the workbench's public modules export (their `__all__`), with its signature and its "
        "docstring, generated from the installed package when the site is built.",
        "",
    ]
    for module_name in public_modules() if modules is None else modules:
        module = importlib.import_module(module_name)
        lines += [f"## `{module_name}`", "", _summary(inspect.getdoc(module)), ""]
        for name, obj in exports(module_name):
            lines += _entry(name, obj)
    return "\n".join(lines)
