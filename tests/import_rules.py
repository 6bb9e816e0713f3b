"""The package's house rules on imports and layout, and the checker applying them to a tree.

``test_imports`` runs it on ``solo_geometry/``, ``test_import_checker`` on broken trees.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from tests.import_graph import (
    Import,
    _internal,
    bound_names,
    collect_imports,
    find_cycles,
)

Rule = Callable[[dict[str, Path], list[Import], str], list[str]]
PACKAGE = "solo_geometry"


PACKAGE_ROOT = Path(__file__).resolve().parents[1] / PACKAGE


# The rules by package. A unit is a subpackage of solo_geometry or a module at its root ("" is
# the package's own __init__). A unit may import itself, the units listed here, and whatever
# those may import (the closure): so each floor names only the floors right under it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "": (),  # the package's __init__: the version, nothing else
    "config": (),  # the geometry node: no torch, no solo-learn (the Hydra plugin imports it)
    "extras": (),  # the one lazy importer of solo-learn, lightly, umap-learn
    "state": (),  # the state guard
    "linalg": (),
    "geometry": ("linalg",),
    "folder": (),  # one run folder: records, lock, resume: every floor above reads and writes runs
    "recipe": ("config",),
    "inputs": ("geometry", "state", "folder"),
    "models": ("config", "inputs", "folder"),
    "analysis": ("models", "extras"),
    "runtime": ("analysis",),
    "hosts": ("runtime", "recipe"),
    "upstream": ("config",),  # the projectors' tables are rendered from config.choices
    "reproduce": ("hosts",),
    "zoo": ("hosts", ""),
    "commands": ("reproduce", "zoo", "upstream", ""),  # the parsers, over the whole library
    "cli": ("commands",),
}


# Units that never import solo-learn at module level (the core and the models under it).
SOLO_FREE = (
    "",
    "config",
    "extras",
    "state",
    "linalg",
    "geometry",
    "folder",
    "recipe",
    "inputs",
    "models",
    "analysis",
    "runtime",
)


# Optional extras: the only imports allowed inside a function (top-level distribution names).
LAZY_EXTRAS = ("solo", "lightly", "umap")


# solo-learn's top-level package.
SOLO_LEARN = "solo"


# House rules: a module's length, and how many modules the root holds besides __init__.py.
MAX_LINES = 400


MAX_ROOT_MODULES = 8


def unit_of(name: str, package: str) -> str | None:
    """The unit a dotted name lies in: "" for the package itself, None outside the package."""
    if name == package:
        return ""
    return name.split(".")[1] if name.startswith(f"{package}.") else None


def may_import(unit: str) -> set[str]:
    """The units ``unit`` may import: itself, those it lists, and theirs (the closure)."""
    allowed, todo = {unit}, [unit]
    while todo:
        for other in MAY_IMPORT.get(todo.pop(), ()):
            if other not in allowed:
                allowed.add(other)
                todo.append(other)
    return allowed


def unplaced_units(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A root module or subpackage with no rule: a new room must say what it may import."""
    units = {unit_of(m, package) for m in modules} - set(MAY_IMPORT)
    return [f"{package}.{u}: no rule in MAY_IMPORT" for u in sorted(u for u in units if u)]


def package_imports(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """An import from one unit into another it may not import."""
    found = []
    for i in _internal(imports, package):
        source, target = unit_of(i.source, package), unit_of(i.target, package)
        allowed = may_import(source or "")
        if i.target in modules and source in MAY_IMPORT and target not in allowed:
            names = (source or package, target or package)
            found.append(f"{i.where}: {names[0]} may not import {names[1]} ({i.target})")
    return found


def unresolved_imports(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """An internal import naming no module, or a name its package or module does not bind."""
    found = []
    for i in _internal(imports, package):
        if i.target not in modules:
            found.append(f"{i.where}: {i.source} imports {i.target}, which is no module")
        elif i.name not in (None, "*"):
            names = bound_names(modules[i.target])
            if names is not None and i.name not in names:  # None: the module star-imports
                found.append(f"{i.where}: {i.source} imports {i.name} from {i.target}, unbound")
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


def solo_learn_imports(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A unit under the hosts importing solo-learn at module level."""
    return [
        f"{i.where}: {i.source} imports solo-learn ({i.target}) at module level"
        for i in imports
        if not i.in_function
        and i.target.split(".")[0] == SOLO_LEARN
        and unit_of(i.source, package) in SOLO_FREE
    ]


def long_modules(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A module over MAX_LINES lines."""
    base, found = modules[package].parent, []
    for file in modules.values():
        lines, inside = len(file.read_text().splitlines()), file.relative_to(base).as_posix()
        if lines > MAX_LINES:
            found.append(f"{package}/{inside}: {lines} lines > {MAX_LINES}")
    return found


def private_imports(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A private name (``_x``, not a dunder) imported from another module of the package."""
    return [
        f"{i.where}: {i.source} imports the private {i.name} from {i.target}"
        for i in _internal(imports, package)
        if i.name and i.name.startswith("_") and not i.name.startswith("__")
    ]


# Public names several modules define on purpose: each command module's parser and entry point
# (commands/), each host's launcher (hosts/<host>/launcher.py).
PROTOCOL_NAMES = ("add_parser", "run", "launch")


def repeated_names(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """A public function or class defined at the top of two modules: one name, one thing."""
    defined: dict[str, list[str]] = {}
    for module, file in modules.items():
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if not node.name.startswith("_") and node.name not in PROTOCOL_NAMES:
                    defined.setdefault(node.name, []).append(module)
    return [
        f"{name} is defined in {', '.join(sorted(where))}"
        for name, where in sorted(defined.items())
        if len(where) > 1
    ]


def crowded_root(modules: dict[str, Path], imports: list[Import], package: str) -> list[str]:
    """More than MAX_ROOT_MODULES modules at the root besides ``__init__.py``."""
    root = sorted(m for m, f in modules.items() if m.count(".") == 1 and f.name != "__init__.py")
    if len(root) <= MAX_ROOT_MODULES:
        return []
    return [f"{len(root)} root modules > {MAX_ROOT_MODULES}: {', '.join(root)}"]


RULES: dict[str, Rule] = {
    "cycles": find_cycles,
    "unplaced-units": unplaced_units,
    "package-imports": package_imports,
    "unresolved-imports": unresolved_imports,
    "function-level-imports": function_level_imports,
    "solo-learn-imports": solo_learn_imports,
    "long-modules": long_modules,
    "private-imports": private_imports,
    "repeated-names": repeated_names,
    "crowded-root": crowded_root,
}


def check_package(root: Path) -> dict[str, list[str]]:
    """The violations of every rule in the package folder ``root``, by rule."""
    modules, imports = collect_imports(root)
    return {name: rule(modules, imports, root.name) for name, rule in RULES.items()}
