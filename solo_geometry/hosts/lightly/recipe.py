"""Check a solo-learn recipe for the lightly host and build its typed nodes.

Every field of a recipe is either read into a node of :mod:`.nodes` (with solo-learn's meaning
and default), passed to the Lightning Trainer (any key that is a ``Trainer.__init__`` argument,
as solo-learn does), or listed in ``IRRELEVANT`` (fields solo-learn uses only for its own
logging and resumption). Anything else is a ``ValueError`` naming the field: a recipe never
silently trains something other than what it says.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, get_type_hints

from lightning.pytorch import Trainer
from omegaconf import DictConfig, OmegaConf

from solo_geometry.hosts.lightly.nodes import (
    DATASETS,
    JITTER_KEYS,
    METHOD_KWARGS,
    OPTIMIZER_KWARGS,
    AugmentationNode,
    AugmentationProbs,
    CheckpointNode,
    DataNode,
    MethodKwargs,
    MomentumNode,
    OptimizerNode,
    SchedulerNode,
    recipe_choice,
)
from solo_geometry.hosts.lightly.reading import (
    build_node,
    convert,
    node_of,
    reject_unknown,
    required,
    value_of,
)
from solo_geometry.inputs.datasets import MeanStd, mean_std_of
from solo_geometry.models.backbones import STEMS, resolve_stem

__all__ = [
    "IRRELEVANT",
    "MOMENTUM_METHODS",
    "ParsedRecipe",
    "TrainerKwargs",
    "parse_recipe",
    "trainer_keys",
]

MOMENTUM_METHODS = ("byol",)
# Keyword arguments of lightning.pytorch.Trainer, as the recipe gives them.
TrainerKwargs = dict[str, Any]

# Accepted and not used: solo-learn's logging (wandb, auto_umap), resumption (auto_resume:
# a lightly run resumes with `solo-geometry pretrain --resume RUN`), DALI settings
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
_DIR = frozenset({"dir"})  # checkpoint.dir: checkpoints go to the run folder's
# The keys of each pipeline's transform nodes (AugmentationProbs' fields); only prob is used
# besides rrc's scales and color_jitter's strengths.
_AUG_KEYS = {
    "rrc": {"enabled", "crop_min_scale", "crop_max_scale"},
    "color_jitter": {"enabled", "prob", *JITTER_KEYS},
    **{f.name: {"enabled", "prob"} for f in fields(AugmentationProbs) if f.name != "color_jitter"},
}


def trainer_keys() -> frozenset[str]:
    """Return the names of ``lightning.pytorch.Trainer`` constructor arguments."""
    return frozenset(p for p in inspect.signature(Trainer.__init__).parameters if p != "self")


@dataclass(frozen=True)
class ParsedRecipe:
    """A recipe checked for the lightly host, solo-learn's defaults filled in.

    ``optimizer.lr`` and ``optimizer.classifier_lr`` are already scaled by
    ``batch_size * devices * num_nodes / 256`` (and by gradient accumulation) as in solo-learn.

    Raises:
        ValueError: on a method the lightly host does not train.
        TypeError: if ``method_kwargs`` are not the method's.
    """

    name: str
    method: str  # a key of METHOD_KWARGS
    backbone: str
    method_kwargs: MethodKwargs
    momentum: MomentumNode
    data: DataNode
    optimizer: OptimizerNode
    scheduler: SchedulerNode
    augmentations: tuple[AugmentationNode, ...]
    max_epochs: int
    seed: int
    checkpoint: CheckpointNode
    trainer: TrainerKwargs = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    stem: str = "auto"  # backbone.stem (backbones.STEMS), resolved by the dataset

    def __post_init__(self) -> None:
        expected = METHOD_KWARGS[recipe_choice("method", self.method, sorted(METHOD_KWARGS))]
        if not isinstance(self.method_kwargs, expected):
            raise TypeError(
                f"method_kwargs of {self.method} must be {expected.__name__}, "
                f"got {type(self.method_kwargs).__name__}"
            )

    @property
    def cifar(self) -> bool:
        """Whether the backbone gets solo-learn's CIFAR stem (``data.dataset`` is CIFAR)."""
        return self.data.cifar

    @property
    def backbone_stem(self) -> str:
        """The backbone's stem, ``auto`` resolved (``backbones.resolve_stem``)."""
        return resolve_stem(self.stem, self.data.dataset)

    def normalisation(self) -> MeanStd:
        """Input ``(mean, std)`` of the first pipeline (identity with ``data.normalize=false``)."""
        aug = self.augmentations[0]
        return mean_std_of(self.data.dataset, aug.mean, aug.std, normalise=self.data.normalize)


