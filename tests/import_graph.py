"""The package's import graph, read from the source with :mod:`ast` (the checker of test_imports).

Every ``.py`` under a package folder is parsed; each import statement, at module level or
inside a function, becomes an edge from its module to the module it names. So does a call
naming a module by a string literal, ``require("umap")`` (solo_geometry.extras) or
``importlib.import_module(...)``: such an import is lazy by construction.
``from solo_geometry.pkg import name`` names the submodule ``solo_geometry.pkg.name`` when that
is a module, else the package ``solo_geometry.pkg`` (and ``name`` is kept, to check that the
package binds it). No implicit edges are added from a module to the packages above it, so a
package ``__init__`` importing its own submodules is not a cycle by itself; a cycle appears
only when a module imports back up to something that imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

# Calls whose first argument, a string literal, names a module they import.
DYNAMIC_IMPORTERS = ("require", "import_module")


@dataclass(frozen=True)
class Import:
    """One imported name: ``source`` imports ``target`` at ``file:line``."""

    source: str  # dotted module name of the importing file
    target: str  # dotted module name imported (a submodule when the name is one)
    file: Path  # relative to the folder holding the package
    line: int
    in_function: bool
    dynamic: bool = False  # a call such as require("umap"), not an import statement
    name: str | None = None  # from target import name, when name is no module

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package folder ``root``."""
    modules = {}
    for file in sorted(root.rglob("*.py")):
        parts = (root.name, *file.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = file
    return modules


def _from_base(node: ast.ImportFrom, module: str, file: Path) -> str:
    """The module a ``from ... import`` statement imports from (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if file.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str, file: Path, shown: Path, modules: dict[str, Path]) -> None:
        self.module, self.file, self.shown, self.modules = module, file, shown, modules
        self.depth = 0  # function nesting
        self.found: list[Import] = []

    def _add(
        self, target: str, node: ast.stmt | ast.expr, dynamic: bool = False, name: str | None = None
    ) -> None:
        found = Import(self.module, target, self.shown, node.lineno, self.depth > 0, dynamic, name)
        self.found.append(found)

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _from_base(node, self.module, self.file)
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            if candidate in self.modules:
                self._add(candidate, node)
            else:
                self._add(base, node, name=alias.name)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        first = node.args[0] if node.args else None
        if name in DYNAMIC_IMPORTERS and isinstance(first, ast.Constant):
            if isinstance(first.value, str):
                self._add(first.value, node, dynamic=True)
        self.generic_visit(node)


def collect_imports(root: Path) -> tuple[dict[str, Path], list[Import]]:
    """Every import statement of the package under ``root`` (module and function level)."""
    modules = module_files(root)
    found = []
    for module, file in modules.items():
        visitor = _Visitor(module, file, file.relative_to(root.parent), modules)
        visitor.visit(ast.parse(file.read_text(), filename=str(file)))
        found.extend(visitor.found)
    return modules, found


def _internal(imports: list[Import], package: str) -> Iterator[Import]:
    return (i for i in imports if i.target == package or i.target.startswith(f"{package}."))


def bound_names(file: Path) -> set[str] | None:
    """The names a module binds at its top level (None: it star-imports, so any name may be)."""
    names: set[str] = set()
    statements = list(ast.parse(file.read_text(), filename=str(file)).body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue  # its body binds nothing at the top level
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        for field in ("body", "orelse", "finalbody", "handlers"):  # if, try, with at top level
            statements.extend(getattr(node, field, []))
    return names


def find_cycles(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A shortest cycle through each module not already on a reported one, edges with lines."""
    edges: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for i in _internal(imports, package):
        if i.target != i.source and i.target in modules:
            edges[i.source].setdefault(i.target, i)
    found, seen = [], set()
    for start in sorted(modules):
        if start in seen:
            continue
        parent: dict[str, str] = {}
        queue = [start]
        while queue and start not in parent:  # breadth first: a shortest way back to start
            node = queue.pop(0)
            for nxt in sorted(edges[node]):
                if nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
        if start not in parent:
            continue
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(parent[path[-1]])
        path.reverse()  # start -> ... -> start
        seen.update(path)
        hops = " -> ".join(f"{a} ({edges[a][b].where})" for a, b in pairwise(path))
        found.append(f"cycle: {hops} -> {start}")
    return found
