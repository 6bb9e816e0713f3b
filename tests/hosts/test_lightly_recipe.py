"""The lightly host's recipe checks: solo-learn's defaults, and errors naming the field."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_lightly_support import AUGMENTATION, recipe_dict  # noqa: E402

from solo_geometry.hosts.lightly.data import build_pipeline  # noqa: E402
from solo_geometry.hosts.lightly.recipe import IRRELEVANT, parse_recipe  # noqa: E402
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


def _parse(recipe: dict[str, Any]) -> Any:
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
        assert parsed.optimizer["lr"] == pytest.approx(0.3 * scale)
        assert parsed.optimizer["classifier_lr"] == pytest.approx(0.1 * scale)

    def test_accumulation_scales_lr(self) -> None:
        parsed = _parse(_recipe(accumulate_grad_batches=2))
        assert parsed.optimizer["lr"] == pytest.approx(0.3 * 16 / 256 * 2)

    def test_method_defaults(self) -> None:
        parsed = _parse(_recipe("barlow_twins"))
        assert parsed.method_kwargs["lamb"] == pytest.approx(0.0051)
        assert parsed.method_kwargs["scale_loss"] == pytest.approx(0.1)
        vic = _parse(_recipe("vicreg", method_kwargs={"proj_hidden_dim": 8, "proj_output_dim": 8}))
        assert vic.method_kwargs["sim_loss_weight"] == 25.0

    def test_scheduler_defaults(self) -> None:
        sch = _parse(_recipe()).scheduler
        assert (sch["warmup_epochs"], sch["warmup_start_lr"], sch["min_lr"]) == (10, 3e-5, 0.0)
        assert sch["interval"] == "step"

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
        aug["probs"]["gaussian_blur"] = 1.0
        aug["probs"]["equalization"] = 1.0
        x = build_pipeline("custom", aug)(Image.new("RGB", (40, 40), (10, 200, 30)))
        assert x.shape == (3, 32, 32)
