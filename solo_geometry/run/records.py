"""Run records: the versioned schemas a run writes (docs/design.md section 7, docs/run-folder.md).

``geometry.jsonl`` holds one :class:`GeometryRecord` per line and ``probes.json`` a
:class:`ProbeTable`, written and read only here and through :class:`~.run_folder.RunFolder`.
:func:`read_records`, the one reader, drops a torn last line with a warning naming file and
line, refuses (or, for a report, skips) other unusable lines and unknown schema versions.
Versions: 1 (no ``parts``), 2 (``parts``, ``deferred_parts``), 3 (``alert``, ``failed_parts``,
settings ``precision``, ``features_dtype``, ``user_matmul``; None before).
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

__all__ = [
    "GEOMETRY_FILE",
    "PARTS",
    "PROBES_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "STATUSES",
    "GeometryRecord",
    "OrbitRow",
    "ProbeRow",
    "ProbeTable",
    "RecordsError",
    "RecordsWarning",
    "Settings",
    "read_records",
]

SCHEMA_VERSION = 3  # of geometry.jsonl's records
READABLE_VERSIONS = (1, 2, 3)  # record versions this reader knows (1, 2 upgraded on reading)
PROBES_SCHEMA_VERSION = 1  # of probes.json
GEOMETRY_FILE = "geometry.jsonl"
# A record's parts: statistics, spectra, tangents (rho), SLQ density (last 3 wait for budget).
PARTS = ("stats", "hessian", "augment", "density")
STATUSES = ("ok", "skipped")
Scalar = float | int | bool | None


class RecordsError(ValueError):
    """A run file that cannot be read: corrupt, or written by an unknown schema version."""


class RecordsWarning(UserWarning):
    """A reader of run files dropped something (a torn last line) and says what."""


def _check_schema(
    data: Mapping[str, Any], where: str, known: tuple[int, ...] = READABLE_VERSIONS
) -> None:
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


def _from_dict(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """Build a dataclass from a mapping, rejecting unknown or missing keys with their names."""
    if not isinstance(data, Mapping):
        raise RecordsError(f"{where}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise RecordsError(f"{where}: unknown field(s) {unknown}; known: {sorted(names)}")
    try:
        return cls(**data)
    except TypeError as err:  # a required field missing
        raise RecordsError(f"{where}: {err}") from err


@dataclass(frozen=True)
class Settings:
    """The settings that define a record's numbers (None where a measurement did not run).

    Attributes:
        dtype: arithmetic of the operator products and the statistics (``float64`` or
            ``float32``).
        features_dtype: the dtype the backbone computed the measured features in (e.g.
            ``bfloat16`` under ``bf16-mixed``; the measurement raises them to float32).
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
        lanczos_max_steps: Lanczos step cap per operator run.
        lanczos_tol: relative residual tolerance of the extremes.
        slq_probes: SLQ probes per operator behind the negative fractions (and the density).
        augment_samples: images used for augmentation tangents.
        seed: seed of the monitor's generator.
        budget: the monitor's time budget (fraction of training time), None when off.
        deferred: steps this measurement was deferred by to keep the budget.
    """

    dtype: str | None = None
    features_dtype: str | None = None
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
    metrics: dict[str, Scalar] = field(default_factory=dict)
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
        _check_schema(data, where)
        data = dict(data)
        if data["schema"] == 1:  # upgraded: the parts it held, read off its metrics
            ok = data.get("status") == "ok"
            data["parts"] = _parts_of(data.get("metrics") or {}, data.get("density")) if ok else []
        data["schema"] = SCHEMA_VERSION  # 1 and 2 hold no alert: None
        data["settings"] = _from_dict(Settings, data.get("settings") or {}, f"{where}.settings")
        try:
            return _from_dict(cls, data, where)
        except TypeError as err:  # a required field missing
            raise RecordsError(f"{where}: {err}") from err


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
    """
    path = Path(source)
    path = path / GEOMETRY_FILE if path.is_dir() else path
    if not path.is_file():
        return []
    text = path.read_bytes()
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
                warnings.warn(RecordsWarning(f"{where}: torn last record dropped ({err}): a "
                                             "write cut short, e.g. by a killed writer"),
                              stacklevel=2)  # fmt: skip
                continue
            if problems is None:
                raise RecordsError(f"{where}: not a JSON record: {err}") from None
            problems.append((number, str(err)))
            continue
        if isinstance(data, Mapping):
            _check_schema(data, where)  # an unknown version is never tolerated: no guessing
        try:
            records.append(GeometryRecord.from_dict(data, where))
        except RecordsError as err:
            if problems is None:
                raise
            problems.append((number, str(err).removeprefix(f"{where}: ")))
    return [r for r in records if r.ok] if ok_only else records


