"""The invariance experiments' result as typed records: ``invariance.json``, part by part.

Each record's fields are the JSON keys of its part of the file, in the file's order (the whole
file: :class:`InvarianceResult`), through the one codec of :mod:`solo_geometry.folder.field_types`;
a field an older or hand-written file may lack takes a default. The numbers are :mod:`.measure`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from solo_geometry.folder.field_types import JsonRecord
from solo_geometry.geometry.stats import WhiteningScore
from solo_geometry.reproduce.invariance.evidence import OrbitSummary, ProbeEvidence
from solo_geometry.reproduce.results import Verdict, read_result

__all__ = [
    "Curvature",
    "CurvatureSeed",
    "DepthRow",
    "Guillotine",
    "InvarianceResult",
    "OrbitReading",
    "OrbitSeed",
    "OrbitStats",
    "OrbitTable",
    "PaperProbes",
    "ProbePair",
    "READINGS",
    "Spectra",
    "Whitening",
    "read_invariance",
]

# (mean, std): over orbits, over seeds; None where the number was not finite or not recorded.
Pair = tuple[float | None, ...]
Numbers = tuple[float | None, ...]
_NONE: Pair = (None, None)
# The two inputs of the head in an orbit table: the paper's code feeds unit z, training fed raw z.
READINGS = {"unit_z": "paper", "raw_z": "default"}  # reading -> orbit_representations protocol


@dataclass(frozen=True)
class ProbePair(JsonRecord):
    """One probe (target x probe) on Z and on H: accuracies, ``gap`` (z - h), chance."""

    target: str
    probe: str
    z: float
    h: float
    gap: float | None = None
    chance: float | None = None


@dataclass(frozen=True)
class PaperProbes(ProbeEvidence):
    """The paper's rotation probes (``probes.json``'s ``paper``): [Z, H] per probe, and how."""

    protocol: str = "paper"
    settings: Mapping[str, object] = field(default_factory=dict)  # PaperProbeSettings


@dataclass(frozen=True)
class OrbitStats(JsonRecord):
    """The paper's orbit table for one space: each statistic's (mean, std) over orbits."""

    spread: Pair = _NONE
    d_intra: Pair = _NONE
    d_inter: Pair = _NONE
    separation: Pair = _NONE


@dataclass(frozen=True)
class OrbitTable(JsonRecord):
    """Mean and std over seeds of each statistic's mean, and of the compression."""

    z: OrbitStats = field(default_factory=OrbitStats)
    h: OrbitStats = field(default_factory=OrbitStats)
    compression: Pair = _NONE


@dataclass(frozen=True)
class OrbitSeed(JsonRecord):
    """One draw's orbit table: per space, compression, its ``.npz`` and its summary."""

    z: OrbitStats = field(default_factory=OrbitStats)
    h: OrbitStats = field(default_factory=OrbitStats)
    compression: float | None = None
    file: str = ""
    summary: OrbitSummary | None = None


@dataclass(frozen=True)
class OrbitReading(JsonRecord):
    """The orbit tables of one input of the head (``unit_z`` or ``raw_z``) over seeds."""

    table: OrbitTable = field(default_factory=OrbitTable)
    per_seed: tuple[OrbitSeed, ...] = ()
    h_cosine_to_mean: float | None = None  # mean over seeds
    feature_norm: float | None = None  # mean norm of raw training features

    def summaries(self) -> list[OrbitSummary]:
        """The orbit summaries of the draws that hold one."""
        return [r.summary for r in self.per_seed if r.summary is not None]


@dataclass(frozen=True)
class CurvatureSeed(JsonRecord):
    """One draw of sweeps: mean kappa(Z), kappa(H), their ratio, sweeps and ``.npz``."""

    kappa_z: float | None = None
    kappa_h: float | None = None
    ratio: float | None = None
    n_sweeps: int | None = None
    file: str = ""


@dataclass(frozen=True)
class Curvature(JsonRecord):
    """Curvature per draw, and kappa(Z), kappa(H), ratio: (mean, std) over draws."""

    per_seed: tuple[CurvatureSeed, ...] = ()
    kappa_z: Pair = _NONE
    kappa_h: Pair = _NONE
    ratio: Pair = _NONE


@dataclass(frozen=True)
class Guillotine(JsonRecord):
    """The guillotine experiment: the ReLU + BN head's probes, orbits and curvature."""

    run: str = ""
    head: str = ""
    probes: tuple[ProbePair, ...] = ()
    probes_paper: PaperProbes | None = None
    n_test: int | None = None
    orbits: Mapping[str, OrbitReading] = field(default_factory=dict)  # by reading
    curvature: Curvature = field(default_factory=Curvature)


@dataclass(frozen=True)
class DepthRow(JsonRecord):
    """One head depth: its rotation probe, headline numbers (mean, std), orbits, curvature."""

    depth: int
    run: str
    rotation_linear: ProbePair
    rotation_paper: PaperProbes
    compression: Pair = _NONE  # unit z
    compression_raw_z: Pair = _NONE
    separation_z: Pair = _NONE
    separation_h: Pair = _NONE
    curvature_ratio: Pair = _NONE
    orbits: Mapping[str, OrbitReading] = field(default_factory=dict)
    curvature: Curvature = field(default_factory=Curvature)

    @classmethod
    def of(cls, depth: int, run: Guillotine) -> DepthRow:
        """The row of a depth's run, measured as the guillotine's: headline numbers its own."""
        unit, raw = run.orbits["unit_z"].table, run.orbits["raw_z"].table
        assert run.probes_paper is not None  # measured with protocol "both"
        return cls(
            depth,
            run.run,
            run.probes[0],
            run.probes_paper,
            unit.compression,
            raw.compression,
            unit.z.separation,
            unit.h.separation,
            run.curvature.ratio,
            run.orbits,
            run.curvature,
        )


@dataclass(frozen=True)
class Spectra(JsonRecord):
    """One checkpoint: covariance spectra of Z and H (descending), whitening, metric."""

    epoch: int
    cov_z: Numbers
    cov_h: Numbers
    whitening: WhiteningScore  # geometry.stats' (a null read as NaN)
    n_samples: int
    metric: Mapping[str, float | None] | None = None  # a metric-linear head's: MetricSpectrum's
    metric_eigenvalues: Numbers = ()  # descending


@dataclass(frozen=True)
class Whitening(JsonRecord):
    """The metric-linear run: its training series by metric, its spectra per epoch."""

    run: str
    series: Mapping[str, Numbers]  # "step" and each metric, per measurement
    epochs: tuple[Spectra, ...]


@dataclass(frozen=True)
class InvarianceResult(JsonRecord):
    """``invariance.json``: settings, the five experiments, the claims, seconds per step."""

    schema: int = 0
    dataset: str = ""
    host: str = ""
    settings: Mapping[str, object] = field(default_factory=dict)  # InvarianceSettings
    recipe: str = ""
    guillotine: Guillotine | None = None
    depth: tuple[DepthRow, ...] = ()
    whitening: Whitening | None = None
    claims: tuple[Verdict, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=dict)


def read_invariance(path: str | Path) -> InvarianceResult:
    """An ``invariance.json`` (or the folder holding it), typed (:func:`read_result`)."""
    return read_result(InvarianceResult, path, "invariance")
