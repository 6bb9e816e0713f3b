"""``probes.json``: the probe table a run writes, one versioned schema (docs/run-folder.md).

Written and read only here and through :class:`~.run_folder.RunFolder`; the checks of
:mod:`.records` (schema version, field names and types) apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from solo_geometry.run.records import RecordsError, check_schema, from_dict

__all__ = ["PROBES_SCHEMA_VERSION", "OrbitRow", "ProbeRow", "ProbeTable"]

PROBES_SCHEMA_VERSION = 1  # of probes.json


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
        hits = [
            r.accuracy
            for r in self.rows
            if (r.features, r.probe, r.target) == (features, probe, target)
        ]
        return hits[0] if hits else None

    def gaps(self) -> dict[str, dict[str, float]]:
        """Backbone minus head (``z_minus_h``) and MLP minus linear (``mlp_minus_linear``)."""
        acc = {(r.features, r.probe, r.target): r.accuracy for r in self.rows}
        z_h = {
            f"{p}/{t}": a - acc[("h", p, t)]
            for (f, p, t), a in acc.items()
            if f == "z" and ("h", p, t) in acc
        }
        mlp_lin = {
            f"{f}/{t}": a - acc[(f, "linear", t)]
            for (f, p, t), a in acc.items()
            if p == "mlp" and (f, "linear", t) in acc
        }
        return {"z_minus_h": z_h, "mlp_minus_linear": mlp_lin}

    def to_dict(self) -> dict[str, Any]:
        """Plain types, with the gaps included for readers of the JSON file."""
        return {**dataclasses.asdict(self), "gaps": self.gaps()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "probes") -> ProbeTable:
        """Parse ``probes.json``; raises :class:`RecordsError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise RecordsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        check_schema(data, where, (PROBES_SCHEMA_VERSION,))
        body = {k: v for k, v in data.items() if k != "gaps"}
        for key, row in (("rows", ProbeRow), ("orbits", OrbitRow)):
            held = body.get(key, [])
            if not isinstance(held, list):
                raise RecordsError(f"{where}: field {key} must be a list, got {held!r:.60}")
            body[key] = [from_dict(row, r, f"{where}.{key}") for r in held]
        return from_dict(cls, body, where)
