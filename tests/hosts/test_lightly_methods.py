"""Losses, heads, LARS and schedules of the lightly host against hand-written formulas."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_geometry.config import HeadConfig
from solo_geometry.hosts.lightly.losses import (
    Objective,
    build_optimizer,
    build_predictor,
    build_projector,
    momentum_tau,
    warmup_cosine_lr,
)
from solo_geometry.hosts.lightly.nodes import (
    OPTIMIZER_KWARGS,
    BarlowTwinsKwargs,
    BYOLKwargs,
    MethodKwargs,
    OptimizerNode,
    SimCLRKwargs,
    VICRegKwargs,
)
from solo_geometry.models.heads import SmoothMLPHead

KWARGS: dict[str, MethodKwargs] = {
    "simclr": SimCLRKwargs(proj_hidden_dim=16, proj_output_dim=8, temperature=0.2),
    "byol": BYOLKwargs(proj_hidden_dim=16, proj_output_dim=8, pred_hidden_dim=12),
    "vicreg": VICRegKwargs(
        proj_hidden_dim=16,
        proj_output_dim=8,
        sim_loss_weight=25.0,
        var_loss_weight=25.0,
        cov_loss_weight=1.0,
    ),
    "barlow_twins": BarlowTwinsKwargs(
        proj_hidden_dim=16, proj_output_dim=8, lamb=0.0051, scale_loss=0.024
    ),
}


def _batch(seed: int = 0, n: int = 6, p: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(2, n, p, generator=g, dtype=torch.float64)
    T = torch.randn(2, n, p, generator=g, dtype=torch.float64)
    return H, T


# ---- hand-written references (the papers' formulas, as solo-learn states them) -------------


def ref_simclr(H: torch.Tensor, t: float) -> torch.Tensor:
    """NT-Xent: -log softmax of the positive over all other 2N-1 samples, mean over 2N."""
    z = F.normalize(torch.cat([H[0], H[1]]), dim=1)
    n2 = z.shape[0]
    n = n2 // 2
    total = torch.zeros((), dtype=z.dtype)
    for i in range(n2):
        j = (i + n) % n2
        sims = torch.stack([z[i] @ z[k] / t for k in range(n2) if k != i])
        total = total - (z[i] @ z[j] / t - torch.logsumexp(sims, 0))
    return total / n2


def ref_byol(H: torch.Tensor, T: torch.Tensor, pred: nn.Module) -> torch.Tensor:
    """sum over ordered view pairs of 2 - 2 * mean cosine(pred(H[v2]), T[v1])."""
    total = torch.zeros((), dtype=H.dtype)
    for v1 in range(2):
        v2 = 1 - v1
        p = pred(H[v2])
        cos = (p * T[v1]).sum(1) / (p.norm(dim=1) * T[v1].norm(dim=1))
        total = total + 2 - 2 * cos.mean()
    return total


def ref_vicreg(a: torch.Tensor, b: torch.Tensor, s: float, v: float, c: float) -> torch.Tensor:
    """s * MSE + v * (hinge on std of a + of b) + c * (off-diagonal cov^2 / D of a + of b)."""
    n, d = a.shape

    def var(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(1 - torch.sqrt(x.var(dim=0) + 1e-4)).mean()

    def cov(x: torch.Tensor) -> torch.Tensor:
        x = x - x.mean(0)
        m = x.T @ x / (n - 1)
        return (m**2).sum() / d - (torch.diagonal(m) ** 2).sum() / d

    return s * ((a - b) ** 2).mean() + v * (var(a) + var(b)) + c * (cov(a) + cov(b))


def ref_barlow(a: torch.Tensor, b: torch.Tensor, lamb: float, scale: float) -> torch.Tensor:
    """scale * (sum (C_ii - 1)^2 + lamb * sum_{i != j} C_ij^2), C of batch-standardised views."""
    n = a.shape[0]

    def std(x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)

    C = std(a).T @ std(b) / n
    on = ((torch.diagonal(C) - 1) ** 2).sum()
    off = (C**2).sum() - (torch.diagonal(C) ** 2).sum()
    return scale * (on + lamb * off)


class TestObjective:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_simclr(self, seed: int) -> None:
        H, _ = _batch(seed)
        got = Objective("simclr", KWARGS["simclr"])(H)
        torch.testing.assert_close(got, ref_simclr(H, 0.2))

    @pytest.mark.parametrize("seed", [0, 1])
    def test_byol(self, seed: int) -> None:
        H, T = _batch(seed)
        pred = build_predictor("byol", KWARGS["byol"])
        assert pred is not None
        pred = pred.double().train()
        got = Objective("byol", KWARGS["byol"], pred)(H, T)
        torch.testing.assert_close(got, ref_byol(H, T, pred))

    @pytest.mark.parametrize("seed", [0, 1])
    def test_vicreg(self, seed: int) -> None:
        H, _ = _batch(seed)
        got = Objective("vicreg", KWARGS["vicreg"])(H)
        torch.testing.assert_close(got, ref_vicreg(H[0], H[1], 25.0, 25.0, 1.0))

    @pytest.mark.parametrize("seed", [0, 1])
    def test_barlow_twins(self, seed: int) -> None:
        H, _ = _batch(seed)
        got = Objective("barlow_twins", KWARGS["barlow_twins"])(H)
        torch.testing.assert_close(got, ref_barlow(H[0], H[1], 0.0051, 0.024))

    def test_byol_without_targets_raises(self) -> None:
        pred = build_predictor("byol", KWARGS["byol"])
        with pytest.raises(ValueError, match="targets"):
            Objective("byol", KWARGS["byol"], pred)(_batch()[0].float())

    def test_unknown_method(self) -> None:
        with pytest.raises(ValueError, match="unknown method"):
            Objective("moco", KWARGS["simclr"])

    @pytest.mark.parametrize("method", ["simclr", "byol", "vicreg", "barlow_twins"])
    def test_other_methods_kwargs_rejected(self, method: str) -> None:
        other = KWARGS["vicreg" if method != "vicreg" else "simclr"]
        pred = build_predictor("byol", KWARGS["byol"])
        with pytest.raises(TypeError, match=f"method_kwargs of {method}"):
            Objective(method, other, pred)


class TestHeads:
    @pytest.mark.parametrize(
        ("method", "n_linear", "n_bn"),
        [("simclr", 2, 0), ("byol", 2, 1), ("vicreg", 3, 2), ("barlow_twins", 3, 2)],
    )
    def test_solo_structure(self, method: str, n_linear: int, n_bn: int) -> None:
        proj = build_projector(method, 32, KWARGS[method])
        mods = list(proj.modules())
        assert sum(isinstance(m, nn.Linear) for m in mods) == n_linear
        assert sum(isinstance(m, nn.BatchNorm1d) for m in mods) == n_bn
        assert proj(torch.randn(4, 32)).shape == (4, 8)
        assert "0.weight" in proj.state_dict()  # solo-learn's key names

    def test_configured_head(self) -> None:
        head = HeadConfig(name="smooth_mlp", activation="swish")
        proj = build_projector("byol", 32, KWARGS["byol"], head)
        assert isinstance(proj, SmoothMLPHead)
        assert proj(torch.randn(4, 32)).shape == (4, 8)

    def test_predictor_only_for_byol(self) -> None:
        assert build_predictor("simclr", KWARGS["simclr"]) is None


def _opt(name: str, **kwargs: object) -> OptimizerNode:
    defaults = {"lars": {"eta": 0.02}}.get(name, {})  # solo-learn's defaults, LARS's eta 0.02
    return OptimizerNode(
        name=name,
        batch_size=256,
        lr=0.5,
        classifier_lr=0.5,
        weight_decay=1e-4,
        kwargs=OPTIMIZER_KWARGS[name](**{**defaults, **kwargs}),
        exclude_bias_n_norm_wd=False,
    )


class TestLARS:
    @pytest.mark.parametrize("clip", [False, True])
    @pytest.mark.parametrize("exclude", [False, True])
    def test_first_step_matches_formula(self, clip: bool, exclude: bool) -> None:
        torch.manual_seed(0)
        lin = nn.Linear(5, 3).double()
        w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
        lin(torch.randn(7, 5, dtype=torch.float64)).pow(2).sum().backward()
        gw, gb = lin.weight.grad.clone(), lin.bias.grad.clone()  # type: ignore[union-attr]
        opt = build_optimizer(
            [{"name": "x", "params": lin.parameters()}],
            _opt("lars", clip_lr=clip, exclude_bias_n_norm=exclude),
        )
        opt.step()
        lr, wd, eta = 0.5, 1e-4, 0.02

        def expected(p: torch.Tensor, g: torch.Tensor, vector: bool) -> torch.Tensor:
            # solo-learn's LARS, written out: 1-d params skip scaling and decay when excluded.
            if vector and exclude:
                return p - lr * g
            local = eta * p.norm() / (g.norm() + wd * p.norm() + 1e-8)
            if clip:
                local = min(local / lr, 1.0)
            return p - lr * local * (g + wd * p)

        torch.testing.assert_close(lin.weight.detach(), expected(w0, gw, False))
        torch.testing.assert_close(lin.bias.detach(), expected(b0, gb, True))

    @pytest.mark.parametrize("name", ["sgd", "adamw", "lars"])
    def test_classifier_group_keeps_its_lr(self, name: str) -> None:
        a, b = nn.Linear(3, 3), nn.Linear(3, 2)
        opt = build_optimizer(
            [
                {"name": "a", "params": a.parameters()},
                {"name": "c", "params": b.parameters(), "lr": 0.01, "weight_decay": 0.0},
            ],
            _opt(name),
        )
        lrs = {g["name"]: g["lr"] for g in opt.param_groups}
        assert lrs == {"a": 0.5, "c": 0.01}

    def test_exclude_bias_n_norm_wd(self) -> None:
        opt = build_optimizer(
            [{"name": "a", "params": nn.Linear(3, 3).parameters()}],
            dataclasses.replace(_opt("sgd"), exclude_bias_n_norm_wd=True),
        )
        assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 1e-4]


class TestSchedule:
    def test_momentum_tau_is_solo_cosine(self) -> None:
        base, final, K = 0.99, 1.0, 12
        for k in range(K + 1):
            want = final - (final - base) * (math.cos(math.pi * k / K) + 1) / 2
            assert momentum_tau(k, K, base, final) == pytest.approx(want)

    def test_warmup_cosine_closed_form(self) -> None:
        base, start, low, warm, total = 1.0, 0.1, 0.01, 5, 20
        for k in range(total + 1):
            if k < warm:
                want = start + k * (base - start) / (warm - 1)
            else:
                want = low + 0.5 * (base - low) * (
                    1 + math.cos(math.pi * (k - warm) / (total - warm))
                )
            assert warmup_cosine_lr(k, base, warm, total, start, low) == pytest.approx(want)


@pytest.mark.solo
@pytest.mark.skipif(
    __import__("importlib").util.find_spec("solo") is None,
    reason="solo-learn 1.0.6 is not installed here",
)
class TestAgainstSoloLosses:
    """Where solo-learn is installed: the same numbers as solo-learn's own loss functions."""

    def test_all_methods(self) -> None:
        from solo.losses.barlow import barlow_loss_func
        from solo.losses.byol import byol_loss_func
        from solo.losses.simclr import simclr_loss_func
        from solo.losses.vicreg import vicreg_loss_func

        H, T = _batch(3)
        n = H.shape[1]
        simclr = simclr_loss_func(torch.cat([H[0], H[1]]), torch.arange(n).repeat(2), 0.2)
        torch.testing.assert_close(Objective("simclr", KWARGS["simclr"])(H), simclr)
        vic = vicreg_loss_func(H[0], H[1], 25.0, 25.0, 1.0)
        torch.testing.assert_close(Objective("vicreg", KWARGS["vicreg"])(H), vic)
        H32 = H.float()  # solo-learn's barlow loss builds a float32 BatchNorm
        bt = barlow_loss_func(H32[0], H32[1], 0.0051, 0.024)
        torch.testing.assert_close(Objective("barlow_twins", KWARGS["barlow_twins"])(H32), bt)
        pred = build_predictor("byol", KWARGS["byol"])
        assert pred is not None
        pred = pred.double()
        byol = byol_loss_func(pred(H[1]), T[0]) + byol_loss_func(pred(H[0]), T[1])
        torch.testing.assert_close(Objective("byol", KWARGS["byol"], pred)(H, T), byol)
