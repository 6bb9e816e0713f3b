"""Augmentation orbits: spread, intra- and inter-class distances, compression and curvature.

An orbit is K augmented copies of one image along one family (DESIGN.md section 3). Every
metric is computed on the rows L2-normalised, in float64:

* spread: per orbit, the mean squared Euclidean distance of its rows to the orbit centroid;
* D_intra: per orbit, the mean Euclidean distance over its K (K - 1) / 2 pairs of rows;
* D_inter: the mean Euclidean distance over pairs of class centroids (a class centroid is the
  mean of all normalised rows with that label); its std is over centroid pairs;
* separation: per orbit, D_inter (its mean over centroid pairs) divided by that orbit's D_intra;
* compression: per orbit, spread(Z) / spread(H).

Each is reported as mean and std over orbits (population std, ddof = 0, as ``numpy.std``).
``separation_mean`` is therefore the mean over orbits of D_inter / D_intra(orbit), not
D_inter / mean D_intra.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from solo_geometry.geometry.augment import apply_augmentation
from solo_geometry.geometry.stats import normalise_rows

__all__ = ["OrbitMetrics", "make_orbits", "orbit_compression", "orbit_curvature", "orbit_metrics"]


@dataclass(frozen=True)
class OrbitMetrics:
    """Orbit statistics of one representation (see the module docstring for definitions)."""

    spread_mean: float
    spread_std: float
    d_intra_mean: float
    d_intra_std: float
    d_inter_mean: float
    d_inter_std: float
    separation_mean: float
    separation_std: float

    def as_dict(self) -> dict[str, float]:
        """The eight fields as a plain dict."""
        return asdict(self)


def _mean_std(values: Tensor) -> tuple[float, float]:
    if values.numel() == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(correction=0))


def _pairwise_upper(points: Tensor) -> Tensor:
    """Euclidean distances over unordered pairs i < j of the rows of points (K, d)."""
    i, j = torch.triu_indices(points.shape[0], points.shape[0], offset=1)
    return (points[i] - points[j]).norm(dim=1)


def _per_orbit(X: Tensor, orbit_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Spread and D_intra of every orbit, each (O,), in the order of ``orbit_ids.unique()``."""
    spreads, intras = [], []
    for orbit in torch.unique(orbit_ids):
        rows = X[orbit_ids == orbit]  # (K, d)
        spreads.append((rows - rows.mean(dim=0)).pow(2).sum(dim=1).mean())
        intras.append(_pairwise_upper(rows).mean() if rows.shape[0] > 1 else rows.new_zeros(()))
    return torch.stack(spreads), torch.stack(intras)


def _validate(X: Tensor, orbit_ids: Tensor, labels: Tensor) -> None:
    if X.ndim != 2:
        raise ValueError(f"X must have shape (M, d); got {tuple(X.shape)}")
    if orbit_ids.shape != (X.shape[0],) or labels.shape != (X.shape[0],):
        raise ValueError(
            f"orbit_ids and labels must have shape ({X.shape[0]},); "
            f"got {tuple(orbit_ids.shape)} and {tuple(labels.shape)}"
        )


def orbit_metrics(X: Tensor, orbit_ids: Tensor, labels: Tensor) -> OrbitMetrics:
    """Spread, D_intra, D_inter and separation of augmentation orbits.

    Args:
        X: representations (M, d) of all orbit members (rows are L2-normalised here).
        orbit_ids: (M,) orbit of each row.
        labels: (M,) class of each row.

    Returns:
        The :class:`OrbitMetrics`; D_inter and separation are NaN with fewer than two classes.

    Raises:
        ValueError: on inconsistent shapes.
    """
    _validate(X, orbit_ids, labels)
    X = normalise_rows(X).cpu()  # (M, d)
    orbit_ids, labels = orbit_ids.cpu(), labels.cpu()
    spread, d_intra = _per_orbit(X, orbit_ids)
    centroids = torch.stack([X[labels == c].mean(dim=0) for c in torch.unique(labels)])
    d_inter = _pairwise_upper(centroids)  # (C (C - 1) / 2,)
    inter_mean, inter_std = _mean_std(d_inter)
    separation = inter_mean / d_intra  # (O,)
    return OrbitMetrics(
        *_mean_std(spread), *_mean_std(d_intra), inter_mean, inter_std, *_mean_std(separation)
    )


