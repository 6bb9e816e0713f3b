"""Spearman's rank correlation (scipy.stats.spearmanr's) and its percentile bootstrap.

A statistic of paired samples, not of the reproductions: the collapse sweep's std-cond
correlation, the escape-prediction test and the Hessian tracker's re-reading use it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import ConstantInputWarning, spearmanr

__all__ = ["RankCorrelation", "bootstrap_spearman", "spearman"]


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rho of paired samples; nan when either is constant or fewer than 2 pairs.

    Raises:
        ValueError: if the samples differ in length.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y must pair up; got lengths {len(x)} and {len(y)}")
    if len(x) < 2:
        return math.nan
    with warnings.catch_warnings():  # a constant sample: scipy warns, rho is nan
        warnings.simplefilter("ignore", ConstantInputWarning)
        return float(spearmanr(x, y).statistic)


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman's rho with its bootstrap percentile interval.

    Attributes:
        rho: Spearman's rho of the pairs (nan if undefined).
        low: lower end of the interval (nan if fewer than half the resamples defined rho).
        high: upper end.
        n: pairs.
        level: the interval's coverage, e.g. 0.95.
        resamples: bootstrap resamples drawn.
        seed: the generator's seed.
    """

    rho: float
    low: float
    high: float
    n: int
    level: float
    resamples: int
    seed: int


def bootstrap_spearman(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> RankCorrelation:
    """Spearman's rho and its percentile interval over ``resamples`` resampled pair sets.

    Resamples on which rho is undefined (a constant sample) are dropped; with fewer than half
    of them defined the interval is (nan, nan).

    Raises:
        ValueError: on unequal lengths, ``resamples`` < 1 or ``level`` outside (0, 1).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1; got {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rho = spearman(xs, ys)
    rng = np.random.default_rng(seed)
    draws = [spearman(xs[i], ys[i]) for i in rng.integers(0, len(xs), (resamples, len(xs)))]
    defined = np.array([d for d in draws if not math.isnan(d)])
    low = high = math.nan
    if len(xs) and len(defined) >= resamples / 2:
        tail = (1 - level) / 2
        low, high = (float(q) for q in np.quantile(defined, [tail, 1 - tail]))
    return RankCorrelation(rho, low, high, len(xs), level, resamples, seed)
