"""Augmentation orbits: the paper's statistics and protocols.

An orbit is K augmented copies of one image along one family (docs/design.md section 3). The
statistics are exactly those of the paper's code (plot_results.py,
``_calculate_geometric_metrics``), on the rows L2-normalised, in float64:

* spread: per orbit, the mean squared distance of its rows to their centroid; over orbits;
* D_intra: per orbit with at least two rows, the mean distance over its pairs; over orbits;
* D_inter: distances between class centroids (the mean of all rows of a class); over pairs;
* separation = mean D_inter / (mean D_intra + 1e-10), +- by first-order error propagation,
  sep * sqrt((std D_inter / (mean D_inter + 1e-10))^2 + (std D_intra / (mean D_intra + 1e-10))^2);
* compression = mean spread(Z) / (mean spread(H) + 1e-10): a ratio of means.

Every std is the population std (ddof = 0, ``numpy.std``); the 1e-10 are the paper's. The
per-orbit distributions, means of ratios that differ from the paper's numbers, have names of their
own: ``separation_per_orbit`` (mean D_inter / D_intra(orbit)) and ``compression_per_orbit``
(spread_Z(orbit) / spread_H(orbit)), each mean and std over orbits.

Two orbit protocols (``protocol``):

* ``"paper"`` (experiments.py, ``run_orbit_visualization_experiment``): 5 classes evenly spaced
  over the label range (``np.linspace(0, C - 1, 5, dtype=int)``: 0, 2, 4, 6, 9 on CIFAR-10),
  3 images of each drawn at random (here by ``seed``), each rotated by 0, 30, ..., 330 degrees
  (12) with ``torchvision``'s ``rotate`` (nearest neighbour, zero fill) before normalisation;
  backbone and head in eval mode, z = backbone(x) / ||.||, h = head(z) / ||.||: the head is fed
  the L2-normalised z, as that code does (its head was trained on raw z);
* ``"default"`` (this project's): every given image, K copies along any family of
  :mod:`~solo_geometry.geometry.augment` with t evenly spaced in [-t_max, t_max]; the head is fed
  the raw z, as in training.

The curvature of rotation sweeps is in :mod:`solo_geometry.geometry.curvature`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.transforms import functional as TF

from solo_geometry.geometry.augment import (
    MeanStd,
    apply_augmentation,
    apply_normalisation,
    deterministic_mode,
)
from solo_geometry.geometry.stats import normalise_rows

__all__ = [
    "PAPER_EPS",
    "PAPER_ORBIT_DEGREES",
    "PROTOCOLS",
    "Pair",
    "OrbitComparison",
    "OrbitImages",
    "OrbitMetrics",
    "make_orbits",
    "mean_std",
    "orbit_comparison",
    "orbit_images",
    "orbit_metrics",
    "orbit_representations",
    "orbit_spreads",
    "paper_orbit_selection",
]

PAPER_EPS = 1e-10  # the paper's guard in the denominators of separation and compression
PAPER_ORBIT_DEGREES = tuple(30.0 * i for i in range(12))  # np.linspace(0, 360, 12, endpoint=False)
PROTOCOLS = ("default", "paper")

Pair = tuple[float, float]


def mean_std(values: Tensor) -> Pair:
    """Mean and population std (ddof 0); NaN for no values, as NumPy."""
    if values.numel() == 0:
        return math.nan, math.nan
    return float(values.mean()), float(values.std(correction=0))


@dataclass(frozen=True)
class OrbitMetrics:
    """Orbit statistics of one representation, each a (mean, std) pair (module docstring).

    Attributes:
        spread: over orbits.
        d_intra: over orbits with at least two rows.
        d_inter: over pairs of class centroids.
        separation: mean D_inter / mean D_intra, +- by error propagation (the paper's).
        separation_per_orbit: mean D_inter / D_intra(orbit), over orbits (not the paper's).
        n_orbits: number of orbits.
        n_classes: number of classes.
    """

    spread: Pair
    d_intra: Pair
    d_inter: Pair
    separation: Pair
    separation_per_orbit: Pair
    n_orbits: int
    n_classes: int

    def paper_table(self) -> dict[str, list[float]]:
        """The paper's four rows: ``spread``, ``d_intra``, ``d_inter``, ``separation``."""
        keys = ("spread", "d_intra", "d_inter", "separation")
        return {k: list(getattr(self, k)) for k in keys}


@dataclass(frozen=True)
class OrbitComparison:
    """Orbit statistics of the backbone (Z) and of the head (H) on the same orbits.

    Attributes:
        z: statistics of Z.
        h: statistics of H.
        compression: mean spread(Z) / (mean spread(H) + 1e-10), the paper's ratio of means.
        compression_per_orbit: spread_Z(o) / spread_H(o), mean and std over orbits.
    """

    z: OrbitMetrics
    h: OrbitMetrics
    compression: float
    compression_per_orbit: Pair

    def paper_table(self) -> dict[str, dict[str, list[float]] | float]:
        """``{"z": {...}, "h": {...}, "compression": float}``, the paper's table."""
        return {
            "z": self.z.paper_table(),
            "h": self.h.paper_table(),
            "compression": self.compression,
        }

    def as_dict(self) -> dict[str, Any]:
        """Every field, nested; pairs as ``(mean, std)`` tuples (JSON writes lists)."""
        return asdict(self)


def _validate(X: Tensor, orbit_ids: Tensor, labels: Tensor, name: str = "X") -> None:
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{name} must have shape (M, d) with M >= 1; got {tuple(X.shape)}")
    if orbit_ids.shape != (X.shape[0],) or labels.shape != (X.shape[0],):
        raise ValueError(
            f"orbit_ids and labels must have shape ({X.shape[0]},) to match {name}; "
            f"got {tuple(orbit_ids.shape)} and {tuple(labels.shape)}"
        )


def orbit_spreads(X: Tensor, orbit_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Spread (O,) and D_intra (O,) (NaN for one-row orbits), orbits in sorted id order."""
    spreads, intras = [], []
    for orbit in torch.unique(orbit_ids):  # sorted, as np.unique
        rows = X[orbit_ids == orbit]  # (K, d)
        spreads.append((rows - rows.mean(dim=0)).pow(2).sum(dim=1).mean())
        intras.append(F.pdist(rows).mean() if rows.shape[0] > 1 else rows.new_tensor(math.nan))
    return torch.stack(spreads), torch.stack(intras)


def orbit_metrics(X: Tensor, orbit_ids: Tensor, labels: Tensor) -> OrbitMetrics:
    """Spread, D_intra, D_inter and separation of augmentation orbits, as the paper computes.

    Args:
        X: representations (M, d) of all orbit members (rows L2-normalised here).
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
    spread, d_intra = orbit_spreads(X, orbit_ids)
    d_intra = d_intra[~d_intra.isnan()]  # orbits with >= 2 rows, as the paper's code
    centroids = torch.stack([X[labels == c].mean(dim=0) for c in torch.unique(labels)])  # (C, d)
    inter_mean, inter_std = mean_std(F.pdist(centroids))  # over C (C - 1) / 2 pairs
    intra_mean, intra_std = mean_std(d_intra)
    sep = inter_mean / (intra_mean + PAPER_EPS)
    sep_err = sep * math.sqrt(
        (inter_std / (inter_mean + PAPER_EPS)) ** 2 + (intra_std / (intra_mean + PAPER_EPS)) ** 2
    )
    return OrbitMetrics(
        spread=mean_std(spread),
        d_intra=(intra_mean, intra_std),
        d_inter=(inter_mean, inter_std),
        separation=(sep, sep_err),
        separation_per_orbit=mean_std(inter_mean / d_intra),
        n_orbits=spread.numel(),
        n_classes=centroids.shape[0],
    )


def orbit_comparison(Z: Tensor, H: Tensor, orbit_ids: Tensor, labels: Tensor) -> OrbitComparison:
    """Orbit statistics of the backbone and the head, and the compression.

    Args:
        Z: backbone features (M, d) of the orbit members.
        H: head outputs (M, p) of the same rows.
        orbit_ids: (M,) orbit of each row.
        labels: (M,) class of each row.

    Returns:
        The :class:`OrbitComparison`.

    Raises:
        ValueError: on inconsistent shapes.
    """
    _validate(Z, orbit_ids, labels, "Z")
    _validate(H, orbit_ids, labels, "H")
    spread_z = orbit_spreads(normalise_rows(Z).cpu(), orbit_ids.cpu())[0]  # (O,)
    spread_h = orbit_spreads(normalise_rows(H).cpu(), orbit_ids.cpu())[0]  # (O,)
    return OrbitComparison(
        z=orbit_metrics(Z, orbit_ids, labels),
        h=orbit_metrics(H, orbit_ids, labels),
        compression=float(spread_z.mean() / (spread_h.mean() + PAPER_EPS)),
        compression_per_orbit=mean_std(spread_z / spread_h),
    )


@dataclass(frozen=True)
class OrbitImages:
    """Orbit images (M, C, H, W), orbits contiguous; orbit_ids, labels, params (M,) per image.

    ``params`` are degrees under ``"paper"``, the family's units otherwise; ``source`` (O,)
    indexes each orbit's image among the images given.
    """

    images: Tensor
    orbit_ids: Tensor
    labels: Tensor
    params: Tensor
    source: Tensor
    protocol: str
    family: str


def make_orbits(x: Tensor, family: str, k: int, t_max: float) -> tuple[Tensor, Tensor, Tensor]:
    """K augmented copies of every image, t evenly spaced in [-t_max, t_max].

    Args:
        x: images (N, C, H, W) in pixel space.
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
    orbit_ids = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)  # (N * k,)
    return copies.flatten(0, 1), orbit_ids, t  # (N * k, C, H, W) orbit-major, (N * k,), (k,)


def paper_orbit_selection(
    labels: Tensor,
    *,
    n_classes: int | None = None,
    per_class: int = 3,
    seed: int = 0,
) -> Tensor:
    """The paper's orbit images: 5 evenly spaced classes, ``per_class`` images each.

    Classes ``np.linspace(0, n_classes - 1, 5, dtype=int)``; within each, ``per_class`` images
    (all, if fewer) drawn without replacement by a generator seeded with ``seed`` (the paper's
    ``random.sample`` cannot be replayed: its state depends on earlier experiments).

    Args:
        labels: (N,) integer class of each candidate image.
        n_classes: classes of the dataset (default: ``labels.max() + 1``).
        per_class: images per class (the paper's 3).
        seed: seed of the draw.

    Returns:
        Indices into ``labels`` (<= 5 * per_class,), grouped by class in ascending order.

    Raises:
        ValueError: if labels is not 1-D and non-empty.
    """
    if labels.ndim != 1 or labels.numel() == 0:
        raise ValueError(f"labels must be a non-empty 1-D tensor; got {tuple(labels.shape)}")
    total = int(labels.max()) + 1 if n_classes is None else n_classes
    gen = torch.Generator().manual_seed(seed)
    picked = []
    for c in np.linspace(0, total - 1, 5, dtype=int).tolist():
        members = torch.nonzero(labels.cpu() == c).flatten()  # (n_c,)
        picked.append(members[torch.randperm(members.numel(), generator=gen)[:per_class]])
    return torch.cat(picked)


def orbit_images(
    images: Tensor,
    labels: Tensor,
    *,
    protocol: str = "default",
    family: str = "rotation",
    k: int = 8,
    t_max: float = 0.5,
    seed: int = 0,
) -> OrbitImages:
    """The orbits of a protocol (see the module docstring for both).

    Args:
        images: candidate images (N, C, H, W) in pixel space (normalise after augmenting).
        labels: (N,) their classes.
        protocol: ``"paper"`` (``family`` must be rotation; ``k``, ``t_max`` unused) or
            ``"default"`` (every image, ``k`` copies along ``family``, t in [-t_max, t_max]).
        family: augmentation family.
        k: copies per orbit.
        t_max: largest parameter.
        seed: seed of the paper's image draw.

    Returns:
        The :class:`OrbitImages`.

    Raises:
        ValueError: on an unknown protocol or family, rotation not chosen under ``"paper"``,
            mismatched shapes or k < 2.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown orbit protocol {protocol!r}; choose from {list(PROTOCOLS)}")
    if images.ndim != 4 or labels.shape != (images.shape[0],):
        raise ValueError(
            f"images must be (N, C, H, W) and labels (N,); got "
            f"{tuple(images.shape)} and {tuple(labels.shape)}"
        )
    if protocol == "paper":
        if family != "rotation":
            raise ValueError(f"the paper's orbit protocol rotates; got family {family!r}")
        source = paper_orbit_selection(labels, seed=seed)
        x = images[source.to(images.device)]  # (O, C, H, W)
        params = torch.tensor(PAPER_ORBIT_DEGREES, dtype=torch.float64)  # (12,)
        copies = torch.stack([TF.rotate(x, float(a)) for a in params], dim=1)  # (O, 12, C, H, W)
        orbits = copies.reshape(-1, *x.shape[1:])  # (O * 12, C, H, W), orbit-major
        ids = torch.arange(len(source)).repeat_interleave(len(params))  # (O * 12,)
    else:
        source = torch.arange(images.shape[0])
        orbits, ids, params = make_orbits(images, family, k, t_max)  # (N * k, ...), (N * k,), (k,)
    orbit_labels = labels[source.to(labels.device)][ids.to(labels.device)]  # (M,)
    return OrbitImages(
        orbits, ids, orbit_labels, params.repeat(len(source)), source, protocol, family
    )


@torch.no_grad()
def orbit_representations(
    backbone: nn.Module,
    head: nn.Module,
    images: Tensor,
    *,
    protocol: str = "default",
    normalise: MeanStd | None = None,
    batch_size: int = 256,
) -> tuple[Tensor, Tensor]:
    """Z and H of orbit images, rows L2-normalised, backbone and head in eval mode.

    Under ``"paper"`` the head is fed the L2-normalised z (as the paper's orbit code does),
    under ``"default"`` the raw z. Modes and running statistics are left as found.

    Args:
        backbone: images (B, C, H, W) -> features (B, d).
        head: features (B, d) -> outputs (B, p).
        images: orbit images (M, C, H, W) in pixel space.
        protocol: ``"paper"`` or ``"default"``.
        normalise: the recipe's ``(mean, std)`` applied before the backbone, or None.
        batch_size: images per forward pass.

    Returns:
        Z (M, d) and H (M, p), unit rows, detached.

    Raises:
        ValueError: on an unknown protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown orbit protocol {protocol!r}; choose from {list(PROTOCOLS)}")
    zs, hs = [], []
    with deterministic_mode(nn.ModuleList([backbone, head]), batch_stats=False):
        for chunk in images.split(batch_size):
            z = backbone(chunk if normalise is None else apply_normalisation(chunk, normalise))
            zn = F.normalize(z.flatten(1), dim=1)  # (B, d)
            zs.append(zn)
            hs.append(F.normalize(head(zn if protocol == "paper" else z.flatten(1)), dim=1))
    return torch.cat(zs), torch.cat(hs)
