"""solo-geometry: the geometry of projection heads in self-supervised learning.

Heads as trainable Riemannian metrics on the backbone's representation, measured inside
solo-learn (or the lightly host) runs: effective-Hessian spectra, representation statistics,
augmentation tangents, orbit compression and backbone-vs-head probes.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
