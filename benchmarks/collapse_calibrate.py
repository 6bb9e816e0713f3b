"""The alert's thresholds calibrated on one half of the benchmark's runs, scored on the other.

The split is fixed by the configurations' order in :data:`benchmarks.collapse_configs.CONFIGS`:
half A the even positions (0, 2, ...), half B the odd ones, so each half holds collapsing and
healthy runs of each method. On A every (source, features, rank threshold, complete_enter,
patience) of the grid below is scored (the rank threshold is ``dimensional_enter``, over the
running maximum, on the training batch; ``heldout_enter``, over the reading at the start, on the
held-out batch) (:func:`benchmarks.collapse_peers.score`); the one chosen
maximises warned-before-reference plus detected, minus three per false alarm and one per warned
ambiguous run (unverified either way: the calibration leans quiet), ties to the larger median
lead, then to H, then to the lower (more conservative) thresholds, then to the larger patience.
The choice is then scored on B, untouched by it.

:func:`calibrate_peers` gives every peer detector the same chance: its own threshold chosen on
half A by the same objective from :data:`PEER_GRIDS` (which hold each peer's published or
customary value), scored on half B, so that ours is compared with each peer at the peer's best
threshold for these runs, not only at the value its library or paper suggests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.collapse_configs import CONFIGS
from benchmarks.collapse_peers import HELDOUT, Score, alert, monai_score, rankme_milestone, score
from benchmarks.collapse_peers import threshold as crossing
from solo_geometry.config import AlertConfig

__all__ = [
    "COMPLETE_GRID",
    "DIMENSIONAL_GRID",
    "HELDOUT_GRID",
    "FEATURES_GRID",
    "PATIENCE_GRID",
    "SOURCE_GRID",
    "PEER_GRIDS",
    "Calibration",
    "PeerCalibration",
    "calibrate",
    "calibrate_heldout",
    "calibrate_peers",
    "halves",
]

DIMENSIONAL_GRID = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
# the held-out rank over its reading at the start: a healthy run ends near or above it
HELDOUT_GRID = (0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8)
# complete_enter stays at 0.05: the replay of the authors' released collapse curves (std only)
# was calibrated with it (docs/reproducing.md, Collapse), and is kept
COMPLETE_GRID = (0.05,)
# records a state must persist before it is entered; descending, so ties keep the larger. Not 1:
# one noisy batch must not flip the state (AlertConfig's promise)
PATIENCE_GRID = (3, 2)
# the space the states read: H (and Z beside it, the lower counts) or the backbone's Z alone;
# H first, so ties keep the paper's statistic
FEATURES_GRID = ("h", "z")
# what the states read: the training batch (geometry.alert.heldout=0, the default) or the fixed
# held-out batch (heldout=256); the training batch first, so ties keep the default
SOURCE_GRID = ("batch", "heldout")


def halves(results: Sequence[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Half A (even positions of CONFIGS) and half B (odd), failed runs left out.

    A run on another data set (``<config>@<data>``) goes to its configuration's half.
    """
    order = {c.name: i for i, c in enumerate(CONFIGS)}
    placed = [(order.get(r["config"]["name"].split("@")[0]), r) for r in results]
    ok = [(i, r) for i, r in placed if i is not None and r["label"] != "failed"]
    return [r for i, r in ok if i % 2 == 0], [r for i, r in ok if i % 2 == 1]


def _config(
    rank: float, complete: float, patience: int = 2, features: str = "h", source: str = "batch"
) -> AlertConfig:
    """The alert with these thresholds; ``rank`` is the chosen source's rank threshold."""
    ranks = (
        {"heldout_enter": rank, "heldout_leave": min(0.99, rank + 0.2)}
        if source == "heldout"
        else {"dimensional_enter": rank, "dimensional_leave": min(0.99, 1.5 * rank)}
    )
    return AlertConfig(
        features=features,
        complete_enter=complete,
        complete_leave=min(0.99, 2 * complete),
        patience=patience,
        **ranks,  # type: ignore[arg-type]
    )


def _objective(s: Score) -> tuple[float, float]:
    lead = s.median_lead if s.median_lead is not None else float("-inf")
    return s.early + s.detections - 3 * s.false_alarms - s.ambiguous_fired, lead


@dataclass(frozen=True)
class Calibration:
    """The chosen thresholds and their scores on both halves.

    ``rank_enter`` is ``dimensional_enter`` on the training batch, ``heldout_enter`` on the
    held-out one (:attr:`rank_option` names it).
    """

    rank_enter: float
    complete_enter: float
    patience: int
    features: str
    source: str
    on_a: Score
    on_b: Score

    @property
    def rank_option(self) -> str:
        """The ``geometry.alert`` option :attr:`rank_enter` sets."""
        return "heldout_enter" if self.source == "heldout" else "dimensional_enter"


