"""Representation statistics, whitening score, a metric's spectrum (docs/design.md section 3).

Representation statistics are taken over every sample given: features (M, d), or (V, N, d) whose
views are pooled into M = V * N rows, as the paper's code concatenates ``[z1, z2]``. Each is
computed on the rows L2-normalised, in float64:

* ``normalized_std``: the standard deviation over samples (unbiased, M - 1) of each dimension of
  the normalised rows, averaged over dimensions; about 1/sqrt(d) when healthy, 0 at collapse
  (the paper's ``torch.std(F.normalize(z), dim=0).mean()``), at most ``std_ceiling``
  sqrt(M / ((M - 1) d)), reached by zero-mean orthonormal-like rows;
* ``cov_eigenvalues``: eigenvalues of the covariance (centred, divided by M - 1) of the
  normalised rows, descending, from the singular values of the centred matrix;
* ``rank``: numerical rank of the centred matrix at the features' own precision: singular values
  above :func:`~solo_geometry.geometry.precision.rank_tolerance`, set by the dtype the features
  were captured in (not the float64 they are computed in here);
* ``cond`` (the default): largest over smallest covariance eigenvalue within the numerical rank
  (NaN at rank 0), never against a clamp;
* ``cond_paper``: the paper's covariance condition number, for comparison only: lambda_max over
  max(lambda_min, 1e-7) over all d eigenvalues of that covariance (its code: ``eigvalsh`` of
  ``z_c.T @ z_c / (M - 1)``, ``torch.clamp(eigenvalues[0], min=1e-7)``); with M <= d it is
  lambda_max / 1e-7 whatever the features;
* ``rankme_l2``: RankMe's formula [0] on the L2-normalised rows: :func:`entropy_rank` (exp of the
  entropy of p_k = sigma_k / ||sigma||_1 + eps) of the singular values sigma of the normalised
  (uncentred) rows, eps = 1e-7 by default; singular values within the rank tolerance count as 0
  (they are round-off). The paper's RankMe, on the raw rows, is
  :func:`~solo_geometry.geometry.quality.rankme` (``<p>/rankme``).

Every rank-based number is read at the precision of the dtype the features were captured in
(:mod:`solo_geometry.geometry.precision`).

The whitening score compares Cov(H) with Cov(Z) on their shared numerical rank; the metric
spectrum summarises the eigenvalues of a metric-linear head's W^T W.

References:
    - [0]: Garrido, Balestriero, Najman, LeCun, 2023, arXiv 2210.02885 (RankMe)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from solo_geometry.geometry.precision import rank_tolerance, source_dtype

__all__ = [
    "PAPER_COV_CLAMP",
    "RANKME_EPS",
    "MetricSpectrum",
    "RepresentationStats",
    "WhiteningScore",
    "entropy_rank",
    "metric_spectrum",
    "normalise_rows",
    "normalized_std",
    "pool_views",
    "representation_stats",
    "stats_record",
    "std_ceiling",
    "whitening_score",
]

RANKME_EPS = 1e-7  # RankMe's epsilon, as in its paper
PAPER_COV_CLAMP = 1e-7  # the paper's clamp of the smallest covariance eigenvalue


def normalise_rows(X: Tensor) -> Tensor:
    """Rows of X (N, d) scaled to unit norm, detached, in float64 (zero rows stay zero)."""
    X = X.detach().double()
    return X / X.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def entropy_rank(values: Tensor, *, eps: float = RANKME_EPS) -> float | None:
    """RankMe's effective rank of a spectrum [0]: exp of the entropy of p_k = v_k / ||v||_1 + eps.

    The one entropy of the package: RankMe (singular values of the raw rows), its L2-normalised
    rows' twin, LiDAR (eigenvalues of the LDA matrix) and the metric spectrum's effective rank.

    Args:
        values: non-negative spectrum (k,) (singular values for RankMe, eigenvalues for LiDAR).
        eps: added to each normalised value, as the papers do.

    Returns:
        The effective rank; None when every value is 0.
    """
    v = values.detach().double().clamp_min(0.0)
    total = v.sum()
    if total <= 0:
        return None
    p = v / total + eps
    return float(torch.exp(-(p * torch.log(p)).sum()))


def _entropy_rank_or_nan(values: Tensor, eps: float) -> float:
    """:func:`entropy_rank`, NaN for an all-zero spectrum (the dataclasses' float fields)."""
    rank = entropy_rank(values, eps=eps)
    return math.nan if rank is None else rank


def pool_views(X: Tensor) -> Tensor:
    """Features (N, d) as they are, or (V, N, d) with the views pooled into (V * N, d).

    Raises:
        ValueError: if X is neither 2- nor 3-dimensional.
    """
    if X.ndim == 3:
        return X.reshape(-1, X.shape[-1])  # (V * N, d), views stacked as torch.cat does
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d) or (V, N, d); got {tuple(X.shape)}")
    return X


