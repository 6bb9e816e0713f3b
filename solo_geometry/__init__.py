"""solo-geometry: the geometry of projection heads in self-supervised learning.

Heads as trainable Riemannian metrics on the backbone's representation, measured inside
solo-learn (or the lightly host) runs: effective-Hessian spectra, representation statistics,
augmentation tangents, orbit compression and backbone-vs-head probes.

The package's rooms (docs/design.md, "Layout"; ``tests/test_imports.py`` states who may import
whom): :mod:`~solo_geometry.config`, :mod:`~solo_geometry.linalg`,
:mod:`~solo_geometry.geometry`, :mod:`~solo_geometry.folder`, :mod:`~solo_geometry.inputs`,
:mod:`~solo_geometry.models`, :mod:`~solo_geometry.analysis`, :mod:`~solo_geometry.runtime`,
:mod:`~solo_geometry.hosts`, :mod:`~solo_geometry.reproduce`, :mod:`~solo_geometry.zoo`,
:mod:`~solo_geometry.upstream`, :mod:`~solo_geometry.commands` (the commands' parsers), and at the
root :mod:`solo_geometry.cli` with the modules every floor may use (``extras``, ``state``,
``recipe``).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
