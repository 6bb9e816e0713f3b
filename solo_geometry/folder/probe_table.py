"""``probes.json``: the probe table a run writes, one versioned schema (docs/run-folder.md).

Written and read only here and through :class:`~.run_folder.RunFolder`; the checks of
:mod:`.records` (schema version, field names and types) apply. Version 2 added each row's
``random_init``: the same probe on the same architecture at random initialisation; version 1
files are still read, their rows with ``random_init`` None ("not measured").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from solo_geometry.folder.records import RecordsError, check_schema, from_dict

__all__ = [
    "PROBES_SCHEMA_VERSION",
    "OrbitRow",
    "ProbeRow",
    "ProbeTable",
    "below_random_init",
    "random_init_summary",
    "versus_random_init",
]

PROBES_SCHEMA_VERSION = 2  # of probes.json
READABLE_PROBES_VERSIONS = (1, 2)  # 1: no random_init (read as None: not measured)


@dataclass(frozen=True)
class ProbeRow:
    """One probe fit: features ``z`` or ``h``, probe ``linear`` or ``mlp``, one target.

    Attributes:
        features: ``z`` (backbone) or ``h`` (head).
        probe: ``linear`` or ``mlp``.
        target: ``class``, ``rotation`` or ``jitter``.
        accuracy: held-out accuracy of the trained network's features.
        chance: the held-out split's majority-class share.
        details: the fit's facts (``ProbeResult.details``).
        random_init: held-out accuracy of the same probe, split and seed on the same features
            of the same architecture at random initialisation (backbone and head rebuilt by
            the constructor that built them, under ``torch.manual_seed(settings.random_init
            .seed)``); None: not measured (a version-1 file, or no constructor to rebuild).
        random_init_details: that fit's facts.
    """

    features: str
    probe: str
    target: str
    accuracy: float
    chance: float
    details: dict[str, Any] = field(default_factory=dict)
    random_init: float | None = None
    random_init_details: dict[str, Any] = field(default_factory=dict)

    def over_random_init(self) -> float | None:
        """Trained minus random-init accuracy; None when the random init was not measured."""
        return None if self.random_init is None else self.accuracy - self.random_init


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
        row = self.row(features, probe, target)
        return None if row is None else row.accuracy

    def row(self, features: str, probe: str, target: str) -> ProbeRow | None:
        """The row of one fit, None if it did not run."""
        hits = [
            r for r in self.rows if (r.features, r.probe, r.target) == (features, probe, target)
        ]
        return hits[0] if hits else None

    def gaps(self) -> dict[str, dict[str, float]]:
        """The table's differences of accuracy.

        Returns:
            ``z_minus_h`` (backbone minus head), ``mlp_minus_linear`` and
            ``trained_minus_random_init`` (keyed ``features/probe/target``; rows that
            measured the random initialisation).
        """
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
        trained = {
            f"{r.features}/{r.probe}/{r.target}": delta
            for r in self.rows
            if (delta := r.over_random_init()) is not None
        }
        return {"z_minus_h": z_h, "mlp_minus_linear": mlp_lin, "trained_minus_random_init": trained}

    def to_dict(self) -> dict[str, Any]:
        """Plain types, with the gaps included for readers of the JSON file."""
        return {**dataclasses.asdict(self), "gaps": self.gaps()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "probes") -> ProbeTable:
        """Parse ``probes.json``; raises :class:`RecordsError` naming what is wrong.

        Versions 1 and 2 are read; a version-1 table comes back as version 2 whose rows did
        not measure the random initialisation (``random_init`` None).
        """
        if not isinstance(data, Mapping):
            raise RecordsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        check_schema(data, where, READABLE_PROBES_VERSIONS)
        body = {k: v for k, v in data.items() if k != "gaps"}
        body["schema"] = PROBES_SCHEMA_VERSION
        for key, row in (("rows", ProbeRow), ("orbits", OrbitRow)):
            held = body.get(key, [])
            if not isinstance(held, list):
                raise RecordsError(f"{where}: field {key} must be a list, got {held!r:.60}")
            body[key] = [from_dict(row, r, f"{where}.{key}") for r in held]
        return from_dict(cls, body, where)


def versus_random_init(row: ProbeRow) -> str:
    """The row against its random initialisation, in words (the report, ``probe``, the demo).

    Returns:
        e.g. ``"random init 0.850, trained - random init -0.374: below its random
        initialisation"``, or ``"random init not measured"``.
    """
    delta = row.over_random_init()
    if delta is None or row.random_init is None:
        return "random init not measured"
    text = f"random init {row.random_init:.3f}, trained - random init {delta:+.3f}"
    return text + (": below its random initialisation" if delta < 0 else "")


def below_random_init(table: ProbeTable) -> list[ProbeRow]:
    """The rows whose trained accuracy is below that of the same network at random init."""
    return [r for r in table.rows if (d := r.over_random_init()) is not None and d < 0]


def random_init_summary(table: ProbeTable) -> str:
    """One sentence: the fits below the same network at random initialisation, if any.

    Returns:
        ``"below its random initialisation: Z linear class (0.476 against 0.850)"`` (each
        such fit, ``; ``-separated); ``"every probe is below its random initialisation
        (trained - random init -0.599 to -0.042)"`` when every measured fit is;
        ``"every probe is at or above the same network at random initialisation"``; or
        ``"random init not measured"`` when no row measured it.
    """
    measured = [r for r in table.rows if r.random_init is not None]
    if not measured:
        return "random init not measured"
    if len(below_random_init(table)) == len(measured) > 1:
        deltas = [r.accuracy - r.random_init for r in measured if r.random_init is not None]
        return (
            f"every probe is below its random initialisation (trained - random init "
            f"{min(deltas):+.3f} to {max(deltas):+.3f})"
        )
    below = [
        f"{r.features.upper()} {r.probe} {r.target} ({r.accuracy:.3f} against {r.random_init:.3f})"
        for r in below_random_init(table)
    ]
    if not below:
        return "every probe is at or above the same network at random initialisation"
    return "below its random initialisation: " + "; ".join(below)
