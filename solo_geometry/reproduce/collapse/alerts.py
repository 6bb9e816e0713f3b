"""The collapse alert replayed on a sweep's runs: its state per epoch against the run's outcome.

The monitor's alert (:mod:`solo_geometry.runtime.alert`) at its defaults, fed one record per
epoch (:func:`replay`), beside the diagnosis from M at the start, the lead time to the curve's
minimum and whether leaving ``complete`` agrees with the escape (docs/reproducing.md, "The
collapse alert on the same curves").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solo_geometry.config import AlertConfig
from solo_geometry.reproduce.collapse.result import CollapseRow
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR, epochs_text, row_escape
from solo_geometry.runtime.alert import CollapseAlert

__all__ = ["AlertReplay", "alert_markdown", "replay", "replay_run"]


def replay(curve: Sequence[float], rows: int, dim: int) -> list[str]:
    """The alert's state after each epoch of a per-epoch std curve (rank unknown: given as d).

    Args:
        curve: the per-epoch std, epoch 0 first.
        rows: M, the rows the std is taken over.
        dim: d, their width.

    Returns:
        One state of :data:`~solo_geometry.runtime.alert.STATES` per epoch.
    """
    alert = CollapseAlert(AlertConfig())  # geometry.alert's defaults
    metrics = {"h/rankme_l2": float(dim), "h/n_samples": rows, "h/dim": dim}
    with warnings.catch_warnings():  # the monitor's rank-zero warning, once per change
        warnings.simplefilter("ignore")
        return [
            alert.observe(epoch, {**metrics, "h/normalized_std": std}, None)["state"]
            for epoch, std in enumerate(curve)
        ]


@dataclass(frozen=True)
class AlertReplay:
    """One run's replayed alert; epochs index the curve, 0 the start."""

    run: CollapseRow
    outcome: str  # the run's escape outcome at the factor
    states: tuple[str, ...]
    first_warning: int | None  # first epoch not healthy (None: never warned)
    left: int | None  # the epoch it became healthy after complete, if it ends healthy
    minimum: int  # the epoch the curve is lowest
    lead_steps: int | None  # (minimum - first_warning) x steps per epoch
    diagnosis: str  # "strict saddle", "no negative curvature" or "unknown"

    @property
    def agrees(self) -> bool | None:
        """Whether leaving ``complete`` matches escaping (None for an undecidable run)."""
        if self.outcome == "undecidable":
            return None
        return (self.left is not None) == (self.outcome == "escaped")


def _diagnosis(count: int | None) -> str:
    if count is None:
        return "unknown"
    return "strict saddle" if count > 0 else "no negative curvature"


def replay_run(run: CollapseRow, factor: float = ESCAPE_FACTOR) -> AlertReplay:
    """The alert replayed on one run, with its outcome, lead time and diagnosis."""
    esc = row_escape(run, factor)  # checks the run's sizes
    assert run.output_rows and run.output_dim and run.steps_per_epoch
    states = tuple(replay(run.std_curve, run.output_rows, run.output_dim))
    first = next((e for e, s in enumerate(states) if s != "healthy"), None)
    left = None
    if "complete" in states and states[-1] == "healthy":
        last_complete = max(e for e, s in enumerate(states) if s == "complete")
        left = last_complete + 1
    minimum = min(range(len(run.std_curve)), key=lambda e: run.std_curve[e])
    lead = None if first is None else (minimum - first) * run.steps_per_epoch
    return AlertReplay(
        run,
        esc.outcome,
        states,
        first,
        left,
        minimum,
        lead,
        _diagnosis(run.m_neg_count_start),
    )


def _count(replays: Sequence[AlertReplay], test: Callable[[AlertReplay], bool]) -> str:
    return f"{sum(1 for r in replays if test(r))}/{len(replays)}"


def alert_markdown(runs: Sequence[CollapseRow], factor: float = ESCAPE_FACTOR) -> str:
    """The replayed alert per configuration as Markdown, with the agreement over all runs."""
    replays = [replay_run(r, factor) for r in runs]
    groups: dict[tuple[str | None, ...], list[AlertReplay]] = {}
    for r in replays:
        key = (r.run.dataset, r.run.backbone, r.run.head, r.run.norm, r.run.lr_name)
        groups.setdefault(key, []).append(r)
    lines = [
        "| data, backbone | head | norm | lr | escaped | warned (epoch) | ends complete "
        "| left complete (epoch) | lead to the std's minimum (steps) | diagnosis at start |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (data, backbone, head, norm, lr), group in groups.items():
        diagnoses = sorted({r.diagnosis for r in group})
        lines.append(
            f"| {data}, {backbone} | {head} | {norm} | {lr} "
            f"| {_count(group, lambda r: r.outcome == 'escaped')} "
            f"| {epochs_text([r.first_warning for r in group])} "
            f"| {_count(group, lambda r: r.states[-1] == 'complete')} "
            f"| {epochs_text([r.left for r in group])} "
            f"| {epochs_text([r.lead_steps for r in group])} | {', '.join(diagnoses)} |"
        )
    judged = [r for r in replays if r.agrees is not None]
    agree = sum(1 for r in judged if r.agrees)
    lines.append(
        f"\nThe state agrees with the outcome (left `complete` if and only if escaped at "
        f"{factor:g}x) in {agree} of {len(judged)} decidable runs "
        f"({len(replays) - len(judged)} undecidable)."
    )
    return "\n".join(lines) + "\n"
