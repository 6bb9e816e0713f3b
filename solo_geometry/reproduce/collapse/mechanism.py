"""Does lambda_min(M) at the collapsed start predict the escape? A rank test over the cells.

Spearman's rho with a seeded percentile bootstrap interval
(:func:`solo_geometry.geometry.ranks.bootstrap_spearman`); the cells, the prediction and its
verdicts: docs/reproducing.md, "Does lambda_min(M) at the start predict the escape?".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from solo_geometry.geometry.ranks import RankCorrelation, bootstrap_spearman
from solo_geometry.reproduce.collapse.protocol import cell_id
from solo_geometry.reproduce.collapse.result import CollapseRow, read_cell, read_summary
from solo_geometry.reproduce.results import Verdict

__all__ = [
    "CLAIM",
    "MIN_CELLS",
    "EscapePrediction",
    "escape_prediction",
    "prediction_pairs",
    "sweep_rows",
]

CLAIM = "a more negative lambda_min(M) at the collapsed start predicts an earlier escape"
MIN_CELLS = 6
RESAMPLES = 2000


@dataclass(frozen=True)
class EscapePrediction:
    """The rank test and its verdict.

    Attributes:
        correlation: Spearman's rho of (lambda_min(M), escape time) and its interval.
        cells: the cells used, ``head-norm-lr-seed``.
        left_out: cells left out, with why.
        verdict: the :class:`Verdict` (id ``m_predicts_escape``).
    """

    correlation: RankCorrelation
    cells: tuple[str, ...]
    left_out: tuple[str, ...]
    verdict: Verdict

    def as_json(self) -> dict[str, Any]:
        """The correlation's fields, the cells, those left out and the verdict's object."""
        return {
            **asdict(self.correlation),
            "cells": list(self.cells),
            "left_out": list(self.left_out),
            "verdict": self.verdict.as_json(),
        }


def sweep_rows(path: str | Path) -> list[CollapseRow]:
    """The rows of a sweep: its ``summary.json`` (or the folder holding it), else its cells.

    A folder without ``summary.json`` (an unfinished sweep) gives the rows of its finished
    cells, ``cells/*.json``.

    Raises:
        ValueError: naming the path: neither, or a file that does not read as a row.
    """
    path = Path(path)
    if not path.is_dir() or (path / "summary.json").is_file():
        return list(read_summary(path).rows)
    files = sorted((path / "cells").glob("*.json"))
    if not files:
        raise ValueError(
            f"{str(path)!r} holds neither summary.json nor cells/*.json; expected a collapse "
            "sweep folder (solo-geometry reproduce collapse --out DIR)"
        )
    return [read_cell(f).row for f in files]


def prediction_pairs(
    rows: Sequence[CollapseRow],
) -> tuple[list[float], list[float], list[str], list[str]]:
    """``(lambda_min(M), escape time, cells used, cells left out with why)``."""
    xs: list[float] = []
    ys: list[float] = []
    used: list[str] = []
    left: list[str] = []
    for row in rows:
        name = cell_id(row.head, row.norm, row.lr, row.seed)
        if row.outcome not in ("escaped", "not escaped"):
            left.append(f"{name} ({row.outcome or 'no outcome'})")
        elif row.m_lambda_min_start is None:
            left.append(f"{name} (lambda_min(M) not converged)")
        elif row.outcome == "escaped" and row.escape_epoch is None:
            left.append(f"{name} (escaped without an escape epoch)")
        else:
            xs.append(row.m_lambda_min_start)
            ys.append(math.inf if row.outcome == "not escaped" else float(row.escape_epoch or 0))
            used.append(name)
    return xs, ys, used, left


def _judge(r: RankCorrelation, xs: list[float], ys: list[float]) -> str:
    if r.n < MIN_CELLS or len(set(xs)) < 2 or len(set(ys)) < 2 or math.isnan(r.low):
        return "undecidable"
    if r.low > 0:
        return "held"
    return "not held" if r.high <= 0 else "undecidable"


def escape_prediction(
    rows: Sequence[CollapseRow], *, resamples: int = RESAMPLES, seed: int = 0
) -> EscapePrediction:
    """The rank test over the sweep's rows and its verdict."""
    xs, ys, used, left = prediction_pairs(rows)
    r = bootstrap_spearman(xs, ys, resamples=resamples, seed=seed)
    verdict = _judge(r, xs, ys)
    escaped = sum(not math.isinf(y) for y in ys)
    evidence = (
        f"Spearman rho {r.rho:+.3f}, {r.level:.0%} bootstrap interval [{r.low:+.3f}, "
        f"{r.high:+.3f}] ({r.resamples} resamples, seed {r.seed}) over {r.n} cells "
        f"({escaped} escaped); {len(left)} left out"
    )
    if r.n < MIN_CELLS:
        evidence += f"; fewer than {MIN_CELLS} cells"
    elif len(set(ys)) < 2:
        evidence += "; every cell has the same escape time"
    elif len(set(xs)) < 2:
        evidence += "; every cell has the same lambda_min(M)"
    return EscapePrediction(
        correlation=r,
        cells=tuple(used),
        left_out=tuple(left),
        verdict=Verdict("m_predicts_escape", CLAIM, verdict, evidence),
    )
