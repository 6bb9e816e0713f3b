"""SimSiam on the lightly host, and the ``geometry.head`` / ``geometry.predictor`` options.

References: lightly's own ``SimSiamProjectionHead`` and ``SimSiamPredictionHead`` (same layers,
other key names), a hand-written SimSiam loss, and solo-learn's ``simsiam_loss_func`` when
solo-learn is importable.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightly.models.modules import SimSiamPredictionHead, SimSiamProjectionHead
from omegaconf import OmegaConf
from torch import nn

from solo_geometry.config import HeadConfig, PredictorConfig, geometry_config
from solo_geometry.hosts.lightly.data import build_train_loader
from solo_geometry.hosts.lightly.losses import Objective, build_predictor, build_projector
from solo_geometry.hosts.lightly.module import LightlyMethod
from solo_geometry.hosts.lightly.nodes import SimSiamKwargs
from solo_geometry.hosts.lightly.recipe import parse_recipe
from solo_geometry.models.heads import SmoothMLPHead, build_configured_predictor
from solo_geometry.models.solo_mlp import solo_projector

KW = SimSiamKwargs(proj_hidden_dim=16, proj_output_dim=8, pred_hidden_dim=6)
RECIPE = Path(__file__).parents[2] / "solo_geometry" / "recipes" / "digits" / "simsiam.yaml"


def ref_simsiam(H: torch.Tensor, pred: nn.Module, detach: bool = True) -> torch.Tensor:
    """SimSiam's symmetrised negative cosine, targets detached (Chen and He, Algorithm 1)."""
    p0, p1 = pred(H[0]), pred(H[1])
    t0, t1 = (H[0].detach(), H[1].detach()) if detach else (H[0], H[1])
    d0 = -(F.normalize(p0, dim=1) * F.normalize(t1, dim=1)).sum(1).mean()
    d1 = -(F.normalize(p1, dim=1) * F.normalize(t0, dim=1)).sum(1).mean()
    return (d0 + d1) / 2


def _load_by_position(dst: nn.Module, src: nn.Module) -> None:
    """Copy ``src``'s state into ``dst`` tensor by tensor, in registration order."""
    dst_keys, src_state = list(dst.state_dict()), list(src.state_dict().values())
    assert len(dst_keys) == len(src_state)
    dst.load_state_dict(dict(zip(dst_keys, src_state, strict=True)))


class TestSimSiamObjective:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_value_and_stop_gradient(self, seed: int) -> None:
        torch.manual_seed(seed)
        pred = build_predictor("simsiam", KW)
        assert pred is not None
        H = torch.randn(2, 5, 8, requires_grad=True)
        got = Objective("simsiam", KW, pred)(H)
        want = ref_simsiam(H, pred)
        torch.testing.assert_close(got, want)
        g_got = torch.autograd.grad(got, H)[0]
        g_want = torch.autograd.grad(ref_simsiam(H, pred), H)[0]
        torch.testing.assert_close(g_got, g_want)

    def test_without_stop_gradient(self) -> None:
        """``method_kwargs.stop_gradient=false`` (Chen and He 2021, Figure 2): the gradient also
        flows through the targets, so it differs from the stop-gradient one."""
        torch.manual_seed(0)
        pred = build_predictor("simsiam", KW)
        assert pred is not None
        kw = SimSiamKwargs(
            proj_hidden_dim=16, proj_output_dim=8, pred_hidden_dim=6, stop_gradient=False
        )
        H = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
        pred = pred.double()
        got = Objective("simsiam", kw, pred)(H)
        g_got = torch.autograd.grad(got, H)[0]
        g_want = torch.autograd.grad(ref_simsiam(H, pred, detach=False), H)[0]
        torch.testing.assert_close(g_got, g_want)
        g_sg = torch.autograd.grad(ref_simsiam(H, pred), H)[0]
        assert (g_got - g_sg).abs().max() > 1e-3

    def test_equals_solo_learn_loss(self) -> None:
        solo = pytest.importorskip("solo.losses.simsiam", reason="solo-learn not importable")
        torch.manual_seed(0)
        pred = build_predictor("simsiam", KW)
        assert pred is not None
        H = torch.randn(2, 6, 8)
        p0, p1 = pred(H[0]), pred(H[1])
        want = solo.simsiam_loss_func(p0, H[1]) / 2 + solo.simsiam_loss_func(p1, H[0]) / 2
        torch.testing.assert_close(Objective("simsiam", KW, pred)(H), want)

    def test_needs_predictor(self) -> None:
        with pytest.raises(ValueError, match="simsiam needs its predictor"):
            Objective("simsiam", KW)


class TestSimSiamHeads:
    def test_predictor_is_lightlys_prediction_head(self) -> None:
        torch.manual_seed(0)
        ours = build_predictor("simsiam", KW)
        assert ours is not None
        theirs = SimSiamPredictionHead(8, 6, 8)
        _load_by_position(theirs, ours)
        x = torch.randn(7, 8)
        torch.testing.assert_close(ours.train()(x), theirs.train()(x))
        assert "0.weight" in ours.state_dict() and "0.bias" not in ours.state_dict()

    def test_projector_is_lightlys_projection_head_in_training(self) -> None:
        torch.manual_seed(0)
        ours = build_projector("simsiam", 12, KW)
        theirs = SimSiamProjectionHead(12, 16, 8)
        src = {k: v for k, v in ours.state_dict().items() if k != "6.bias"}  # solo's frozen bias
        dst_keys = list(theirs.state_dict())
        theirs.load_state_dict(dict(zip(dst_keys, src.values(), strict=True)))
        x = torch.randn(9, 12)
        # BatchNorm(affine=False) after the last Linear removes its bias in training mode.
        torch.testing.assert_close(ours.train()(x), theirs.train()(x))
        assert not ours[6].bias.requires_grad  # solo-learn's hack, reproduced

    def test_solo_projector_keys_are_solo_learns(self) -> None:
        keys = set(solo_projector("simsiam", 12, 16, 8).state_dict())
        assert {"0.weight", "1.weight", "3.weight", "4.running_mean", "6.weight", "6.bias"} <= keys
        assert "0.bias" not in keys and "7.weight" not in keys  # affine-free output norm
        assert "7.running_mean" in keys


class TestPredictorOptions:
    def test_null_options_follow_the_head(self) -> None:
        head = HeadConfig(name="smooth_mlp", activation="gelu", norm="none", bias=False)
        pred = build_configured_predictor(PredictorConfig(name="smooth_mlp"), head, 8, 6)
        assert isinstance(pred, SmoothMLPHead)
        assert pred.activation == "gelu"
        assert not any(isinstance(m, nn.BatchNorm1d) for m in pred.modules())
        assert all(m.bias is None for m in pred.modules() if isinstance(m, nn.Linear))
        assert pred(torch.randn(3, 8)).shape == (3, 8)
        assert pred.layers[0].weight.shape == (6, 8)  # the recipe's pred_hidden_dim

    def test_identity_is_no_predictor(self) -> None:
        pred = build_configured_predictor(PredictorConfig(name="identity"), HeadConfig(), 8, 6)
        assert isinstance(pred, nn.Identity) and not list(pred.parameters())
        with pytest.raises(ValueError, match="identity"):  # the choices name it
            PredictorConfig(name="none")

    def test_own_options_win(self) -> None:
        head = HeadConfig(name="smooth_mlp", activation="gelu", norm="none")
        pcfg = PredictorConfig(name="smooth_mlp", activation="relu", norm="bn", out_norm=True)
        pred = build_configured_predictor(pcfg, head, 8)
        assert pred.activation == "relu"
        assert sum(isinstance(m, nn.BatchNorm1d) for m in pred.modules()) == 2

    def test_paper_head_bias_and_out_norm(self) -> None:
        head = SmoothMLPHead(6, 10, 4, activation="swish", norm="bn", bias=False, out_norm=True)
        names = [type(m).__name__ for m in head.layers]
        assert names == ["Linear", "BatchNorm1d", "SiLU", "Linear", "BatchNorm1d", "Identity"]
        assert all(m.bias is None for m in head.modules() if isinstance(m, nn.Linear))
        default = SmoothMLPHead(6, 10, 4, activation="swish", norm="bn")
        assert set(default.state_dict()) - set(head.state_dict()) == {"layers.3.bias"}

    def test_host_keeps_its_predictor_by_default(self) -> None:
        assert isinstance(
            build_predictor("simsiam", KW, PredictorConfig(), HeadConfig()), nn.Sequential
        )

    @pytest.mark.parametrize(
        ("node", "key"),
        [
            ({"name": "mlp"}, "geometry.predictor.name"),
            ({"activation": "sigmoid"}, "geometry.predictor.activation"),
            ({"norm": "gn"}, "geometry.predictor.norm"),
            ({"depth": 0}, "geometry.predictor.depth"),
        ],
    )
    def test_bad_values_name_the_key(self, node: dict, key: str) -> None:
        cfg = OmegaConf.create({"geometry": {"enabled": True, "predictor": node}})
        with pytest.raises(ValueError, match=key):
            geometry_config(cfg)

    def test_on_off_words_for_head_bias(self) -> None:
        cfg = OmegaConf.create({"geometry": {"head": {"bias": "off"}, "predictor": {"bias": "on"}}})
        gcfg = geometry_config(cfg)
        assert gcfg is not None and gcfg.head.bias is False and gcfg.predictor.bias is True


class TestSimSiamRecipe:
    def test_digits_recipe_parses_with_paper_optimiser(self) -> None:
        parsed = parse_recipe(OmegaConf.load(RECIPE))
        assert parsed.method == "simsiam"
        assert isinstance(parsed.method_kwargs, SimSiamKwargs)
        # the paper's collapse experiment: SGD, momentum 0.9, lr 0.05, no decay, no schedule
        assert parsed.optimizer.name == "sgd" and parsed.optimizer.lr == pytest.approx(0.05)
        assert parsed.optimizer.weight_decay == 0.0 and parsed.scheduler.name == "none"
        assert parsed.method_kwargs.stop_gradient is True

    def test_stop_gradient_switch(self) -> None:
        raw = OmegaConf.load(RECIPE)
        raw.method_kwargs.stop_gradient = False
        parsed = parse_recipe(raw)
        assert isinstance(parsed.method_kwargs, SimSiamKwargs)
        assert parsed.method_kwargs.stop_gradient is False


class _Rates(pl.Callback):
    """Each group's learning rate after every optimiser step, by group name."""

    def __init__(self) -> None:
        self.rates: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        groups = trainer.optimizers[0].param_groups
        self.rates.append({g["name"]: g["lr"] for g in groups})


class TestStaticPredictorRate:
    def test_predictor_keeps_base_rate_under_warmup_cosine(self, digits: Path) -> None:
        """solo-learn's ``static_lr``: SimSiam's predictor is not scheduled, the rest is."""
        raw = OmegaConf.load(RECIPE)
        raw.data.train_path, raw.data.val_path = str(digits / "train"), None
        raw.optimizer.batch_size = 8
        raw.scheduler = {"name": "warmup_cosine", "warmup_epochs": 1}
        raw.max_epochs, raw.limit_train_batches = 2, 2
        recipe = parse_recipe(raw)
        torch.manual_seed(0)
        model = LightlyMethod(recipe, num_classes=10)
        rates = _Rates()
        trainer = pl.Trainer(
            max_epochs=2,
            limit_train_batches=2,
            callbacks=[rates],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
        )
        loader = build_train_loader(recipe.data, recipe.augmentations, 8)
        trainer.fit(model, loader)
        base = recipe.optimizer.lr
        assert [r["predictor"] for r in rates.rates] == pytest.approx([base] * 4)
        assert len({r["projector"] for r in rates.rates}) > 1  # the schedule moved the others
