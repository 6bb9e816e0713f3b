"""The invariance experiment: SimCLR with the paper's augmentations, probes and orbit readings.

:mod:`.experiment` runs it (sizes: :mod:`.settings`, images:
:mod:`solo_geometry.reproduce.data`) through :mod:`.measure` into ``invariance.json``
(:mod:`.result`); :mod:`.evidence` and :mod:`.verdicts` judge the claims (the paper's numbers:
:mod:`.claims`); :mod:`.page` draws ``invariance.html``.
"""

from __future__ import annotations

from solo_geometry.reproduce.invariance.experiment import (
    FULL,
    QUICK,
    RECIPE,
    invariance_experiment,
    run_invariance_experiment,
)

__all__ = ["FULL", "QUICK", "RECIPE", "invariance_experiment", "run_invariance_experiment"]
