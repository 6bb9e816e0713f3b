"""The twin of solo-learn's IterNorm against solo-learn's own module (VIbCReg's projector)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

whitening = pytest.importorskip("solo.utils.whitening", reason="solo-learn 1.0.6 is not importable")

from solo_geometry.hosts.solo.iternorm import IterNormTwin, differentiable_head  # noqa: E402

pytestmark = pytest.mark.solo  # counted in the terminal summary (conftest.py)


def _iternorm(features: int = 16) -> nn.Module:
    torch.manual_seed(0)
    norm = whitening.IterNorm(features, num_groups=64, T=5, dim=2).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return norm


def _loss(h: torch.Tensor) -> torch.Tensor:
    return (h.tanh() * torch.linspace(-1, 1, h.numel(), dtype=h.dtype).view_as(h)).sum() + (
        h.pow(2).sum(0).sqrt().sum()
    )


class TestIterNormTwin:
    @pytest.mark.parametrize("training", [True, False])
    def test_forward_and_gradient_equal_solo_learn(self, training: bool) -> None:
        norm = _iternorm()
        norm.train()
        norm(torch.randn(40, 16, dtype=torch.float64))  # running buffers away from their init
        norm.train(training)
        twin = IterNormTwin(norm)
        x = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
        buffers = [b.clone() for b in norm.buffers()]
        ours = twin(x)
        assert all(torch.equal(a, b) for a, b in zip(buffers, norm.buffers(), strict=True))
        theirs = norm(x)
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
        if not training:  # solo-learn's backward gives no input gradient in eval mode
            return
        (g_ours,) = torch.autograd.grad(_loss(ours), x)
        (g_theirs,) = torch.autograd.grad(_loss(norm(x)), x)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-8, atol=1e-10)

    def test_hessian_products_match_solo_learns_gradient(self) -> None:
        norm = _iternorm()
        twin = IterNormTwin(norm)
        x = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
        v = torch.randn_like(x)
        (g,) = torch.autograd.grad(_loss(twin(x)), x, create_graph=True)
        (hv,) = torch.autograd.grad(g, x, v)  # the twin: a gradient of the gradient

        def solo_grad(z: torch.Tensor) -> torch.Tensor:
            z = z.detach().requires_grad_(True)
            return torch.autograd.grad(_loss(norm(z)), z)[0]  # solo-learn's hand-written backward

        eps = 1e-5
        fd = (solo_grad(x + eps * v) - solo_grad(x - eps * v)) / (2 * eps)
        torch.testing.assert_close(hv, fd, rtol=1e-5, atol=1e-6)

    def test_solo_learns_own_module_cannot_do_them(self) -> None:
        norm = _iternorm()
        x = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(_loss(norm(x)), x, create_graph=True)
        with pytest.raises(RuntimeError):
            torch.autograd.grad(g, x, torch.randn_like(x))
            torch.autograd.grad(g, x, torch.randn_like(x))


class TestDifferentiableHead:
    def test_swaps_iternorm_and_leaves_the_head_alone(self) -> None:
        norm = _iternorm(8)
        head = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Sequential(nn.Linear(8, 8), norm))
        head = head.double()
        measured = differentiable_head(head)
        assert isinstance(measured[2][1], IterNormTwin) and head[2][1] is norm
        assert measured[0] is head[0] and measured[2][0] is head[2][0]
        x = torch.randn(12, 6, dtype=torch.float64)
        torch.testing.assert_close(measured(x), head(x), rtol=1e-10, atol=1e-10)
        plain = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
        assert differentiable_head(plain) is plain
