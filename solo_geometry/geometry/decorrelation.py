"""Decorrelation losses (VICReg, VIbCReg, Barlow Twins) in the form cheapest for the batch.

These losses penalise the off-diagonal entries of a D x D matrix of batch statistics, C = A^T B
for standardised or centred outputs A, B (N, D): solo-learn builds C and masks its diagonal.
When N < D the same sum is cheaper through the N x N Gram matrices,

    sum_{i != j} C_ij^2 = ||A^T B||_F^2 - sum_i C_ii^2 = sum((A A^T) * (B B^T)) - sum_i C_ii^2,

O(N^2 D) instead of O(N D^2). It is the same function of A and B (equal to round-off, with the
same derivatives), so a Hessian-vector product through it is the product of the training loss;
for solo-learn's cifar VICReg recipe (D = 2048, N = 32) it makes a product of H_eff six times
cheaper, since masking a 2048 x 2048 matrix (and scattering its gradient back) dominated.

Each loss takes the head outputs of the two views (N, D) and the method's weights, and follows
solo-learn's formula step for step (``solo.losses.vicreg``, ``vibcreg``, ``barlow``); the caller
gathers features across ranks first where the method does (VICReg and VIbCReg gather before
their variance and covariance terms).

References:
    - [0]: Bardes, Ponce, LeCun, 2022, arXiv:2105.04906 (VICReg)
    - [1]: Lee, Aune, 2021, arXiv:2109.00783 (VIbCReg)
    - [2]: Zbontar et al., 2021, arXiv:2103.03230 (Barlow Twins)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "barlow_twins_loss",
    "off_diagonal_sq_sum",
    "standardised",
    "vibcreg_loss",
    "vicreg_loss",
]


def off_diagonal_sq_sum(a: Tensor, b: Tensor) -> Tensor:
    """sum_{i != j} (A^T B)_ij^2, through whichever of the D x D or N x N products is smaller.

    Args:
        a: (N, D).
        b: (N, D).

    Returns:
        The scalar sum.
    """
    diag = (a * b).sum(0)  # (D,) the diagonal of A^T B
    n, d = a.shape
    if n < d:
        total = ((a @ a.T) * (b @ b.T)).sum()  # ||A^T B||_F^2 via (N, N) Gram matrices
    else:
        total = (a.T @ b).pow(2).sum()  # (D, D)
    return total - diag.pow(2).sum()


def _variance(z1: Tensor, z2: Tensor) -> Tensor:
    """VICReg's hinge on the per-feature std (unbiased variance, eps 1e-4), both views."""
    std1, std2 = torch.sqrt(z1.var(dim=0) + 1e-4), torch.sqrt(z2.var(dim=0) + 1e-4)
    return torch.mean(F.relu(1 - std1)) + torch.mean(F.relu(1 - std2))


def vicreg_loss(
    z1: Tensor,
    z2: Tensor,
    g1: Tensor,
    g2: Tensor,
    sim_loss_weight: float,
    var_loss_weight: float,
    cov_loss_weight: float,
) -> Tensor:
    """solo-learn's ``vicreg_loss_func`` with the covariance term in the cheaper form.

    Args:
        z1: head outputs of view 1 on this rank (N, D): the invariance term.
        z2: head outputs of view 2 on this rank (N, D).
        g1: view 1 gathered over ranks (N_total, D) (``z1`` itself in one process): the
            variance and covariance terms.
        g2: view 2 gathered over ranks (N_total, D).
        sim_loss_weight: invariance weight.
        var_loss_weight: variance weight.
        cov_loss_weight: covariance weight.

    Returns:
        The scalar loss.
    """
    n, d = g1.shape
    c1, c2 = g1 - g1.mean(0), g2 - g2.mean(0)  # (N_total, D) each
    # cov = c^T c / (N - 1); solo-learn divides its off-diagonal sum by D
    cov = (off_diagonal_sq_sum(c1, c1) + off_diagonal_sq_sum(c2, c2)) / ((n - 1) ** 2 * d)
    return (
        sim_loss_weight * F.mse_loss(z1, z2)
        + var_loss_weight * _variance(g1, g2)
        + cov_loss_weight * cov
    )


def vibcreg_loss(
    z1: Tensor,
    z2: Tensor,
    g1: Tensor,
    g2: Tensor,
    sim_loss_weight: float,
    var_loss_weight: float,
    cov_loss_weight: float,
) -> Tensor:
    """solo-learn's ``vibcreg_loss_func`` with the covariance term in the cheaper form.

    The covariance term is the mean over the D x D entries of the squared off-diagonal
    correlations of the centred, per-feature L2-normalised outputs.

    Args:
        z1: head outputs of view 1 on this rank (N, D): the invariance term.
        z2: head outputs of view 2 on this rank (N, D).
        g1: view 1 gathered over ranks (N_total, D): the variance and covariance terms.
        g2: view 2 gathered over ranks (N_total, D).
        sim_loss_weight: invariance weight.
        var_loss_weight: variance weight.
        cov_loss_weight: covariance weight.

    Returns:
        The scalar loss.
    """
    d = g1.shape[1]
    unit = [F.normalize(g - g.mean(0), p=2, dim=0) for g in (g1, g2)]  # (N_total, D) each
    cov = (off_diagonal_sq_sum(unit[0], unit[0]) + off_diagonal_sq_sum(unit[1], unit[1])) / d**2
    return (
        sim_loss_weight * F.mse_loss(z1, z2)
        + var_loss_weight * _variance(g1, g2)
        + cov_loss_weight * cov
    )


def standardised(z: Tensor) -> Tensor:
    """Barlow Twins' per-feature standardisation of (N, D): batch mean, biased variance, eps 1e-5.

    ``BatchNorm1d(affine=False)`` in training mode, as ``solo.losses.barlow`` applies it.
    """
    return (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + 1e-5)  # (N, D)


def barlow_twins_loss(z1: Tensor, z2: Tensor, lamb: float, scale_loss: float) -> Tensor:
    """solo-learn's ``barlow_loss_func`` in one process, in the inputs' dtype, cheaper form.

    Each view standardised per feature with its batch mean and biased variance (eps 1e-5, as
    ``BatchNorm1d(affine=False)`` in training mode), cross-correlation C = A^T B / N, loss
    ``scale_loss * (sum_i (C_ii - 1)^2 + lamb * sum_{i != j} C_ij^2)``. Under DDP solo-learn
    all-reduces C, which this form does not: the caller uses the D x D form there.

    Args:
        z1: head outputs of view 1 (N, D).
        z2: head outputs of view 2 (N, D).
        lamb: off-diagonal weight.
        scale_loss: overall scale.

    Returns:
        The scalar loss.
    """
    n = z1.shape[0]
    a, b = standardised(z1), standardised(z2)  # (N, D) each
    on_diagonal = ((a * b).sum(0) / n - 1).pow(2).sum()
    return scale_loss * (on_diagonal + lamb * off_diagonal_sq_sum(a, b) / n**2)