def _parse_method(cfg: Mapping[str, Any]) -> tuple[str, MethodKwargs, MomentumNode]:
    """Check ``method``, ``method_kwargs`` and ``momentum``."""
    method = recipe_choice("method", cfg.get("method"), sorted(METHOD_KWARGS))
    kwargs = build_node(METHOD_KWARGS[method], node_of(cfg, "method_kwargs", ""), "method_kwargs")
    mom = node_of(cfg, "momentum", "")
    reject_unknown(mom, {f.name for f in fields(MomentumNode)} | {"classifier"}, "momentum")
    if mom.get("classifier"):
        raise ValueError("recipe field momentum.classifier=True not supported by the lightly host")
    mom.pop("classifier", None)
    return method, kwargs, build_node(MomentumNode, mom, "momentum")


def _parse_data(cfg: Mapping[str, Any]) -> DataNode:
    """Check ``data``: image folders only."""
    data = node_of(cfg, "data", "")
    accepted = frozenset({"format", "no_labels"}) | _DERIVED
    reject_unknown(data, {f.name for f in fields(DataNode)} | accepted, "data")
    recipe_choice("data.dataset", required(data, "dataset", "data"), DATASETS)
    if data.get("format", "image_folder") != "image_folder":
        raise ValueError(
            f"recipe field data.format={data['format']!r} not supported by the "
            "lightly host; only image_folder"
        )
    if data.get("no_labels", False):
        raise ValueError("recipe field data.no_labels=True not supported by the lightly host")
    return build_node(DataNode, data, "data", accepted)


def _device_count(cfg: Mapping[str, Any]) -> int:
    """Number of devices as solo-learn counts them for lr scaling (``len(cfg.devices)``)."""
    devices = cfg.get("devices", 1)
    if isinstance(devices, (list, tuple)):
        return max(1, len(devices))
    if isinstance(devices, int) and devices > 0:
        return devices
    return 1


def _parse_optimizer(cfg: Mapping[str, Any]) -> OptimizerNode:
    """Check ``optimizer``; scale learning rates as solo-learn does."""
    opt = node_of(cfg, "optimizer", "")
    reject_unknown(opt, {f.name for f in fields(OptimizerNode)} - {"accumulate"}, "optimizer")
    name = required(opt, "name", "optimizer")
    recipe_choice("optimizer.name", name, sorted(OPTIMIZER_KWARGS))
    kwargs = build_node(
        OPTIMIZER_KWARGS[name], node_of(opt, "kwargs", "optimizer."), "optimizer.kwargs"
    )
    batch_size = value_of(opt, "batch_size", "optimizer", int)
    accumulate = int(cfg.get("accumulate_grad_batches") or 1)
    scale = batch_size * _device_count(cfg) * int(cfg.get("num_nodes") or 1) / 256
    return OptimizerNode(
        name=name,
        batch_size=batch_size,
        weight_decay=value_of(opt, "weight_decay", "optimizer", float),
        lr=value_of(opt, "lr", "optimizer", float) * scale * accumulate,
        classifier_lr=value_of(opt, "classifier_lr", "optimizer", float, 0.1) * scale * accumulate,
        kwargs=kwargs,
        exclude_bias_n_norm_wd=bool(opt.get("exclude_bias_n_norm_wd", False)),
        accumulate=accumulate,
    )


def _parse_scheduler(cfg: Mapping[str, Any]) -> SchedulerNode:
    """Check ``scheduler`` (warmup_cosine, step or none) and fill solo-learn's defaults."""
    sch = node_of(cfg, "scheduler", "")
    sch["lr_decay_steps"] = sch.get("lr_decay_steps") or ()  # null: none, as in solo-learn
    node = build_node(SchedulerNode, sch, "scheduler")
    accumulate = int(cfg.get("accumulate_grad_batches") or 1)
    return replace(
        node, min_lr=node.min_lr * accumulate, warmup_start_lr=node.warmup_start_lr * accumulate
    )


