"""Matrices of known rank captured in a lower precision, and a BatchNorm-ended SimSiam head.

Shared by the tests of the statistics' and the quality metrics' rank at the features' precision
(docs/design.md section 3): each matrix is built in float64 (the reference) and cast to the
capture dtype, as a backbone's float32 or mixed-precision output would hold it.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor

from solo_geometry.models.heads import build_head

LOW_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (M, d, rank, centred rank): rank 20 (the 128 x 512), rank 1, full rank both ways.
KNOWN_RANK = [(128, 512, 20, 20), (128, 512, 1, 1), (128, 512, 128, 127), (512, 64, 64, 64)]


def known_rank(m: int, d: int, rank: int, seed: int = 0) -> Tensor:
    """A float64 (M, d) matrix of the given rank, well conditioned on it.

    Gaussian (M, d) at full rank (min(M, d)); else Gaussian (M, rank) times Gaussian (rank, d)
    (a product of square Gaussians would have singular values near 0 that no precision resolves).
    """
    gen = torch.Generator().manual_seed(seed)
    if rank == min(m, d):
        return torch.randn(m, d, generator=gen, dtype=torch.float64)
    a = torch.randn(m, rank, generator=gen, dtype=torch.float64)
    return a @ torch.randn(rank, d, generator=gen, dtype=torch.float64)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def centred_svals(x: np.ndarray) -> np.ndarray:
    """Singular values (descending) of the centred L2-normalised rows, NumPy float64."""
    xn = unit_rows(x)
    return np.linalg.svd(xn - xn.mean(axis=0), compute_uv=False)


def weyl_cond_bounds(s: np.ndarray, rank: int, delta: float) -> tuple[float, float]:
    """Bounds of (s_1 / s_rank)^2 when every singular value may move by up to ``delta`` (Weyl)."""
    return ((s[0] - delta) / (s[rank - 1] + delta)) ** 2, (
        (s[0] + delta) / (s[rank - 1] - delta)
    ) ** 2


def simsiam_bn_head_outputs(n: int = 64, d: int = 512, seed: int = 0) -> tuple[Tensor, Tensor]:
    """H (2, n, p) of a SimSiam-style BatchNorm-ended projector in float32, and its float64 twin.

    The package's head builder with the digits SimSiam recipe's sizes (512 -> 512 -> 512):
    Linear (no bias) -> BatchNorm -> ReLU -> Linear (no bias) -> BatchNorm, in training mode,
    each view's batch normalised on its own as solo-learn does; Z are ReLU-like (non-negative)
    backbone features. The twin is a float64 copy of the same head on the same Z.
    """
    torch.manual_seed(seed)
    head = build_head(
        "smooth_mlp", d, d, hidden_dim=d, activation="relu", norm="bn", bias=False, out_norm=True
    ).train()
    twin = copy.deepcopy(head).double()
    Z = torch.relu(torch.randn(2, n, d, generator=torch.Generator().manual_seed(seed + 1)))
    with torch.no_grad():
        H = torch.stack([head(Z[v]) for v in range(2)])  # (2, n, p) float32
        H64 = torch.stack([twin(Z[v].double()) for v in range(2)])  # (2, n, p) float64
    return H, H64
