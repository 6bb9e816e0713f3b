"""The direction of imports (docs/design.md section 2), checked on the source without importing it.

Every ``.py`` under ``solo_geometry/`` is parsed with :mod:`ast`; each import statement, at
module level or inside a function, becomes an edge from its module to the module it names.
So does a call naming a module by a string literal, ``require("umap")`` (solo_geometry.extras)
or ``importlib.import_module(...)``: such an import is lazy by construction and obeys every rule
but the one on function-level import statements.
``from solo_geometry.pkg import name`` names the submodule ``solo_geometry.pkg.name`` when that
is a module, else the package ``solo_geometry.pkg``. No implicit edges are added from a module to
the packages above it, so a package ``__init__`` importing its own submodules is not a cycle by
itself; a cycle appears only when a module imports back up to something that imports it.

The rule sets below are the layering spec; :func:`check_package` applies them to any package
folder, so the same checker runs on ``solo_geometry/`` and on synthetic trees that show it fails.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

PACKAGE = "solo_geometry"
PACKAGE_ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# The core: the measurement, its records and its reports. It never reaches up to a host or the CLI.
CORE = (
    "heads",
    "solo_mlp",  # build_mlp and solo-learn's projector/predictor layouts, split out of heads
    "init",
    "state",
    "config",
    "records",
    "run_folder",  # RunFolder, split out of records
    "measure",
    "distributed",  # measurements under DDP (collectives, rank chunks)
    "monitor",
    "probes",
    "logreg",
    "features",
    "datasets",
    "evaluation",
    "report",
    "plots",
    "callbacks",
    "extras",
    "backbones",
    "linalg",  # the subpackage and every module in it
    "geometry",  # the subpackage and every module in it
)
# What no core module may import (each prefix with everything below it).
ABOVE_CORE = ("hosts", "cli")
# The numerical layers: each may import, of the package, only what is listed here.
LAYERS = {
    "linalg": ("linalg",),
    "geometry": ("linalg", "geometry"),
}
# Optional extras: the only imports allowed inside a function (top-level distribution names).
LAZY_EXTRAS = ("solo", "lightly", "umap")
# solo-learn's top-level package: the core never imports it at module level.
SOLO_LEARN = "solo"
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

    def _add(self, target: str, node: ast.stmt | ast.expr, dynamic: bool = False) -> None:
        found = Import(self.module, target, self.shown, node.lineno, self.depth > 0, dynamic)
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
            self._add(candidate if candidate in self.modules else base, node)

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


def _within(name: str, prefixes: tuple[str, ...], package: str) -> bool:
    """Whether ``name`` is ``package.p`` or below it for a ``p`` in ``prefixes``."""
    return any(name == f"{package}.{p}" or name.startswith(f"{package}.{p}.") for p in prefixes)


def _internal(imports: list[Import], package: str) -> Iterator[Import]:
    return (i for i in imports if i.target == package or i.target.startswith(f"{package}."))


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


def core_imports_above(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A core module importing a host or the CLI."""
    return [
        f"{i.where}: core {i.source} imports {i.target}"
        for i in _internal(imports, package)
        if _within(i.source, CORE, package) and _within(i.target, ABOVE_CORE, package)
    ]


