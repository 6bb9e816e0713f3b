"""The collapse experiment: SimSiam from pseudo-collapse, heads x norms x learning rates x seeds.

:func:`reproduce_collapse` runs the sweep (:mod:`.sweep`) and writes its summary, page and
verdicts; ``solo-geometry reproduce verdicts collapse`` judges saved results (docs/reproducing.md,
"Collapse").
"""

from __future__ import annotations

from solo_geometry.reproduce.collapse.cell import CellConfig, cell_overrides
from solo_geometry.reproduce.collapse.sweep import (
    cell_host,
    collapse_experiment,
    reproduce_collapse,
)

__all__ = [
    "CellConfig",
    "cell_host",
    "cell_overrides",
    "collapse_experiment",
    "reproduce_collapse",
]
