"""Labels of the collapse-detection benchmark that no detector computes (docs/reproducing.md).

Fixed before any detector was tuned. Each run is measured after training on the whole
validation set (the digits' 359 held-out images, never a detector's batch), and so is the same
network at random initialisation (same recipe, seed and head, one epoch of no batch):

* the linear-probe accuracy of the backbone's features Z and of the head's H (the package's
  probes: trained on the training folder, scored on the validation folder) against chance and
  against random initialisation;
* the effective rank (RankMe) and the normalised std over its ceiling of the validation set's
  Z and H (:func:`solo_geometry.geometry.stats.representation_stats`).

The rule (:data:`RULE`):

* **collapsed**: the head probes at least ``probe_margin`` below random initialisation, and
  Z or H shows it: its effective rank below ``rank_fraction`` of random initialisation's, or its
  std below ``std_floor`` of the ceiling;
* **healthy**: no collapse evidence at all (neither the probe drop nor the geometry) and the
  backbone probes no more than ``healthy_margin`` below random initialisation;
* **ambiguous** otherwise (the criteria disagree): reported, never dropped.

A collapsed run's reference time is when the statistic that labelled it (std if it is below the
floor, else the rank of H, else of Z) reaches its floor along the run's records:
:func:`reference_step`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor

from solo_geometry.geometry.stats import representation_stats, std_ceiling

__all__ = [
    "LABELS",
    "RULE",
    "Evidence",
    "Geometry",
    "Rule",
    "geometry_of",
    "label",
    "reference_key",
    "reference_step",
]

LABELS = ("collapsed", "healthy", "ambiguous")


@dataclass(frozen=True)
class Rule:
    """The labelling thresholds (module docstring), fixed before any detector was tuned."""

    probe_margin: float = 0.05  # head probe this far below random init: the probe says collapse
    healthy_margin: float = 0.02  # backbone probe within this of random init: training kept it
    rank_fraction: float = 0.5  # effective rank below half of random init's
    std_floor: float = 0.1  # normalised std below a tenth of its ceiling
    settle: float = 0.1  # reference: within 10% (log scale) of the fall to the floor


RULE = Rule()


@dataclass(frozen=True)
class Geometry:
    """Effective rank (RankMe) and normalised std over its ceiling of one feature matrix."""

    rank: float
    std_ratio: float


def geometry_of(X: Tensor) -> Geometry:
    """:class:`Geometry` of features (N, d), N >= 2."""
    s = representation_stats(X)
    return Geometry(s.rankme_l2, s.normalized_std / std_ceiling(X.shape[0], X.shape[1]))


@dataclass(frozen=True)
class Evidence:
    """What the labels read: probes and geometry, trained and at random initialisation.

    Attributes:
        probe: linear-probe accuracy per space (``"z"``, ``"h"``) of the trained network.
        probe_init: the same at random initialisation.
        chance: the majority class's share of the validation set.
        val: :class:`Geometry` per space of the trained network on the validation set.
        val_init: the same at random initialisation.
    """

    probe: Mapping[str, float]
    probe_init: Mapping[str, float]
    chance: float
    val: Mapping[str, Geometry]
    val_init: Mapping[str, Geometry]


def _geometry_reasons(ev: Evidence, rule: Rule) -> list[str]:
    reasons = []
    for space in ("h", "z"):
        g, g0 = ev.val[space], ev.val_init[space]
        if g.std_ratio < rule.std_floor:
            reasons.append(f"std({space.upper()}) {g.std_ratio:.3g} < {rule.std_floor} of ceiling")
        if g.rank < rule.rank_fraction * g0.rank:
            reasons.append(
                f"rank({space.upper()}) {g.rank:.3g} < {rule.rank_fraction} x init {g0.rank:.3g}"
            )
    return reasons


def label(ev: Evidence, rule: Rule = RULE) -> tuple[str, list[str]]:
    """The run's label (one of :data:`LABELS`) and the criteria that gave it.

    Args:
        ev: the run's evidence.
        rule: the thresholds.

    Returns:
        ``(label, reasons)``: reasons name each criterion met, with its numbers.
    """
    geometry = _geometry_reasons(ev, rule)
    h, h0, z, z0 = ev.probe["h"], ev.probe_init["h"], ev.probe["z"], ev.probe_init["z"]
    probe_drop = h <= h0 - rule.probe_margin
    probe = [f"probe(H) {h:.3f} <= init {h0:.3f} - {rule.probe_margin}"] if probe_drop else []
    if probe_drop and geometry:
        return "collapsed", probe + geometry
    kept = z >= z0 - rule.healthy_margin
    if not probe_drop and not geometry and kept:
        return "healthy", [f"probe(Z) {z:.3f} >= init {z0:.3f} - {rule.healthy_margin}"]
    why = probe + geometry
    if not kept:
        why.append(f"probe(Z) {z:.3f} < init {z0:.3f} - {rule.healthy_margin}")
    return "ambiguous", why


def reference_key(ev: Evidence, rule: Rule = RULE) -> str:
    """The records' metric whose floor is a collapsed run's reference time.

    The std of H, then of Z, if below the floor (complete collapse); else the effective rank of
    the space whose rank fell most against random initialisation (dimensional collapse).
    """
    for space in ("h", "z"):
        if ev.val[space].std_ratio < rule.std_floor:
            return f"{space}/normalized_std"
    space = min(("h", "z"), key=lambda s: ev.val[s].rank / max(ev.val_init[s].rank, 1e-12))
    return f"{space}/rankme_l2"


def reference_step(steps: Sequence[int], values: Sequence[float], rule: Rule = RULE) -> int | None:
    """When a falling statistic reaches its floor along a run.

    The floor is the series' minimum, the top its maximum before the floor; the reference is
    the first step whose value is within ``rule.settle`` of the fall from top to floor, on a log
    scale (the statistics fall over orders of magnitude): log v <= log floor + settle (log top -
    log floor). A series that never falls gives its first step.

    Args:
        steps: the records' steps, ascending.
        values: the statistic at each, positive.
        rule: ``settle``.

    Returns:
        The reference step; None for an empty series.

    Raises:
        ValueError: on series of different lengths or a value that is not positive.
    """
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} != {len(values)}")
    if not values:
        return None
    if min(values) <= 0:
        raise ValueError(f"values must be positive, got min {min(values)!r}")
    logs = [math.log(v) for v in values]
    low = min(range(len(logs)), key=logs.__getitem__)
    top = max(logs[: low + 1])
    bar = logs[low] + rule.settle * (top - logs[low])
    return next(s for s, v in zip(steps, logs, strict=True) if v <= bar)