def layer_imports(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A numerical layer importing a part of the package it may not."""
    found = []
    for i in _internal(imports, package):
        for layer, allowed in LAYERS.items():
            if _within(i.source, (layer,), package) and not _within(i.target, allowed, package):
                found.append(f"{i.where}: {layer} module {i.source} imports {i.target}")
    return found


def function_level_imports(
    modules: dict[str, Path], imports: list[Import], package: str
) -> list[str]:
    """An import statement inside a function of anything but an optional extra."""
    return [
        f"{i.where}: {i.source} imports {i.target} inside a function"
        for i in imports
        if i.in_function and not i.dynamic and i.target.split(".")[0] not in LAZY_EXTRAS
    ]


def core_imports_solo_learn(
    modules: dict[str, Path], imports: list[Import], package: str
) -> list[str]:
    """A core module importing solo-learn at module level."""
    return [
        f"{i.where}: core {i.source} imports solo-learn ({i.target}) at module level"
        for i in imports
        if not i.in_function
        and i.target.split(".")[0] == SOLO_LEARN
        and _within(i.source, CORE, package)
    ]


Rule = Callable[[dict[str, Path], list[Import], str], list[str]]
RULES: dict[str, Rule] = {
    "cycles": find_cycles,
    "core-imports-hosts-or-cli": core_imports_above,
    "layers": layer_imports,
    "function-level-imports": function_level_imports,
    "core-imports-solo-learn": core_imports_solo_learn,
}


def check_package(root: Path) -> dict[str, list[str]]:
    """The violations of every rule in the package folder ``root``, by rule."""
    modules, imports = collect_imports(root)
    return {name: rule(modules, imports, root.name) for name, rule in RULES.items()}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A synthetic ``solo_geometry`` package; every folder gets an ``__init__.py``."""
    root = tmp_path / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        file = root / name
        file.parent.mkdir(parents=True, exist_ok=True)
        for folder in file.relative_to(root).parents:  # the package's folders, "." included
            (root / folder / "__init__.py").touch()
        file.write_text(text)
    return root


class TestPackage:
    def test_package_found(self) -> None:
        modules, imports = collect_imports(PACKAGE_ROOT)
        assert f"{PACKAGE}.records" in modules and f"{PACKAGE}.linalg.lanczos" in modules
        assert any(i.source == f"{PACKAGE}.geometry.spectrum" for i in imports)

    @pytest.mark.parametrize("rule", sorted(RULES))
    def test_rule(self, rule: str) -> None:
        modules, imports = collect_imports(PACKAGE_ROOT)
        violations = RULES[rule](modules, imports, PACKAGE)
        assert not violations, f"{len(violations)} {rule} violation(s):\n" + "\n".join(violations)


TRY_SOLO = "try:\n    from solo.methods import METHODS\nexcept ImportError:\n    pass\n"
# Synthetic trees: files, the one rule that must fire, and what each of its messages must hold.
CASES = {
    "two-module-cycle": (
        {
            "records.py": "from solo_geometry import monitor\n",
            "monitor.py": "import json\n\nimport solo_geometry.records as r\n",
        },
        "cycles",
        [
            "cycle: solo_geometry.monitor (",
            "monitor.py:3) -> solo_geometry.records (",
            "records.py:1) -> solo_geometry.monitor",
        ],
    ),
    "back-up-to-package-init": (
        {
            "hosts/solo/__init__.py": "from solo_geometry.hosts.solo import launcher\n",
            "hosts/solo/launcher.py": "from solo_geometry.hosts.solo import METHODS\n",
        },
        "cycles",
        ["cycle: solo_geometry.hosts.solo (", "-> solo_geometry.hosts.solo.launcher ("],
    ),
    "relative-import-cycle": (
        {
            "geometry/a.py": "from . import b\n",
            "geometry/b.py": "from .a import helper\n",
        },
        "cycles",
        ["cycle: solo_geometry.geometry.a (", "-> solo_geometry.geometry.b ("],
    ),
    "core-imports-hosts": (
        {
            "hosts/solo/launcher.py": "",
            "records.py": "from solo_geometry.hosts.solo import launcher\n",
        },
        "core-imports-hosts-or-cli",
        ["records.py:1: core solo_geometry.records imports solo_geometry.hosts.solo.launcher"],
    ),
    "core-imports-cli": (
        {"cli.py": "", "evaluation.py": "import torch\nfrom solo_geometry import cli\n"},
        "core-imports-hosts-or-cli",
        ["evaluation.py:2: core solo_geometry.evaluation imports solo_geometry.cli"],
    ),
    "linalg-imports-geometry": (
        {"linalg/lanczos.py": "from solo_geometry.geometry import spectrum\n"},
        "layers",
        ["lanczos.py:1: linalg module solo_geometry.linalg.lanczos imports"],
    ),
    "geometry-imports-config": (
        {"geometry/orbits.py": "import torch\nfrom solo_geometry.config import Config\n"},
        "layers",
        ["orbits.py:2: geometry module solo_geometry.geometry.orbits imports solo_geometry.config"],
    ),
    "geometry-imports-package": (
        {"geometry/orbits.py": "from solo_geometry import __version__\n"},
        "layers",
        ["orbits.py:1: geometry module solo_geometry.geometry.orbits imports solo_geometry"],
    ),
    "function-level-json": (
        {"report.py": "import os\n\n\ndef write():\n    import json\n"},
        "function-level-imports",
        ["report.py:5: solo_geometry.report imports json inside a function"],
    ),
    "function-level-in-method-and-host": (
        {"hosts/base.py": "class A:\n    def f(self):\n        from torch import nn\n"},
        "function-level-imports",
        ["base.py:3: solo_geometry.hosts.base imports torch inside a function"],
    ),
    "core-requires-host": (
        {
            "hosts/lightly/__init__.py": "",
            "plots.py": "def f():\n    require('solo_geometry.hosts.lightly', extra='lightly')\n",
        },
        "core-imports-hosts-or-cli",
        ["plots.py:2: core solo_geometry.plots imports solo_geometry.hosts.lightly"],
    ),
    "import-module-cycle": (
        {
            "monitor.py": (
                "import importlib\n\nSTATE = importlib.import_module('solo_geometry.state')\n"
            ),
            "state.py": "from solo_geometry.monitor import Monitor\n",
        },
        "cycles",
        ["cycle: solo_geometry.monitor (solo_geometry/monitor.py:3) -> solo_geometry.state ("],
    ),
    "core-imports-solo-learn": (
        {"monitor.py": TRY_SOLO},
        "core-imports-solo-learn",
        ["monitor.py:2: core solo_geometry.monitor imports solo-learn (solo.methods)"],
    ),
}


class TestChecker:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_fails_on_violation(self, tmp_path: Path, case: str) -> None:
        files, rule, messages = CASES[case]
        found = check_package(_tree(tmp_path, files))
        assert len(found[rule]) == 1, found[rule]
        for message in messages:
            assert message in found[rule][0]
        assert {r: v for r, v in found.items() if r != rule and v} == {}

    def test_clean_tree_passes(self, tmp_path: Path) -> None:
        files = {
            "__init__.py": "from solo_geometry.heads import build_head\n",
            "linalg/__init__.py": "from solo_geometry.linalg.lanczos import lanczos\n",
            "linalg/lanczos.py": "import torch\nfrom .operators import hvp\n",
            "linalg/operators.py": "from __future__ import annotations\n",
            "geometry/spectrum.py": "from solo_geometry.linalg import lanczos\n",
            "heads.py": "from torch import nn\n",
            "records.py": "import json\n\nfrom solo_geometry import cliparse\n",
            "cliparse.py": "",  # not the CLI: prefixes match whole dotted names
            "monitor.py": "LOAD = lambda: require('solo.methods')\n",
            "plots.py": "def f():\n    from solo.methods import METHODS\n",
            "report.py": "def umap_plot():\n    import umap\n    from umap import UMAP\n",
            "hosts/solo/__init__.py": "from solo_geometry.hosts.solo.launcher import main\n",
            "hosts/solo/launcher.py": "import solo\nfrom solo_geometry import records, heads\n",
            "hosts/lightly/module.py": "def f():\n    import lightly.models\n",
            "pretrain.py": "def f():\n    require('solo_geometry.hosts.lightly', 'lightly')\n",
            "extras.py": "import importlib\n\n\ndef require(m):\n    importlib.import_module(m)\n",
            "cli.py": "from solo_geometry.hosts.solo import launcher\n",
        }
        assert check_package(_tree(tmp_path, files)) == {rule: [] for rule in RULES}

    @pytest.mark.parametrize(
        ("source", "statement", "target"),
        [
            (
                "pkg/mod.py",
                "from solo_geometry.linalg import lanczos",
                "solo_geometry.linalg.lanczos",
            ),
            ("pkg/mod.py", "from solo_geometry.linalg import hvp", "solo_geometry.linalg"),
            (
                "pkg/mod.py",
                "import solo_geometry.linalg.lanczos as l",
                "solo_geometry.linalg.lanczos",
            ),
            ("pkg/mod.py", "from .. import heads", "solo_geometry.heads"),
            ("pkg/mod.py", "from . import other", "solo_geometry.pkg"),
            ("pkg/mod.py", "from .sub import x", "solo_geometry.pkg.sub"),
            ("pkg/__init__.py", "from . import mod", "solo_geometry.pkg.mod"),
            ("pkg/__init__.py", "from .mod import x", "solo_geometry.pkg.mod"),
        ],
    )
    def test_resolves_targets(
        self, tmp_path: Path, source: str, statement: str, target: str
    ) -> None:
        files = {"heads.py": "", "linalg/lanczos.py": "", "pkg/mod.py": "", "pkg/sub.py": ""}
        root = _tree(tmp_path, {**files, source: f"{statement}\n"})
        _, imports = collect_imports(root)
        assert [i.target for i in imports] == [target]
