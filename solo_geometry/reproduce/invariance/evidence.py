"""The evidence the invariance verdicts judge: probes, orbit summaries and their noise, curvature.

:class:`Evidence` comes from a reproduction's ``invariance.json``
(:func:`~solo_geometry.reproduce.invariance.verdicts.run_evidence`) or from the authors' arrays
(:func:`~solo_geometry.reproduce.paper_arrays.paper_evidence`); the calibration fixture holds it
as plain JSON (:meth:`Evidence.fixture`, read back by ``Evidence.from_json``).

The paper's orbit statistics (docs/design.md section 3) need, per orbit, only its spread, its
D_intra, its class, its size and its mean point: a class centroid is the size-weighted mean of its
orbits' means, so D_inter is a function of the orbit means. Distances among those means are
unchanged by expressing them in an orthonormal basis of their span (at most one vector per orbit),
so an :class:`OrbitSummary` of the paper's 15 orbits is 15 x 15 numbers per space instead of 180 x
2048, and reproduces the paper's table exactly. Released arrays reduce to fixtures this way.
The noise of the orbit claims (:func:`orbit_evidence`) is docs/reproducing.md's ("Verdicts").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from solo_geometry.folder.field_types import JsonRecord
from solo_geometry.geometry.orbits import PAPER_EPS, orbit_spreads

__all__ = [
    "Evidence",
    "OrbitEvidence",
    "OrbitSummary",
    "ProbeEvidence",
    "cosine_to_mean",
    "orbit_evidence",
]


def cosine_to_mean(X: np.ndarray) -> float:
    """Mean cosine of the rows of X (M, d) with their mean direction (1: all rows parallel)."""
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)  # (M, d)
    mu = Xn.mean(axis=0)
    return float(np.mean(Xn @ (mu / np.linalg.norm(mu))))


def _span(means: np.ndarray) -> np.ndarray:
    """Rows (O, d) in an orthonormal basis of their span (O, r): every distance is kept."""
    _, s, vt = np.linalg.svd(means, full_matrices=False)
    keep = s > s.max() * 1e-12 if s.size else s.astype(bool)
    return means @ vt[keep].T


def _space(X: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per orbit (sorted ids): mean point (O, d), spread (O,), D_intra (O,) of unit rows."""
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    spreads, intras = orbit_spreads(torch.as_tensor(X), torch.as_tensor(ids))
    means = np.stack([X[ids == orbit].mean(axis=0) for orbit in np.unique(ids)])
    return means, spreads.numpy(), intras.numpy()


@dataclass(frozen=True)
class OrbitSummary(JsonRecord):
    """What the orbit statistics of one table need, per orbit (sorted by orbit id).

    Attributes:
        labels: (O,) class of each orbit.
        sizes: (O,) rows of each orbit.
        means_z: (O, r) orbit mean points of unit z in an orthonormal basis of their span.
        means_h: (O, r') the same for H.
        spread_z: (O,) mean squared distance to the orbit centroid, Z.
        spread_h: (O,) the same for H.
        intra_z: (O,) mean pairwise distance within the orbit, Z.
        intra_h: (O,) the same for H.
        h_cosine_to_mean: mean cosine of H's rows with their mean direction.
    """

    labels: np.ndarray
    sizes: np.ndarray
    means_z: np.ndarray
    means_h: np.ndarray
    spread_z: np.ndarray
    spread_h: np.ndarray
    intra_z: np.ndarray
    intra_h: np.ndarray
    h_cosine_to_mean: float

    @classmethod
    def from_arrays(
        cls, Z: np.ndarray, H: np.ndarray, orbit_ids: np.ndarray, labels: np.ndarray
    ) -> OrbitSummary:
        """Summarise orbit representations in the paper's layout (rows of every orbit)."""
        Z, H = np.asarray(Z, dtype=np.float64), np.asarray(H, dtype=np.float64)
        ids, labels = np.asarray(orbit_ids), np.asarray(labels)
        if Z.ndim != 2 or H.ndim != 2 or not len(Z) == len(H) == len(ids) == len(labels):
            raise ValueError(
                f"orbit arrays must be Z (M, d), H (M, p), ids and labels (M,); got "
                f"{Z.shape}, {H.shape}, {ids.shape}, {labels.shape}"
            )
        mz, sz, iz = _space(Z, ids)
        mh, sh, ih = _space(H, ids)
        orbit_labels = np.array([labels[ids == o][0] for o in np.unique(ids)])
        sizes = np.array([np.sum(ids == o) for o in np.unique(ids)])
        return cls(orbit_labels, sizes, _span(mz), _span(mh), sz, sh, iz, ih, cosine_to_mean(H))


