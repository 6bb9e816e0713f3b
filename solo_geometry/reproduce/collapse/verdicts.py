"""The collapse claims as the paper states them, judged on any set of runs: ours or the authors'.

A run is one seed of one configuration, a :class:`~.result.CollapseRow` with its curve
``std_curve``, the per-epoch mean of the per-step std of the L2-normalised projector outputs,
epoch 0 first; :func:`escape` judges it
against ``factor`` x epoch 0 and the ceiling :func:`~solo_geometry.geometry.stats.std_ceiling`,
and :func:`judge` each claim of :data:`CLAIMS` per backbone and data set. Definitions, the
calibration on the authors' released results and the default grid's verdicts:
docs/reproducing.md, "Collapse" ("Escape, as the paper plots it", "Claims").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from solo_geometry.geometry.stats import std_ceiling
from solo_geometry.reproduce.collapse.protocol import LR_NAMES
from solo_geometry.reproduce.collapse.result import CollapseRow
from solo_geometry.reproduce.results import Verdict

__all__ = [
    "BN_BAND",
    "CLAIMS",
    "ESCAPE_FACTOR",
    "Escape",
    "Runs",
    "epochs_text",
    "escape",
    "judge",
    "curve_ratios",
    "row_escape",
]

ESCAPE_FACTOR = 2.0
# The runs judged: our summary's rows or the authors' curves, as rows (:mod:`.files`).
Runs = Sequence[CollapseRow]
# With BatchNorm "std stays near its level": the authors' curves stay at 0.30 to 1.61 of epoch 0
# (DESIGN section 8: 0.4 to 1.3 at the end); without it ReLU falls to 0.10 and 0.03.
BN_BAND = (0.25, 2.0)
SMOOTH = ("gelu", "swish")
CLAIMS = {
    "smooth_escape": "without BatchNorm at the base lr, GELU and Swish heads escape the collapsed "
    "start in at least 2 of 3 seeds and earlier than the linear head; ReLU "
    "never escapes",
    "relu_needs_bn": "ReLU relies on BatchNorm and the step size: without BatchNorm its final "
    f"std falls as the lr grows; with BatchNorm it stays within "
    f"{BN_BAND[0]:g} to {BN_BAND[1]:g} x its epoch-0 level",
    "m_negative_at_start": "at the collapsed start M has eigenvalues below the floor for smooth "
    "heads and none for linear and ReLU heads without BatchNorm",
}


@dataclass(frozen=True)
class Escape:
    """A run's escape: outcome ``escaped``, ``not escaped`` or ``undecidable``."""

    outcome: str
    baseline_std: float
    ceiling: float
    escape_epoch: int | None
    escape_step: int | None


def escape(
    curve: Sequence[float],
    *,
    rows: int,
    dim: int,
    steps_per_epoch: int,
    factor: float = ESCAPE_FACTOR,
) -> Escape:
    """The escape of one per-epoch curve (epoch 0 first; module docstring).

    Raises:
        ValueError: on a curve without epoch 0 or a factor that is not above 1.
    """
    if not curve:
        raise ValueError("an escape needs a curve with at least epoch 0")
    if not factor > 1:
        raise ValueError(f"the escape factor must be > 1, got {factor}")
    baseline, ceiling = float(curve[0]), std_ceiling(rows, dim)
    epoch = next((e for e, v in enumerate(curve) if e > 0 and v >= factor * baseline), None)
    if epoch is not None:
        return Escape("escaped", baseline, ceiling, epoch, (epoch + 1) * steps_per_epoch)
    outcome = "undecidable" if factor * baseline > ceiling else "not escaped"
    return Escape(outcome, baseline, ceiling, None, None)


def row_escape(row: CollapseRow, factor: float = ESCAPE_FACTOR) -> Escape:
    """A judged run's escape at ``factor`` (its sizes: :func:`~.files.summary_runs` checks them)."""
    assert row.output_rows and row.output_dim and row.steps_per_epoch  # a judged run holds them
    return escape(
        row.std_curve,
        rows=row.output_rows,
        dim=row.output_dim,
        steps_per_epoch=row.steps_per_epoch,
        factor=factor,
    )


def curve_ratios(row: CollapseRow) -> list[float]:
    """A run's curve over its epoch-0 mean."""
    return [v / row.std_curve[0] for v in row.std_curve]


def _select(runs: Runs, head: str, norm: str, lr: str | None = None) -> list[CollapseRow]:
    return [
        r for r in runs if r.head == head and r.norm == norm and (lr is None or r.lr_name == lr)
    ]


def _verdict(cid: str, verdict: str, evidence: str) -> Verdict:
    return Verdict(cid, CLAIMS[cid], verdict, evidence)


def epochs_text(values: Sequence[int | None]) -> str:
    """Epochs (or steps) as ``1, -, 3``: ``-`` where there is none."""
    return ", ".join("-" if v is None else str(v) for v in values)


def _median_epoch(escapes: Sequence[Escape]) -> float:
    return statistics.median(
        math.inf if e.escape_epoch is None else e.escape_epoch for e in escapes
    )


