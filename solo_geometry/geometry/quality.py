"""Representation-quality metrics users know by name (docs/design.md section 3).

Each follows its paper's formula, on the raw features (no L2 normalisation unless the metric's
definition has one), in float64. Features are (N, d), or (V, N, d) whose views are pooled into
M = V * N rows (LiDAR keeps the views: each sample is a class of its V views).

* :func:`rankme` [0]: exp of the entropy of p_k = sigma_k / ||sigma||_1 + eps over the singular
  values of the (uncentred) feature matrix, eps = 1e-7, singular values within the rank
  tolerance counted as 0. Range about [1, min(M, d)]. The paper
  does not centre; stable-pretraining's ``RankMe`` matches it but for eps = 1e-5; reptrix's
  ``get_rankme`` centres and takes the PCA eigenvalues sigma_k^2 instead of sigma_k.
* :func:`lidar` [1]: the same entropy over the eigenvalues of the LDA matrix
  Sigma_w^(-1/2) Sigma_b Sigma_w^(-1/2), where Sigma_b is the covariance of the N class means
  (divided by N - 1) and Sigma_w the within-class covariance (divided by N (V - 1)) plus
  delta I, delta = 1e-4. Range about [1, min(N - 1, d)]; None with one view. stable-pretraining's
  ``LiDAR`` builds the same matrix but normalises (lambda + eps) / sum(lambda + eps), eps = 1e-8;
  reptrix's ``get_lidar`` builds it (same for V = 2 up to a scale of Sigma_b, which cancels) but
  then takes the PCA eigenvalues of that matrix, not its eigenvalues.
* :func:`alpha_req` [2]: the covariance eigenvalues lambda_k (centred, descending) follow
  lambda_k ~ k^(-alpha); alpha is minus the slope of the least-squares line of log lambda_k on
  log k, with its coefficient of determination R^2 as the fit quality. By default the fit takes
  every rank within the numerical rank (at the features' precision), unweighted; the authors'
  reptrix ``get_alpha`` fits ranks 11 to 100 weighted by 1/k, which ``fit=(11, 100),
  weighted=True`` reproduces. Range
  alpha >= 0 in practice (0: a flat spectrum; larger: faster decay, toward collapse), R^2 in [0, 1].
* :func:`collapse_level` [3]: lightly's ``1 - sqrt(d) * std_of_l2_normalized(z)`` (without the
  tutorial's moving average), clipped to [0, 1]: 0 for isotropic features, 1 at complete collapse.
* :func:`linear_cka` [4]: ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F) over centred
  rows; range [0, 1], 1 when Y is an orthogonal map of X up to scale and shift.

The rank tolerance is :func:`~solo_geometry.geometry.precision.rank_tolerance` of the uncentred
features at the dtype they were captured in (``features_dtype``; by default the input's own,
read before the cast to float64): in exact arithmetic the singular values under it are 0, and
counting them fits alpha-ReQ to round-off. RankMe is nearly insensitive to them in float32 (each
adds about sigma_k / ||sigma||_1 < 1e-6 to a p_k that already holds eps = 1e-7), not in bfloat16
or float16 (a few percent), hence the cut.

References:
    - [0]: Garrido, Balestriero, Najman, LeCun, 2023, arXiv 2210.02885 (RankMe)
    - [1]: Thilak, Huang, Saremi, Dinh, Goh, Nakkiran, Susskind, Littwin, 2024, arXiv 2312.04000
      (LiDAR)
    - [2]: Agrawal, Mondal, Ghosh, Richards, 2022, NeurIPS (alpha-ReQ)
    - [3]: lightly ``lightly.utils.debug.std_of_l2_normalized``; Chen and He, 2021,
      arXiv 2011.10566 (SimSiam)
    - [4]: Kornblith, Norouzi, Lee, Hinton, 2019, arXiv 1905.00414 (CKA)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from solo_geometry.geometry.precision import rank_tolerance, source_dtype
from solo_geometry.geometry.stats import RANKME_EPS, entropy_rank, normalise_rows, pool_views

__all__ = [
    "LIDAR_DELTA",
    "AlphaReq",
    "alpha_req",
    "collapse_level",
    "lidar",
    "linear_cka",
    "rankme",
]

LIDAR_DELTA = 1e-4  # LiDAR's regulariser of the within-class covariance


def _features(X: Tensor) -> Tensor:
    """Raw rows (M, d) in float64, views pooled; at least 2 rows."""
    X = pool_views(X).detach().double()
    if X.shape[0] < 2:
        raise ValueError(f"X must hold at least 2 samples; got shape {tuple(X.shape)}")
    return X


def _resolved(s: Tensor, shape: tuple[int, int], features_dtype: torch.dtype) -> Tensor:
    """Singular values s of an uncentred (M, d) matrix, those within the rank tolerance 0."""
    return torch.where(s > rank_tolerance(s, shape, features_dtype), s, 0.0)


def rankme(
    X: Tensor, *, eps: float = RANKME_EPS, features_dtype: torch.dtype | None = None
) -> float | None:
    """RankMe [0] of the raw, uncentred features, round-off singular values counted as 0.

    Args:
        X: features (N, d) or (V, N, d) (views pooled).
        eps: RankMe's epsilon.
        features_dtype: the dtype the features were captured in, which sets the rank
            tolerance; None: X's own (pass it when X was cast after capture).

    Returns:
        RankMe, about [1, min(M, d)]; None for all-zero features.

    Raises:
        ValueError: if X is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    F = _features(X)  # (M, d) float64
    s = torch.linalg.svdvals(F)
    shape = (F.shape[0], F.shape[1])
    return entropy_rank(_resolved(s, shape, source_dtype(X, features_dtype)), eps=eps)


