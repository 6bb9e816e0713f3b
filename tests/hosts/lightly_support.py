"""Shared helpers of the lightly-host tests: tiny digits recipes written to tmp_path.

Imported by the other ``test_lightly*`` files (no tests here). The recipes follow solo-learn's
schema with a ``defaults`` list and an augmentations file next to them, as solo-learn's
``scripts/pretrain/cifar/*.yaml`` do, sized for 2 CPU cores.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

# Each method's ``method_kwargs`` node as a recipe file writes it (parsed into nodes.METHOD_KWARGS).
RECIPE_METHOD_KWARGS: dict[str, dict[str, Any]] = {
    "simclr": {"proj_hidden_dim": 64, "proj_output_dim": 32, "temperature": 0.2},
    "byol": {"proj_hidden_dim": 64, "proj_output_dim": 32, "pred_hidden_dim": 64},
    "vicreg": {
        "proj_hidden_dim": 64,
        "proj_output_dim": 64,
        "sim_loss_weight": 25.0,
        "var_loss_weight": 25.0,
        "cov_loss_weight": 1.0,
    },
    "barlow_twins": {"proj_hidden_dim": 64, "proj_output_dim": 64, "scale_loss": 0.1},
}

AUGMENTATION = {
    "rrc": {"enabled": True, "crop_min_scale": 0.2, "crop_max_scale": 1.0},
    "color_jitter": {
        "prob": 0.8,
        "brightness": 0.4,
        "contrast": 0.4,
        "saturation": 0.2,
        "hue": 0.1,
    },
    "grayscale": {"prob": 0.2},
    "gaussian_blur": {"prob": 0.0},
    "solarization": {"prob": 0.1},
    "equalization": {"prob": 0.0},
    "horizontal_flip": {"prob": 0.5},
    "crop_size": 32,
    "num_crops": 1,
}


def recipe_dict(method: str, data_dir: Path) -> dict[str, Any]:
    """A complete tiny recipe for ``method`` on the digits in ``data_dir``."""
    recipe: dict[str, Any] = {
        "defaults": ["_self_", {"augmentations": "asymmetric.yaml"}],
        "name": f"{method}-digits",
        "method": method,
        "backbone": {"name": "resnet18"},
        "method_kwargs": copy.deepcopy(RECIPE_METHOD_KWARGS[method]),
        "data": {
            "dataset": "custom",
            "train_path": str(data_dir / "train"),
            "val_path": str(data_dir / "val"),
            "format": "image_folder",
            "num_workers": 0,
        },
        "optimizer": {
            "name": "lars",
            "batch_size": 16,
            "lr": 0.3,
            "classifier_lr": 0.1,
            "weight_decay": 1e-4,
            "kwargs": {"clip_lr": True, "eta": 0.02, "exclude_bias_n_norm": True},
        },
        "scheduler": {"name": "warmup_cosine"},
        "checkpoint": {"enabled": False, "dir": "trained_models", "frequency": 1},
        "auto_resume": {"enabled": False},
        "wandb": {"enabled": False},
        "max_epochs": 1,
        "limit_train_batches": 2,
        "limit_val_batches": 1,  # solo-learn's online classifier: one batch, not 359 digits
        "devices": [0],
        "accelerator": "cpu",
        "strategy": "auto",  # solo-learn passes strategy=None to Lightning when it is absent
        "precision": 32,
        "num_sanity_val_steps": 0,
    }
    if method == "byol":
        recipe["momentum"] = {"base_tau": 0.99, "final_tau": 1.0}
    return recipe


def write_recipe(folder: Path, method: str, data_dir: Path, **changes: Any) -> Path:
    """Write ``<folder>/<method>.yaml`` plus ``augmentations/asymmetric.yaml``.

    ``changes`` replace top-level keys; a value of None deletes the key.
    """
    recipe = recipe_dict(method, data_dir)
    for key, value in changes.items():
        if value is None:
            recipe.pop(key, None)
        else:
            recipe[key] = value
    (folder / "augmentations").mkdir(parents=True, exist_ok=True)
    second = copy.deepcopy(AUGMENTATION)
    second["solarization"] = {"prob": 0.2}
    (folder / "augmentations" / "asymmetric.yaml").write_text(
        yaml.safe_dump([AUGMENTATION, second], sort_keys=False)
    )
    path = folder / f"{method}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path