def calibrate(results: Sequence[dict[str, Any]]) -> Calibration:
    """Choose the thresholds on half A, score them on half B (module docstring)."""
    a, b = halves(results)
    grid = (
        (source, feat, rank, comp, pat)
        for source in SOURCE_GRID
        for feat, rank, comp, pat in itertools.product(
            FEATURES_GRID,
            HELDOUT_GRID if source == "heldout" else DIMENSIONAL_GRID,
            COMPLETE_GRID,
            PATIENCE_GRID,
        )
    )
    best: tuple[tuple[float, float], AlertConfig, str, float] | None = None
    for source, feat, rank, comp, pat in grid:
        cfg = _config(rank, comp, pat, feat, source)
        obj = _objective(score(a, alert(cfg, batch=source == "batch")))
        # strictly better only: ties keep the training batch, H, the lower thresholds, then
        # the larger patience
        if best is None or obj > best[0]:
            best = (obj, cfg, source, rank)
    assert best is not None
    _, cfg, source, rank = best
    chosen = alert(cfg, batch=source == "batch")
    return Calibration(
        rank,
        cfg.complete_enter,
        cfg.patience,
        cfg.features,
        source,
        score(a, chosen),
        score(b, chosen),
    )


def calibrate_heldout(results: Sequence[dict[str, Any]]) -> Calibration:
    """``heldout_enter`` for the opt-in held-out batch, chosen on half A, scored on half B.

    The other settings stay at their defaults (the held-out batch shares them with the
    training batch); the same objective and ties (the lower threshold) as :func:`calibrate`.
    """
    a, b = halves(results)
    d = AlertConfig()

    def fires(rank: float) -> Callable[[Sequence[dict[str, Any]]], int | None]:
        return alert(_config(rank, d.complete_enter, d.patience, d.features, "heldout"))

    rank = max(HELDOUT_GRID, key=lambda t: _objective(score(a, fires(t))))  # first of the best
    chosen = fires(rank)
    return Calibration(
        rank,
        d.complete_enter,
        d.patience,
        d.features,
        "heldout",
        score(a, chosen),
        score(b, chosen),
    )


Fires = Callable[[Sequence[dict[str, Any]]], int | None]


def _peer_grids(prefix: str, where: str) -> dict[str, tuple[tuple[float, ...], Callable]]:
    """Per peer reading ``prefix + "h/..."``: its thresholds (the customary one among them)."""
    return {
        f"RankMe milestone{where}": ((2, 5, 10, 20, 50), lambda k: rankme_milestone(prefix, k)),
        f"lightly collapse level{where}": (
            (0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
            lambda t: crossing(f"{prefix}h/collapse_level", above=t),
        ),
        f"MONAI effective_rank_score{where}": (
            (0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
            lambda t: monai_score(prefix, t),
        ),
        f"alpha-ReQ{where}": (
            (1.5, 2.0, 3.0, 4.0, 6.0),
            lambda t: crossing(f"{prefix}h/alpha_req", above=t),
        ),
        f"rank gate{where}": (
            (2.0, 4.0, 8.0, 16.0),
            lambda t: crossing(f"{prefix}h/rankme_l2", below=t),
        ),
    }


# the peers of benchmarks/collapse_peers.py's DETECTORS, by name: (thresholds, threshold -> fires)
PEER_GRIDS: dict[str, tuple[tuple[float, ...], Callable[[float], Fires]]] = {
    **_peer_grids("", ""),
    "LiDAR": ((2.0, 4.0, 8.0, 16.0), lambda t: crossing("h/lidar", below=t)),
    **_peer_grids(HELDOUT, " (held-out)"),
}


@dataclass(frozen=True)
class PeerCalibration:
    """A peer's threshold chosen on half A, and its scores on both halves."""

    threshold: float
    on_a: Score
    on_b: Score


def calibrate_peers(results: Sequence[dict[str, Any]]) -> dict[str, PeerCalibration]:
    """Each peer of :data:`PEER_GRIDS` calibrated on half A as ours is, scored on half B."""
    a, b = halves(results)
    out = {}
    for name, (grid, make) in PEER_GRIDS.items():
        chosen = max(grid, key=lambda t: _objective(score(a, make(t))))  # first of the best
        out[name] = PeerCalibration(chosen, score(a, make(chosen)), score(b, make(chosen)))
    return out