def lidar(X: Tensor, *, delta: float = LIDAR_DELTA, eps: float = RANKME_EPS) -> float | None:
    """LiDAR [1]: effective rank of the LDA matrix whose classes are the samples' views.

    The d eigenvalues of Sigma_w^(-1/2) Sigma_b Sigma_w^(-1/2) are those of the N x N matrix
    B Sigma_w^(-1) B^T / (N - 1) (B the centred class means) padded with d - N zeros, and
    Sigma_w^(-1/2) comes from the thin SVD of the within-class residuals, so nothing d x d is
    formed: the cost is that of two SVDs of the batch.

    Args:
        X: features (V, N, d) of N samples in V views (sample n's views are X[:, n]).
        delta: added to Sigma_w's diagonal, as the paper does.
        eps: the effective rank's epsilon.

    Returns:
        LiDAR, about [1, min(N - 1, d)]; None with fewer than 2 views or 2 samples, or
        when the class means coincide.

    Raises:
        ValueError: if X is not (V, N, d) or ``delta`` is not positive.
    """
    if X.ndim != 3:
        raise ValueError(f"X must have shape (V, N, d); got {tuple(X.shape)}")
    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta!r}")
    V, N, d = X.shape
    if V < 2 or N < 2:
        return None
    X = X.detach().double()
    means = X.mean(dim=0)  # (N, d) class means
    B = means - means.mean(dim=0, keepdim=True)  # (N, d)
    C = (X - means).reshape(V * N, d) / math.sqrt(N * (V - 1))  # (V N, d): Sigma_w = C^T C + dI
    _, s, Wt = torch.linalg.svd(C, full_matrices=False)  # Wt (r, d)
    # Sigma_w^(-1/2) = W diag(scale) W^T + I / sqrt(delta), W^T = Wt
    scale = (s**2 + delta).rsqrt() - delta**-0.5  # (r,)
    Q = (B @ Wt.T) * scale @ Wt + B * delta**-0.5  # (N, d) = B Sigma_w^(-1/2)
    lam = torch.linalg.svdvals(Q) ** 2 / (N - 1)  # (min(N, d),)
    return entropy_rank(torch.cat([lam, lam.new_zeros(d - lam.numel())]), eps=eps)


@dataclass(frozen=True)
class AlphaReq:
    """alpha-ReQ's power-law fit of the covariance spectrum.

    Attributes:
        alpha: minus the slope of log lambda_k on log k (None when under 2 ranks were fitted).
        r2: coefficient of determination of that line (None as alpha, or for a flat spectrum).
        n_fit: ranks the line was fitted on.
    """

    alpha: float | None
    r2: float | None
    n_fit: int


