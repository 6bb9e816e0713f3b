"""Backbones by solo-learn's names, built without solo-learn.

solo-learn builds its ResNets from torchvision, drops ``fc`` and, for CIFAR-sized datasets,
replaces the stem (3x3 stride-1 ``conv1``, no ``maxpool``). This module reproduces exactly that,
so a checkpoint's ``backbone.*`` keys load with ``strict=True`` on machines without solo-learn,
and the lightly host trains the same network as solo-learn does.

``resnet20`` (lightly host only; solo-learn has no such name) is He et al.'s CIFAR ResNet (2016,
section 4.2): a 3x3 stride-1 stem of 16 channels, three stages of three basic blocks (16, 32, 64
channels, the last two starting at stride 2), global average pooling; 64 features and about
0.27 M parameters against ResNet-18's 11 M. Its shortcuts across a stride are torchvision's 1x1
convolution with BatchNorm (He et al.'s option B; the paper's CIFAR net pads with zeros, option
A). It is the CPU scale of ``reproduce collapse``: on small images a step costs a fraction of
ResNet-18's, whose time there goes to its parameter count (optimiser, update sizes), not its
convolutions. Its stem is its own: ``backbone.stem`` applies to the torchvision ResNets.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock

__all__ = [
    "BACKBONES",
    "CIFAR_DATASETS",
    "LIGHTLY_ONLY",
    "OWN_STEM",
    "STEMS",
    "ResNet20",
    "build_backbone",
    "resolve_stem",
]


class ResNet20(nn.Module):
    """He et al.'s CIFAR ResNet-20 without its classifier (``fc`` is the identity).

    Args:
        blocks: basic blocks per stage (3: ResNet-20; n gives ResNet-(6n + 2)).
    """

    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        stages, inplanes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            layers = []
            for i in range(blocks):
                s = stride if i == 0 else 1
                down = None
                if s != 1 or inplanes != planes:
                    down = nn.Sequential(
                        nn.Conv2d(inplanes, planes, kernel_size=1, stride=s, bias=False),
                        nn.BatchNorm2d(planes),
                    )
                layers.append(BasicBlock(inplanes, planes, stride=s, downsample=down))
                inplanes = planes
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc: nn.Module = nn.Linear(64, 10)  # replaced by the identity in build_backbone
        for m in self.modules():  # He et al.'s (and torchvision's) initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, H, W) -> features (N, 64)."""
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


BACKBONES: dict[str, Callable[[], nn.Module]] = {
    "resnet18": torchvision.models.resnet18,
    "resnet20": ResNet20,
    "resnet50": torchvision.models.resnet50,
}
# Backbones whose stem is their own (built for small images): backbone.stem does not apply.
OWN_STEM = ("resnet20",)
# Backbones of the lightly host only (solo-learn has no such name).
LIGHTLY_ONLY = ("resnet20",)

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
        name: a key of :data:`BACKBONES` (solo-learn's ``resnet18``, ``resnet50``; ``resnet20``).
        cifar: use solo-learn's small-image stem (3x3 stride-1 conv1, no maxpool).
        stem: one of :data:`STEMS` but ``auto`` (:func:`resolve_stem`); overrides ``cifar``.
            Ignored for :data:`OWN_STEM` backbones (their stem is built for small images).

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
    if name in OWN_STEM:
        return model, features_dim
    stem = stem if stem is not None else "cifar" if cifar else "imagenet"
    if stem in _PADDING:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=_PADDING[stem], bias=False)
        model.maxpool = nn.Identity()
    elif stem != "imagenet":
        raise ValueError(f"unknown stem {stem!r}; choose from {list(STEMS[1:])}")
    return model, features_dim
