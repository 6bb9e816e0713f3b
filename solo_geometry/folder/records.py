"""Run records: the versioned schemas a run writes (docs/design.md section 7, docs/run-folder.md).

``geometry.jsonl`` holds one :class:`GeometryRecord` per line (``probes.json`` a
:class:`~.probe_table.ProbeTable`), written and read only here and through
:class:`~.run_folder.RunFolder`.
:func:`read_records`, the one reader, drops a torn last line with a warning naming file and
line, refuses (or, for a report, skips) other unusable lines and unknown schema versions.
Versions: 1 (no ``parts``), 2 (``parts``, ``deferred_parts``), 3 (``alert``, ``failed_parts``,
settings ``precision``, ``features_dtype``, ``user_matmul``; None before), 4 (settings
``rank_eps``, ``rank_work_eps``; None before: those records' ranks were read at float64's eps),
5 (``<z|h>/effective_rank`` renamed ``<z|h>/rankme_l2``, :data:`RENAMED_METRICS`: older records'
keys are renamed on reading).

A record's metrics are :data:`Metrics`, keyed by the patterns of
``solo_geometry.geometry.metrics.METRICS`` (the registry, above this floor: a test holds every
key a record writes to it, and every renamed key's new name).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solo_geometry.folder.field_types import from_plain
from solo_geometry.folder.safe_files import MAX_RECORDS_BYTES, read_bytes

__all__ = [
    "GEOMETRY_FILE",
    "PARTS",
    "RENAMED_METRICS",
    "SCHEMA_VERSION",
    "STATUSES",
    "GeometryRecord",
    "Metrics",
    "RecordsError",
    "RecordsWarning",
    "Settings",
    "check_schema",
    "from_dict",
    "read_records",
    "renamed_metrics",
]

SCHEMA_VERSION = 5  # of geometry.jsonl's records
READABLE_VERSIONS = (1, 2, 3, 4, 5)  # versions this reader knows (1 to 4 upgraded on reading)
GEOMETRY_FILE = "geometry.jsonl"
# A record's parts: statistics, spectra, tangents (rho), SLQ density (these 3 wait for budget),
# the held-out batch's statistics (runtime/heldout.py).
PARTS = ("stats", "hessian", "augment", "density", "heldout")
STATUSES = ("ok", "skipped")
Scalar = float | int | bool | None
# A record's metrics: key (a pattern of geometry.metrics.METRICS filled in) -> value.
Metrics = dict[str, Scalar]
# Metric keys renamed since, old -> new, applied when reading a record of an older version
# (version 5: RankMe of the L2-normalised rows named for what it is; ``<p>/rankme`` is the paper's).
RENAMED_METRICS = {"z/effective_rank": "z/rankme_l2", "h/effective_rank": "h/rankme_l2"}


class RecordsError(ValueError):
    """A run file that cannot be read: corrupt, or written by an unknown schema version."""


class RecordsWarning(UserWarning):
    """A reader of run files dropped something (a torn last line) and says what."""


def check_schema(
    data: Mapping[str, Any], where: str, known: tuple[int, ...] = READABLE_VERSIONS
) -> None:
    """Refuse a file written by a schema version outside ``known`` (no guessing), naming it."""
    version = data.get("schema")
    if isinstance(version, bool) or version not in known:
        raise RecordsError(
            f"{where}: schema version {version!r} is not one this reader knows "
            f"({', '.join(map(str, known))}); upgrade solo-geometry or re-run the measurement"
        )


def _parts_of(metrics: Mapping[str, Any], density: Any) -> list[str]:
    """The parts a version-1 record holds, read off its metric names (it had no ``parts``)."""
    prefixes = {"stats": ("z/", "h/", "stats/"), "hessian": ("heff/",), "augment": ("rho/",)}
    held = [p for p, pre in prefixes.items() if any(k.startswith(pre) for k in metrics)]
    return held + (["density"] if density is not None else [])


def from_dict(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """Build a dataclass from a mapping, rejecting unknown or missing keys, wrong types, by name."""
    try:  # "step": "ten" refused here, not in a plot
        return from_plain(cls, data, where, known_only=True)
    except ValueError as err:
        raise RecordsError(str(err)) from None


@dataclass(frozen=True)
class Settings:
    """The settings that define a record's numbers (None where a measurement did not run).

    Attributes:
        dtype: arithmetic of the operator products and the statistics (``float64`` or
            ``float32``; ``geometry.spectrum.dtype``).
        features_dtype: the dtype the backbone computed the measured features in (e.g.
            ``bfloat16`` under ``bf16-mixed``; the measurement raises them to float32).
        rank_eps: machine epsilon of ``features_dtype``, the relative round-off of the captured
            features: the statistics' rank tolerance is max(max(M, d) * rank_work_eps * s_1,
            rank_eps * ||X||_F) on the uncentred features X (docs/design.md section 3).
        rank_work_eps: machine epsilon of the arithmetic the features were computed in
            (float32, or float64 for float64 features).
        precision: the trainer's precision (``32-true``, ``bf16-mixed``, ...): the head and
            loss are re-evaluated in ``dtype`` at that forward's features (docs/design.md 3).
        user_matmul: the float32 matmul settings the user had (TF32 flags, matmul precision),
            turned off (``highest``, no TF32) during the measurement and restored after.
        recurrence_dtype: arithmetic of the Lanczos recurrences, Krylov basis and
            reorthogonalisation (``float64``; the tridiagonal is always solved in float64).
        tau: relative negativity floor (docs/design.md section 3).
        floor: the absolute floor tau * max|lambda(H_eff)| used for all three operators.
        n_batch: samples of the batch the loss saw.
        n_block: samples whose rows form the operators' principal sub-block.
        n_views: views V of the batch.
        dim: size of the operators, n_views * n_block * d.
        lanczos_max_steps: Lanczos step cap per operator run (``geometry.spectrum.max_steps``).
        lanczos_tol: relative residual tolerance of the extremes (``geometry.spectrum.tol``).
        slq_probes: SLQ probes per operator behind the negative fractions (and the density).
        augment_samples: images used for augmentation tangents.
        seed: seed of the monitor's generator.
        budget: the monitor's time budget (fraction of training time), None when off.
        deferred: steps this measurement was deferred by to keep the budget.
    """

    dtype: str | None = None
    features_dtype: str | None = None
    rank_eps: float | None = None
    rank_work_eps: float | None = None
    precision: str | None = None
    user_matmul: dict[str, Any] | None = None
    recurrence_dtype: str | None = None
    tau: float | None = None
    floor: float | None = None
    n_batch: int | None = None
    n_block: int | None = None
    n_views: int | None = None
    dim: int | None = None
    lanczos_max_steps: int | None = None
    lanczos_tol: float | None = None
    slq_probes: int | None = None
    augment_samples: int | None = None
    seed: int | None = None
    budget: float | None = None
    deferred: int | None = None


@dataclass(frozen=True)
class GeometryRecord:
    """One measurement, one line of ``geometry.jsonl``.

    Attributes:
        step: optimiser steps taken before the measurement (parameters before step ``step``).
        epoch: the trainer's epoch.
        status: ``"ok"`` or ``"skipped"``.
        reason: why a measurement was skipped (``None`` when ok).
        settings: what defines the numbers.
        metrics: flat ``name -> value``; ``None`` where a number is undefined (e.g. the
            condition number of an operator with no eigenvalue above the floor).
        density: SLQ density of H_eff (``nodes``, ``weights``) where the record holds one.
        parts: which of :data:`PARTS` the record holds (empty when skipped).
        deferred_parts: ``part -> reason`` for each due part this record does not hold
            because the time budget deferred it (a ``budget:`` reason); the spectra and rho
            then come in a later record, the statistics never wait.
        failed_parts: ``part -> reason`` for each due part that raised or came out
            non-finite while the record's other parts were kept.
        final: the measurement at the end of fit.
        head: name of the measured head.
        n_skipped: skipped measurements so far in the run, this one included.
        seconds: wall time of the measurement.
        meta: plain facts about the run (first record only), e.g. the geometry config.
        alert: the collapse alert at this record (``state``, ``since``, ``std_ratio``,
            ``rank_ratio``, ``diagnosis``, ...: :meth:`~solo_geometry.runtime.alert.
            CollapseAlert.as_record`); None when skipped, switched off, or before version 3.
        schema: the schema version, :data:`SCHEMA_VERSION`.
    """

    step: int
    epoch: int
    status: str
    reason: str | None = None
    settings: Settings = field(default_factory=Settings)
    metrics: Metrics = field(default_factory=dict)
    density: dict[str, list[float]] | None = None
    parts: list[str] = field(default_factory=list)
    deferred_parts: dict[str, str] = field(default_factory=dict)
    failed_parts: dict[str, str] = field(default_factory=dict)
    final: bool = False
    head: str | None = None
    n_skipped: int = 0
    seconds: float = 0.0
    meta: dict[str, Any] | None = None
    alert: dict[str, Any] | None = None
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RecordsError(f"status: unknown value {self.status!r}; choose from {STATUSES}")
        named = set(self.parts) | set(self.deferred_parts) | set(self.failed_parts)
        unknown = sorted(named - set(PARTS))
        if unknown:
            raise RecordsError(f"parts: unknown {unknown}; choose from {list(PARTS)}")
        if self.alert is not None and not isinstance(self.alert.get("state"), str):
            raise RecordsError(f"alert: expected a 'state' string, got {self.alert!r:.60}")
        nodes, weights = (self.density or {}).get("nodes"), (self.density or {}).get("weights")
        if self.density is not None and (
            nodes is None or weights is None or len(nodes) != len(weights)
        ):
            raise RecordsError(
                f"density: expected 'nodes' and 'weights' of one length, got {self.density!r:.60}"
            )

    @property
    def ok(self) -> bool:
        """Whether the measurement succeeded."""
        return self.status == "ok"

    def holds(self, part: str) -> bool:
        """Whether the record holds ``part`` (one of :data:`PARTS`)."""
        return self.ok and part in self.parts

    def value(self, key: str) -> float | None:
        """A metric as a float, None when absent, undefined or not a number."""
        v = self.metrics.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        return float(v)

    def to_json(self) -> str:
        """The record as one line of JSON (no newline)."""
        return json.dumps(dataclasses.asdict(self), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "record") -> GeometryRecord:
        """Parse a record; raises :class:`RecordsError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise RecordsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        check_schema(data, where)
        data = dict(data)
        if data["schema"] == 1:  # upgraded: the parts it held, read off its metrics
            ok = data.get("status") == "ok"
            held = data.get("metrics")
            metrics: dict[str, Any] = held if isinstance(held, dict) else {}
            data["parts"] = _parts_of(metrics, data.get("density")) if ok else []
        if data["schema"] < 5 and isinstance(data.get("metrics"), dict):
            data["metrics"] = renamed_metrics(data["metrics"])
        data["schema"] = SCHEMA_VERSION  # 1, 2 hold no alert, 1 to 3 no rank_eps: None
        data["settings"] = from_dict(Settings, data.get("settings") or {}, f"{where}.settings")
        return from_dict(cls, data, where)


def renamed_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics of an older record under today's keys (:data:`RENAMED_METRICS`), order kept."""
    return {RENAMED_METRICS.get(k, k): v for k, v in metrics.items()}


class _NonFinite(ValueError):
    """A line holding ``NaN`` or ``Infinity``: foreign (the writer writes null), never torn."""


def _refuse_constant(name: str) -> float:
    """``json.loads``'s hook for ``NaN``/``Infinity``."""
    raise _NonFinite(f"non-finite number {name} (the writer writes null for an undefined one)")


def _parse_line(raw: bytes) -> Any:
    """One line's JSON; a ``ValueError`` saying why it is unusable."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte {err.start})") from None
    try:
        return json.loads(line, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None


def read_records(
    source: str | Path,
    *,
    ok_only: bool = False,
    problems: list[tuple[int, str]] | None = None,
) -> list[GeometryRecord]:
    """Read ``geometry.jsonl`` (a run folder or the file itself).

    A torn last line (no newline after it: a write cut short by a killed writer) is dropped
    with one :class:`RecordsWarning` naming the file and line. Any other line that is not
    UTF-8, not JSON, holds ``NaN``/``Infinity`` (the writer writes null) or is not a record is
    refused, or skipped into ``problems``.

    Args:
        source: the run folder or the file.
        ok_only: keep only successful measurements.
        problems: if given, an unusable line (other than a torn last one) is appended here
            as ``(line number, reason)`` and skipped instead of raising; a report uses this to
            draw the rest. An unknown schema version always raises.

    Returns:
        The records in file order; [] when the file does not exist.

    Raises:
        RecordsError: on an unusable line other than a torn last one (unless ``problems``
            is given), or an unknown schema version; the message names the file and line.
        LinkRefused: the file is a symbolic link (never followed).
        TooLarge: the file is over :data:`~.safe_files.MAX_RECORDS_BYTES`.
    """
    path = Path(source)
    path = path / GEOMETRY_FILE if path.is_dir() else path
    if not path.is_file() and not path.is_symlink():
        return []
    text = read_bytes(path, MAX_RECORDS_BYTES, "geometry records file")
    lines = text.split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = _parse_line(line)
        except ValueError as err:
            if number == len(lines) and not isinstance(err, _NonFinite):  # no newline after it
                warnings.warn(
                    RecordsWarning(
                        f"{where}: torn last record dropped ({err}): a "
                        "write cut short, e.g. by a killed writer"
                    ),
                    stacklevel=2,
                )
                continue
            if problems is None:
                raise RecordsError(f"{where}: not a JSON record: {err}") from None
            problems.append((number, str(err)))
            continue
        if isinstance(data, Mapping):
            check_schema(data, where)  # an unknown version is never tolerated: no guessing
        try:
            records.append(GeometryRecord.from_dict(data, where))
        except RecordsError as err:
            if problems is None:
                raise
            problems.append((number, str(err).removeprefix(f"{where}: ")))
    return [r for r in records if r.ok] if ok_only else records
