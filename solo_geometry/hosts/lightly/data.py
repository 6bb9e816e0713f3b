"""Data for the lightly host: solo-learn's augmentation pipelines built from torchvision.

Each entry of a recipe's ``augmentations`` list becomes one torchvision pipeline applied
``num_crops`` times, in solo-learn's order: random resized crop (bicubic) or resize, rotation
(``rotation.prob``; not solo-learn's: the paper's ``RandomRotation(45)``), colour jitter,
grayscale, Gaussian blur, solarization, equalization, horizontal flip, tensor, normalisation.
A training sample is ``(index, [view_0, view_1, ...], label)`` as in solo-learn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import datasets
from torchvision import transforms as T

from solo_geometry.hosts.lightly.nodes import AugmentationNode, DataNode
from solo_geometry.inputs.cifar import CifarFiles, cifar_paths
from solo_geometry.inputs.datasets import mean_std_of

__all__ = [
    "ROTATION_DEGREES",
    "MultiViewTransform",
    "build_pipeline",
    "build_train_loader",
    "num_classes",
    "train_dataset",
]

# PIL's GaussianBlur(radius=sigma), sigma ~ U(0.1, 2.0) in solo-learn; a 13-tap kernel covers
# +-3 sigma at the largest sigma.
_BLUR_SIGMA = (0.1, 2.0)
_BLUR_KERNEL = 13
# The paper's rotation augmentation (experiments.py, run_guillotine_experiment): uniform angle in
# [-45, 45] degrees, nearest neighbour, zero fill (torchvision's defaults).
ROTATION_DEGREES = 45.0


def build_pipeline(
    dataset: str, aug: AugmentationNode, *, normalise: bool = True
) -> Callable[[Any], torch.Tensor]:
    """Build one augmentation pipeline from a parsed ``augmentations`` entry.

    Args:
        dataset: the recipe's ``data.dataset`` (chooses the normalisation statistics).
        aug: an entry of ``ParsedRecipe.augmentations``.
        normalise: False: no mean/std normalisation (``data.normalize``).

    Returns:
        A callable mapping a PIL image to a tensor (3, crop_size, crop_size).
    """
    size, probs = aug.crop_size, aug.probs
    steps: list[Any] = [
        T.RandomResizedCrop(size, scale=aug.scale, interpolation=T.InterpolationMode.BICUBIC)
        if aug.rrc
        else T.Resize(size, interpolation=T.InterpolationMode.BICUBIC)
    ]
    if probs.rotation:  # before the jitter, as the paper's pipeline (a flip commutes in law)
        steps.append(T.RandomApply([T.RandomRotation(ROTATION_DEGREES)], p=probs.rotation))
    if probs.color_jitter:
        steps.append(T.RandomApply([T.ColorJitter(*aug.jitter)], p=probs.color_jitter))
    if probs.grayscale:
        steps.append(T.RandomGrayscale(p=probs.grayscale))
    if probs.gaussian_blur:
        blur = T.GaussianBlur(_BLUR_KERNEL, sigma=_BLUR_SIGMA)
        steps.append(T.RandomApply([blur], p=probs.gaussian_blur))
    if probs.solarization:
        steps.append(T.RandomSolarize(threshold=128, p=probs.solarization))
    if probs.equalization:
        steps.append(T.RandomEqualize(p=probs.equalization))
    if probs.horizontal_flip:
        steps.append(T.RandomHorizontalFlip(p=probs.horizontal_flip))
    mean, std = mean_std_of(dataset, aug.mean, aug.std, normalise=normalise)
    steps += [T.ToTensor(), T.Normalize(mean=mean, std=std)]
    return T.Compose(steps)


class MultiViewTransform:
    """Apply each pipeline ``num_crops`` times and return the list of views.

    Args:
        pipelines: ``(pipeline, num_crops)`` pairs, in recipe order.
    """

    def __init__(self, pipelines: Sequence[tuple[Callable[[Any], torch.Tensor], int]]) -> None:
        self.pipelines = list(pipelines)

    def __call__(self, image: Any) -> list[torch.Tensor]:
        """Return the views of one image, each (3, H, W)."""
        return [p(image) for p, n in self.pipelines for _ in range(n)]

    def __repr__(self) -> str:
        return f"MultiViewTransform({self.pipelines!r})"


class _Indexed(Dataset):
    """Wrap a labelled dataset so items are ``(index, views, label)`` as in solo-learn."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[int, Any, int]:
        views, label = self.base[index]
        return index, views, label


