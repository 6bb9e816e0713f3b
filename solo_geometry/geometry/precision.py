"""The round-off of the features' dtype: the tolerance of every rank-based number.

The features reach this module in some dtype (float32, bfloat16, float16 under mixed
precision, float64) and are computed on in float64; a rank-based number must not count the
round-off of that dtype as rank. With X the uncentred matrix whose singular values are taken (its
rows normalised or not), s_1 its largest singular value, eps_c the machine epsilon of the capture
dtype and eps_w that of the arithmetic the features were computed in (float64 for float64
features, float32 otherwise: autocast accumulates half-precision products in float32), the
tolerance is

    tol = max(max(M, d) * eps_w * s_1, eps_c * ||X||_F).

The first term is NumPy's ``matrix_rank`` rule at the working precision (the round-off of the
products that made the features, e.g. a BatchNorm's centring in float32); the second bounds the
rounding of the captured values: each entry within a relative u = eps_c / 2, so the rounding
error E has ||E||_2 <= ||E||_F <= u ||X||_F, and a row normalised after rounding moves by at most
2u, so eps_c ||X||_F bounds it too; centring (a projection) does not enlarge it, and by Weyl no
singular value that is 0 in exact arithmetic exceeds it. For float32 and float64 the first term
is always the larger (||X||_F <= sqrt(min(M, d)) s_1), so the rule is ``matrix_rank``'s with the
features' eps; for bfloat16 and float16 that rule would exceed s_1 once max(M, d) >= 128 and the
second term decides. Both are relative to the uncentred matrix: the round-off is relative to the
values as stored, so a nearly collapsed batch, whose centred spread is below it, has no rank.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rank_tolerance", "round_off_eps", "source_dtype"]


def round_off_eps(features_dtype: torch.dtype) -> tuple[float, float]:
    """Machine epsilons behind the rank tolerance of features captured in ``features_dtype``.

    Args:
        features_dtype: the dtype the features were captured in; a non-floating dtype holds its
            values exactly and counts as float64.

    Returns:
        ``(eps_c, eps_w)``: the capture dtype's epsilon and that of the arithmetic the features
        were computed in (float64 for float64 features, float32 otherwise).
    """
    if not features_dtype.is_floating_point:
        features_dtype = torch.float64
    work = torch.float64 if features_dtype == torch.float64 else torch.float32
    return torch.finfo(features_dtype).eps, torch.finfo(work).eps


def rank_tolerance(s: Tensor, shape: tuple[int, int], features_dtype: torch.dtype) -> float:
    """Round-off floor of singular values: max(max(M, d) eps_w s_1, eps_c ||X||_F) (module doc).

    Args:
        s: singular values of the uncentred matrix X (any order; ||X||_F is their norm).
        shape: X's shape (M, d).
        features_dtype: the dtype X was captured in (:func:`round_off_eps`).

    Returns:
        The tolerance; singular values of X or of its centred copy at or under it are round-off.
    """
    eps_c, eps_w = round_off_eps(features_dtype)
    return max(max(shape) * eps_w * float(s.max()), eps_c * float(torch.linalg.vector_norm(s)))


def source_dtype(X: Tensor, features_dtype: torch.dtype | None) -> torch.dtype:
    """``features_dtype`` if given (the caller has cast X already), else X's own dtype."""
    return X.dtype if features_dtype is None else features_dtype
