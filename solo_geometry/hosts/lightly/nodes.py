"""The typed nodes of a solo-learn recipe as the lightly host reads them.

One frozen dataclass per recipe node (``data``, ``optimizer`` and its ``kwargs``, ``scheduler``,
``checkpoint``, ``momentum``, ``method_kwargs``, each entry of ``augmentations``), its defaults
solo-learn's. :func:`solo_geometry.hosts.lightly.recipe.parse_recipe` builds them from a recipe
and rejects any key a node does not have; each node checks its values when it is constructed,
with a ``ValueError`` naming the field, the value received and the choices;
:mod:`solo_geometry.hosts.lightly.reading` builds them from the recipe's plain mappings.

Nothing here imports torch or lightly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DATASETS",
    "JITTER_KEYS",
    "METHOD_KWARGS",
    "OPTIMIZER_KWARGS",
    "AdamWKwargs",
    "AugmentationNode",
    "AugmentationProbs",
    "BYOLKwargs",
    "BarlowTwinsKwargs",
    "CheckpointNode",
    "DataNode",
    "LARSKwargs",
    "MethodKwargs",
    "MomentumNode",
    "OptimizerKwargs",
    "OptimizerNode",
    "SGDKwargs",
    "SchedulerNode",
    "SimCLRKwargs",
    "SimSiamKwargs",
    "VICRegKwargs",
    "recipe_choice",
]

DATASETS = ("cifar10", "cifar100", "imagenet", "imagenet100", "custom")
# ColorJitter's arguments, in T.ColorJitter's order (the keys of a pipeline's color_jitter node).
JITTER_KEYS = ("brightness", "contrast", "saturation", "hue")
_SCHEDULERS = ["none", "step", "warmup_cosine"]


def recipe_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        ValueError: naming the recipe field, the value and the choices.
    """
    if value not in choices:
        raise ValueError(
            f"recipe field {name}={value!r} not supported by the lightly host; "
            f"choose from {list(choices)}"
        )
    return str(value)


@dataclass(frozen=True)
class DataNode:
    """``data``: the pretraining images (image folders, or torchvision's CIFAR files)."""

    dataset: str  # one of DATASETS: the normalisation statistics, and the CIFAR stem
    train_path: str  # image folder, or CIFAR's download folder
    val_path: str | None = None  # the probes' folder when geometry.probes.data is not set
    num_workers: int = 4  # solo-learn's default
    # Stratified fraction of the training set kept (solo-learn's split seed 42); -1 keeps all.
    fraction: float = -1.0
    # False: no mean/std normalisation, ToTensor's [0, 1] only (the paper's code); not solo-learn's.
    normalize: bool = True

    def __post_init__(self) -> None:
        recipe_choice("data.dataset", self.dataset, DATASETS)
        if self.fraction > 0 and not self.fraction < 1:
            raise ValueError(
                f"recipe field data.fraction must be in (0, 1) or -1, got {self.fraction}"
            )

    @property
    def cifar(self) -> bool:
        """Whether the backbone gets solo-learn's CIFAR stem (3x3 conv, no max-pool)."""
        return self.dataset in ("cifar10", "cifar100")


@dataclass(frozen=True)
class MethodKwargs:
    """``method_kwargs`` every method has: the projector's sizes (required, as in solo-learn)."""

    proj_hidden_dim: int
    proj_output_dim: int


SIMCLR_LOSSES = ("ntxent", "cross_view")


@dataclass(frozen=True)
class SimCLRKwargs(MethodKwargs):
    """SimCLR's ``method_kwargs``."""

    temperature: float  # NT-Xent temperature; solo-learn has no default
    # "ntxent": lightly's NT-Xent over 2N views (solo-learn's); "cross_view": the paper's
    # one-directional cross-view cross-entropy, CE(z1 z2^T / t, diag) (experiments.py).
    loss: str = "ntxent"

    def __post_init__(self) -> None:
        recipe_choice("method_kwargs.loss", self.loss, SIMCLR_LOSSES)


@dataclass(frozen=True)
class BYOLKwargs(MethodKwargs):
    """BYOL's ``method_kwargs``."""

    pred_hidden_dim: int  # the predictor's hidden width; solo-learn has no default


@dataclass(frozen=True)
class SimSiamKwargs(MethodKwargs):
    """SimSiam's ``method_kwargs``."""

    pred_hidden_dim: int  # the predictor's hidden width; solo-learn has no default
    # False drops the stop-gradient on the targets: Chen and He 2021's ablation (Figure 2), which
    # collapses. solo-learn has no such switch (its loss detaches the targets).
    stop_gradient: bool = True


@dataclass(frozen=True)
class VICRegKwargs(MethodKwargs):
    """VICReg's ``method_kwargs``, solo-learn's (and the paper's) loss weights by default."""

    sim_loss_weight: float = 25.0
    var_loss_weight: float = 25.0
    cov_loss_weight: float = 1.0


@dataclass(frozen=True)
class BarlowTwinsKwargs(MethodKwargs):
    """Barlow Twins' ``method_kwargs``, solo-learn's defaults."""

    lamb: float = 0.0051  # weight of the off-diagonal terms
    scale_loss: float = 0.024  # factor on the whole loss


# method -> its method_kwargs; the methods the lightly host trains.
METHOD_KWARGS: dict[str, type[MethodKwargs]] = {
    "simclr": SimCLRKwargs,
    "byol": BYOLKwargs,
    "simsiam": SimSiamKwargs,
    "vicreg": VICRegKwargs,
    "barlow_twins": BarlowTwinsKwargs,
}