def orbit_compression(Z: Tensor, H: Tensor, orbit_ids: Tensor, labels: Tensor) -> dict:
    """Orbit metrics of the backbone (Z) and head (H) and the per-orbit compression.

    Args:
        Z: backbone features (M, d) of the orbit members.
        H: head outputs (M, p) of the same rows.
        orbit_ids: (M,) orbit of each row.
        labels: (M,) class of each row.

    Returns:
        ``{"z": OrbitMetrics dict, "h": OrbitMetrics dict, "compression_mean": float,
        "compression_std": float}``, compression = spread(Z) / spread(H) per orbit, mean and
        std (ddof 0) over orbits.

    Raises:
        ValueError: on inconsistent shapes.
    """
    _validate(Z, orbit_ids, labels)
    _validate(H, orbit_ids, labels)

    def spreads(X: Tensor) -> Tensor:
        return _per_orbit(normalise_rows(X).cpu(), orbit_ids.cpu())[0]

    mean, std = _mean_std(spreads(Z) / spreads(H))
    return {
        "z": orbit_metrics(Z, orbit_ids, labels).as_dict(),
        "h": orbit_metrics(H, orbit_ids, labels).as_dict(),
        "compression_mean": mean,
        "compression_std": std,
    }


def orbit_curvature(X_ordered: Tensor) -> Tensor:
    """Curvature along an ordered orbit by central differences.

    With x' = (x_{i+1} - x_{i-1}) / 2 and x'' = x_{i+1} - 2 x_i + x_{i-1} (unit parameter
    spacing; the curvature does not depend on it), kappa_i = sqrt(|x'|^2 |x''|^2 - (x'.x'')^2)
    / |x'|^3, the curvature of a curve in R^d. Rows are used as given (not normalised).

    Args:
        X_ordered: (K, d) representations ordered by the augmentation parameter, K >= 3.

    Returns:
        (K - 2,) float64 curvature at the interior points.

    Raises:
        ValueError: if fewer than three points are given.
    """
    if X_ordered.ndim != 2 or X_ordered.shape[0] < 3:
        raise ValueError(f"X_ordered must be (K >= 3, d); got {tuple(X_ordered.shape)}")
    x = X_ordered.detach().double()
    first = (x[2:] - x[:-2]) / 2  # (K - 2, d)
    second = x[2:] - 2 * x[1:-1] + x[:-2]  # (K - 2, d)
    a, b, ab = first.pow(2).sum(1), second.pow(2).sum(1), (first * second).sum(1)
    return torch.sqrt((a * b - ab**2).clamp_min(0.0)) / a.pow(1.5)


def make_orbits(x: Tensor, family: str, k: int, t_max: float) -> tuple[Tensor, Tensor, Tensor]:
    """K augmented copies of every image, t evenly spaced in [-t_max, t_max].

    Args:
        x: images (N, C, H, W).
        family: one of ``FAMILIES``.
        k: copies per image (orbit size).
        t_max: largest parameter value.

    Returns:
        images (N * k, C, H, W) with each orbit contiguous and ordered by t, orbit ids
        (N * k,) equal to the source image index, and the parameter values t (k,).

    Raises:
        ValueError: on an unknown family or k < 2.
    """
    if k < 2:
        raise ValueError(f"k must be at least 2; got {k}")
    t = torch.linspace(-t_max, t_max, k, dtype=x.dtype, device=x.device)  # (k,)
    copies = torch.stack([apply_augmentation(x, family, float(ti)) for ti in t], dim=1)
    n = x.shape[0]
    images = copies.reshape(n * k, *x.shape[1:])  # (N * k, C, H, W), orbit-major
    orbit_ids = torch.arange(n, device=x.device).repeat_interleave(k)  # (N * k,)
    return images, orbit_ids, t
