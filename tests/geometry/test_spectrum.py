from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import hessian, jacobian

import solo_geometry.geometry.spectrum as spectrum_module
from solo_geometry.folder.records import Settings
from solo_geometry.geometry.spectrum import (
    HessianSpectrum,
    OperatorSpectrum,
    SpectrumSettings,
    effective_hessian_spectrum,
    operator_spectrum,
    piecewise_linear,
)
from solo_geometry.linalg.blocks import block_indices
from solo_geometry.linalg.lanczos import CHECK_EVERY, lanczos
from solo_geometry.linalg.slq import SpectralDensity
from solo_geometry.models.heads import SmoothMLPHead
from solo_geometry.models.init import pseudo_collapse_

V, N, D = 2, 5, 3
Loss = Callable[[Tensor], Tensor]


def small_head(norm: str = "none", activation: str = "swish", depth: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return SmoothMLPHead(D, 6, 4, depth=depth, activation=activation, norm=norm)


def features(n: int = N, d: int = D) -> Tensor:
    return torch.randn(V, n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def dense_parts(head: nn.Module, loss_fn: Loss, z: Tensor) -> dict[str, Tensor]:
    """Dense float64 H_eff, GN = J^T (d2 loss/dH2) J and M = H_eff - GN of the whole batch."""
    head = copy.deepcopy(head).double().train()
    shape = z.shape

    def outputs(flat: Tensor) -> Tensor:
        zz = flat.reshape(shape)
        return torch.stack([head(zz[v]) for v in range(shape[0])])  # (V, N, p)

    z0 = z.reshape(-1)
    h_eff = hessian(lambda flat: loss_fn(outputs(flat)), z0)
    h0 = outputs(z0).detach()
    loss_h = hessian(lambda flat: loss_fn(flat.reshape(h0.shape)), h0.reshape(-1))
    jac = jacobian(lambda flat: outputs(flat).reshape(-1), z0)  # (V N p, V N d)
    gn = jac.T @ loss_h @ jac
    return {"heff": h_eff, "gn": gn, "m": h_eff - gn}


class RoundOffHead(nn.Module):
    """Linear(x + sinh(x) - (e^x - e^-x) / 2): linear in exact arithmetic, M is round-off."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(D, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x + torch.sinh(x) - (torch.exp(x) - torch.exp(-x)) / 2)


def diagonal_loss(lam: Tensor) -> Loss:
    """0.5 sum_i lam_i h_i^2: with an identity head H_eff = GN = diag(lam) and M = 0."""

    def loss(h: Tensor) -> Tensor:
        return 0.5 * (lam.to(h).reshape(h.shape) * h * h).sum()

    return loss


def diagonal_spectra() -> dict[str, Tensor]:
    f64 = torch.float64
    return {
        # 30 % negative, a gap around 0
        "gapped": torch.cat([torch.linspace(-2.0, -0.5, 60), torch.linspace(0.5, 3.0, 140)]),
        # ten eigenvalues within 1e-3 at each end
        "clustered": torch.cat(
            [
                torch.linspace(-1.0, -0.999, 10),
                torch.linspace(-0.5, 1.0, 180),
                torch.linspace(2.999, 3.0, 10),
            ]
        ),
        # magnitudes from 1e-6 to 1 on both sides: a spread of 1e6 (25 % negative)
        "spread": torch.cat([-torch.logspace(-6, 0, 50, dtype=f64), torch.logspace(-6, 0, 150)]),
    }


def identity_features(n: int) -> Tensor:
    """Z (2, n / 2, 1): the diagonal losses act on V * N * d = n coordinates."""
    return torch.randn(
        2, n // 2, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )


class TestOperatorSpectrum:
    @staticmethod
    def summary(lam: Tensor, max_steps: int, tol: float, floor: float) -> OperatorSpectrum:
        gen = torch.Generator().manual_seed(0)
        run = lanczos(lambda v: lam * v, lam.numel(), max_steps=max_steps, tol=tol, generator=gen)
        density = SpectralDensity.from_runs([run])
        return operator_spectrum(run, density, floor=floor, tol=tol, dim=lam.numel())

    def test_converged_definite_operator(self) -> None:
        lam = torch.linspace(2.0, 8.0, 12, dtype=torch.float64)  # exact after 12 steps
        s = self.summary(lam, max_steps=50, tol=1e-8, floor=1e-9)
        assert (s.lambda_min, s.lambda_max) == (pytest.approx(2.0), pytest.approx(8.0))
        assert s.converged_min and s.converged_max and s.steps == 12
        assert s.cond == pytest.approx(4.0, rel=1e-10)
        assert (s.neg_fraction, s.neg_fraction_std, s.neg_fraction_quad) == (0.0, 0.0, 0.0)
        negative = self.summary(-lam, max_steps=50, tol=1e-8, floor=1e-9)
        assert negative.cond == pytest.approx(4.0, rel=1e-10)
        assert negative.neg_fraction == 1.0 and negative.neg_fraction_quad == 0.0

    def test_indefinite_or_singular_has_no_condition_number(self) -> None:
        lam = torch.linspace(-1.0, 3.0, 12, dtype=torch.float64)
        assert self.summary(lam, max_steps=50, tol=1e-8, floor=1e-9).cond is None
        singular = torch.cat([torch.zeros(4), torch.linspace(1.0, 3.0, 8)]).double()
        assert self.summary(singular, max_steps=50, tol=1e-8, floor=1e-9).cond is None

    def test_not_converged_is_none_with_its_bounds(self) -> None:
        lam = torch.cat([torch.tensor([-1.0]), torch.linspace(0.0, 300.0, 399)]).double()
        s = self.summary(lam, max_steps=12, tol=1e-6, floor=1e-8)
        assert not s.converged_min and s.lambda_min is None and s.cond is None
        assert s.ritz_min > -0.5 and s.residual_min > 1e-6 * 300.0  # a bound, far from -1
        assert s.norm is None

    def test_cond_needs_the_small_extreme_to_relative_accuracy(self) -> None:
        lam = torch.linspace(1e-3, 1.0, 400, dtype=torch.float64)
        s = self.summary(lam, max_steps=400, tol=1e-4, floor=1e-12)
        assert s.converged_min and s.converged_max
        assert s.residual_min > 1e-4 * 1e-3  # converged w.r.t. the scale, not to itself
        assert s.cond is None


class TestEffectiveHessianSpectrum:
    @pytest.mark.parametrize("norm", ["none", "bn"])
    def test_extremes_of_all_three_match_dense(self, norm: str, ssl_loss: Loss) -> None:
        head, z = small_head(norm), features()
        s = effective_hessian_spectrum(head, ssl_loss, z, tol=1e-6)
        dense = {k: torch.linalg.eigvalsh(a) for k, a in dense_parts(head, ssl_loss, z).items()}
        scale = float(dense["heff"].abs().max())
        for op, exact in dense.items():
            spec = s.operators[op]
            assert spec.converged_min and spec.converged_max, op
            assert spec.lambda_min == pytest.approx(float(exact[0]), abs=1e-6 * scale), op
            assert spec.lambda_max == pytest.approx(float(exact[-1]), abs=1e-6 * scale), op
        assert s.floor == pytest.approx(1e-10 * scale, rel=1e-6)
        m_norm = float(dense["m"].abs().max())
        assert s.interaction_ratio == pytest.approx(m_norm / scale, abs=2e-6)
        assert isinstance(s, HessianSpectrum) and s.dim == V * N * D

    @pytest.mark.parametrize("kind", ["linear", "relu"])
    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
    def test_m_is_round_off_for_linear_and_relu_heads(
        self, kind: str, dtype: torch.dtype, ssl_loss: Loss
    ) -> None:
        head = small_head(depth=1) if kind == "linear" else small_head(activation="relu")
        s = effective_hessian_spectrum(head, ssl_loss, features(), dtype=dtype)
        m = s.m
        assert m.converged_min and m.converged_max and m.steps <= CHECK_EVERY
        assert m.lambda_min is not None and m.lambda_max is not None
        assert max(abs(m.lambda_min), abs(m.lambda_max)) <= s.floor
        assert (m.neg_fraction, m.neg_fraction_std, m.neg_fraction_quad) == (0.0, 0.0, 0.0)
        assert s.interaction_ratio is not None and s.interaction_ratio <= s.tau

    def test_round_off_m_converges_at_once_under_the_floor(self, ssl_losses: dict) -> None:
        s = effective_hessian_spectrum(RoundOffHead(), ssl_losses["nt_xent"], features())
        m = s.m
        assert m.ritz_max > 0 or m.ritz_min < 0  # not structurally zero: round-off
        assert max(abs(m.ritz_min), abs(m.ritz_max)) < 1e-14 * abs(s.heff.ritz_max)
        assert m.converged_min and m.converged_max and m.steps == 1  # checked at every step
        assert (m.neg_fraction, m.neg_fraction_quad) == (0.0, 0.0)

    @pytest.mark.parametrize("kind", ["gapped", "clustered", "spread"])
    def test_known_diagonal_operator(self, kind: str) -> None:
        lam = diagonal_spectra()[kind].double()
        z = identity_features(lam.numel())
        s = effective_hessian_spectrum(
            nn.Identity(), diagonal_loss(lam), z, tol=1e-6, density_probes=3
        )
        scale = float(lam.abs().max())
        true_fraction = float((lam < -s.floor).double().mean())
        for op in ("heff", "gn"):
            spec = s.operators[op]
            assert spec.lambda_min == pytest.approx(float(lam.min()), abs=1e-6 * scale)
            assert spec.lambda_max == pytest.approx(float(lam.max()), abs=1e-6 * scale)
            spread = spec.neg_fraction_quad + 3 * spec.neg_fraction_std
            assert abs(spec.neg_fraction - true_fraction) <= spread
        assert s.m.lambda_min == 0.0 and s.m.lambda_max == 0.0 and s.m.neg_fraction == 0.0
        assert s.interaction_ratio == 0.0 and s.probes == 4
        if kind == "gapped":  # no mass near the floor: the bracket is narrow
            assert s.heff.neg_fraction_quad < 0.05

    def test_each_operator_converges_relative_to_its_own_scale(self, ssl_losses: dict) -> None:
        head, z = small_head(activation="tanh"), features() * 1e-4  # tanh'' ~ 0 near 0
        loss = ssl_losses["nt_xent"]
        s = effective_hessian_spectrum(head, loss, z, tol=1e-4)
        assert s.interaction_ratio is not None and s.interaction_ratio < 1e-4  # M is small
        dense = {k: torch.linalg.eigvalsh(a) for k, a in dense_parts(head, loss, z).items()}
        for op, exact in dense.items():
            own = float(exact.abs().max())
            assert s.floor < 1e-4 * own
            assert s.operators[op].lambda_min == pytest.approx(float(exact[0]), abs=1e-4 * own)
            assert s.operators[op].lambda_max == pytest.approx(float(exact[-1]), abs=1e-4 * own)

    def test_too_few_steps_flagged_not_converged(self) -> None:
        lam = torch.cat([torch.tensor([-1.0]), torch.linspace(0.0, 300.0, 399)]).double()
        s = effective_hessian_spectrum(
            nn.Identity(), diagonal_loss(lam), identity_features(400), max_steps=12, tol=1e-6
        )
        heff = s.heff
        assert heff.steps == 12 and not heff.converged_min and heff.lambda_min is None
        assert heff.ritz_min > -0.5  # what a fixed 12 steps would have reported
        assert heff.cond is None and s.interaction_ratio is None
        record = s.as_record()
        assert record["heff/lambda_min"] is None and record["heff/converged_min"] is False
        full = effective_hessian_spectrum(nn.Identity(), diagonal_loss(lam), identity_features(400))
        assert full.heff.converged_min and full.heff.steps > 12
        assert full.heff.lambda_min == pytest.approx(-1.0, abs=full.heff.residual_min)

    def test_sub_block_is_that_of_the_full_batch_loss(self, ssl_losses: dict) -> None:
        loss = ssl_losses["nt_xent"]  # every other sample of the batch is a negative
        head, z = small_head("bn"), features(n=8)
        idx = block_indices(8, 3)
        assert idx is not None and idx.tolist() == [0, 4, 7]
        s = effective_hessian_spectrum(head, loss, z, tol=1e-8, max_samples=3)
        rows = torch.arange(V * 8 * D).reshape(V, 8, D)[:, idx].reshape(-1)
        scale = None
        for op, a in dense_parts(head, loss, z).items():
            exact = torch.linalg.eigvalsh(a[rows][:, rows])
            scale = scale or float(exact.abs().max())
            assert s.operators[op].lambda_min == pytest.approx(float(exact[0]), abs=1e-8 * scale)
            assert s.operators[op].lambda_max == pytest.approx(float(exact[-1]), abs=1e-8 * scale)
        assert (s.dim, s.n_batch, s.n_block) == (V * 3 * D, 8, 3)
        # the Hessian of the loss of the 3-sample batch alone is another operator
        alone = torch.linalg.eigvalsh(dense_parts(head, loss, z[:, idx])["heff"])
        assert abs(float(alone[0]) - s.heff.lambda_min) > 1e-3 * abs(s.heff.lambda_min)

    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
    def test_row_wise_head_block_with_its_rows_alone(
        self, dtype: torch.dtype, ssl_losses: dict, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A GELU chain's block from its rows alone: the dense block's extremes, and the very
        numbers of the whole batch's graph restricted to the block (the former path)."""
        loss, z, tol = (
            ssl_losses["nt_xent"],
            features(n=8),
            1e-8 if dtype == torch.float64 else 1e-3,
        )
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(D, 6), nn.GELU(), nn.Linear(6, 4))
        s = effective_hessian_spectrum(head, loss, z, tol=tol, dtype=dtype, max_samples=3)
        rows = torch.arange(V * 8 * D).reshape(V, 8, D)[:, block_indices(8, 3)].reshape(-1)
        dense = {op: a[rows][:, rows] for op, a in dense_parts(head, loss, z).items()}
        scale = float(torch.linalg.eigvalsh(dense["heff"]).abs().max())
        for op, a in dense.items():
            exact = torch.linalg.eigvalsh(a)
            assert s.operators[op].lambda_min == pytest.approx(float(exact[0]), abs=tol * scale)
            assert s.operators[op].lambda_max == pytest.approx(float(exact[-1]), abs=tol * scale)
        monkeypatch.setattr(spectrum_module, "row_wise", lambda _: False)  # the whole batch
        whole = effective_hessian_spectrum(head, loss, z, tol=tol, dtype=dtype, max_samples=3)
        for op in ("heff", "gn", "m"):
            a, b = s.operators[op], whole.operators[op]
            assert a.steps == b.steps
            assert a.ritz_min == pytest.approx(b.ritz_min, abs=1e-5 * scale)
            assert a.ritz_max == pytest.approx(b.ritz_max, abs=1e-5 * scale)

    def test_record_keys(self) -> None:
        record = effective_hessian_spectrum(small_head(), _loss, features()).as_record()
        fields = (
            "lambda_min",
            "lambda_max",
            "ritz_min",
            "ritz_max",
            "residual_min",
            "residual_max",
            "converged_min",
            "converged_max",
            "steps",
            "cond",
            "neg_fraction",
            "neg_fraction_std",
            "neg_fraction_quad",
            "seconds",
        )
        expected = {f"{op}/{k}" for op in ("heff", "gn", "m") for k in fields}
        assert set(record) == expected | {"interaction_ratio", "gn_is_heff"}  # metrics alone

    def test_settings_apart_named_as_the_record_names_them(self) -> None:
        s = effective_hessian_spectrum(small_head(), _loss, features(), max_samples=3, tol=1e-4)
        assert s.settings == SpectrumSettings(
            floor=s.floor,
            tau=1e-10,
            lanczos_tol=1e-4,
            lanczos_max_steps=200,
            slq_probes=1,
            dim=V * 3 * D,
            n_batch=s.n_batch,
            n_block=3,
        )
        record_fields = {f.name for f in dataclasses.fields(Settings)}
        assert {f.name for f in dataclasses.fields(SpectrumSettings)} <= record_fields

    def test_heff_only(self) -> None:
        gen = torch.Generator().manual_seed(3)
        s = effective_hessian_spectrum(small_head(), _loss, features(), operators=("heff",))
        assert set(s.operators) == {"heff"}
        assert all(k.startswith("heff/") or "/" not in k for k in s.as_record())
        assert "interaction_ratio" not in s.as_record()
        full = effective_hessian_spectrum(small_head(), _loss, features(), generator=gen)
        gen = torch.Generator().manual_seed(3)
        again = effective_hessian_spectrum(
            small_head(), _loss, features(), generator=gen, operators=("heff",)
        )
        assert again.heff.lambda_min == full.heff.lambda_min  # H_eff draws first

    def test_float32(self) -> None:
        head, z = small_head(), features()
        s64 = effective_hessian_spectrum(head, _loss, z, tol=1e-6)
        s32 = effective_hessian_spectrum(head, _loss, z, dtype=torch.float32, tol=1e-6)
        assert s32.tau == 1e-5
        assert s32.floor == pytest.approx(1e-5 * abs(s64.heff.lambda_max), rel=1e-4)
        scale = abs(s64.heff.lambda_max)
        for op in ("heff", "gn", "m"):
            assert s32.operators[op].lambda_min == pytest.approx(
                s64.operators[op].lambda_min, abs=1e-5 * scale
            )

    @pytest.mark.parametrize("loss_name", ["nt_xent", "barlow_twins"])
    def test_pseudo_collapse_swish_negative_relu_none(
        self, loss_name: str, ssl_losses: dict
    ) -> None:
        gen = torch.Generator().manual_seed(0)
        z = torch.randn(16, generator=gen, dtype=torch.float64)
        z = z + 1e-3 * torch.randn(2, 12, 16, generator=gen, dtype=torch.float64)  # near-constant
        spectra = {}
        for act in ("swish", "relu"):
            torch.manual_seed(0)
            head = pseudo_collapse_(SmoothMLPHead(16, 32, 8, activation=act, norm="none"), 0.1)
            spectra[act] = effective_hessian_spectrum(head, ssl_losses[loss_name], z)
        swish, relu = spectra["swish"], spectra["relu"]
        assert swish.m.lambda_min is not None and swish.m.lambda_min < -swish.floor
        assert swish.m.neg_fraction > 0
        assert relu.m.neg_fraction == 0.0 and relu.m.neg_fraction_quad == 0.0

    @pytest.mark.parametrize(
        ("options", "match"),
        [
            ({"dtype": torch.float16}, "dtype"),
            ({"max_samples": 0}, "max_samples"),
            ({"max_steps": 0}, "max_steps"),
            ({"tol": -1.0}, "tol"),
            ({"density_probes": -1}, "density_probes"),
            ({"operators": ("gn",)}, "operators"),
            ({"operators": ("heff", "hessian")}, "operators"),
        ],
    )
    def test_rejects_bad_arguments(self, options: dict, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            effective_hessian_spectrum(small_head(), _loss, features(), **options)


def _loss(h: Tensor) -> Tensor:
    return (h[0] - h[1]).pow(2).sum() + torch.tanh(h).sum()


def relu_chain(norm: bool = False) -> nn.Sequential:
    """Linear-ReLU-Linear as solo-learn builds SimCLR's projector; BatchNorm after the first."""
    torch.manual_seed(0)
    middle = [nn.BatchNorm1d(6)] if norm else []
    return nn.Sequential(nn.Linear(D, 6), *middle, nn.ReLU(), nn.Linear(6, 4))


class ShiftedLinear(nn.Linear):
    """A Linear subclass whose forward is not affine: the type says nothing of its forward."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x).pow(2)


class TestPiecewiseLinearHead:
    def test_recognised_by_its_modules(self) -> None:
        nested = nn.Sequential(nn.Linear(D, 6), nn.LeakyReLU(), nn.Dropout(0.0), nn.Flatten())
        assert piecewise_linear(relu_chain())
        assert piecewise_linear(nn.Sequential(nested, nn.Identity(), nn.Linear(6, 4)))
        assert piecewise_linear(nn.Linear(D, 4))
        for head in (
            relu_chain(norm=True),
            nn.Sequential(nn.Linear(D, 6), nn.GELU(), nn.Linear(6, 4)),
            nn.Sequential(ShiftedLinear(D, 4)),
            small_head(activation="relu"),  # its own forward, which this does not read
        ):
            assert not piecewise_linear(head), head

    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
    def test_gn_is_heffs_run_and_the_dense_gn(self, dtype: torch.dtype, ssl_loss: Loss) -> None:
        head, z, tol = relu_chain(), features(), 1e-6 if dtype == torch.float64 else 1e-3
        s = effective_hessian_spectrum(head, ssl_loss, z, tol=tol, dtype=dtype)
        assert s.gn_is_heff and s.as_record()["gn_is_heff"] is True
        assert s.gn.steps == s.heff.steps and s.gn.seconds == 0.0  # no second run
        assert (s.gn.lambda_min, s.gn.lambda_max) == (s.heff.lambda_min, s.heff.lambda_max)
        dense = dense_parts(head, ssl_loss, z)
        exact = torch.linalg.eigvalsh(dense["gn"])
        scale = float(exact.abs().max())
        assert float(dense["m"].abs().max()) <= 1e-12 * scale  # M = 0: GN is H_eff
        assert s.gn.lambda_min == pytest.approx(float(exact[0]), abs=tol * scale)
        assert s.gn.lambda_max == pytest.approx(float(exact[-1]), abs=tol * scale)
        assert s.m.converged_min and max(abs(s.m.ritz_min), abs(s.m.ritz_max)) <= s.floor

    def test_batch_norm_head_runs_gn_itself(self, ssl_losses: dict) -> None:
        head, z, loss = relu_chain(norm=True), features(), ssl_losses["nt_xent"]
        s = effective_hessian_spectrum(head, loss, z, tol=1e-6)
        assert not s.gn_is_heff and s.as_record()["gn_is_heff"] is False
        dense = {k: torch.linalg.eigvalsh(a) for k, a in dense_parts(head, loss, z).items()}
        scale = float(dense["heff"].abs().max())
        assert float(dense["m"].abs().max()) > 1e-3 * scale  # BatchNorm: M is not 0
        for op in ("gn", "m"):
            got, exact = s.operators[op], dense[op]
            assert got.lambda_min == pytest.approx(float(exact[0]), abs=1e-6 * scale)
            assert got.lambda_max == pytest.approx(float(exact[-1]), abs=1e-6 * scale)


class TestNoSideEffects:
    @pytest.mark.parametrize("training", [True, False])
    def test_head_grads_bn_mode_and_rng_unchanged(self, training: bool) -> None:
        head = small_head("bn").train()
        head(torch.randn(N, D))
        head.train(training)
        for p in head.parameters():
            p.grad = torch.randn_like(p)
        state = copy.deepcopy(head.state_dict())
        grads = [p.grad.clone() for p in head.parameters()]  # type: ignore[union-attr]
        params = [p.detach().clone() for p in head.parameters()]
        rng = torch.get_rng_state()
        effective_hessian_spectrum(head, _loss, features(), max_steps=8)
        assert head.training is training
        assert all(m.training is training for m in head.modules())
        assert torch.equal(torch.get_rng_state(), rng)
        for key, value in head.state_dict().items():
            assert torch.equal(value, state[key]), key
        for p, g, q in zip(head.parameters(), grads, params, strict=True):
            assert torch.equal(p.grad, g) and torch.equal(p, q)  # type: ignore[arg-type]
