"""Pure numerical kernels: matrix-free curvature operators and Lanczos (no Lightning, no solo)."""

from __future__ import annotations

from solo_geometry.linalg.lanczos import LanczosResult, lanczos
from solo_geometry.linalg.operators import (
    HeadOperators,
    LossFn,
    has_batch_norm,
    head_jvp,
    head_operators,
    runs_in_training_mode,
)
from solo_geometry.linalg.slq import FractionEstimate, SpectralDensity, slq_density

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
    "runs_in_training_mode",
    "slq_density",
]
