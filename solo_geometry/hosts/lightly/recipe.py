"""Check a solo-learn recipe for the lightly host and fill in solo-learn's defaults.

Every field of a recipe is either used (with solo-learn's meaning and default), passed to the
Lightning Trainer (any key that is a ``Trainer.__init__`` argument, as solo-learn does), or
listed in ``IRRELEVANT`` (fields solo-learn uses only for its own logging and resumption).
Anything else is a ``ValueError`` naming the field: a recipe never silently trains something
other than what it says.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightning.pytorch import Trainer
from omegaconf import DictConfig, OmegaConf

from solo_geometry.hosts.lightly.data import (
    node_of,
    parse_augmentations,
    reject_unknown,
    required,
)

__all__ = [
    "IRRELEVANT",
    "METHOD_KWARGS",
    "MOMENTUM_METHODS",
    "ParsedRecipe",
    "parse_recipe",
    "trainer_keys",
]

# method -> {key: default}; None means required (solo-learn asserts it is present).
METHOD_KWARGS: dict[str, dict[str, Any]] = {
    "simclr": {"proj_hidden_dim": None, "proj_output_dim": None, "temperature": None},
    "byol": {"proj_hidden_dim": None, "proj_output_dim": None, "pred_hidden_dim": None},
    "vicreg": {
        "proj_hidden_dim": None,
        "proj_output_dim": None,
        "sim_loss_weight": 25.0,
        "var_loss_weight": 25.0,
        "cov_loss_weight": 1.0,
    },
    "barlow_twins": {
        "proj_hidden_dim": None,
        "proj_output_dim": None,
        "lamb": 0.0051,
        "scale_loss": 0.024,
    },
}
MOMENTUM_METHODS = ("byol",)

# Accepted and not used: solo-learn's logging (wandb, auto_umap), resumption (auto_resume:
# every lightly run gets a fresh run folder, so there is nothing to resume), DALI settings
# (only read when data.format is dali, which is rejected), memory-format tuning and debug prints.
IRRELEVANT = frozenset(
    {"wandb", "auto_resume", "auto_umap", "dali", "performance", "debug_augmentations"}
)
# Top-level fields read here (besides Trainer arguments and IRRELEVANT); geometry is read by
# solo_geometry.config.geometry_config.
_TOP_LEVEL = frozenset(
    {
        "name",
        "method",
        "backbone",
        "method_kwargs",
        "momentum",
        "data",
        "optimizer",
        "scheduler",
        "augmentations",
        "max_epochs",
        "seed",
        "geometry",
        "checkpoint",
        "knn_eval",
        "resume_from_checkpoint",
    }
)
# solo-learn writes these back into the config it saves; a saved config can be rerun.
_DERIVED = frozenset({"num_classes", "num_large_crops", "num_small_crops"})

_OPTIMIZER_KWARGS: dict[str, dict[str, Any]] = {
    "sgd": {"momentum": 0.9, "nesterov": False, "dampening": 0.0},
    "lars": {
        "momentum": 0.9,
        "eta": 1e-3,
        "clip_lr": False,
        "exclude_bias_n_norm": False,
        "nesterov": False,
        "dampening": 0.0,
    },
    "adamw": {"betas": [0.9, 0.999], "eps": 1e-8, "amsgrad": False},
}
_DATASETS = ("cifar10", "cifar100", "imagenet", "imagenet100", "custom")


def trainer_keys() -> frozenset[str]:
    """Return the names of ``lightning.pytorch.Trainer`` constructor arguments."""
    return frozenset(p for p in inspect.signature(Trainer.__init__).parameters if p != "self")


@dataclass(frozen=True)
class ParsedRecipe:
    """A recipe checked for the lightly host, solo-learn's defaults filled in.

    ``optimizer["lr"]`` and ``optimizer["classifier_lr"]`` are already scaled by
    ``batch_size * devices * num_nodes / 256`` (and by gradient accumulation) as in solo-learn.
    """

    name: str
    method: str
    backbone: str
    cifar: bool
    method_kwargs: dict[str, Any]
    momentum: dict[str, float]
    data: dict[str, Any]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    augmentations: list[dict[str, Any]]
    max_epochs: int
    seed: int
    checkpoint: dict[str, Any]
    trainer: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _check_choice(field: str, value: Any, choices: list[str]) -> str:
    """``value`` if it is one of ``choices``, else the error naming the field and the choices."""
    if value not in choices:
        raise ValueError(
            f"recipe field {field}={value!r} not supported by the lightly host; "
            f"choose from {choices}"
        )
    return str(value)


def _parse_method(cfg: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, float]]:
    """Check ``method``, ``method_kwargs`` and ``momentum``."""
    method = _check_choice("method", cfg.get("method"), sorted(METHOD_KWARGS))
    spec = METHOD_KWARGS[method]
    given = node_of(cfg, "method_kwargs", "")
    reject_unknown(given, set(spec), "method_kwargs")
    kwargs = {k: given.get(k, d) for k, d in spec.items()}
    for key in spec:
        required(kwargs, key, "method_kwargs")
    mom = node_of(cfg, "momentum", "")
    reject_unknown(mom, {"base_tau", "final_tau", "classifier"}, "momentum")
    if mom.get("classifier"):
        raise ValueError("recipe field momentum.classifier=True not supported by the lightly host")
    momentum = {
        "base_tau": float(mom.get("base_tau", 0.99)),
        "final_tau": float(mom.get("final_tau", 1.0)),
    }
    if not 0 <= momentum["base_tau"] <= momentum["final_tau"] <= 1:
        raise ValueError(
            f"recipe fields momentum.base_tau/final_tau must satisfy "
            f"0 <= base <= final <= 1, got {momentum}"
        )
    return str(method), kwargs, momentum


def _parse_data(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``data``: image folders only."""
    data = node_of(cfg, "data", "")
    reject_unknown(
        data,
        {"dataset", "train_path", "val_path", "format", "num_workers", "no_labels", "fraction"}
        | _DERIVED,
        "data",
    )
    dataset = required(data, "dataset", "data")
    _check_choice("data.dataset", dataset, list(_DATASETS))
    if data.get("format", "image_folder") != "image_folder":
        raise ValueError(
            f"recipe field data.format={data['format']!r} not supported by the "
            "lightly host; only image_folder"
        )
    if data.get("no_labels", False):
        raise ValueError("recipe field data.no_labels=True not supported by the lightly host")
    fraction = float(data.get("fraction", -1.0))
    if fraction > 0 and not fraction < 1:
        raise ValueError(f"recipe field data.fraction must be in (0, 1) or -1, got {fraction}")
    return {
        "dataset": dataset,
        "train_path": str(required(data, "train_path", "data")),
        "val_path": None if data.get("val_path") is None else str(data["val_path"]),
        "num_workers": int(data.get("num_workers", 4)),
        "fraction": fraction,
    }


