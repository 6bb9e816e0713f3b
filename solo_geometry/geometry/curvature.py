"""Curvature of rotation sweeps in Z and in H, as the paper's code computes it.

experiments.py, ``run_curvature_experiment``: each image rotated by 10 angles evenly from 0 to
45 degrees (torchvision's ``rotate``), r_i the L2-normalised representation at angle i,
kappa = mean over interior i of ||r_{i+1} - 2 r_i + r_{i-1}|| (no division by the step), in Z and
in H = head(raw z), as that code feeds the head; the ratio kappa(H) / (kappa(Z) + 1e-8). The
paper reports 1.93x on CIFAR-10 (docs/design.md section 3, "Curvature of a sweep").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchvision.transforms import functional as TF

from solo_geometry.geometry.augment import MeanStd
from solo_geometry.geometry.orbits import Pair, mean_std, orbit_representations
from solo_geometry.geometry.stats import normalise_rows

__all__ = [
    "CURVATURE_RATIO_EPS",
    "PAPER_SWEEP_DEGREES",
    "SweepCurvature",
    "curvature_comparison",
    "sweep_curvature",
    "sweep_representations",
]

CURVATURE_RATIO_EPS = 1e-8  # the paper's guard in kappa(H) / kappa(Z)
PAPER_SWEEP_DEGREES = tuple(5.0 * i for i in range(10))  # np.linspace(0, 45, 10)


def sweep_representations(
    backbone: nn.Module,
    head: nn.Module,
    images: Tensor,
    *,
    normalise: MeanStd | None = None,
    degrees: Sequence[float] = PAPER_SWEEP_DEGREES,
    batch_size: int = 256,
) -> tuple[Tensor, Tensor]:
    """Representations of rotation sweeps, as the paper's curvature code computes them.

    Each image is rotated by every angle with torchvision's ``rotate`` (nearest neighbour, zero
    fill, counter-clockwise), then normalised; eval mode; z = backbone(x) / ||.||,
    h = head(raw z) / ||.|| (:func:`orbit_representations` under ``"default"``).

    Args:
        backbone: images (B, C, H, W) -> features (B, d).
        head: features (B, d) -> outputs (B, p).
        images: (N, C, H, W) in pixel space.
        normalise: the recipe's ``(mean, std)`` applied after rotating, or None.
        degrees: the A angles of the sweep.
        batch_size: images per forward pass.

    Returns:
        Sweeps in Z (N, A, d) and in H (N, A, p), unit rows.
    """
    sweeps = torch.stack([TF.rotate(images, float(a)) for a in degrees], dim=1)  # (N, A, C, H, W)
    z, h = orbit_representations(
        backbone, head, sweeps.flatten(0, 1), normalise=normalise, batch_size=batch_size
    )
    n, a = images.shape[0], len(degrees)
    return z.reshape(n, a, -1), h.reshape(n, a, -1)  # (N, A, d), (N, A, p)


def sweep_curvature(R: Tensor) -> Tensor:
    """The paper's curvature of each sweep: mean_i ||r_{i+1} - 2 r_i + r_{i-1}||, r unit rows.

    Args:
        R: sweeps (S, A, d) (or one, (A, d)), A >= 3, ordered by angle.

    Returns:
        (S,) float64 curvature of each sweep (no division by the angle step).

    Raises:
        ValueError: if R is not (S, A, d) or (A, d) with A >= 3.
    """
    if R.ndim == 2:
        R = R.unsqueeze(0)
    if R.ndim != 3 or R.shape[1] < 3:
        raise ValueError(f"R must be (S, A >= 3, d) or (A >= 3, d); got {tuple(R.shape)}")
    r = normalise_rows(R.reshape(-1, R.shape[-1])).reshape(R.shape)  # (S, A, d), unit rows
    second = r[:, 2:] - 2 * r[:, 1:-1] + r[:, :-2]  # (S, A - 2, d)
    return second.norm(dim=-1).mean(dim=1)  # (S,)


@dataclass(frozen=True)
class SweepCurvature:
    """Curvature of rotation sweeps in Z and in H.

    Attributes:
        kappa_z: mean and std (ddof 0) over sweeps of kappa in Z.
        kappa_h: the same in H.
        ratio: mean kappa(H) / (mean kappa(Z) + 1e-8), the paper's ratio for one seed.
        n_sweeps: number of sweeps (images).
    """

    kappa_z: Pair
    kappa_h: Pair
    ratio: float
    n_sweeps: int


def curvature_comparison(R_z: Tensor, R_h: Tensor) -> SweepCurvature:
    """Curvature of the same sweeps in the backbone's and the head's space.

    Args:
        R_z: sweeps in Z (S, A, d).
        R_h: sweeps in H (S, A, p).

    Returns:
        The :class:`SweepCurvature`.

    Raises:
        ValueError: if the two do not hold the same S sweeps of A >= 3 angles.
    """
    if R_z.shape[:-1] != R_h.shape[:-1]:
        raise ValueError(f"R_z, R_h must hold the same sweeps; got {R_z.shape}, {R_h.shape}")
    kz, kh = sweep_curvature(R_z), sweep_curvature(R_h)  # (S,), (S,)
    return SweepCurvature(
        kappa_z=mean_std(kz),
        kappa_h=mean_std(kh),
        ratio=float(kh.mean() / (kz.mean() + CURVATURE_RATIO_EPS)),
        n_sweeps=kz.numel(),
    )