def smooth_escape(runs: Runs, factor: float = ESCAPE_FACTOR) -> Verdict:
    """Claim ``smooth_escape`` on one backbone and data set's runs."""
    cells = {h: _select(runs, h, "none", "base") for h in ("linear", "relu", *SMOOTH)}
    smooth = [h for h in SMOOTH if cells[h]]
    missing = [h for h in ("linear", "relu") if not cells[h]] + ([] if smooth else list(SMOOTH))
    if missing:
        return _verdict(
            "smooth_escape", "undecidable", f"no runs without BN at the base lr for {missing}"
        )
    esc = {h: [row_escape(r, factor) for r in cells[h]] for h in cells if cells[h]}
    parts = [
        f"{h} {sum(e.outcome == 'escaped' for e in es)}/{len(es)} at epochs "
        f"[{epochs_text([e.escape_epoch for e in es])}]"
        for h, es in esc.items()
    ]
    evidence = f"escaped (>= {factor:g} x epoch 0), no BN, base lr: " + "; ".join(parts)
    undecided = [h for h, es in esc.items() if any(e.outcome == "undecidable" for e in es)]
    if undecided:
        return _verdict(
            "smooth_escape",
            "undecidable",
            f"{evidence}; {factor:g} x epoch 0 is above the ceiling for {undecided}",
        )
    linear_median = _median_epoch(esc["linear"])
    held = all(
        3 * sum(e.outcome == "escaped" for e in esc[h]) >= 2 * len(esc[h])
        and _median_epoch(esc[h]) < linear_median
        for h in smooth
    )
    held = held and not any(e.outcome == "escaped" for e in esc["relu"])
    return _verdict("smooth_escape", "held" if held else "not held", evidence)


def relu_needs_bn(runs: Runs, factor: float = ESCAPE_FACTOR) -> Verdict:
    """Claim ``relu_needs_bn`` on one backbone and data set's runs."""
    plain = {lr: _select(runs, "relu", "none", lr) for lr in LR_NAMES.values()}
    plain = {lr: rs for lr, rs in plain.items() if rs}
    bn = _select(runs, "relu", "bn")
    if len(plain) < 2 or not bn:
        return _verdict(
            "relu_needs_bn",
            "undecidable",
            f"ReLU runs without BN at {sorted(plain)} (needs 2 lrs or more), with BN: {len(bn)}",
        )
    finals = {lr: statistics.fmean(curve_ratios(r)[-1] for r in rs) for lr, rs in plain.items()}
    levels = list(finals.values())
    falls = all(a > b for a, b in zip(levels, levels[1:], strict=False))
    lo, hi = BN_BAND
    bn_ratios = [v for r in bn for v in curve_ratios(r)[1:]]
    inside = bool(bn_ratios) and all(lo <= v < hi for v in bn_ratios)
    evidence = (
        "no BN, final / epoch 0 (seed mean): "
        + ", ".join(f"lr {lr} {v:.3g}" for lr, v in finals.items())
        + f"; with BN ({len(bn)} runs), every epoch / epoch 0 in "
        f"[{min(bn_ratios, default=math.nan):.3g}, {max(bn_ratios, default=math.nan):.3g}]"
    )
    return _verdict("relu_needs_bn", "held" if falls and inside else "not held", evidence)


def m_negative_at_start(runs: Runs, factor: float = ESCAPE_FACTOR) -> Verdict:
    """Claim ``m_negative_at_start`` on one backbone and data set's runs."""
    smooth = [r for r in runs if r.head in SMOOTH]
    flat = [r for r in runs if r.head in ("linear", "relu") and r.norm == "none"]
    neg_s = [r.m_neg_count_start for r in smooth]
    neg_f = [r.m_neg_count_start for r in flat]
    evidence = f"M's negative count at start: smooth {neg_s}, linear/ReLU without BN {neg_f}"
    if not (smooth and flat):
        return _verdict(
            "m_negative_at_start", "undecidable", "no smooth or no linear/ReLU runs without BN"
        )
    if all(c is None for c in neg_s + neg_f):
        return _verdict("m_negative_at_start", "undecidable", "no run records M at the start")
    if any(c is None for c in neg_s + neg_f):
        return _verdict(
            "m_negative_at_start",
            "undecidable",
            f"{evidence} (None: an extreme of M did not converge)",
        )
    held = all(c > 0 for c in neg_s) and all(c == 0 for c in neg_f)  # type: ignore[operator]
    return _verdict("m_negative_at_start", "held" if held else "not held", evidence)


RULES = (smooth_escape, relu_needs_bn, m_negative_at_start)


def judge(runs: Runs, factor: float = ESCAPE_FACTOR) -> list[Verdict]:
    """Every claim on every backbone and data set in ``runs``.

    Returns:
        One verdict per claim and group, its ``dataset`` and ``backbone`` set.
    """
    groups = sorted({(r.dataset, r.backbone) for r in runs})
    out = []
    for dataset, backbone in groups:
        members = [r for r in runs if (r.dataset, r.backbone) == (dataset, backbone)]
        for rule in RULES:
            out.append(replace(rule(members, factor), dataset=dataset, backbone=backbone))
    return out
