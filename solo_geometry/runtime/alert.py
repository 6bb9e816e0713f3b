"""The collapse alert: a state at every record, with the theory's diagnosis beside it.

A small state machine over the records' representation statistics (docs/design.md section 3)
of H (``geometry.alert.features``) and, with ``geometry.alert.read_z`` (the default), of the
backbone's Z too, the lower reading of the two counting (a BatchNorm-ended head holds the std
of H near its ceiling through a collapse; Z does not hide it). It reads the fixed held-out batch
(``heldout/...``, :mod:`.heldout`: clean images, the same rows at every record) where a record
holds it, else the training batch (``geometry.alert.heldout=0`` or no validation folder):

* ``complete``: the normalised std below ``complete_enter`` of its ceiling sqrt(M / ((M - 1) d))
  (the most it can be on M rows of width d, :func:`~solo_geometry.geometry.stats.std_ceiling`),
  left above ``complete_leave``;
* ``dimensional``: the std holds but RankMe of the L2-normalised rows (``<p>/rankme_l2``) over
  min(M, d) has fallen below ``dimensional_enter`` of its running maximum over the run's
  records (the run's own history, so the threshold does not move with the batch size:
  docs/reproducing.md, "The collapse alert on runs that collapse"), left above
  ``dimensional_leave``. On the held-out batch the reference is its reading before the first
  optimiser step (:meth:`CollapseAlert.begin`, the network as it started, on the same images):
  below ``heldout_enter`` of it, left above ``heldout_leave``. A healthy run's rank rises
  above that start and falls back toward it as the head compresses; a collapse falls through
  it (the benchmark's labels compare with the same network at random initialisation);
* ``healthy`` otherwise.

A state changes only after ``patience`` consecutive records point to the same new one, so one
noisy batch does not flip it (hysteresis twice over: separate enter and leave thresholds, and
the run of records). At a collapsed state the diagnosis reads the latest spectra of M, the
curvature the head injects: a Ritz value of M below -floor (a Rayleigh quotient, so it bounds
lambda_min(M) from above: proof of negative curvature whether or not it converged) is a strict
saddle, and gradient descent has a way out; none means the head (linear or ReLU, M = 0) cannot
leave by curvature. Each change of state is one rank-zero warning; ``geometry/alert`` (0, 1, 2 for
:data:`STATES`) goes to every logger, and the opt-in ``geometry.alert.stop`` asks Lightning to
stop once ``complete`` has lasted ``stop_after`` records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn

from solo_geometry.config import AlertConfig
from solo_geometry.folder.records import GeometryRecord
from solo_geometry.geometry.metrics import metric
from solo_geometry.geometry.stats import std_ceiling

__all__ = ["STATES", "CollapseAlert", "classify", "diagnosis", "ratios"]

STATES = ("healthy", "dimensional", "complete")  # logged as their index
SADDLE = "strict saddle: the head's curvature gives gradient descent a way out"
FLAT = (
    "no negative curvature: a linear or ReLU head cannot leave by curvature; the paper finds "
    "such heads rely on BatchNorm and the step size"
)


# The entries of geometry.metrics.METRICS the alert reads: std, rank, rows M and width d.
READS = (STD, RANK, ROWS, WIDTH) = tuple(
    metric(name) for name in ("normalized_std", "rankme_l2", "n_samples", "dim")
)
RITZ_MIN, NEG_FRACTION = metric("ritz_min"), metric("neg_fraction")  # M's, for the diagnosis


def ratios(
    metrics: Mapping[str, Any], features: str, heldout: bool = False
) -> tuple[float, float] | None:
    """The normalised std over its ceiling and RankMe of the L2-normalised rows over min(M, d).

    Args:
        metrics: a record's metrics (the keys of :data:`READS` for ``features``:
            ``<features>/normalized_std``, ``/rankme_l2``, ``/n_samples`` and ``/dim``).
        features: ``"h"`` or ``"z"``.
        heldout: read the held-out batch's (``heldout/<features>/...``) instead.

    Returns:
        ``(std_ratio, rank_ratio)``, each in [0, 1]; None when the record lacks one of them.
    """
    keys = (
        metric(f"heldout_{entry.name}").key_for(features) if heldout else entry.key_for(features)
        for entry in READS
    )
    std, rank, m, d = (metrics.get(key) for key in keys)
    if any(not isinstance(v, int | float) or isinstance(v, bool) for v in (std, rank, m, d)):
        return None
    assert std is not None and rank is not None and m is not None and d is not None
    if m < 2 or d < 1:
        return None
    return float(std) / std_ceiling(int(m), int(d)), float(rank) / min(m, d)


def classify(
    std_ratio: float, rank_ratio: float, current: str, cfg: AlertConfig, start: bool = False
) -> str:
    """The state these ratios point to, from ``current`` (enter and leave thresholds differ).

    Args:
        std_ratio: normalised std over its ceiling.
        rank_ratio: RankMe of the L2-normalised rows over min(M, d), over its reference.
        current: the state now, one of :data:`STATES`.
        cfg: the thresholds.
        start: the reference is the held-out reading at the start (``heldout_enter`` and
            ``heldout_leave``), not the running maximum (``dimensional_*``).

    Returns:
        One of :data:`STATES`.
    """
    complete = cfg.complete_leave if current == "complete" else cfg.complete_enter
    if std_ratio < complete:
        return "complete"
    enter, leave = (
        (cfg.heldout_enter, cfg.heldout_leave)
        if start
        else (cfg.dimensional_enter, cfg.dimensional_leave)
    )
    return "dimensional" if rank_ratio < (enter if current == "healthy" else leave) else "healthy"


def diagnosis(curvature: Mapping[str, Any] | None) -> str:
    """The theory's reading of the latest spectra of M, with their numbers.

    Args:
        curvature: ``step``, ``m_ritz_min``, ``floor`` (and ``m_neg_fraction``) of the latest
            record with spectra, or None.

    Returns:
        The strict-saddle line, the no-negative-curvature line, or why there is none.
    """
    if curvature is None:
        return "no spectra of M yet: the diagnosis waits for a record with geometry.measure.hessian"
    lam, floor, step = curvature["m_ritz_min"], curvature["floor"], curvature["step"]
    numbers = f"lowest Ritz value of M {lam:.3g}, floor {floor:.3g}, at step {step}"
    if curvature.get("m_neg_fraction") is not None:
        numbers += f"; negative fraction {curvature['m_neg_fraction']:.3g}"
    if lam < -floor:
        return f"{SADDLE} ({numbers} < -floor)"
    return f"{FLAT} ({numbers} >= -floor)"


class CollapseAlert:
    """The collapse state across a run's records (module docstring).

    Args:
        cfg: the ``geometry.alert`` node.
    """

    def __init__(self, cfg: AlertConfig) -> None:
        self.cfg = cfg
        self.state = "healthy"
        self.since: int | None = None  # step the state was entered (None: the start)
        self.curvature: dict[str, Any] | None = None
        self._candidate: str | None = None
        self._count = 0  # consecutive records pointing to the candidate
        self._complete = 0  # consecutive records in ``complete``
        self._last: tuple[float, float] | None = None
        self._top: dict[str, float] = {}  # running maximum of rank / min(M, d) per space
        self._start: dict[str, float] = {}  # the held-out rank / min(M, d) before training
        self._of: tuple[str, str] | None = None  # the spaces that gave the last reading
        self._source = "batch"  # what the last reading read: "heldout" or the training "batch"
        self._asked = False  # whether the opt-in stop was asked for

    def _spectra(self, step: int, metrics: Mapping[str, Any], floor: float | None) -> None:
        lam = metrics.get(RITZ_MIN.key_for("m"))
        if isinstance(lam, int | float) and not isinstance(lam, bool) and floor is not None:
            self.curvature = {
                "step": step,
                "m_ritz_min": float(lam),
                "floor": float(floor),
                "m_neg_fraction": metrics.get(NEG_FRACTION.key_for("m")),
            }

    def observe(self, step: int, metrics: Mapping[str, Any], floor: float | None) -> dict:
        """Take one ok record's metrics; warn (rank zero) when the state changes.

        Args:
            step: the record's step.
            metrics: its metrics.
            floor: its absolute negativity floor (``settings.floor``; None without spectra).

        Returns:
            :meth:`as_record` after this record.
        """
        self._spectra(step, metrics, floor)
        reading = self.reading(metrics)
        if reading is not None:
            self._last = reading
            target = classify(*reading, self.state, self.cfg, self._reference == "start")
            if target == self.state:
                self._candidate, self._count = None, 0
            else:
                self._count = self._count + 1 if target == self._candidate else 1
                self._candidate = target
                if self._count >= self.cfg.patience:
                    self._enter(target, step)
            self._complete = self._complete + 1 if self.state == "complete" else 0
        return self.as_record()

    def begin(self, metrics: Mapping[str, Any] | None) -> None:
        """Take the held-out reading before the first optimiser step, once per run.

        Args:
            metrics: ``heldout/<z|h>/...`` of the network as training starts (a resumed run
                keeps the reading its state holds); None or empty: the held-out batch's rank
                is read against its running maximum instead.
        """
        if self._start or not metrics:
            return
        for space in ("h", "z"):
            read = ratios(metrics, space, heldout=True)
            if read is not None and read[1] > 0:
                self._start[space] = read[1]

    @property
    def started(self) -> bool:
        """Whether the held-out reading at the start was taken (:meth:`begin`)."""
        return bool(self._start)

    @property
    def _reference(self) -> str:
        """What the last rank ratio was over: ``"start"`` or the running maximum ``"peak"``."""
        return "start" if self._source == "heldout" and self.cfg.features in self._start else "peak"

    def reading(self, metrics: Mapping[str, Any]) -> tuple[float, float] | None:
        """``(std_ratio, rank_ratio)`` of a record: the lowest over the spaces read.

        The rank's ratio is rank / min(M, d) over its reference: on the held-out batch its
        reading at the start (:meth:`begin`) where taken, else its running maximum in this run
        (updated here). None when the record lacks the statistics of ``features``.
        """
        spaces = [self.cfg.features]
        if self.cfg.read_z and self.cfg.features != "z":
            spaces.append("z")
        heldout = ratios(metrics, self.cfg.features, heldout=True) is not None
        read = {s: r for s in spaces if (r := ratios(metrics, s, heldout)) is not None}
        if self.cfg.features not in read:
            return None
        self._source = "heldout" if heldout else "batch"
        drops = {}
        start = self._reference == "start"
        for space, (_, rank) in read.items():
            top = f"heldout/{space}" if heldout else space  # one running maximum per source
            self._top[top] = max(self._top.get(top, 0.0), rank)
            ref = self._start.get(space, 0.0) if start else self._top[top]
            drops[space] = rank / ref if ref > 0 else 1.0
        std_of = min(read, key=lambda s: read[s][0])
        rank_of = min(drops, key=drops.__getitem__)
        self._of = (std_of, rank_of)
        return read[std_of][0], drops[rank_of]

    def _enter(self, state: str, step: int) -> None:
        old, self.state, self.since = self.state, state, step
        self._candidate, self._count = None, 0
        record = self.as_record()
        of = "reading before training" if record["reference"] == "start" else "running maximum"
        rank_zero_warn(
            f"GeometryMonitor: collapse alert {old} -> {state} at step {step} (on the "
            f"{'held-out' if self._source == 'heldout' else 'training'} batch: normalised std of "
            f"{record['std_of'].upper()} {record['std_ratio']:.3g} of its ceiling, "
            f"{RANK.label} of {record['rank_of'].upper()} {record['rank_ratio']:.3g} of its {of})"
            + (f"; {record['diagnosis']}" if record["diagnosis"] else "")
        )

    def as_record(self) -> dict[str, Any]:
        """The record's ``alert``: state, since, the ratios, the diagnosis and its spectra."""
        std_ratio, rank_ratio = self._last if self._last is not None else (None, None)
        return {
            "state": self.state,
            "level": STATES.index(self.state),
            "since": self.since,
            "features": self.cfg.features,
            "std_ratio": std_ratio,
            "rank_ratio": rank_ratio,
            "std_of": self._of[0] if self._of else self.cfg.features,
            "rank_of": self._of[1] if self._of else self.cfg.features,
            "source": self._source,
            "reference": self._reference,
            "start": dict(self._start),
            "pending": self._candidate,
            "diagnosis": diagnosis(self.curvature) if self.state != "healthy" else None,
            "curvature": self.curvature,
        }

    @property
    def should_stop(self) -> bool:
        """Whether the opt-in stop is due: ``complete`` lasted ``stop_after`` records."""
        return self.cfg.stop and self._complete >= self.cfg.stop_after

    def attach(self, trainer: pl.Trainer, fields: dict[str, Any]) -> None:
        """Put the alert into an ok record's ``fields``; ask Lightning to stop if due.

        Args:
            trainer: the trainer (``should_stop`` is set only with ``geometry.alert.stop``).
            fields: the record's fields being built (``metrics``, ``settings``, ``step``).
        """
        if not self.cfg.enabled or fields.get("status") != "ok":
            return
        floor = getattr(fields.get("settings"), "floor", None)
        fields["alert"] = self.observe(fields["step"], fields["metrics"], floor)
        if self.should_stop and not self._asked:
            self._asked = True
            rank_zero_warn(
                f"GeometryMonitor: complete collapse for {self._complete} records; "
                "stopping (geometry.alert.stop=true)"
            )
            trainer.should_stop = True

    @staticmethod
    def scalars(record: GeometryRecord) -> dict[str, float]:
        """``geometry/alert``: the index of the record's state in :data:`STATES` (if any)."""
        return {"geometry/alert": float(record.alert["level"])} if record.alert else {}

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue the states (plain types)."""
        return {
            "state": self.state,
            "since": self.since,
            "curvature": self.curvature,
            "candidate": self._candidate,
            "count": self._count,
            "complete": self._complete,
            "last": list(self._last) if self._last is not None else None,
            "top": dict(self._top),
            "start": dict(self._start),
            "of": list(self._of) if self._of is not None else None,
            "source": self._source,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (an empty mapping: the start)."""
        self.state = state.get("state", "healthy")
        self.since, self.curvature = state.get("since"), state.get("curvature")
        self._candidate, self._count = state.get("candidate"), int(state.get("count", 0))
        self._complete = int(state.get("complete", 0))
        last = state.get("last")
        self._last = (float(last[0]), float(last[1])) if last is not None else None
        self._top = {str(k): float(v) for k, v in state.get("top", {}).items()}
        self._start = {str(k): float(v) for k, v in state.get("start", {}).items()}
        of = state.get("of")
        self._of = (str(of[0]), str(of[1])) if of else None
        self._source = str(state.get("source", "batch"))