@dataclass(frozen=True)
class ProbeRow:
    """One probe fit: features ``z`` or ``h``, probe ``linear`` or ``mlp``, one target."""

    features: str
    probe: str
    target: str
    accuracy: float
    chance: float
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OrbitRow:
    """The orbit statistics of one augmentation family (docs/design.md section 3, "Orbits").

    Attributes:
        family: augmentation family.
        t_max: orbits span t in [-t_max, t_max].
        k: copies per orbit.
        z: statistics of the backbone features: ``spread``, ``d_intra``, ``d_inter``,
            ``separation`` (the paper's: ratio of means, error-propagated +-) and
            ``separation_per_orbit``, each ``[mean, std]``; ``n_orbits``, ``n_classes``.
        h: the same for the head outputs.
        compression: mean spread(Z) / mean spread(H), the paper's ratio of means.
        compression_per_orbit: spread(Z) / spread(H) per orbit, ``[mean, std]`` over orbits.
    """

    family: str
    t_max: float
    k: int
    z: dict[str, Any]
    h: dict[str, Any]
    compression: float
    compression_per_orbit: list[float]


@dataclass(frozen=True)
class ProbeTable:
    """``probes.json``: backbone-vs-head probes and the orbit table.

    Attributes:
        rows: every probe fit.
        orbits: the orbit table, one row per family.
        settings: what defines the numbers (data folder, seed, split sizes, probe options).
        paper: the paper's rotation probes (``geometry.probes.protocol`` ``paper`` or
            ``both``; :func:`~solo_geometry.analysis.paper_probes.paper_rotation_probes`), else
            None.
        schema: the schema version.
    """

    rows: list[ProbeRow]
    orbits: list[OrbitRow] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] | None = None
    schema: int = PROBES_SCHEMA_VERSION

    def accuracy(self, features: str, probe: str, target: str) -> float | None:
        """Held-out accuracy of one fit, None if it did not run."""
        hits = [r.accuracy for r in self.rows if (r.features, r.probe, r.target) ==
                (features, probe, target)]  # fmt: skip
        return hits[0] if hits else None

    def gaps(self) -> dict[str, dict[str, float]]:
        """Backbone minus head (``z_minus_h``) and MLP minus linear (``mlp_minus_linear``)."""
        acc = {(r.features, r.probe, r.target): r.accuracy for r in self.rows}
        z_h = {f"{p}/{t}": a - acc[("h", p, t)] for (f, p, t), a in acc.items()
               if f == "z" and ("h", p, t) in acc}  # fmt: skip
        mlp_lin = {f"{f}/{t}": a - acc[(f, "linear", t)] for (f, p, t), a in acc.items()
                   if p == "mlp" and (f, "linear", t) in acc}  # fmt: skip
        return {"z_minus_h": z_h, "mlp_minus_linear": mlp_lin}

    def to_dict(self) -> dict[str, Any]:
        """Plain types, with the gaps included for readers of the JSON file."""
        return {**dataclasses.asdict(self), "gaps": self.gaps()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "probes") -> ProbeTable:
        """Parse ``probes.json``; raises :class:`RecordsError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise RecordsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        _check_schema(data, where, (PROBES_SCHEMA_VERSION,))
        body = {k: v for k, v in data.items() if k != "gaps"}
        body["rows"] = [_from_dict(ProbeRow, r, f"{where}.rows") for r in body.get("rows", [])]
        body["orbits"] = [_from_dict(OrbitRow, r, f"{where}.orbits")
                          for r in body.get("orbits", [])]  # fmt: skip
        return _from_dict(cls, body, where)
