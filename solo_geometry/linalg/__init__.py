"""Pure numerical kernels: matrix-free curvature operators and Lanczos (no Lightning, no solo)."""

from __future__ import annotations

from solo_geometry.linalg.lanczos import (
    FractionEstimate,
    LanczosResult,
    SpectralDensity,
    lanczos,
    slq_density,
)
from solo_geometry.linalg.operators import (
    HeadOperators,
    LossFn,
    has_batch_norm,
    head_jvp,
    head_operators,
)

__all__ = [
    "FractionEstimate",
    "HeadOperators",
    "LanczosResult",
    "LossFn",
    "SpectralDensity",
    "has_batch_norm",
    "head_jvp",
    "head_operators",
    "lanczos",
    "slq_density",
]
