"""The reproductions' results on disk: one verdict type, one writer and one reader per file.

:class:`Verdict` is every experiment's judged claim; :func:`write_result` alone writes
``summary.json`` (the collapse sweep) and ``invariance.json`` (the invariance experiments), and
:func:`read_result` alone reads them (docs/reproducing.md, section "Collapse"). Their content is
frozen dataclasses (:class:`JsonRecord`) whose fields are the file's keys in the file's order;
:func:`to_plain` and :func:`from_plain` are their one codec: a missing key takes the field's
default (files of an older layout still read), a null ``float`` reads as NaN, and keys it does
not know are ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypeVar

import numpy as np

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from solo_geometry.folder.atomic import write_text
from solo_geometry.folder.field_types import fits

__all__ = [
    "KINDS",
    "RESULT_VERSION",
    "VERDICTS",
    "JsonRecord",
    "Verdict",
    "from_plain",
    "read_result",
    "to_plain",
    "write_result",
]

# The words a claim's verdict may be, in the order pages list them.
VERDICTS = ("held", "not held", "undecidable")
# The layout version write_result stamps; a file of a later version is refused, not guessed.
RESULT_VERSION = 1
# The result files, by kind: the file name each kind is written to.
KINDS = {"collapse": "summary.json", "invariance": "invariance.json"}
_VERDICT_KEYS = ("id", "claim", "verdict", "evidence")
_GROUP_KEYS = ("dataset", "backbone")


class JsonRecord:
    """A frozen dataclass of a result file, written and read through :func:`to_plain`."""

    def to_json(self, *, finite: bool = True) -> dict[str, object]:
        """The plain object (non-finite floats None unless ``finite`` is False)."""
        plain = to_plain(self, finite=finite)
        assert isinstance(plain, dict)  # a dataclass is always an object
        return plain

    @classmethod
    def from_json(cls, obj: object, where: str = "") -> Self:
        """The record from its plain object (:func:`from_plain`)."""
        return from_plain(cls, obj, where)


@dataclass(frozen=True, eq=False)
class Verdict(JsonRecord, Mapping[str, str]):
    """One claim's verdict (one of :data:`VERDICTS`) with its evidence, as a read-only mapping.

    A collapse verdict also names the data set and backbone of the runs judged. Read by
    ``Verdict.from_json`` (:func:`from_plain`: a missing or non-string key, or an unknown
    verdict, is a ValueError).
    """

    id: str  # the claim's identifier, e.g. ``smooth_escape``
    claim: str  # as the paper states it
    verdict: str
    evidence: str  # the numbers the verdict rests on, in words
    dataset: str | None = None
    backbone: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(
                f"verdict {self.verdict!r} of {self.id!r}: expected one of {', '.join(VERDICTS)}"
            )

    def as_json(self) -> dict[str, str]:
        """The plain object written to files and ``--json``: the group keys only when set."""
        keys = _VERDICT_KEYS + tuple(k for k in _GROUP_KEYS if getattr(self, k) is not None)
        return {k: getattr(self, k) for k in keys}

    def text(self, indent: str = "") -> str:
        """Two lines: ``[verdict] id (dataset, backbone): claim``, then the evidence."""
        group = "" if self.dataset is None else f" ({self.dataset}, {self.backbone})"
        head = f"{indent}[{self.verdict}] {self.id}{group}: {self.claim}"
        return f"{head}\n{indent}    {self.evidence}"

    def __getitem__(self, key: str) -> str:
        return self.as_json()[key]  # KeyError for a key it does not hold

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_json())

    def __len__(self) -> int:
        return len(self.as_json())


def to_plain(value: object, *, finite: bool = True) -> object:
    """Dataclasses and verdicts to objects, tuples to lists, recursively.

    Args:
        value: what to write.
        finite: non-finite floats become None (JSON has no NaN); False keeps them.
    """
    if isinstance(value, Verdict):
        return value.as_json()
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


_T = TypeVar("_T")


def _decode_union(args: tuple[object, ...], value: object, where: str) -> object:
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in (a for a in args if a is not type(None)):
        try:
            return _decode(arg, value, where)
        except ValueError as err:
            errors.append(str(err))
    raise ValueError("; ".join(errors))


def _decode(tp: object, value: object, where: str) -> object:
    """``value`` read as type ``tp`` (module docstring); ValueError naming ``where``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is object:
        return value
    if tp is float and value is None:  # a number JSON could not hold (NaN, infinity)
        return math.nan
    if origin in (typing.Union, types.UnionType):
        return _decode_union(args, value, where)
    if origin in (tuple, list) and isinstance(value, list | tuple):
        items = [_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) and isinstance(value, Mapping):
        key = int if args[0] is int else str
        return {key(k): _decode(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is np.ndarray and isinstance(value, list | tuple):
        try:  # numbers, ints kept, None read as NaN; ragged or other values fall through
            array = np.asarray(value)
            array = np.asarray(value, dtype=np.float64) if array.dtype == object else array
        except (ValueError, TypeError):
            array = np.asarray(())
        if array.dtype.kind in "biuf" and (array.size or not value):
            return array
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else from_plain(tp, value, where)
    if tp in (float, int, str, bool) and fits(value, tp):
        return value
    name = getattr(tp, "__name__", str(tp))
    raise ValueError(f"{where}: expected {name}, got {value!r}")


def from_plain(cls: type[_T], obj: object, where: str = "") -> _T:
    """The dataclass ``cls`` from its plain object, checked field by field (module docstring).

    Raises:
        ValueError: not an object, a required key missing or a value of another type; the
            message names the key's path under ``where``.
    """
    where = where or cls.__name__
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in obj:
            values[f.name] = _decode(hints[f.name], obj[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where} lacks {f.name!r}")
    try:
        return cls(**values)
    except ValueError as err:  # the record's own check (a verdict's word)
        raise ValueError(f"{where}: {err}") from None


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"result kind {kind!r}: expected one of {', '.join(KINDS)}")
    return KINDS[kind]


def write_result(
    folder: Path, kind: str, content: Mapping[str, object] | DataclassInstance
) -> Path:
    """Write ``content`` as ``folder/<KINDS[kind]>``, stamped, whole or not at all; its path.

    Raises:
        ValueError: an unknown kind.
    """
    path = Path(folder) / _check_kind(kind)
    plain = to_plain(content)
    assert isinstance(plain, dict)  # a mapping or a dataclass is always an object
    stamped = {"kind": kind, "version": RESULT_VERSION, **plain}
    return write_text(path, json.dumps(stamped, indent=1, allow_nan=False))


def read_result(cls: type[_T], path: str | Path, kind: str) -> _T:
    """A result file of ``kind`` (a folder is read as its ``KINDS[kind]`` file) as ``cls``.

    A file without the stamp (written before it) reads as version 0.

    Raises:
        ValueError: an unknown kind, a file that is not JSON, not an object, of another kind,
            of a later version than this package writes, or with content of the wrong types
            (:func:`from_plain`); each message names the file.
    """
    name = _check_kind(kind)
    path = Path(path)
    path = path / name if path.is_dir() else path
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {str(path)!r} as JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{str(path)!r}: expected a JSON object, got {type(data).__name__}")
    found, version = data.pop("kind", kind), data.pop("version", 0)
    if found != kind:
        raise ValueError(f"{str(path)!r} is a {found!r} result, expected {kind!r}")
    if not isinstance(version, int) or not 0 <= version <= RESULT_VERSION:
        raise ValueError(
            f"{str(path)!r} has layout version {version!r}; this package reads "
            f"versions 0 to {RESULT_VERSION}"
        )
    return from_plain(cls, data, str(path))
