"""The paper's published invariance numbers: CIFAR-10, ResNet-18, SimCLR.

As the authors' released arrays hold them (``results/cifar10/resnet18``, the files
:mod:`solo_geometry.reproduce.paper_arrays` reads; the depth ablation's computed from its
``.npz`` with the same code). Only the separation of Z differs: the paper's table 2.04 +- 0.52,
its own code (``_calculate_geometric_metrics``) on its array 2.04 +- 0.50.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PUBLISHED", "PUBLISHED_DEPTH", "Published"]

PairZH = tuple[float, float]


@dataclass(frozen=True)
class Published:
    """The paper's guillotine, orbit and curvature numbers, backbone Z vs head H.

    Attributes:
        probes: ``<target>_<probe>`` -> (accuracy on Z, on H), as fractions.
        orbit_stats: ``spread``, ``d_intra``, ``d_inter`` -> (Z, H).
        separation: (mean, std) for Z, then for H.
        compression: mean spread(Z) / mean spread(H).
        curvature_z: kappa(Z), mean +- std over 3 seeds.
        curvature_h: the same for H.
        curvature_ratio: kappa(H) / kappa(Z), mean +- std.
    """

    probes: Mapping[str, PairZH]
    orbit_stats: Mapping[str, PairZH]
    separation: tuple[PairZH, PairZH]
    compression: float
    curvature_z: PairZH
    curvature_h: PairZH
    curvature_ratio: PairZH


PUBLISHED = Published(
    probes={"rotation_linear": (0.5227, 0.3755), "rotation_mlp": (0.5546, 0.4356)},
    orbit_stats={
        "spread": (2.2476e-2, 1.0285e-3),
        "d_intra": (0.2114, 0.0444),
        "d_inter": (0.4319, 0.1110),
    },
    separation=((2.04, 0.52), (2.50, 0.72)),  # the paper's table (module docstring)
    compression=21.85,
    curvature_z=(0.1254, 0.0024),
    curvature_h=(0.2423, 0.0044),
    curvature_ratio=(1.93, 0.0019),
)
# Per depth (Swish + BN heads): rotation linear probe Z, H; compression; separation Z, H;
# curvature ratio mean kappa(H) / mean kappa(Z) over the 100 sweeps saved.
_DEPTH_KEYS = ("z", "h", "compression", "separation_z", "separation_h", "curvature_ratio")
PUBLISHED_DEPTH: dict[int, dict[str, float]] = {
    depth: dict(zip(_DEPTH_KEYS, row, strict=True))
    for depth, row in {
        1: (0.4752, 0.4740, 49.13, 2.19, 1.89, 1.93),
        2: (0.5282, 0.3970, 57.22, 2.07, 2.61, 2.00),
        3: (0.5235, 0.3561, 78.51, 2.22, 3.29, 2.09),
    }.items()
}
