from __future__ import annotations

import copy
import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import hessian

from solo_geometry.geometry.spectrum import (
    HessianSpectrum,
    OperatorSpectrum,
    effective_hessian_spectrum,
    operator_spectrum,
    subsample_indices,
)
from solo_geometry.heads import SmoothMLPHead
from solo_geometry.init import pseudo_collapse_

V, N, D = 2, 5, 3


def swish_head(norm: str | None = None, activation: str = "swish") -> nn.Module:
    torch.manual_seed(0)
    return SmoothMLPHead(D, 6, 4, activation=activation, norm=norm)


def features(n: int = N, d: int = D) -> Tensor:
    return torch.randn(V, n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def dense_heff(head: nn.Module, loss_fn: Callable[[Tensor], Tensor], z: Tensor) -> Tensor:
    head = copy.deepcopy(head).double().train()
    shape = z.shape

    def total(zf: Tensor) -> Tensor:
        zz = zf.reshape(shape)
        return loss_fn(torch.stack([head(zz[v]) for v in range(shape[0])]))

    return hessian(total, z.reshape(-1))


class TestOperatorSpectrum:
    def test_definitions_on_ritz_values(self) -> None:
        ritz = torch.tensor([-4.0, -1e-12, 0.0, 1e-13, 2.0, 8.0], dtype=torch.float64)
        s = operator_spectrum(ritz, floor=1e-9)
        assert s == OperatorSpectrum(
            lambda_min=-4.0,
            lambda_max=8.0,
            neg_count=1,
            neg_mass=4.0 / (14.0 + 1e-12 + 1e-13),
            cond=8.0 / 2.0,
        )

    def test_round_off_only(self) -> None:
        s = operator_spectrum(torch.tensor([-1e-15, 2e-15], dtype=torch.float64), floor=1e-10)
        assert s.neg_count == 0 and s.neg_mass == 0.0 and math.isnan(s.cond)


class TestEffectiveHessianSpectrum:
    @pytest.mark.parametrize("norm", [None, "bn"])
    def test_matches_dense_eigvalsh(self, norm: str | None, ssl_loss: Callable) -> None:
        head, z = swish_head(norm), features()
        s = effective_hessian_spectrum(head, ssl_loss, z, steps=V * N * D)
        exact = torch.linalg.eigvalsh(dense_heff(head, ssl_loss, z))
        scale = float(exact.abs().max())
        assert abs(s.heff.lambda_min - float(exact[0])) <= 1e-10 * scale
        assert abs(s.heff.lambda_max - float(exact[-1])) <= 1e-10 * scale
        assert s.floor == pytest.approx(1e-10 * scale, rel=1e-8)
        assert 0 < s.interaction_ratio < 10
        assert isinstance(s, HessianSpectrum) and s.dim == V * N * D

    def test_record_keys(self) -> None:
        record = effective_hessian_spectrum(swish_head(), _loss, features(), steps=5).as_record()
        names = ("lambda_min", "lambda_max", "neg_count", "neg_mass", "cond")
        expected = {f"{op}/{k}" for op in ("heff", "gn", "m") for k in names}
        assert set(record) == expected | {"interaction_ratio"}

    def test_max_samples_is_the_principal_sub_block(self) -> None:
        head, z = swish_head("bn"), features(n=8)
        idx = subsample_indices(8, 3)
        assert idx is not None and idx.tolist() == [0, 4, 7]
        s = effective_hessian_spectrum(head, _loss, z, steps=100, max_samples=3)
        full = dense_heff(head, _loss, z).reshape(V, 8, D, V, 8, D)
        sub = full[:, idx][:, :, :, :, idx].reshape(V * 3 * D, V * 3 * D)
        exact = torch.linalg.eigvalsh(sub)
        assert s.dim == V * 3 * D
        assert s.heff.lambda_min == pytest.approx(float(exact[0]), rel=1e-9)
        assert s.heff.lambda_max == pytest.approx(float(exact[-1]), rel=1e-9)

    def test_float32(self) -> None:
        head, z = swish_head(), features()
        s64 = effective_hessian_spectrum(head, _loss, z, steps=30)
        s32 = effective_hessian_spectrum(head, _loss, z, steps=30, dtype=torch.float32)
        assert s32.floor == pytest.approx(1e-5 * abs(s64.heff.lambda_max), rel=1e-3)
        assert s32.heff.lambda_max == pytest.approx(s64.heff.lambda_max, rel=1e-4)

    @pytest.mark.parametrize("loss_name", ["nt_xent", "barlow_twins"])
    def test_pseudo_collapse_swish_negative_relu_none(
        self, loss_name: str, ssl_losses: dict[str, Callable[[Tensor], Tensor]]
    ) -> None:
        gen = torch.Generator().manual_seed(0)
        z = torch.randn(16, generator=gen, dtype=torch.float64)
        z = z + 1e-3 * torch.randn(2, 12, 16, generator=gen, dtype=torch.float64)  # near-constant
        counts = {}
        for act in ("swish", "relu"):
            torch.manual_seed(0)
            head = pseudo_collapse_(SmoothMLPHead(16, 32, 8, activation=act, norm=None), 0.1)
            s = effective_hessian_spectrum(head, ssl_losses[loss_name], z, steps=30)
            counts[act] = s.m.neg_count
        assert counts["swish"] > 0
        assert counts["relu"] == 0

    def test_rejects_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="dtype"):
            effective_hessian_spectrum(swish_head(), _loss, features(), dtype=torch.float16)
        with pytest.raises(ValueError, match="max_samples"):
            effective_hessian_spectrum(swish_head(), _loss, features(), max_samples=0)


def _loss(h: Tensor) -> Tensor:
    return (h[0] - h[1]).pow(2).sum() + torch.tanh(h).sum()


class TestNoSideEffects:
    @pytest.mark.parametrize("training", [True, False])
    def test_head_grads_bn_mode_and_rng_unchanged(self, training: bool) -> None:
        head = swish_head("bn").train()
        head(torch.randn(N, D))
        head.train(training)
        for p in head.parameters():
            p.grad = torch.randn_like(p)
        state = copy.deepcopy(head.state_dict())
        grads = [p.grad.clone() for p in head.parameters()]  # type: ignore[union-attr]
        params = [p.detach().clone() for p in head.parameters()]
        rng = torch.get_rng_state()
        effective_hessian_spectrum(head, _loss, features(), steps=8)
        assert head.training is training
        assert all(m.training is training for m in head.modules())
        assert torch.equal(torch.get_rng_state(), rng)
        for key, value in head.state_dict().items():
            assert torch.equal(value, state[key]), key
        for p, g, q in zip(head.parameters(), grads, params, strict=True):
            assert torch.equal(p.grad, g) and torch.equal(p, q)  # type: ignore[arg-type]