@dataclass(frozen=True)
class MomentumNode:
    """``momentum``: tau of the momentum update, on a cosine from base to final (BYOL)."""

    base_tau: float = 0.99
    final_tau: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.base_tau <= self.final_tau <= 1:
            taus = {"base_tau": self.base_tau, "final_tau": self.final_tau}
            raise ValueError(
                f"recipe fields momentum.base_tau/final_tau must satisfy "
                f"0 <= base <= final <= 1, got {taus}"
            )


@dataclass(frozen=True)
class SGDKwargs:
    """``optimizer.kwargs`` of sgd (solo-learn's defaults)."""

    momentum: float = 0.9
    nesterov: bool = False
    dampening: float = 0.0


@dataclass(frozen=True)
class LARSKwargs:
    """``optimizer.kwargs`` of lars (solo-learn's defaults)."""

    momentum: float = 0.9
    eta: float = 1e-3  # trust coefficient
    clip_lr: bool = False  # local rate min(lars_lr / lr, 1)
    exclude_bias_n_norm: bool = False  # 1-d parameters: no scaling, no weight decay
    nesterov: bool = False
    dampening: float = 0.0


@dataclass(frozen=True)
class AdamWKwargs:
    """``optimizer.kwargs`` of adamw (torch's defaults, as solo-learn)."""

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    amsgrad: bool = False


OptimizerKwargs = SGDKwargs | LARSKwargs | AdamWKwargs
# optimizer.name -> its kwargs.
OPTIMIZER_KWARGS: dict[str, type[OptimizerKwargs]] = {
    "sgd": SGDKwargs,
    "lars": LARSKwargs,
    "adamw": AdamWKwargs,
}


@dataclass(frozen=True)
class OptimizerNode:
    """``optimizer``, learning rates scaled as solo-learn scales them.

    Raises:
        ValueError: on an unknown name, or lars with zero weight decay.
        TypeError: if ``kwargs`` is not the named optimiser's.
    """

    name: str  # a key of OPTIMIZER_KWARGS
    batch_size: int  # per device
    # Both rates already multiplied by batch_size * devices * num_nodes / 256 and by accumulate.
    lr: float
    classifier_lr: float  # the online classifier's group (recipe default 0.1, then scaled)
    weight_decay: float
    kwargs: OptimizerKwargs
    exclude_bias_n_norm_wd: bool = False  # 1-d parameters (biases, norms) without weight decay
    accumulate: int = 1  # the Trainer's accumulate_grad_batches, folded into the rates

    def __post_init__(self) -> None:
        recipe_choice("optimizer.name", self.name, sorted(OPTIMIZER_KWARGS))
        expected = OPTIMIZER_KWARGS[self.name]
        if not isinstance(self.kwargs, expected):
            raise TypeError(
                f"optimizer.kwargs of {self.name} must be {expected.__name__}, "
                f"got {type(self.kwargs).__name__}"
            )
        if self.name == "lars" and self.weight_decay == 0:
            raise ValueError(
                "recipe field optimizer.weight_decay=0 with lars: lightly's LARS skips "
                "layer-wise scaling at zero weight decay, solo-learn's does not"
            )


@dataclass(frozen=True)
class SchedulerNode:
    """``scheduler``: warmup_cosine, step or none; rates scaled by gradient accumulation."""

    name: str = "none"
    interval: str = "step"  # "step" (per optimiser step, solo-learn's default) or "epoch"
    lr_decay_steps: tuple[int, ...] = ()  # MultiStepLR's milestones; required with name=step
    min_lr: float = 0.0  # the cosine's floor
    warmup_start_lr: float = 3e-5  # the linear warmup's first rate
    warmup_epochs: float = 10.0  # may be fractional, as in solo-learn

    def __post_init__(self) -> None:
        recipe_choice("scheduler.name", self.name, _SCHEDULERS)
        if self.interval not in {"step", "epoch"}:
            raise ValueError(
                f"recipe field scheduler.interval must be step or epoch, got {self.interval!r}"
            )
        if self.name == "step" and not self.lr_decay_steps:
            raise ValueError("recipe field scheduler.lr_decay_steps is required with name=step")


@dataclass(frozen=True)
class CheckpointNode:
    """``checkpoint``: saved into ``<run>/checkpoints`` (the recipe's ``dir`` is not used)."""

    enabled: bool = False
    frequency: int = 1  # every this many epochs
    keep_prev: bool = False  # keep every checkpoint, not only the latest


@dataclass(frozen=True)
class AugmentationProbs:
    """Probability of each random transform of a pipeline (0 leaves it out)."""

    color_jitter: float = 0.0
    grayscale: float = 0.0
    gaussian_blur: float = 0.0
    solarization: float = 0.0
    equalization: float = 0.0
    horizontal_flip: float = 0.0
    # Not in solo-learn's schema: RandomRotation(ROTATION_DEGREES) with this probability, the
    # paper's rotation augmentation (experiments.py: transforms.RandomRotation(degrees=45)).
    rotation: float = 0.0


@dataclass(frozen=True)
class AugmentationNode:
    """One entry of ``augmentations``: a pipeline applied ``num_crops`` times (large crops)."""

    crop_size: int
    num_crops: int
    rrc: bool = False  # random resized crop (bicubic); False resizes to crop_size
    scale: tuple[float, float] = (0.08, 1.0)  # rrc's crop_min_scale, crop_max_scale
    # ColorJitter's brightness, contrast, saturation, hue (JITTER_KEYS).
    jitter: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    probs: AugmentationProbs = field(default_factory=AugmentationProbs)
    # Normalisation for datasets without statistics in solo-learn's table (None: ImageNet's).
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
