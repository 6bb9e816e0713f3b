"""The invariance experiment: SimCLR with the paper's augmentations, probes and orbit readings.

* :mod:`.command`: ``solo-geometry reproduce invariance``, the pretraining runs and the summary;
* :mod:`.settings` and :mod:`.data`: its scales and the images it reads;
* :mod:`.measure`: guillotine probes, the orbit table, rotation-sweep curvature, depth, whitening;
* :mod:`.result`: ``invariance.json`` as typed records, its one reader :func:`.read_invariance`;
* :mod:`.evidence`, :mod:`.orbit_evidence`, :mod:`.claims` and :mod:`.verdicts`: the claims
  judged on saved results;
* :mod:`.page`: the figures and ``index.html``.
"""

from __future__ import annotations

from solo_geometry.reproduce.invariance.command import (
    FULL,
    QUICK,
    RECIPE,
    InvarianceSettings,
    add_invariance_parser,
    invariance_experiment,
    run_invariance,
    run_invariance_experiment,
)

__all__ = [
    "FULL",
    "QUICK",
    "RECIPE",
    "InvarianceSettings",
    "add_invariance_parser",
    "invariance_experiment",
    "run_invariance",
    "run_invariance_experiment",
]
