"""Nodes of :mod:`solo_geometry.hosts.lightly.nodes` read from a recipe's plain mappings.

Unknown keys rejected, defaults filled, values converted to the field's type; every error a
``ValueError`` naming the recipe field and the value. Nothing here imports torch or lightly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from types import UnionType
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

__all__ = ["build_node", "convert", "node_of", "reject_unknown", "required", "value_of"]

_Node = TypeVar("_Node")
_T = TypeVar("_T", int, float)


def reject_unknown(node: Mapping[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    """Raise if ``node`` has a key outside ``allowed``."""
    extra = sorted(set(node) - set(allowed))
    if extra:
        names = ", ".join(f"{where}.{k}" if where else str(k) for k in extra)
        raise ValueError(
            f"recipe field(s) {names} not supported by the lightly host; "
            f"supported here: {sorted(allowed)}"
        )


def node_of(cfg: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """Return ``cfg[key]`` as a dict ({} when absent or null)."""
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"recipe field {where}{key} must be a mapping, got {value!r}")
    return dict(value)


def required(node: Mapping[str, Any], key: str, where: str) -> Any:
    """Return ``node[key]``, raising a ValueError naming ``where.key`` when missing."""
    if node.get(key) is None:
        raise ValueError(f"recipe field {where + '.' if where else ''}{key} is required")
    return node[key]


def convert(value: Any, kind: Any, name: str) -> Any:
    """``value`` as the node field type ``kind``: a scalar, a tuple of them, or optional.

    Raises:
        ValueError: naming the recipe field ``name`` and the value.
    """
    if get_origin(kind) is UnionType:  # X | None
        if value is None:
            return None
        (kind,) = [a for a in get_args(kind) if a is not type(None)]
        return convert(value, kind, name)
    if get_origin(kind) is tuple:
        args = get_args(kind)
        if not isinstance(value, list | tuple) or (
            args[-1] is not Ellipsis and len(value) != len(args)
        ):
            size = "" if args[-1] is Ellipsis else f" of {len(args)}"
            raise ValueError(f"recipe field {name}={value!r} must be a list{size}")
        return tuple(convert(v, args[0], f"{name}[{i}]") for i, v in enumerate(value))
    if kind is bool:  # bool("false") is True: only a YAML boolean is one
        if not isinstance(value, bool):
            raise ValueError(f"recipe field {name}={value!r} must be true or false")
        return value
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"recipe field {name}={value!r} must be of type {kind.__name__}") from None


def build_node(
    cls: type[_Node], node: Mapping[str, Any], where: str, accepted: frozenset[str] = frozenset()
) -> _Node:
    """The node ``cls`` from a recipe node: unknown keys rejected, defaults filled, types checked.

    ``accepted``: keys read elsewhere (or accepted and not used). A null value counts as
    missing unless the field is optional.

    Raises:
        ValueError: naming an unknown or missing key, or a value of the wrong type.
    """
    names = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    reject_unknown(node, set(names) | accepted, where)
    hints = get_type_hints(cls)
    values = {}
    for name, f in names.items():
        if name not in node and (f.default is not MISSING or f.default_factory is not MISSING):
            continue  # the node's default
        value = node.get(name)
        if value is None and get_origin(hints[name]) is not UnionType:
            required(node, name, where)  # raises: null counts as missing
        values[name] = convert(value, hints[name], f"{where}.{name}")
    return cls(**values)


def value_of(
    node: Mapping[str, Any], key: str, where: str, kind: type[_T], default: _T | None = None
) -> _T:
    """``node[key]`` (or ``default``; required when that is None) as ``kind``.

    Raises:
        ValueError: naming ``where.key`` when it is missing or not a ``kind``.
    """
    value = required(node, key, where) if default is None else node.get(key, default)
    converted: _T = convert(value, kind, f"{where}.{key}" if where else key)
    return converted