def _parse_pipeline(aug: Any, where: str) -> AugmentationNode:
    """Check one entry of ``augmentations`` and fill solo-learn's defaults."""
    if not isinstance(aug, Mapping):
        raise ValueError(f"recipe field {where} must be a mapping, got {aug!r}")
    reject_unknown(aug, set(_AUG_KEYS) | {"crop_size", "num_crops", "mean", "std"}, where)
    nodes = {key: node_of(aug, key, f"{where}.") for key in _AUG_KEYS}
    for key, allowed in _AUG_KEYS.items():
        reject_unknown(nodes[key], allowed, f"{where}.{key}")
    rrc, cj = nodes["rrc"], nodes["color_jitter"]
    if rrc.get("enabled", False):
        required(rrc, "crop_min_scale", f"{where}.rrc")
    hints = get_type_hints(AugmentationNode)
    brightness, contrast, saturation, hue = (
        value_of(cj, k, f"{where}.color_jitter", float, 0.0) for k in JITTER_KEYS
    )
    return AugmentationNode(
        crop_size=value_of(aug, "crop_size", where, int),
        num_crops=value_of(aug, "num_crops", where, int),
        rrc=bool(rrc.get("enabled", False)),
        scale=(
            value_of(rrc, "crop_min_scale", f"{where}.rrc", float, 0.08),
            value_of(rrc, "crop_max_scale", f"{where}.rrc", float, 1.0),
        ),
        jitter=(brightness, contrast, saturation, hue),
        probs=AugmentationProbs(
            **{
                f.name: value_of(nodes[f.name], "prob", f"{where}.{f.name}", float, 0.0)
                for f in fields(AugmentationProbs)
            }
        ),
        mean=convert(aug.get("mean"), hints["mean"], f"{where}.mean"),
        std=convert(aug.get("std"), hints["std"], f"{where}.std"),
    )


def _parse_augmentations(cfg: Mapping[str, Any]) -> tuple[AugmentationNode, ...]:
    """Check a recipe's ``augmentations`` list (solo-learn's pipeline keys): two large crops."""
    augs = cfg.get("augmentations")
    if not augs or not isinstance(augs, (list, tuple)):
        raise ValueError("recipe field augmentations is required: a list of pipelines")
    out = tuple(_parse_pipeline(aug, f"augmentations[{i}]") for i, aug in enumerate(augs))
    small = [i for i, a in enumerate(out) if a.crop_size != out[0].crop_size]
    if small:
        raise ValueError(
            f"recipe field augmentations[{small[0]}].crop_size: small crops "
            "(multi-crop) are not supported by the lightly host"
        )
    if sum(a.num_crops for a in out) != 2:
        raise ValueError(
            "recipe fields augmentations[*].num_crops must add up to 2 large crops "
            f"for {cfg.get('method')!r}, as solo-learn requires"
        )
    return out


def _trainer_kwargs(cfg: Mapping[str, Any]) -> TrainerKwargs:
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
        raise ValueError(
            "recipe field resume_from_checkpoint not supported by the lightly host; "
            "resume a run with solo-geometry pretrain --resume RUN"
        )
    backbone = node_of(plain, "backbone", "")
    reject_unknown(backbone, {"name", "kwargs", "stem"}, "backbone")
    if backbone.get("kwargs"):
        raise ValueError(
            f"recipe field backbone.kwargs={backbone['kwargs']} not supported by the lightly host"
        )
    return backbone


def parse_recipe(cfg: DictConfig | Mapping[str, Any]) -> ParsedRecipe:
    """Check a composed recipe for the lightly host and build its typed nodes.

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
        method_kwargs=method_kwargs,
        momentum=momentum,
        data=data,
        optimizer=_parse_optimizer(plain),
        scheduler=_parse_scheduler(plain),
        augmentations=_parse_augmentations(plain),
        max_epochs=value_of(plain, "max_epochs", "", int),
        seed=value_of(plain, "seed", "", int, 5),
        checkpoint=build_node(CheckpointNode, node_of(plain, "checkpoint", ""), "checkpoint", _DIR),
        trainer=_trainer_kwargs(plain),
        notes=tuple(notes),
        stem=recipe_choice("backbone.stem", backbone.get("stem", "auto"), STEMS),
    )
