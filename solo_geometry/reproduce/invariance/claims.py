"""The paper's published invariance numbers (the verdicts: :mod:`.verdicts`).

Published values: CIFAR-10, ResNet-18, SimCLR (github farischaudhry/projection-head-geometry,
``results/cifar10/resnet18``): ``guillotine_results.npy`` (rotation probes),
``curvature_results.npy`` (3 seeds), ``orbit_visualization.npy`` (the orbit table, as
``solo-geometry orbits`` computes it from that file) and
``head_depth_ablations/geometric_ablation_depth_{1,2,3}.npz`` (per-depth rotation probe, orbit
statistics and curvature, computed from those arrays with the same code). The paper's table
gives separation 2.04 +- 0.52 for Z; its own code (``_calculate_geometric_metrics``) on its
released ``orbit_visualization.npy`` gives 2.04 +- 0.50 (every other entry agrees to the digits
printed).
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
    separation=((2.04, 0.52), (2.50, 0.72)),  # the paper's table; its code on its array: 0.50
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
