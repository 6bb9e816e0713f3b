"""The cheaper decorrelation losses against solo-learn's D x D formulas, written out here.

The references build the D x D matrix and mask its diagonal as ``solo.losses`` does; the
values, gradients and Hessian-vector products must agree in float64 on both sides of N = D
(the Gram path for N < D, the direct one otherwise).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from solo_geometry.geometry.decorrelation import (
    barlow_twins_loss,
    off_diagonal_sq_sum,
    vibcreg_loss,
    vicreg_loss,
)


def _masked(c: Tensor) -> Tensor:
    off = ~torch.eye(c.shape[0], dtype=torch.bool)
    return c[off].pow(2).sum()


def vicreg_reference(z1: Tensor, z2: Tensor) -> Tensor:
    """solo.losses.vicreg.vicreg_loss_func (weights 25, 25, 1), one process."""
    n, d = z1.shape
    std = [torch.sqrt(z.var(dim=0) + 1e-4) for z in (z1, z2)]
    var = sum(torch.mean(F.relu(1 - s)) for s in std)
    cov = sum(_masked((z - z.mean(0)).T @ (z - z.mean(0)) / (n - 1)) / d for z in (z1, z2))
    return 25.0 * F.mse_loss(z1, z2) + 25.0 * var + 1.0 * cov


def vibcreg_reference(z1: Tensor, z2: Tensor) -> Tensor:
    """solo.losses.vibcreg.vibcreg_loss_func (weights 25, 25, 200), one process."""
    std = [torch.sqrt(z.var(dim=0) + 1e-4) for z in (z1, z2)]
    var = sum(torch.mean(F.relu(1 - s)) for s in std)
    cov = 0.0
    for z in (z1, z2):
        u = F.normalize(z - z.mean(0), p=2, dim=0)
        c = (u.T @ u).clone()
        c.fill_diagonal_(0.0)
        cov = cov + (c**2).mean()
    return 25.0 * F.mse_loss(z1, z2) + 25.0 * var + 200.0 * cov


def barlow_reference(z1: Tensor, z2: Tensor) -> Tensor:
    """solo.losses.barlow.barlow_loss_func (lamb 0.0051, scale 0.1), one process."""
    n, d = z1.shape
    a, b = ((z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + 1e-5) for z in (z1, z2))
    c = a.T @ b / n
    eye = torch.eye(d, dtype=c.dtype)
    cdif = (c - eye).pow(2)
    cdif[~eye.bool()] *= 0.0051
    return 0.1 * cdif.sum()


CASES: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]] = {
    "vicreg": (lambda a, b: vicreg_loss(a, b, a, b, 25.0, 25.0, 1.0), vicreg_reference),
    "vibcreg": (lambda a, b: vibcreg_loss(a, b, a, b, 25.0, 25.0, 200.0), vibcreg_reference),
    "barlow": (lambda a, b: barlow_twins_loss(a, b, 0.0051, 0.1), barlow_reference),
}


def _views(n: int, d: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5  # correlated features
    return (torch.randn(2, n, d, generator=g, dtype=torch.float64) @ mix).requires_grad_(True)


class TestOffDiagonalSqSum:
    @pytest.mark.parametrize(("n", "d"), [(6, 40), (40, 6), (12, 12)])
    def test_equals_masked_sum(self, n: int, d: int) -> None:
        a, b = _views(n, d, seed=n + d).detach()
        assert torch.allclose(off_diagonal_sq_sum(a, b), _masked(a.T @ b), rtol=1e-12, atol=0)


class TestLosses:
    @pytest.mark.parametrize(("n", "d"), [(8, 48), (48, 8)])
    @pytest.mark.parametrize("name", sorted(CASES))
    def test_value_gradient_and_hvp_equal_the_reference(self, name: str, n: int, d: int) -> None:
        ours, reference = CASES[name]
        H = _views(n, d, seed=3)
        v = torch.randn(H.shape, generator=torch.Generator().manual_seed(4), dtype=H.dtype)
        out = []
        for fn in (ours, reference):
            value = fn(H[0], H[1])
            (grad,) = torch.autograd.grad(value, H, create_graph=True)
            (hvp,) = torch.autograd.grad(grad, H, v)
            out.append((value.detach(), grad.detach(), hvp))
        for mine, theirs in zip(out[0], out[1], strict=True):
            scale = theirs.abs().max()
            assert (mine - theirs).abs().max() <= 1e-11 * scale, name