def _rows(X: Tensor) -> Tensor:
    X = pool_views(X)
    if X.shape[0] < 2:
        raise ValueError(f"X must hold at least 2 samples; got shape {tuple(X.shape)}")
    return normalise_rows(X)  # (M, d)


def normalized_std(X: Tensor) -> float:
    """Std over samples of the L2-normalised rows, averaged over dimensions.

    About 1/sqrt(d) for isotropic features, 0 for collapsed ones (every row the same). The std
    is unbiased (M - 1), as ``torch.std``; views of (V, N, d) are pooled first, as the paper's
    code does with ``torch.cat([z1, z2])``.

    Args:
        X: features (N, d) or (V, N, d), at least 2 samples in all.

    Returns:
        The statistic as a float (computed in float64).

    Raises:
        ValueError: if X is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    return float(_rows(X).std(dim=0, correction=1).mean())


def std_ceiling(rows: int, dim: int) -> float:
    """The largest value :func:`normalized_std` can take on ``rows`` rows of width ``dim``.

    By Jensen, mean_j std_j <= sqrt(mean_j var_j) = sqrt(sum_i ||x_i - mean||^2 / ((M - 1) d)),
    and sum_i ||x_i - mean||^2 = M (1 - ||mean||^2) <= M for unit rows: sqrt(M / ((M - 1) d)),
    reached by M = d orthonormal-like rows with zero mean, e.g. +-e_j pairs.

    Raises:
        ValueError: if ``rows`` < 2 or ``dim`` < 1.
    """
    if rows < 2 or dim < 1:
        raise ValueError(f"the ceiling needs rows >= 2 and dim >= 1, got rows={rows}, dim={dim}")
    return math.sqrt(rows / ((rows - 1) * dim))


@dataclass(frozen=True)
class _Spectrum:
    """Covariance eigenvalues (d,) descending, numerical rank, uncentred singular values, tol."""

    cov: Tensor
    rank: int
    s: Tensor
    tol: float


def _covariance_spectrum(Xn: Tensor, features_dtype: torch.dtype) -> _Spectrum:
    """The covariance spectrum of normalised rows (M, d) and its rank at the features' precision."""
    m, d = Xn.shape
    s = torch.linalg.svdvals(Xn)  # (min(M, d),) of the uncentred rows: the round-off's scale
    tol = rank_tolerance(s, (m, d), features_dtype)
    sigma = torch.linalg.svdvals(Xn - Xn.mean(dim=0, keepdim=True))  # (min(M, d),) descending
    cov = torch.zeros(d, dtype=torch.float64, device=Xn.device)
    cov[: sigma.numel()] = sigma**2 / (m - 1)
    return _Spectrum(cov, int((sigma > tol).sum()), s, tol)


def _cond_on_rank(eigenvalues: Tensor, rank: int) -> float:
    """lambda_1 / lambda_rank of descending eigenvalues; NaN at rank 0."""
    return float(eigenvalues[0] / eigenvalues[rank - 1]) if rank > 0 else math.nan


