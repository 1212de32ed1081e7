"""Reading the package's imports from its source (no import runs): the graph the layering and
import-cycle tests check."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def module_imports(path: Path, module: str | None = None) -> set[str]:
    """Every module name ``path`` (module ``module``) imports, at any level of its code (function-local
    imports included), relative imports made absolute; ``from package import name`` also yields
    ``package.name``. Imports under ``if TYPE_CHECKING:`` are left out: they are for annotations and
    never run."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{a.name}" for a in node.names)
    return names


def with_package_inits(module: str, imported: set[str], known: set[str]) -> set[str]:
    """``imported`` (names ``module`` imports) with the packages whose ``__init__`` those imports run
    first: ``import a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` before ``a.b.c``. Packages that
    hold ``module`` itself are left out (they are already importing when ``module`` runs). An import
    of ``workbench.runtime.strategies.base`` from ``workbench.runtime.splitter`` so yields the
    package ``workbench.runtime.strategies``, whose ``__init__`` imports every strategy: a loop
    through a package's ``__init__`` that the bare module names do not show."""
    ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    packages = {".".join(name.split(".")[:i]) for name in imported for i in range(1, name.count(".") + 1)}
    return imported | {p for p in packages if p in known and p not in ancestors and p != module}
