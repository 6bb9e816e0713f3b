"""Raw ``geometry.*`` overrides checked against the schema before OmegaConf sees them.

OmegaConf's typed nodes coerce what they are given: a bool node turns ``2`` into ``true`` and an
int node ``'7'`` into ``7``, so a check after composition sees a value the user never wrote
(``geometry.alert.stop=2`` would stop the run), and a value it cannot coerce ends in Hydra's
``Error merging override``. :func:`check_geometry_overrides` reads each ``geometry.*`` override
with Hydra's own parser and compares the value as written with the type of its field in
:class:`~solo_geometry.config.GeometryConfig`: one ``ValueError`` naming the option, the value
and the type expected. Ranges and choices stay with the nodes' own checks, which see the
composed value (now of the right type). Both hosts call it on the command line's overrides
(:func:`solo_geometry.recipe.load_recipe`); a run started by solo-learn's own
``main_pretrain.py`` calls it on Hydra's record of them (:func:`check_hydra_overrides`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from solo_geometry.config import GeometryConfig, as_bool

__all__ = ["check_geometry_overrides", "check_hydra_overrides", "schema_fields"]

ROOT = "geometry"
_BOOL_WORDS = "true/false, on/off, yes/no, 1/0"
_PLURAL = {str: "strings", float: "numbers", int: "integers"}


def schema_fields(cls: Any = None, prefix: str = ROOT) -> dict[str, Any]:
    """Every option of the ``geometry`` tree and its type, by dotted key.

    Args:
        cls: a node of the tree (default: :class:`~solo_geometry.config.GeometryConfig`).
        prefix: the node's own key.

    Returns:
        ``{"geometry.alert.stop": bool, "geometry.budget": float | None, ...}``; nodes (the
        dataclasses) are listed too, with their class as the type.
    """
    if cls is None:
        cls = GeometryConfig
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key, hint = f"{prefix}.{f.name}", hints[f.name]
        out[key] = hint
        if dataclasses.is_dataclass(hint):
            out.update(schema_fields(hint, key))
    return out


def _shown(value: Any) -> str:
    """A value as an override writes it (``true``, ``null``, ``[a,b]``; a string quoted)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _kind(value: Any) -> str:
    """How Hydra read a value: ``the integer 2``, ``the string 'maybe'``."""
    names: dict[type, str] = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
    }
    name = names.get(type(value), "value")
    return f"the {name} {_shown(value)}" if value is not None else "null"


def _expected(hint: Any) -> str:
    """The type ``hint`` asks for, in words."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return f"{_expected(inner[0])} or null"
    if typing.get_origin(hint) is list:
        return f"a list of {_PLURAL.get(args[0], args[0])}, e.g. [a,b]"
    if dataclasses.is_dataclass(hint):
        return "a mapping of its options, e.g. {key:value}"
    return {
        bool: f"a boolean ({_BOOL_WORDS})",
        int: "an integer",
        float: "a number",
        str: "a string (quote a number: '3')",
    }.get(hint, str(hint))


def _fits(value: Any, hint: Any, key: str) -> bool:
    """Whether ``value``, as Hydra read it, is of type ``hint`` (nested mappings: raises)."""
    if isinstance(value, str) and "${" in value:
        return True  # an interpolation: resolved, and checked by the node, later
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return value is None or any(_fits(value, a, key) for a in args if a is not type(None))
    if typing.get_origin(hint) is list:
        return isinstance(value, list) and all(_fits(v, args[0], key) for v in value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return False
        fields = schema_fields(hint, key)
        for name, item in value.items():
            _check(f"{key}.{name}", item, fields)
        return True
    if hint is bool:
        try:
            as_bool(value, key)  # the spellings the node itself reads
        except ValueError:
            return False
        return True
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


def _check(key: str, value: Any, fields: dict[str, Any]) -> None:
    if key not in fields:
        node = key.rsplit(".", 1)[0]
        known = sorted(k.rsplit(".", 1)[1] for k in fields if k.rsplit(".", 1)[0] == node)
        if not known:
            raise ValueError(f"{key}: unknown option ({node} is not a node of the geometry tree)")
        raise ValueError(f"{key}: unknown option; choose from {known}")
    if not _fits(value, fields[key], key):
        raise ValueError(f"{key}: expected {_expected(fields[key])}, got {_kind(value)}")


def _values(override: Any) -> Iterable[Any]:
    """The values an override sets: one, or each of a sweep's (ranges and globs: none)."""
    if not override.is_sweep_override():
        return [override.value()]
    if override.value_type.name in ("CHOICE_SWEEP", "SIMPLE_CHOICE_SWEEP", "RANGE_SWEEP"):
        return list(override.sweep_iterator())
    return []  # interval and glob sweeps: numbers drawn, or group options, checked later


def check_geometry_overrides(overrides: Sequence[str]) -> None:
    """Check the value of every ``geometry.*`` override, as written, against its field's type.

    Args:
        overrides: Hydra overrides; those not under ``geometry.``, deletions and overrides
            Hydra cannot parse (reported by the composition) are left alone.

    Raises:
        ValueError: an unknown option, or a value of the wrong type (``geometry.alert.stop=2``,
            ``geometry.seed=1.5``), naming the option, the value and the type expected.
    """
    candidates = [o for o in overrides if isinstance(o, str) and ROOT + "." in o.split("=")[0]]
    if not candidates:
        return
    parser, fields = OverridesParser.create(), schema_fields()
    for text in candidates:
        try:
            override = parser.parse_override(text)
        except HydraException:
            continue
        key = override.key_or_group
        if override.is_delete() or not key.startswith(ROOT + ".") or override.package:
            continue
        for value in _values(override):
            _check(key, value, fields)


def check_hydra_overrides() -> None:
    """:func:`check_geometry_overrides` on the overrides of the running Hydra job, if any.

    For a run started by solo-learn's own ``main_pretrain.py`` (the overrides reach the model
    only composed): Hydra's record of them, as the user wrote them.

    Raises:
        ValueError: as :func:`check_geometry_overrides`.
    """
    if HydraConfig.initialized():
        check_geometry_overrides(list(HydraConfig.get().overrides.task))
