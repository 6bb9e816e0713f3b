"""The invariance experiment: SimCLR with the paper's augmentations, probes and orbit readings.

* :mod:`.experiment`: the pretraining runs and ``invariance.json``;
* :mod:`.settings` and :mod:`.data`: its scales and the images it reads;
* :mod:`.measure`: guillotine probes, the orbit table, rotation-sweep curvature, depth, whitening;
* :mod:`.result`: ``invariance.json`` as typed records, its one reader :func:`.read_invariance`;
* :mod:`.evidence`, :mod:`.orbit_evidence`, :mod:`.claims` and :mod:`.verdicts`: the claims
  judged on saved results;
* :mod:`.page`: the figures and ``invariance.html``.
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
