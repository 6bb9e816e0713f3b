"""The JSON value of a record field checked against the field's annotation, before it is used.

A ``geometry.jsonl`` line or a ``probes.json`` handed back may hold ``"step": "ten"`` or
``"metrics": [1, 2]``; built into a record unchecked, such a value surfaces later as a
traceback deep in a reader (``report``'s plots). :func:`check_fields` compares each value of a
dataclass's mapping with the field's type annotation (``int``, ``float``, ``str``, ``bool``,
``None``, unions, ``list[X]``, ``dict[str, X]``, ``Any``, nested dataclasses) and refuses the
first that does not fit, naming the field, the value and the type expected.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["check_fields", "fits"]


def fits(value: Any, kind: Any) -> bool:
    """Whether a JSON value fits a type annotation (``bool`` is no ``int``, ``int`` is a float).

    Args:
        value: the value read from JSON (or a dataclass already built from it).
        kind: the annotation, resolved (``typing.get_type_hints``).

    Returns:
        Whether the value fits.
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if kind is None or kind is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            fits(k, args[0]) and fits(v, args[1]) for k, v in value.items()
        )
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(kind, type):
        return isinstance(value, kind)
    return True  # an annotation this checker does not model: the dataclass decides


def _name(kind: Any) -> str:
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("typing.", "").replace("NoneType", "None")


def check_fields(cls: type, data: Mapping[str, Any], where: str, error: type[Exception]) -> None:
    """Refuse the first value of ``data`` that does not fit ``cls``'s field annotation.

    Args:
        cls: a dataclass.
        data: its fields' values by name (unknown names are the caller's to refuse).
        where: the file and place, for the message.
        error: the exception class raised.

    Raises:
        error: ``<where>: field <name> must be <type>, got <value>``.
    """
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data and not fits(data[f.name], hints[f.name]):
            shown = repr(data[f.name])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise error(
                f"{where}: field {f.name} must be {_name(hints[f.name])}, "
                f"got {shown} ({type(data[f.name]).__name__})"
            )
