"""The package's one JSON codec of frozen dataclasses, each value checked against its field.

A ``geometry.jsonl`` line, a ``probes.json`` or a reproduction's result file handed back may
hold ``"step": "ten"`` or ``"metrics": [1, 2]``; built into a record unchecked, such a value
surfaces later as a traceback deep in a reader (``report``'s plots). :func:`from_plain` builds
a dataclass from its JSON object value by value against the field's annotation (``int``,
``float``, ``str``, ``bool``, ``None``, unions, lists, tuples, mappings, ``np.ndarray``,
``Any``, nested dataclasses) and refuses the first value that does not fit, naming the field,
the value and the type expected; :func:`to_plain` writes one back. A missing key takes the
field's default (files of an older layout still read), a null ``float`` reads as NaN, and a
key the class does not know is ignored, or refused with ``known_only`` (the run records).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Self, TypeVar

import numpy as np

__all__ = ["JsonRecord", "fits", "from_plain", "to_plain"]

_T = TypeVar("_T")


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


def to_plain(value: object, *, finite: bool = True) -> object:
    """Dataclasses to objects, tuples and arrays to lists, recursively.

    A value with its own ``as_json`` (a verdict) is written by it.

    Args:
        value: what to write.
        finite: non-finite floats become None (JSON has no NaN); False keeps them.
    """
    as_json = getattr(value, "as_json", None)
    if callable(as_json):
        return as_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v, finite=finite) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [to_plain(v, finite=finite) for v in value]
    if finite and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _name(kind: Any) -> str:
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("typing.", "").replace("NoneType", "None")


def _array(value: list | tuple) -> np.ndarray | None:
    """Numbers as an array (ints kept, None read as NaN); None for anything else."""
    try:
        array = np.asarray(value)
        array = np.asarray(value, dtype=np.float64) if array.dtype == object else array
    except (ValueError, TypeError):  # ragged, or not numbers
        return None
    return array if array.dtype.kind in "biuf" and (array.size or not value) else None


def _decode(kind: Any, value: object, where: str, name: str, known_only: bool) -> object:
    """``value`` of field ``name`` read as ``kind`` (module docstring); ValueError naming it."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind in (object, Any) or (kind is float and value is None):
        return math.nan if kind is float else value  # null: a number JSON could not hold
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # X | None: X's own message
            return _decode(options[0], value, where, name, known_only)
        for option in options:
            try:
                return _decode(option, value, where, name, known_only)
            except ValueError:
                continue
    elif origin in (tuple, list) and isinstance(value, list | tuple):
        items = [
            _decode(args[0], v, where, f"{name}[{i}]", known_only) for i, v in enumerate(value)
        ]
        return tuple(items) if origin is tuple else items
    elif origin in (dict, Mapping) and isinstance(value, Mapping):
        key = int if args[0] is int else str
        return {
            key(k): _decode(args[1], v, where, f"{name}.{k}", known_only) for k, v in value.items()
        }
    elif (
        kind is np.ndarray and isinstance(value, list | tuple) and (a := _array(value)) is not None
    ):
        return a
    elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if isinstance(value, kind):
            return value
        return from_plain(kind, value, f"{where}.{name}", known_only=known_only)
    elif kind in (float, int, str, bool) and fits(value, kind):
        return value
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise ValueError(
        f"{where}: field {name} must be {_name(kind)}, got {shown} ({type(value).__name__})"
    )


def from_plain(cls: type[_T], obj: object, where: str = "", *, known_only: bool = False) -> _T:
    """The dataclass ``cls`` from its JSON object, checked field by field (module docstring).

    Args:
        cls: a dataclass.
        obj: its JSON object.
        where: the file and place, for messages (default: the class's name).
        known_only: refuse keys ``cls`` has no field for (else they are ignored).

    Raises:
        ValueError: not an object, an unknown key (``known_only``), a required key missing, a
            value of another type or one the class refuses; the message names the key's path
            under ``where``.
    """
    where = where or cls.__name__
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = {f.name for f in fields}
    unknown = sorted(set(obj) - names, key=str)
    if known_only and unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; known: {sorted(names)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields:
        if f.name in obj:
            values[f.name] = _decode(hints[f.name], obj[f.name], where, f.name, known_only)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: lacks {f.name!r}")
    try:
        return cls(**values)
    except ValueError as err:  # the record's own check (a verdict's word, a record's status)
        raise ValueError(f"{where}: {err}") from None


class JsonRecord:
    """A frozen dataclass of a JSON file, written and read through :func:`to_plain`."""

    def to_json(self, *, finite: bool = True) -> dict[str, object]:
        """The plain object (non-finite floats None unless ``finite`` is False)."""
        plain = to_plain(self, finite=finite)
        assert isinstance(plain, dict)  # a dataclass is always an object
        return plain

    @classmethod
    def from_json(cls, obj: object, where: str = "") -> Self:
        """The record from its plain object (:func:`from_plain`)."""
        return from_plain(cls, obj, where)
