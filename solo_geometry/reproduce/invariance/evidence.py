"""The evidence the invariance verdicts judge, typed: probes, orbit summaries, curvature, depth.

:class:`Evidence` comes from a reproduction's ``invariance.json``
(:func:`~solo_geometry.reproduce.invariance.verdicts.run_evidence`) or from the authors' arrays
(:func:`~solo_geometry.reproduce.paper_arrays.paper_evidence`). Its parts also read (and, for
:class:`Evidence`, are replaced) by key, ``ev["orbits"]``, as the mappings they replace: the
calibration tests alter one part of the authors' evidence and judge it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from solo_geometry.reproduce.invariance.orbit_evidence import OrbitSummary
from solo_geometry.reproduce.results import JsonRecord, Keyed

__all__ = ["Evidence", "ProbeEvidence"]


@dataclass(frozen=True)
class ProbeEvidence(JsonRecord, Keyed):
    """One reading's rotation probes: (accuracy on Z, on H) per probe, held-out images ``n``."""

    linear: tuple[float, ...]
    mlp: tuple[float, ...]
    n: int | None = None  # None: unknown, the probes undecidable

    @classmethod
    def of(cls, p: ProbeEvidence | Mapping[str, object]) -> ProbeEvidence:
        """``p``, or the probes a plain ``{"linear", "mlp", "n"}`` mapping holds."""
        return p if isinstance(p, ProbeEvidence) else cls.from_json(p)


@dataclass(eq=True)
class Evidence(Keyed):
    """What the verdicts judge, by reading (module docstring).

    Attributes:
        probes: reading (``paper``, ``package``) -> its rotation probes.
        orbits: reading (``unit_z``, ``raw_z``) -> one :class:`OrbitSummary` per draw.
        curvature: kappa(H) / kappa(Z) per draw of sweeps, or None.
        depth: reading -> head depth -> summaries per draw.
        source: where it came from, in words.
        files: the files read (the authors' arrays).
    """

    probes: dict[str, ProbeEvidence] = field(default_factory=dict)
    orbits: dict[str, list[OrbitSummary]] = field(default_factory=dict)
    curvature: list[float] | None = None
    depth: dict[str, dict[int, list[OrbitSummary]]] = field(default_factory=dict)
    source: str = ""
    files: list[str] = field(default_factory=list)

    def __setitem__(self, key: str, value: object) -> None:
        self[key]  # KeyError for a name that is not a field
        setattr(self, key, value)

    @classmethod
    def of(cls, ev: Evidence | Mapping[str, object]) -> Evidence:
        """A copy of ``ev`` (or of the plain mapping of its fields), its probes typed."""
        out = cls()
        if isinstance(ev, Evidence):
            out = dataclasses.replace(ev)
        else:
            names = {f.name for f in dataclasses.fields(cls)}
            for key, value in ev.items():
                if key in names:  # others ignored, as the codec ignores them
                    out[key] = value
        out.probes = {k: ProbeEvidence.of(p) for k, p in (out.probes or {}).items()}
        out.orbits, out.depth = out.orbits or {}, out.depth or {}
        return out
