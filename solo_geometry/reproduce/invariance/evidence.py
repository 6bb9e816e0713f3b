"""The evidence the invariance verdicts judge, typed: probes, orbit summaries, curvature, depth.

:class:`Evidence` comes from a reproduction's ``invariance.json``
(:func:`~solo_geometry.reproduce.invariance.verdicts.run_evidence`) or from the authors' arrays
(:func:`~solo_geometry.reproduce.paper_arrays.paper_evidence`); the calibration fixture holds it
as plain JSON (:meth:`Evidence.fixture`, read back by ``Evidence.from_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solo_geometry.reproduce.invariance.orbit_evidence import OrbitSummary
from solo_geometry.reproduce.results import JsonRecord

__all__ = ["Evidence", "ProbeEvidence"]


@dataclass(frozen=True)
class ProbeEvidence(JsonRecord):
    """One reading's rotation probes: (accuracy on Z, on H) per probe, held-out images ``n``."""

    linear: tuple[float, ...]
    mlp: tuple[float, ...]
    n: int | None = None  # None: unknown, the probes undecidable


@dataclass
class Evidence(JsonRecord):
    """What the verdicts judge, by reading.

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

    def fixture(self) -> dict[str, object]:
        """The plain object of the judged parts (no ``source``, no ``files``): for fixtures."""
        plain = self.to_json(finite=False)
        return {k: plain[k] for k in ("probes", "orbits", "curvature", "depth")}
