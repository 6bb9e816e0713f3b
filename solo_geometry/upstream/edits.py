"""Source edits of solo-learn's methods, computed from the user's checkout.

Each method file is parsed with ``ast``; a projector assignment is rewritten only when it is an
``nn.Sequential`` of solo-learn's plain shape: ``Linear(features_dim, proj_hidden_dim)``, an
optional ``BatchNorm1d(proj_hidden_dim)``, ``ReLU()``, repeated, then
``Linear(proj_hidden_dim, proj_output_dim)``. Anything else is left as it is, so no solo-learn
code is stored here: the edits are derived from the checkout they apply to.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MethodEdit", "SeriesError", "edit_method", "find_methods", "REQUIRED_METHODS"]

# Methods the series must convert; others of the same shape are converted when found.
REQUIRED_METHODS = ("simclr", "byol", "vicreg", "barlow_twins")
PROJECTOR_ATTRS = ("projector", "momentum_projector")
IMPORT_MODULE = "solo.utils.projectors"
IMPORT_LINE = f"from {IMPORT_MODULE} import build_projector, projector_kwargs\n"


class SeriesError(ValueError):
    """The checkout is not one the series applies to (the message says why)."""


@dataclass(frozen=True)
class MethodEdit:
    """One method file rewritten to use ``build_projector``.

    Attributes:
        method: the file's stem (``simclr``, ``barlow_twins``, ...).
        path: the path relative to the checkout (``solo/methods/simclr.py``).
        depth: Linear layers of its projector.
        norm: ``"bn"`` or ``"none"``.
        attrs: the attributes rewritten (``projector`` and, where present, ``momentum_projector``).
        text: the new file text.
    """

    method: str
    path: str
    depth: int
    norm: str
    attrs: tuple[str, ...]
    text: str


def _call_name(node: ast.AST) -> str | None:
    """``"Linear"`` for ``nn.Linear(...)``; None for anything that is not an ``nn.X(...)`` call."""
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "nn":
            return func.attr
    return None


def _args(node: ast.AST) -> list[str]:
    """The positional arguments of a call, as source text ([] for anything else)."""
    return [ast.unparse(x) for x in node.args] if isinstance(node, ast.Call) else []


def _layout(call: ast.AST) -> tuple[int, str] | None:
    """(depth, norm) of a plain solo-learn projector ``nn.Sequential``, else None."""
    if _call_name(call) != "Sequential":
        return None
    assert isinstance(call, ast.Call)
    layers = [(_call_name(a), _args(a)) for a in call.args]
    blocks, norms, i = 0, set(), 0
    while i < len(layers) - 1:
        name, args = layers[i]
        if name != "Linear" or args != [
            "self.features_dim" if i == 0 else "proj_hidden_dim",
            "proj_hidden_dim",
        ]:
            return None
        has_bn = layers[i + 1] == ("BatchNorm1d", ["proj_hidden_dim"])
        norms.add("bn" if has_bn else "none")
        i += 2 if has_bn else 1
        if i >= len(layers) or layers[i] != ("ReLU", []):
            return None
        i, blocks = i + 1, blocks + 1
    first = "self.features_dim" if blocks == 0 else "proj_hidden_dim"
    if i != len(layers) - 1 or layers[i] != ("Linear", [first, "proj_output_dim"]):
        return None
    if blocks == 0 or len(norms) != 1:
        return None
    return blocks + 1, norms.pop()


def _projector_assignments(tree: ast.Module) -> dict[str, ast.Assign]:
    """``self.<attr> = ...`` statements inside ``__init__`` methods taking ``cfg``, by attr."""
    found: dict[str, ast.Assign] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if fn.name != "__init__" or "cfg" not in [a.arg for a in fn.args.args]:
                continue
            for stmt in ast.walk(fn):
                if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                    continue
                target = stmt.targets[0]
                if isinstance(target, ast.Attribute) and target.attr in PROJECTOR_ATTRS:
                    if isinstance(target.value, ast.Name) and target.value.id == "self":
                        found.setdefault(target.attr, stmt)
    return found


def _builder_call(attr: str, indent: str, depth: int, norm: str) -> list[str]:
    pad = indent + "    "
    return [
        f"{indent}self.{attr} = build_projector(\n",
        f"{pad}self.features_dim,\n",
        f"{pad}proj_hidden_dim,\n",
        f"{pad}proj_output_dim,\n",
        f'{pad}**projector_kwargs(cfg.method_kwargs, depth={depth}, norm="{norm}"),\n',
        f"{indent})\n",
    ]


def _add_import(lines: list[str]) -> list[str]:
    """Insert ``IMPORT_LINE`` among the top-level ``from solo...`` imports, in sorted order."""
    tree = ast.parse("".join(lines))
    solo = [
        n
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("solo.")
    ]
    if not solo:
        raise SeriesError("no top-level 'from solo... import' line to place the import next to")
    before = [n for n in solo if (n.module or "") < IMPORT_MODULE]
    at = before[-1].end_lineno if before else solo[0].lineno - 1
    assert at is not None
    return lines[:at] + [IMPORT_LINE] + lines[at:]


def _drop_unused_nn(lines: list[str]) -> list[str]:
    """Remove ``import torch.nn as nn`` when no ``nn`` name is left in the module."""
    tree = ast.parse("".join(lines))
    used = any(isinstance(n, ast.Name) and n.id == "nn" for n in ast.walk(tree))
    if used:
        return lines
    return [line for line in lines if line.strip() != "import torch.nn as nn"]


def edit_method(root: Path, path: str) -> MethodEdit | None:
    """The rewritten text of one method file, or None when its projector has another shape.

    Args:
        root: the checkout.
        path: the file, relative to ``root``.

    Returns:
        The edit, or None when ``self.projector`` is not of the plain shape.

    Raises:
        SeriesError: when the file already imports the builder.
    """
    text = (root / path).read_text(encoding="utf-8")
    if IMPORT_MODULE in text:
        raise SeriesError(f"{path} already imports {IMPORT_MODULE}: the series is applied")
    tree = ast.parse(text)
    assigns = _projector_assignments(tree)
    if "projector" not in assigns or _layout(assigns["projector"].value) is None:
        return None
    depth, norm = _layout(assigns["projector"].value)  # type: ignore[misc]
    lines = text.splitlines(keepends=True)
    done: list[str] = []
    # bottom-up, so earlier line numbers stay valid
    for attr, stmt in sorted(assigns.items(), key=lambda kv: -kv[1].lineno):
        if _layout(stmt.value) != (depth, norm):
            continue
        assert stmt.end_lineno is not None
        indent = " " * stmt.col_offset
        lines[stmt.lineno - 1 : stmt.end_lineno] = _builder_call(attr, indent, depth, norm)
        done.append(attr)
    lines = _drop_unused_nn(_add_import(lines))
    method = Path(path).stem
    return MethodEdit(method, path, depth, norm, tuple(sorted(done)), "".join(lines))


def find_methods(root: Path) -> list[MethodEdit]:
    """Every method of ``root``'s ``solo/methods`` whose projector has the plain shape.

    Args:
        root: the checkout.

    Returns:
        The edits, sorted by method name.

    Raises:
        SeriesError: when one of ``REQUIRED_METHODS`` is missing or has another shape.
    """
    methods_dir = root / "solo" / "methods"
    edits = []
    for file in sorted(methods_dir.glob("*.py")):
        edit = edit_method(root, file.relative_to(root).as_posix())
        if edit is not None:
            edits.append(edit)
    missing = sorted(set(REQUIRED_METHODS) - {e.method for e in edits})
    if missing:
        raise SeriesError(
            f"the projector of {missing} in solo/methods is not the plain "
            "Linear-[BatchNorm1d]-ReLU nn.Sequential this series rewrites"
        )
    return edits