@dataclass(frozen=True)
class OrbitEvidence:
    """One orbit table's headline numbers and their noise (:func:`orbit_evidence`).

    Attributes:
        compression: the paper's ratio of mean spreads, Z over H.
        log_ratio: (mean, standard error, n orbits) of per-orbit log spread(Z) / spread(H).
        separation_z: the paper's separation in Z.
        separation_h: the same in H.
        separation_diff: (H - Z, its bootstrap standard error).
        h_cosine_to_mean: mean cosine of H's rows with their mean direction.
    """

    compression: float
    log_ratio: tuple[float, float, int]
    separation_z: float
    separation_h: float
    separation_diff: tuple[float, float]
    h_cosine_to_mean: float


def _separation(
    means: np.ndarray, intra: np.ndarray, labels: np.ndarray, sizes: np.ndarray
) -> float:
    """The paper's mean D_inter / (mean D_intra + 1e-10) from orbit summaries."""
    classes = np.unique(labels)
    cent = np.stack(
        [np.average(means[labels == c], axis=0, weights=sizes[labels == c]) for c in classes]
    )
    diff = cent[:, None, :] - cent[None, :, :]
    inter = np.sqrt(np.sum(diff**2, axis=-1))[np.triu_indices(len(classes), 1)]
    return float(inter.mean() / (np.nanmean(intra) + PAPER_EPS))


def _separations(s: OrbitSummary, pick: np.ndarray) -> tuple[float, float]:
    args = (s.labels[pick], s.sizes[pick])
    return (
        _separation(s.means_z[pick], s.intra_z[pick], *args),
        _separation(s.means_h[pick], s.intra_h[pick], *args),
    )


def orbit_evidence(s: OrbitSummary, *, resamples: int = 400, seed: int = 0) -> OrbitEvidence:
    """The orbit table's headline numbers and their noise.

    Compression: per orbit the log of spread(Z) / spread(H), its mean and standard error over
    orbits. Separation: H minus Z, its standard error from ``resamples`` draws (seeded by
    ``seed``) of a paired bootstrap over orbits (resampled within each class, both spaces from
    the same draw).
    """
    logs = np.log(s.spread_z / np.maximum(s.spread_h, PAPER_EPS))
    n = len(logs)
    se = float(np.std(logs, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    everyone = np.arange(n)
    sep_z, sep_h = _separations(s, everyone)
    rng = np.random.default_rng(seed)
    groups = [everyone[s.labels == c] for c in np.unique(s.labels)]
    diffs = []
    for _ in range(resamples if n > 1 else 0):
        pick = np.concatenate([rng.choice(g, size=len(g)) for g in groups])
        bz, bh = _separations(s, pick)
        diffs.append(bh - bz)
    return OrbitEvidence(
        compression=float(s.spread_z.mean() / (s.spread_h.mean() + PAPER_EPS)),
        log_ratio=(float(logs.mean()), se, n),
        separation_z=sep_z,
        separation_h=sep_h,
        separation_diff=(sep_h - sep_z, float(np.std(diffs, ddof=1)) if diffs else math.nan),
        h_cosine_to_mean=s.h_cosine_to_mean,
    )


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
