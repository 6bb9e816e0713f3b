"""Representation statistics of one view's features (DESIGN.md section 3).

Every statistic is computed on the rows L2-normalised, in float64:

* ``normalized_std``: the standard deviation over samples (unbiased, N - 1) of each dimension of
  the normalised rows, averaged over dimensions; about 1/sqrt(d) when healthy, 0 at collapse;
* ``cov_eigenvalues``: eigenvalues of the covariance (centred, divided by N - 1) of the
  normalised rows, descending, from the singular values of the centred matrix;
* ``rank``: numerical rank of the centred matrix, singular values above
  max(N, d) * eps(float64) * sigma_max (NumPy's ``matrix_rank`` rule);
* ``cond``: largest over smallest covariance eigenvalue within the numerical rank (NaN at rank 0);
* ``effective_rank``: RankMe [0], exp of the entropy of p_k = sigma_k / ||sigma||_1 + eps over
  the singular values sigma of the normalised (uncentred) rows, eps = 1e-7 by default.

References:
    - [0]: Garrido, Balestriero, Najman, LeCun, 2023, arXiv 2210.02885 (RankMe)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["RANKME_EPS", "normalise_rows", "representation_stats", "stats_record"]

RANKME_EPS = 1e-7  # RankMe's epsilon, as in its paper


def normalise_rows(X: Tensor) -> Tensor:
    """Rows of X (N, d) scaled to unit norm, detached, in float64 (zero rows stay zero)."""
    X = X.detach().double()
    return X / X.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def representation_stats(X: Tensor, *, eps: float = RANKME_EPS) -> dict[str, Any]:
    """Statistics of one view's features.

    Args:
        X: features (N, d), N >= 2.
        eps: RankMe's epsilon added to the L1-normalised singular values.

    Returns:
        Dict with ``normalized_std`` (float), ``cov_eigenvalues`` (list of d floats,
        descending), ``cond`` (float), ``rank`` (int), ``effective_rank`` (float), ``eps``.

    Raises:
        ValueError: if X is not (N, d) with N >= 2.
    """
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must have shape (N, d) with N >= 2; got {tuple(X.shape)}")
    n, d = X.shape
    Xn = normalise_rows(X)  # (N, d)
    normalized_std = float(Xn.std(dim=0, correction=1).mean())
    centred = Xn - Xn.mean(dim=0, keepdim=True)  # (N, d)
    sigma = torch.linalg.svdvals(centred)  # (min(N, d),) descending
    cov = torch.zeros(d, dtype=torch.float64)
    cov[: sigma.numel()] = sigma**2 / (n - 1)
    tol = max(n, d) * torch.finfo(torch.float64).eps * float(sigma[0])
    rank = int((sigma > tol).sum())
    cond = float(cov[0] / cov[rank - 1]) if rank > 0 else math.nan
    s = torch.linalg.svdvals(Xn)
    p = s / s.sum() + eps
    effective_rank = float(torch.exp(-(p * torch.log(p)).sum()))
    return {
        "normalized_std": normalized_std,
        "cov_eigenvalues": cov.tolist(),
        "cond": cond,
        "rank": rank,
        "effective_rank": effective_rank,
        "eps": eps,
    }


def stats_record(prefix: str, X: Tensor) -> dict[str, float]:
    """Flat scalar record ``<prefix>/normalized_std``, ``/cond``, ``/rank``, ``/effective_rank``.

    Args:
        prefix: key prefix, e.g. ``"z"`` or ``"h"``.
        X: one view (N, d), or several (V, N, d): then each statistic is computed per view and
            averaged over views.

    Returns:
        The four scalars as floats.

    Raises:
        ValueError: if X is neither 2- nor 3-dimensional.
    """
    if X.ndim == 2:
        X = X.unsqueeze(0)
    if X.ndim != 3:
        raise ValueError(f"X must have shape (N, d) or (V, N, d); got {tuple(X.shape)}")
    keys = ("normalized_std", "cond", "rank", "effective_rank")
    per_view = [representation_stats(view) for view in X]
    return {f"{prefix}/{k}": sum(float(s[k]) for s in per_view) / len(per_view) for k in keys}
