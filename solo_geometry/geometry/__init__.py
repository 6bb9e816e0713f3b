"""The quantities of DESIGN.md section 3, built on :mod:`solo_geometry.linalg`."""

from __future__ import annotations

from solo_geometry.geometry.augment import (
    COLOUR_FAMILIES,
    FAMILIES,
    GEOMETRIC_FAMILIES,
    apply_augmentation,
    augmentation_tangents,
    default_step,
    metric_singularity,
)
from solo_geometry.geometry.orbits import (
    OrbitMetrics,
    make_orbits,
    orbit_compression,
    orbit_curvature,
    orbit_metrics,
)
from solo_geometry.geometry.spectrum import (
    DEFAULT_TAU,
    DEFAULT_TOL,
    OPERATORS,
    HessianSpectrum,
    OperatorSpectrum,
    effective_hessian_spectrum,
    operator_spectrum,
)
from solo_geometry.geometry.stats import RANKME_EPS, representation_stats, stats_record

__all__ = [
    "COLOUR_FAMILIES",
    "DEFAULT_TAU",
    "DEFAULT_TOL",
    "FAMILIES",
    "GEOMETRIC_FAMILIES",
    "OPERATORS",
    "RANKME_EPS",
    "HessianSpectrum",
    "OperatorSpectrum",
    "OrbitMetrics",
    "apply_augmentation",
    "augmentation_tangents",
    "default_step",
    "effective_hessian_spectrum",
    "make_orbits",
    "metric_singularity",
    "operator_spectrum",
    "orbit_compression",
    "orbit_curvature",
    "orbit_metrics",
    "representation_stats",
    "stats_record",
]
