"""Backbones by solo-learn's names, built without solo-learn.

solo-learn builds its ResNets from torchvision, drops ``fc`` and, for CIFAR-sized datasets,
replaces the stem (3x3 stride-1 ``conv1``, no ``maxpool``). This module reproduces exactly that,
so a checkpoint's ``backbone.*`` keys load with ``strict=True`` on machines without solo-learn,
and the lightly host trains the same network as solo-learn does.
"""

from __future__ import annotations

from collections.abc import Callable

import torchvision
from torch import nn

__all__ = ["BACKBONES", "CIFAR_DATASETS", "STEMS", "build_backbone", "resolve_stem"]

BACKBONES: dict[str, Callable[[], nn.Module]] = {
    "resnet18": torchvision.models.resnet18,
    "resnet50": torchvision.models.resnet50,
}

# solo-learn switches to the small-image stem for exactly these dataset names.
CIFAR_DATASETS = ("cifar10", "cifar100")
# Stems (recipe field backbone.stem, lightly host): "auto" is solo-learn's rule (the CIFAR stem
# for CIFAR datasets, ImageNet's otherwise); "cifar" is solo-learn's small-image stem (3x3 stride 1
# padding 2, no max-pool); "cifar_paper" the paper's (experiments.py: 3x3 stride 1 padding 1, no
# max-pool), for any small input (on 32-pixel images ImageNet's stem leaves a 1x1 last map).
STEMS = ("auto", "imagenet", "cifar", "cifar_paper")
_PADDING = {"cifar": 2, "cifar_paper": 1}


def resolve_stem(stem: str, dataset: str) -> str:
    """The stem a recipe builds: ``auto`` resolved by the dataset (solo-learn's rule).

    Raises:
        ValueError: on an unknown stem.
    """
    if stem not in STEMS:
        raise ValueError(f"recipe field backbone.stem={stem!r} is not one of {list(STEMS)}")
    if stem == "auto":
        return "cifar" if dataset in CIFAR_DATASETS else "imagenet"
    return stem


def build_backbone(
    name: str, *, cifar: bool = False, stem: str | None = None
) -> tuple[nn.Module, int]:
    """Build a backbone without its classifier.

    Args:
        name: solo-learn's backbone name (``resnet18`` or ``resnet50``).
        cifar: use solo-learn's small-image stem (3x3 stride-1 conv1, no maxpool).
        stem: one of :data:`STEMS` but ``auto`` (:func:`resolve_stem`); overrides ``cifar``.

    Returns:
        The module mapping images (N, 3, H, W) to features (N, d), and d.

    Raises:
        ValueError: if ``name`` is not a known backbone.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; choose from {sorted(BACKBONES)}")
    model = BACKBONES[name]()
    fc = model.fc
    assert isinstance(fc, nn.Linear)  # torchvision ResNets end in a Linear classifier
    features_dim = fc.in_features
    model.fc = nn.Identity()
    stem = stem if stem is not None else "cifar" if cifar else "imagenet"
    if stem in _PADDING:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=_PADDING[stem], bias=False)
        model.maxpool = nn.Identity()
    elif stem != "imagenet":
        raise ValueError(f"unknown stem {stem!r}; choose from {list(STEMS[1:])}")
    return model, features_dim