def _device_count(cfg: Mapping[str, Any]) -> int:
    """Number of devices as solo-learn counts them for lr scaling (``len(cfg.devices)``)."""
    devices = cfg.get("devices", 1)
    if isinstance(devices, (list, tuple)):
        return max(1, len(devices))
    if isinstance(devices, int) and devices > 0:
        return devices
    return 1


def _parse_optimizer(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``optimizer``; scale learning rates as solo-learn does."""
    opt = node_of(cfg, "optimizer", "")
    reject_unknown(
        opt,
        {
            "name",
            "batch_size",
            "lr",
            "classifier_lr",
            "weight_decay",
            "kwargs",
            "exclude_bias_n_norm_wd",
        },
        "optimizer",
    )
    name = required(opt, "name", "optimizer")
    _check_choice("optimizer.name", name, sorted(_OPTIMIZER_KWARGS))
    kwargs = node_of(opt, "kwargs", "optimizer.")
    reject_unknown(kwargs, set(_OPTIMIZER_KWARGS[name]), "optimizer.kwargs")
    batch_size = int(required(opt, "batch_size", "optimizer"))
    accumulate = int(cfg.get("accumulate_grad_batches") or 1)
    scale = batch_size * _device_count(cfg) * int(cfg.get("num_nodes") or 1) / 256
    weight_decay = float(required(opt, "weight_decay", "optimizer"))
    if name == "lars" and weight_decay == 0:
        raise ValueError(
            "recipe field optimizer.weight_decay=0 with lars: lightly's LARS skips "
            "layer-wise scaling at zero weight decay, solo-learn's does not"
        )
    return {
        "name": name,
        "batch_size": batch_size,
        "weight_decay": weight_decay,
        "lr": float(required(opt, "lr", "optimizer")) * scale * accumulate,
        "classifier_lr": float(opt.get("classifier_lr", 0.1)) * scale * accumulate,
        "kwargs": {**_OPTIMIZER_KWARGS[name], **kwargs},
        "exclude_bias_n_norm_wd": bool(opt.get("exclude_bias_n_norm_wd", False)),
        "accumulate": accumulate,
    }


def _parse_scheduler(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``scheduler`` (warmup_cosine, step or none) and fill solo-learn's defaults."""
    sch = node_of(cfg, "scheduler", "")
    reject_unknown(
        sch,
        {"name", "lr_decay_steps", "min_lr", "warmup_start_lr", "warmup_epochs", "interval"},
        "scheduler",
    )
    name = str(sch.get("name", "none"))
    _check_choice("scheduler.name", name, ["none", "step", "warmup_cosine"])
    interval = sch.get("interval", "step")
    if interval not in {"step", "epoch"}:
        raise ValueError(f"recipe field scheduler.interval must be step or epoch, got {interval!r}")
    if name == "step" and not sch.get("lr_decay_steps"):
        raise ValueError("recipe field scheduler.lr_decay_steps is required with name=step")
    accumulate = int(cfg.get("accumulate_grad_batches") or 1)
    return {
        "name": name,
        "interval": interval,
        "lr_decay_steps": list(sch.get("lr_decay_steps") or []),
        "min_lr": float(sch.get("min_lr", 0.0)) * accumulate,
        "warmup_start_lr": float(sch.get("warmup_start_lr", 3e-5)) * accumulate,
        "warmup_epochs": float(sch.get("warmup_epochs", 10)),
    }


def _parse_checkpoint(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``checkpoint``: saved into ``<run>/checkpoints`` (``dir`` is the run folder's)."""
    ckpt = node_of(cfg, "checkpoint", "")
    reject_unknown(ckpt, {"enabled", "dir", "frequency", "keep_prev"}, "checkpoint")
    return {
        "enabled": bool(ckpt.get("enabled", False)),
        "frequency": int(ckpt.get("frequency", 1)),
        "keep_prev": bool(ckpt.get("keep_prev", False)),
    }


def _trainer_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Collect every Trainer argument in the recipe, as solo-learn's ``main_pretrain.py`` does."""
    keys = trainer_keys() - {"logger", "callbacks", "enable_checkpointing", "max_epochs"}
    kwargs = {k: cfg[k] for k in keys if k in cfg}
    if kwargs.get("accelerator") == "cpu" and isinstance(kwargs.get("devices"), (list, tuple)):
        kwargs["devices"] = len(kwargs["devices"])  # Lightning's CPU accelerator wants a count
    return kwargs


def _check_switches(plain: Mapping[str, Any]) -> dict[str, Any]:
    """Reject features solo-learn has and the lightly host has not; return ``backbone``."""
    if node_of(plain, "knn_eval", "").get("enabled"):
        raise ValueError("recipe field knn_eval.enabled=True not supported by the lightly host")
    if plain.get("resume_from_checkpoint") is not None:
        raise ValueError("recipe field resume_from_checkpoint not supported by the lightly host")
    backbone = node_of(plain, "backbone", "")
    reject_unknown(backbone, {"name", "kwargs"}, "backbone")
    if backbone.get("kwargs"):
        raise ValueError(
            f"recipe field backbone.kwargs={backbone['kwargs']} not supported by the lightly host"
        )
    return backbone


def parse_recipe(cfg: DictConfig | Mapping[str, Any]) -> ParsedRecipe:
    """Check a composed recipe for the lightly host.

    Args:
        cfg: the composed recipe (``recipe.load_recipe``), solo-learn's schema.

    Returns:
        The parsed recipe with solo-learn's defaults.

    Raises:
        ValueError: naming the first field that is unknown, unsupported, missing or invalid.
    """
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    assert isinstance(raw, Mapping)
    plain: Mapping[str, Any] = {str(k): v for k, v in raw.items()}
    reject_unknown(plain, _TOP_LEVEL | IRRELEVANT | trainer_keys(), "")
    backbone = _check_switches(plain)
    method, method_kwargs, momentum = _parse_method(plain)
    data = _parse_data(plain)
    notes = []
    if node_of(plain, "wandb", "").get("enabled"):
        notes.append("wandb.enabled is ignored by the lightly host: metrics go to the run folder")
    return ParsedRecipe(
        name=str(plain.get("name") or method),
        method=method,
        backbone=str(required(backbone, "name", "backbone")),
        cifar=data["dataset"] in ("cifar10", "cifar100"),
        method_kwargs=method_kwargs,
        momentum=momentum,
        data=data,
        optimizer=_parse_optimizer(plain),
        scheduler=_parse_scheduler(plain),
        augmentations=parse_augmentations(plain),
        max_epochs=int(required(plain, "max_epochs", "")),
        seed=int(plain.get("seed", 5)),
        checkpoint=_parse_checkpoint(plain),
        trainer=_trainer_kwargs(plain),
        notes=notes,
    )
