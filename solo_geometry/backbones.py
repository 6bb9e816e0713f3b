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

__all__ = ["BACKBONES", "CIFAR_DATASETS", "build_backbone"]

BACKBONES: dict[str, Callable[[], nn.Module]] = {
    "resnet18": torchvision.models.resnet18,
    "resnet50": torchvision.models.resnet50,
}

# solo-learn switches to the small-image stem for exactly these dataset names.
CIFAR_DATASETS = ("cifar10", "cifar100")


def build_backbone(name: str, *, cifar: bool = False) -> tuple[nn.Module, int]:
    """Build a backbone without its classifier.

    Args:
        name: solo-learn's backbone name (``resnet18`` or ``resnet50``).
        cifar: use solo-learn's small-image stem (3x3 stride-1 conv1, no maxpool).

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
    if cifar:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
        model.maxpool = nn.Identity()
    return model, features_dim