@dataclass(frozen=True)
class RepresentationStats:
    """Statistics of one representation (definitions in the module docstring).

    Attributes:
        normalized_std: mean over dimensions of the std of the normalised rows.
        cond: covariance condition number on the numerical rank (the default).
        cond_paper: lambda_max / max(lambda_min, 1e-7), the paper's (comparison only).
        rank: numerical rank of the centred normalised rows.
        rankme_l2: RankMe's formula on the L2-normalised rows, with ``eps``.
        cov_eigenvalues: the d covariance eigenvalues, descending.
        n_samples: rows the statistics saw (views pooled).
        eps: RankMe's epsilon used.
    """

    normalized_std: float
    cond: float
    cond_paper: float
    rank: int
    rankme_l2: float
    cov_eigenvalues: tuple[float, ...]
    n_samples: int
    eps: float

    def as_record(self, prefix: str) -> dict[str, float]:
        """Flat scalars ``<prefix>/<field>``, eigenvalues left out, ``eps`` as ``rankme_eps``."""
        values = {
            "normalized_std": self.normalized_std,
            "cond": self.cond,
            "cond_paper": self.cond_paper,
            "rank": self.rank,
            "rankme_l2": self.rankme_l2,
            "n_samples": self.n_samples,
            "rankme_eps": self.eps,
        }
        return {f"{prefix}/{k}": float(v) for k, v in values.items()}


def representation_stats(
    X: Tensor, *, eps: float = RANKME_EPS, features_dtype: torch.dtype | None = None
) -> RepresentationStats:
    """Statistics of a representation over all its samples.

    Args:
        X: features (N, d), or (V, N, d) whose views are pooled; at least 2 samples in all.
        eps: RankMe's epsilon added to the L1-normalised singular values.
        features_dtype: the dtype the features were captured in, which sets the rank tolerance
            (module docstring); None: X's own (pass it when X was cast after capture).

    Returns:
        The :class:`RepresentationStats`.

    Raises:
        ValueError: if X is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    Xn = _rows(X)  # (M, d), float64
    spec = _covariance_spectrum(Xn, source_dtype(X, features_dtype))
    s = torch.where(spec.s > spec.tol, spec.s, 0.0)  # round-off counts as 0
    cov = spec.cov
    return RepresentationStats(
        normalized_std=float(Xn.std(dim=0, correction=1).mean()),
        cond=_cond_on_rank(cov, spec.rank),
        cond_paper=float(cov[0] / cov[-1].clamp_min(PAPER_COV_CLAMP)),
        rank=spec.rank,
        rankme_l2=_entropy_rank_or_nan(s, eps),
        cov_eigenvalues=tuple(cov.tolist()),
        n_samples=Xn.shape[0],
        eps=eps,
    )


def stats_record(
    prefix: str, X: Tensor, *, eps: float = RANKME_EPS, features_dtype: torch.dtype | None = None
) -> dict[str, float]:
    """:meth:`RepresentationStats.as_record` of ``representation_stats(X)``.

    Args:
        prefix: key prefix, e.g. ``"z"`` or ``"h"``.
        X: features (N, d) or (V, N, d) (views pooled, never averaged).
        eps: RankMe's epsilon.
        features_dtype: the dtype the features were captured in; None: X's own.

    Returns:
        ``<prefix>/normalized_std``, ``/cond``, ``/cond_paper``, ``/rank``, ``/rankme_l2``,
        ``/n_samples`` and ``/rankme_eps`` as floats.

    Raises:
        ValueError: if X is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    return representation_stats(X, eps=eps, features_dtype=features_dtype).as_record(prefix)


@dataclass(frozen=True)
class WhiteningScore:
    """Condition numbers of Cov(Z) and Cov(H) on their shared numerical rank k.

    Attributes:
        score: cond_h / cond_z; below 1 when the head whitens (H more isotropic than Z).
        rank: k = min(rank Cov(Z), rank Cov(H)).
        cond_z: lambda_1 / lambda_k of Cov(Z).
        cond_h: lambda_1 / lambda_k of Cov(H).
    """

    score: float
    rank: int
    cond_z: float
    cond_h: float

    def as_record(self, prefix: str = "whitening") -> dict[str, float]:
        """Flat scalars ``<prefix>/{score,rank,cond_z,cond_h}``."""
        return {
            f"{prefix}/{k}": float(getattr(self, k)) for k in ("score", "rank", "cond_z", "cond_h")
        }