def train_dataset(data: DataNode, transform: Callable[[Any], Any]) -> Dataset:
    """Build the pretraining dataset of a parsed recipe's ``data`` node.

    CIFAR names read torchvision's CIFAR files under ``train_path`` (downloaded by torchvision
    when missing, as solo-learn does) through :class:`solo_geometry.inputs.cifar.CifarFiles` (a
    restricted unpickler, shapes and labels checked, no md5); every other name reads an image
    folder.
    ``fraction`` keeps a stratified subset with solo-learn's split seed (42).

    Args:
        data: ``ParsedRecipe.data``.
        transform: the multi-view transform.

    Returns:
        A dataset of ``(index, views, label)``.

    Raises:
        FileNotFoundError: if the image folder is missing.
    """
    name = data.dataset
    base: Dataset
    if name in ("cifar10", "cifar100"):
        if not all(p.is_file() for p in cifar_paths(data.train_path, name)):
            cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
            cls(data.train_path, train=True, download=True)  # fetch them, as solo-learn does
        cifar = CifarFiles(data.train_path, name, train=True, transform=transform)
        base, labels = cifar, list(cifar.targets)
    else:
        root = Path(data.train_path).expanduser()  # checked by the launcher's prepare()
        if not root.is_dir():
            raise FileNotFoundError(f"data.train_path={data.train_path!r}: data folder not found")
        folder = datasets.ImageFolder(str(root), transform=transform)
        base, labels = folder, list(folder.targets)
    if data.fraction > 0:
        keep, _ = train_test_split(
            list(range(len(labels))),
            train_size=data.fraction,
            stratify=labels,
            random_state=42,
        )
        base = Subset(base, sorted(keep))
    return _Indexed(base)


def num_classes(data: DataNode) -> int:
    """Number of classes solo-learn assumes for ``data`` (class folders for image folders)."""
    fixed = {"cifar10": 10, "cifar100": 100, "imagenet": 1000, "imagenet100": 100}
    if data.dataset in fixed:
        return fixed[data.dataset]
    root = Path(data.train_path)
    return max(1, sum(p.is_dir() for p in root.iterdir())) if root.is_dir() else 1


def build_train_loader(
    data: DataNode, augmentations: Sequence[AugmentationNode], batch_size: int
) -> DataLoader:
    """The pretraining loader: shuffled, last incomplete batch dropped, as solo-learn.

    Args:
        data: ``ParsedRecipe.data``.
        augmentations: ``ParsedRecipe.augmentations``.
        batch_size: per-device batch size (``optimizer.batch_size``).

    Returns:
        The loader; batches are ``(indexes (N,), [views (N, 3, H, W)], labels (N,))``.

    Raises:
        FileNotFoundError: if the data folder is missing.
        ValueError: if the dataset is smaller than one batch.
    """
    transform = MultiViewTransform(
        [
            (build_pipeline(data.dataset, a, normalise=data.normalize), a.num_crops)
            for a in augmentations
        ]
    )
    dataset = train_dataset(data, transform)
    if len(dataset) < batch_size:  # type: ignore[arg-type]
        raise ValueError(
            f"optimizer.batch_size={batch_size} exceeds the {len(dataset)} training images "  # type: ignore[arg-type]
            f"in data.train_path={data.train_path!r} (the last incomplete batch is dropped)"
        )
    workers = data.num_workers
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )
