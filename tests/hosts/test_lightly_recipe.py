"""The lightly host's recipe checks: solo-learn's defaults, and errors naming the field."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from lightly_support import AUGMENTATION, recipe_dict  # noqa: E402

from solo_geometry.hosts.lightly.data import build_pipeline  # noqa: E402
from solo_geometry.hosts.lightly.nodes import (  # noqa: E402
    AdamWKwargs,
    AugmentationNode,
    AugmentationProbs,
    BarlowTwinsKwargs,
    BYOLKwargs,
    CheckpointNode,
    DataNode,
    LARSKwargs,
    MomentumNode,
    OptimizerNode,
    SchedulerNode,
    SGDKwargs,
    SimCLRKwargs,
    VICRegKwargs,
)
from solo_geometry.hosts.lightly.recipe import IRRELEVANT, ParsedRecipe, parse_recipe  # noqa: E402
from solo_geometry.recipe import recipe_from_yaml  # noqa: E402

DATA = Path("/nonexistent/digits")


def _recipe(method: str = "byol", /, **changes: Any) -> dict[str, Any]:
    recipe = recipe_dict(method, DATA)
    recipe.pop("defaults")
    recipe["augmentations"] = [dict(AUGMENTATION), dict(AUGMENTATION)]
    for key, value in changes.items():
        if value is None:
            recipe.pop(key, None)
        else:
            recipe[key] = value
    return recipe


def _parse(recipe: dict[str, Any]) -> ParsedRecipe:
    import yaml

    return parse_recipe(recipe_from_yaml(yaml.safe_dump(recipe)))


class TestDefaults:
    @pytest.mark.parametrize("method", ["simclr", "byol", "vicreg", "barlow_twins"])
    def test_parses(self, method: str) -> None:
        parsed = _parse(_recipe(method))
        assert parsed.method == method
        assert parsed.seed == 5  # solo-learn's default seed
        assert parsed.cifar is False

    def test_lr_scaled_like_solo(self) -> None:
        parsed = _parse(_recipe(devices=[0, 1], accelerator="gpu"))
        scale = 16 * 2 / 256
        assert parsed.optimizer.lr == pytest.approx(0.3 * scale)
        assert parsed.optimizer.classifier_lr == pytest.approx(0.1 * scale)

    def test_accumulation_scales_lr(self) -> None:
        parsed = _parse(_recipe(accumulate_grad_batches=2))
        assert parsed.optimizer.lr == pytest.approx(0.3 * 16 / 256 * 2)
        assert parsed.optimizer.accumulate == 2

    def test_method_defaults(self) -> None:
        parsed = _parse(_recipe("barlow_twins"))
        assert parsed.method_kwargs == BarlowTwinsKwargs(64, 64, lamb=0.0051, scale_loss=0.1)
        vic = _parse(_recipe("vicreg", method_kwargs={"proj_hidden_dim": 8, "proj_output_dim": 8}))
        assert vic.method_kwargs == VICRegKwargs(8, 8, 25.0, 25.0, 1.0)

    def test_scheduler_defaults(self) -> None:
        sch = _parse(_recipe()).scheduler
        assert (sch.warmup_epochs, sch.warmup_start_lr, sch.min_lr) == (10, 3e-5, 0.0)
        assert sch.interval == "step"

    def test_trainer_keys_passed(self) -> None:
        trainer = _parse(_recipe(log_every_n_steps=3, gradient_clip_val=1.0)).trainer
        assert trainer["limit_train_batches"] == 2
        assert trainer["log_every_n_steps"] == 3
        assert trainer["gradient_clip_val"] == 1.0
        assert trainer["devices"] == 1  # [0] on cpu becomes a count

    def test_cifar_stem(self) -> None:
        data = {"dataset": "cifar10", "train_path": "x", "num_workers": 0}
        assert _parse(_recipe(data=data)).cifar is True

    @pytest.mark.parametrize("key", sorted(IRRELEVANT))
    def test_irrelevant_accepted(self, key: str) -> None:
        _parse(_recipe(**{key: {"enabled": False}}))

    def test_wandb_enabled_is_noted(self) -> None:
        parsed = _parse(_recipe(wandb={"enabled": True, "project": "x"}))
        assert any("wandb" in n for n in parsed.notes)


class TestNodes:
    """parse_recipe returns typed frozen nodes holding the recipe's values and solo-learn's."""

    def test_byol_nodes(self) -> None:
        parsed = _parse(_recipe("byol", checkpoint={"enabled": True, "frequency": 2}))
        assert parsed.method_kwargs == BYOLKwargs(64, 32, pred_hidden_dim=64)
        assert parsed.momentum == MomentumNode(base_tau=0.99, final_tau=1.0)
        assert parsed.data == DataNode(
            dataset="custom",
            train_path=str(DATA / "train"),
            val_path=str(DATA / "val"),
            num_workers=0,
            fraction=-1.0,
        )
        assert not parsed.data.cifar and not parsed.cifar
        scale = 16 / 256  # batch_size * devices * num_nodes / 256
        lars = LARSKwargs(momentum=0.9, eta=0.02, clip_lr=True, exclude_bias_n_norm=True)
        assert parsed.optimizer == OptimizerNode(
            name="lars",
            batch_size=16,
            lr=0.3 * scale,
            classifier_lr=0.1 * scale,
            weight_decay=1e-4,
            kwargs=lars,
            exclude_bias_n_norm_wd=False,
            accumulate=1,
        )
        assert parsed.scheduler == SchedulerNode(name="warmup_cosine", interval="step")
        assert parsed.checkpoint == CheckpointNode(enabled=True, frequency=2, keep_prev=False)
        probs = AugmentationProbs(
            color_jitter=0.8, grayscale=0.2, solarization=0.1, horizontal_flip=0.5
        )
        want = AugmentationNode(32, 1, True, (0.2, 1.0), (0.4, 0.4, 0.2, 0.1), probs)
        assert parsed.augmentations == (want, want)
        assert parsed.trainer == {
            "limit_train_batches": 2,
            "limit_val_batches": 1,
            "devices": 1,
            "accelerator": "cpu",
            "strategy": "auto",
            "precision": 32,
            "num_sanity_val_steps": 0,
        }
        with pytest.raises(dataclasses.FrozenInstanceError):
            parsed.optimizer.lr = 1.0  # type: ignore[misc]

    def test_simclr_and_optimizers(self) -> None:
        sgd = {
            "name": "sgd",
            "batch_size": 64,
            "lr": 0.4,
            "weight_decay": 1e-5,
            "kwargs": {"nesterov": True},
            "exclude_bias_n_norm_wd": True,
        }
        parsed = _parse(_recipe("simclr", optimizer=sgd, accumulate_grad_batches=2))
        assert parsed.method_kwargs == SimCLRKwargs(64, 32, temperature=0.2)
        assert isinstance(parsed.method_kwargs.temperature, float)
        opt = parsed.optimizer
        assert opt.kwargs == SGDKwargs(momentum=0.9, nesterov=True, dampening=0.0)
        assert (opt.lr, opt.classifier_lr) == (0.4 * 64 / 256 * 2, 0.1 * 64 / 256 * 2)
        assert opt.exclude_bias_n_norm_wd and opt.accumulate == 2
        adamw = {
            "name": "adamw",
            "batch_size": 8,
            "lr": 1e-3,
            "weight_decay": 0.05,
            "kwargs": {"betas": [0.8, 0.99]},
        }
        kwargs = _parse(_recipe("simclr", optimizer=adamw)).optimizer.kwargs
        assert kwargs == AdamWKwargs(betas=(0.8, 0.99), eps=1e-8, amsgrad=False)

    def test_scheduler_and_pipeline_values(self) -> None:
        sch = {"name": "step", "lr_decay_steps": [3, 5], "interval": "epoch", "min_lr": 0.01}
        second = {**AUGMENTATION, "rrc": {"enabled": False}, "mean": [0.5, 0.4, 0.3]}
        recipe = _recipe(scheduler=sch, accumulate_grad_batches=2)
        recipe["augmentations"][1] = second
        parsed = _parse(recipe)
        assert parsed.scheduler == SchedulerNode(
            name="step",
            interval="epoch",
            lr_decay_steps=(3, 5),
            min_lr=0.02,
            warmup_start_lr=3e-5 * 2,
            warmup_epochs=10.0,
        )
        aug = parsed.augmentations[1]
        assert (aug.rrc, aug.scale) == (False, (0.08, 1.0))  # rrc's defaults when disabled
        assert (aug.mean, aug.std) == ((0.5, 0.4, 0.3), None)

    def test_nodes_check_their_values(self) -> None:
        with pytest.raises(ValueError, match=r"data\.dataset='stl10'.*choose from"):
            DataNode(dataset="stl10", train_path="x")
        with pytest.raises(TypeError, match="SGDKwargs"):
            OptimizerNode("sgd", 16, 0.1, 0.1, 1e-4, kwargs=LARSKwargs())
        with pytest.raises(ValueError, match=r"scheduler\.interval.*'batch'"):
            SchedulerNode(interval="batch")
        parsed = _parse(_recipe("byol"))
        with pytest.raises(TypeError, match="BYOLKwargs"):
            dataclasses.replace(parsed, method_kwargs=SimCLRKwargs(8, 8, 0.1))


class TestErrors:
    @pytest.mark.parametrize(
        ("changes", "field"),
        [
            ({"not_a_field": 1}, "not_a_field"),
            ({"method": "swav"}, "method='swav'"),
            (
                {
                    "method_kwargs": {
                        "proj_hidden_dim": 8,
                        "proj_output_dim": 8,
                        "pred_hidden_dim": 8,
                        "momentum_classifier": 1,
                    }
                },
                "method_kwargs.momentum_classifier",
            ),
            (
                {"method_kwargs": {"proj_hidden_dim": 8, "proj_output_dim": 8}},
                "method_kwargs.pred_hidden_dim",
            ),
            ({"knn_eval": {"enabled": True}}, "knn_eval.enabled"),
            (
                {"backbone": {"name": "resnet18", "kwargs": {"zero_init_residual": True}}},
                "backbone.kwargs",
            ),
            ({"momentum": {"base_tau": 0.99, "classifier": True}}, "momentum.classifier"),
            ({"resume_from_checkpoint": "x.ckpt"}, "resume_from_checkpoint"),
            ({"scheduler": {"name": "cosine"}}, "scheduler.name"),
            ({"scheduler": {"name": "warmup_cosine", "max_lr": 1}}, "scheduler.max_lr"),
            ({"max_epochs": None}, "max_epochs"),
        ],
    )
    def test_names_the_field(self, changes: dict[str, Any], field: str) -> None:
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
            _parse(_recipe(**changes))

    @pytest.mark.parametrize(
        ("node", "value", "field"),
        [
            ("data", {"format": "dali"}, "data.format"),
            ("data", {"dataset": "stl10"}, "data.dataset"),
            ("data", {"no_labels": True}, "data.no_labels"),
            ("data", {"extra": 1}, "data.extra"),
            ("optimizer", {"name": "adam"}, "optimizer.name"),
            ("optimizer", {"kwargs": {"trust": 1}}, "optimizer.kwargs.trust"),
            ("optimizer", {"weight_decay": 0.0}, "optimizer.weight_decay"),
        ],
    )
    def test_nested_fields(self, node: str, value: dict[str, Any], field: str) -> None:
        recipe = _recipe()
        recipe[node] = {**recipe[node], **value}
        with pytest.raises(ValueError, match=field):
            _parse(recipe)

    @pytest.mark.parametrize(
        ("node", "key"),
        [
            ("data", "datset"),
            ("optimizer", "learning_rate"),
            ("scheduler", "warmup_epoch"),
            ("checkpoint", "frequncy"),
            ("momentum", "base_ta"),
            ("method_kwargs", "pred_hiden_dim"),
        ],
    )
    def test_typo_names_the_key(self, node: str, key: str) -> None:
        recipe = _recipe()
        recipe[node] = {**(recipe.get(node) or {}), key: 1}
        with pytest.raises(ValueError, match=rf"{node}\.{key} not supported"):
            _parse(recipe)

    @pytest.mark.parametrize(
        ("node", "value", "message"),
        [
            ("optimizer", {"kwargs": {"etta": 0.02}}, r"optimizer\.kwargs\.etta not supported"),
            ("optimizer", {"lr": "fast"}, r"optimizer\.lr='fast' must be of type float"),
            ("optimizer", {"batch_size": "big"}, r"optimizer\.batch_size='big'"),
            (
                "optimizer",
                {"name": "adamw", "kwargs": {"betas": [0.9]}},
                r"optimizer\.kwargs\.betas=\[0\.9\] must be a list of 2",
            ),
            (
                "method_kwargs",
                {"proj_hidden_dim": "wide"},
                r"method_kwargs\.proj_hidden_dim='wide' must be of type int",
            ),
            ("data", {"fraction": 1.5}, r"data\.fraction must be in \(0, 1\) or -1, got 1\.5"),
            ("scheduler", {"interval": "batch"}, r"scheduler\.interval .*got 'batch'"),
            ("scheduler", {"name": "step"}, r"scheduler\.lr_decay_steps is required"),
            ("momentum", {"base_tau": 1.5}, r"momentum\.base_tau.*'base_tau': 1\.5"),
            ("checkpoint", {"frequency": "often"}, r"checkpoint\.frequency='often'"),
            # bool("false") is True: a string is refused, not read as true
            (
                "checkpoint",
                {"enabled": "false"},
                r"checkpoint\.enabled='false' must be true or false",
            ),
        ],
    )
    def test_bad_value_names_key_and_value(
        self, node: str, value: dict[str, Any], message: str
    ) -> None:
        recipe = _recipe()
        recipe[node] = {**(recipe.get(node) or {}), **value}
        with pytest.raises(ValueError, match=message):
            _parse(recipe)

    @pytest.mark.parametrize(
        ("node", "value", "message"),
        [
            ("color_jitter", {"prob": 0.8, "brightnes": 0.4}, r"\[0\]\.color_jitter\.brightnes"),
            (
                "rrc",
                {"enabled": True, "crop_min_scale": "small"},
                r"\[0\]\.rrc\.crop_min_scale='small' must be of type float",
            ),
            ("mean", 0.5, r"\[0\]\.mean=0\.5 must be a list"),
            ("crop_sise", 32, r"\[0\]\.crop_sise not supported"),
        ],
    )
    def test_pipeline_key_and_value(self, node: str, value: Any, message: str) -> None:
        recipe = _recipe()
        recipe["augmentations"][0] = {**recipe["augmentations"][0], node: value}
        with pytest.raises(ValueError, match=r"augmentations" + message):
            _parse(recipe)

    def test_augmentation_field(self) -> None:
        recipe = _recipe()
        recipe["augmentations"][1] = {**recipe["augmentations"][1], "cutout": {"prob": 1}}
        with pytest.raises(ValueError, match=r"augmentations\[1\]\.cutout"):
            _parse(recipe)

    def test_multicrop(self) -> None:
        recipe = _recipe()
        recipe["augmentations"].append({**recipe["augmentations"][0], "crop_size": 16})
        with pytest.raises(ValueError, match="multi-crop"):
            _parse(recipe)


class TestPipeline:
    def test_views_have_crop_size(self) -> None:
        from PIL import Image

        aug = _parse(_recipe()).augmentations[0]
        probs = dataclasses.replace(aug.probs, gaussian_blur=1.0, equalization=1.0)
        aug = dataclasses.replace(aug, probs=probs)
        x = build_pipeline("custom", aug)(Image.new("RGB", (40, 40), (10, 200, 30)))
        assert x.shape == (3, 32, 32)