def whitening_score(
    Z: Tensor, H: Tensor, *, features_dtype: torch.dtype | None = None
) -> WhiteningScore:
    """How much more isotropic the head's outputs are than the backbone's features.

    Both covariances are of L2-normalised rows, centred, divided by M - 1 (as in
    :func:`representation_stats`). With k the smaller of their two numerical ranks, each is
    summarised by lambda_1 / lambda_k of its own descending eigenvalues, and the score is
    cond_k(H) / cond_k(Z): 1 when the head keeps the conditioning, below 1 when it whitens.
    Comparing on the shared rank keeps a wider space (p > d) from counting its extra null
    directions. NaN when k = 0.

    Args:
        Z: backbone features (N, d) or (V, N, d).
        H: head outputs (N, p) or (V, N, p) of the same samples.
        features_dtype: the dtype both were captured in (sets each rank's tolerance); None:
            each tensor's own.

    Returns:
        The :class:`WhiteningScore`.

    Raises:
        ValueError: if either is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    sz = _covariance_spectrum(_rows(Z), source_dtype(Z, features_dtype))
    sh = _covariance_spectrum(_rows(H), source_dtype(H, features_dtype))
    k = min(sz.rank, sh.rank)
    cond_z, cond_h = _cond_on_rank(sz.cov, k), _cond_on_rank(sh.cov, k)
    return WhiteningScore(
        score=cond_h / cond_z if k > 0 else math.nan, rank=k, cond_z=cond_z, cond_h=cond_h
    )


@dataclass(frozen=True)
class MetricSpectrum:
    """Summary of the eigenvalues of a metric W^T W (d x d).

    Attributes:
        min: smallest eigenvalue (as given; round-off may make it slightly negative).
        max: largest eigenvalue.
        cond: largest over smallest eigenvalue above the numerical-rank floor.
        rank: eigenvalues above d * eps(dtype) * max, NumPy's ``matrix_rank`` rule for a
            symmetric matrix (``hermitian=True``).
        effective_rank: RankMe of W: exp of the entropy of s_k / ||s||_1 + eps with
            s = sqrt(lambda) the singular values of W, 0 for lambda under the floor (NaN
            when W = 0).
        eps: RankMe's epsilon used.
    """

    min: float
    max: float
    cond: float
    rank: int
    effective_rank: float
    eps: float

    def as_record(self, prefix: str = "metric") -> dict[str, float]:
        """Flat scalars ``<prefix>/{min,max,cond,rank,effective_rank}``."""
        keys = ("min", "max", "cond", "rank", "effective_rank")
        return {f"{prefix}/{k}": float(getattr(self, k)) for k in keys}


def metric_spectrum(
    eigenvalues: Tensor, *, eps: float = RANKME_EPS, dtype: torch.dtype | None = None
) -> MetricSpectrum:
    """Summarise the spectrum of a metric-linear head's metric W^T W.

    Eigenvalues at or under the floor d * eps(dtype) * max are round-off: outside the rank and
    the condition number, and 0 in the effective rank (whose square root would lift an
    eigenvalue's round-off eps to sqrt(eps)).

    Args:
        eigenvalues: the d eigenvalues of W^T W (d,), any order.
        eps: RankMe's epsilon.
        dtype: the dtype the eigenvalues were computed in, whose machine epsilon sets the
            floor; None: ``eigenvalues``' own (pass it when they were cast after).

    Returns:
        The :class:`MetricSpectrum` (cond NaN when no eigenvalue is above the floor).

    Raises:
        ValueError: if ``eigenvalues`` is not a non-empty 1-D floating tensor.
    """
    if eigenvalues.ndim != 1 or eigenvalues.numel() == 0 or not eigenvalues.is_floating_point():
        raise ValueError(
            f"eigenvalues must be a non-empty 1-D floating tensor; got shape "
            f"{tuple(eigenvalues.shape)}, dtype {eigenvalues.dtype}"
        )
    floor_eps = torch.finfo(dtype or eigenvalues.dtype).eps
    lam = eigenvalues.detach().double().sort(descending=True).values  # (d,)
    tol = lam.numel() * floor_eps * lam[0].abs()
    rank = int((lam > tol).sum())
    s = torch.where(lam > tol, lam, 0.0).sqrt()
    return MetricSpectrum(
        min=float(lam[-1]),
        max=float(lam[0]),
        cond=_cond_on_rank(lam, rank),
        rank=rank,
        effective_rank=_entropy_rank_or_nan(s, eps),
        eps=eps,
    )
