"""The reproductions' results on disk: one verdict type, one writer and one reader per file.

:class:`Verdict` is every experiment's judged claim; :func:`write_result` alone writes
``summary.json`` (the collapse sweep) and ``invariance.json`` (the invariance experiments), and
:func:`read_result` alone reads them (docs/reproducing.md, section "Collapse"). Their content is
frozen dataclasses whose fields are the file's keys in the file's order, through the package's
one codec (:mod:`solo_geometry.folder.field_types`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from solo_geometry.folder.atomic import write_text
from solo_geometry.folder.field_types import JsonRecord, from_plain, to_plain

__all__ = [
    "KINDS",
    "RESULT_VERSION",
    "VERDICTS",
    "Verdict",
    "read_result",
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
_T = TypeVar("_T")


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