def alpha_req(
    X: Tensor,
    *,
    fit: tuple[int, int] | None = None,
    weighted: bool = False,
    features_dtype: torch.dtype | None = None,
) -> AlphaReq:
    """alpha-ReQ [2]: decay exponent of the covariance eigenvalues, with its fit quality.

    Args:
        X: features (N, d) or (V, N, d) (views pooled), centred here.
        fit: ranks ``(first, last)``, 1-based and inclusive, to fit on (cut to the numerical
            rank); None: every rank within the numerical rank.
        weighted: weight rank k by 1/k in the least squares (reptrix's fit).
        features_dtype: the dtype the features were captured in, which sets the numerical
            rank; None: X's own (pass it when X was cast after capture).

    Returns:
        The :class:`AlphaReq`.

    Raises:
        ValueError: if X is not (N, d) or (V, N, d), holds fewer than 2 samples, or ``fit`` is
            not ``1 <= first <= last``.
    """
    if fit is not None and not 1 <= fit[0] <= fit[1]:
        raise ValueError(f"fit must be (first, last) with 1 <= first <= last; got {fit!r}")
    dtype = source_dtype(X, features_dtype)
    X = _features(X)
    m, d = X.shape
    s = torch.linalg.svdvals(X - X.mean(dim=0, keepdim=True))
    tol = rank_tolerance(torch.linalg.svdvals(X), (m, d), dtype)
    rank = int((s > tol).sum())  # 0 for constant features (tol = 0 only when X = 0)
    first, last = fit if fit is not None else (1, rank)
    k = torch.arange(first, min(last, rank) + 1, dtype=torch.float64)  # 1-based ranks
    if k.numel() < 2:
        return AlphaReq(alpha=None, r2=None, n_fit=int(k.numel()))
    x, y = k.log(), (s[k.long() - 1] ** 2 / (m - 1)).log()
    w = 1.0 / k if weighted else torch.ones_like(k)
    xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
    slope = (w * (x - xm) * (y - ym)).sum() / (w * (x - xm) ** 2).sum()
    resid = y - (ym + slope * (x - xm))
    ss_tot = (w * (y - ym) ** 2).sum()
    r2 = float(1 - (w * resid**2).sum() / ss_tot) if ss_tot > 0 else None
    return AlphaReq(alpha=float(-slope), r2=r2, n_fit=int(k.numel()))


def collapse_level(X: Tensor) -> float:
    """The collapse level of lightly [3]: 1 - sqrt(d) * (normalised std), clipped to [0, 1].

    The normalised std is lightly's ``std_of_l2_normalized``: the unbiased std over samples of
    each dimension of the L2-normalised rows, averaged over dimensions.

    Args:
        X: features (N, d) or (V, N, d) (views pooled).

    Returns:
        0 for isotropic features (std about 1/sqrt(d)), 1 at complete collapse.

    Raises:
        ValueError: if X is not (N, d) or (V, N, d) or holds fewer than 2 samples.
    """
    Xn = normalise_rows(_features(X))
    std = float(Xn.std(dim=0, correction=1).mean())
    return min(1.0, max(0.0, 1.0 - math.sqrt(Xn.shape[1]) * std))


def linear_cka(X: Tensor, Y: Tensor) -> float | None:
    """Linear CKA [4] between two representations of the same samples.

    Args:
        X: features (N, d) or (V, N, d) (views pooled).
        Y: features (N, p) or (V, N, p) of the same samples, in the same order.

    Returns:
        CKA in [0, 1]; None when either representation is constant.

    Raises:
        ValueError: if the shapes are not as above or the sample counts differ.
    """
    X, Y = _features(X), _features(Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must hold the same samples; got {X.shape[0]} and {Y.shape[0]}")
    Xc, Yc = X - X.mean(dim=0), Y - Y.mean(dim=0)
    if X.shape[0] < max(X.shape[1], Y.shape[1]):  # the M x M Gram form: the same numbers
        K, L = Xc @ Xc.T, Yc @ Yc.T  # (M, M); ||Y^T X||_F^2 = <K, L>, ||X^T X||_F = ||K||_F
        cross = (K * L).sum()
        norm_x, norm_y = torch.linalg.matrix_norm(K), torch.linalg.matrix_norm(L)
    else:
        cross = torch.linalg.matrix_norm(Yc.T @ Xc) ** 2
        norm_x, norm_y = torch.linalg.matrix_norm(Xc.T @ Xc), torch.linalg.matrix_norm(Yc.T @ Yc)
    if norm_x * norm_y <= 0:
        return None
    return float(cross / (norm_x * norm_y))
