"""The shape of a zoo card's ``geometry.json``, checked when it is read.

``zoo list``, ``zoo verify`` and the README renderer index into the card (the probe rows, the
orbit table, the statistics, rho_aug, the data record); :func:`check_card` checks every part
they read, so a hand-edited or foreign card is one error naming the field and what was
expected, never a ``KeyError`` or ``TypeError`` from deep inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from solo_geometry.folder.records import RecordsError

__all__ = ["FIELD_TYPES", "check_card"]

# Top-level fields of a card and the JSON type each holds.
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "method": (str,),
    "backbone": (str,),
    "head": (str,),
    "dataset": (str,),
    "epochs": (int,),
    "license": (str,),
    "papers": (list,),
    "files": (dict,),
    "data": (dict,),
    "mean_std": (list,),
    "provenance": (dict,),
    "training_record": (dict, type(None)),
    "settings": (dict,),
    "measurements": (dict,),
    "tolerances": (dict,),
}
_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    type(None): "null",
}
_NUMBER = (int, float, type(None))  # a measured value: a number, or null where undefined
# The keys each part of ``measurements`` must hold (what ``zoo card`` writes).
_ROW_KEYS = ("features", "probe", "target", "accuracy", "chance")
_ORBIT_KEYS = ("family", "z", "h", "compression")


def _expect(value: Any, kinds: tuple[type, ...], field: str) -> Any:
    """``value`` if it is one of ``kinds`` (a bool is no number), else a ``RecordsError``."""
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    expected = "a number or null" if kinds == _NUMBER else " or ".join(_NAMES[k] for k in kinds)
    raise RecordsError(f"field {field} must be {expected}, got {value!r:.80}")


def _keys(value: Any, keys: tuple[str, ...], field: str) -> Mapping[str, Any]:
    """``value`` as an object holding ``keys``."""
    _expect(value, (dict,), field)
    missing = [k for k in keys if k not in value]
    if missing:
        raise RecordsError(f"field {field} lacks {missing}; expected {list(keys)}")
    return value


def _numbers(value: Any, field: str) -> None:
    for key, number in _expect(value, (dict,), field).items():
        _expect(number, _NUMBER, f"{field}.{key}")


def _measurements(m: Any) -> None:
    """What :func:`~solo_geometry.zoo.measurements.measure_model` returns."""
    _keys(m, ("probes", "stats", "rho"), "measurements")
    probes = _keys(m["probes"], ("rows", "orbits"), "measurements.probes")
    for i, row in enumerate(_expect(probes["rows"], (list,), "measurements.probes.rows")):
        where = f"measurements.probes.rows[{i}]"
        _keys(row, _ROW_KEYS, where)
        for key in ("accuracy", "chance"):
            _expect(row[key], _NUMBER, f"{where}.{key}")
    for i, row in enumerate(_expect(probes["orbits"], (list,), "measurements.probes.orbits")):
        where = f"measurements.probes.orbits[{i}]"
        _keys(row, _ORBIT_KEYS, where)
        _expect(row["compression"], _NUMBER, f"{where}.compression")
        for space in ("z", "h"):
            stats = _keys(row[space], ("spread", "separation"), f"{where}.{space}")
            for key, value in stats.items():
                first = value[0] if isinstance(value, list) and value else value  # [mean, std]
                _expect(first, _NUMBER, f"{where}.{space}.{key}")
    _numbers(m["stats"], "measurements.stats")
    _numbers(m["rho"], "measurements.rho")


def check_card(data: Mapping[str, Any]) -> None:
    """Check the fields of a card that carries every field of the schema.

    Args:
        data: the parsed ``geometry.json``.

    Raises:
        RecordsError: naming the first field of the wrong type or lacking keys (the caller
            prefixes the file).
    """
    for name, kinds in FIELD_TYPES.items():
        _expect(data[name], kinds, name)
    _measurements(data["measurements"])
    record = _keys(data["data"], ("kind", "sha256"), "data")
    if record["kind"] == "digits":
        _expect(record.get("size"), (int,), "data.size")
    mean_std = data["mean_std"]
    if len(mean_std) != 2 or not all(isinstance(m, list) and len(m) == 3 for m in mean_std):
        raise RecordsError(f"field mean_std must be [[3 means], [3 stds]], got {mean_std!r:.80}")
    for prefix, tol in data["tolerances"].items():
        if not isinstance(tol, list) or len(tol) != 2:
            raise RecordsError(f"field tolerances.{prefix} must be [abs, rel], got {tol!r:.80}")
    for key, digest in data["files"].items():
        _expect(digest, (str,), f"files.{key}")
