"""Data: image folders, normalisation tables, splits and probe targets.

``MEANS_STDS``: solo-learn's input normalisation per dataset; ``load_image_folder``,
``probe_splits``, ``target_set``: the probes' images and targets. The embedded digits are
written by :func:`.digits.make_digits`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.transforms import functional as TF

from solo_geometry.geometry.augment import MeanStd, apply_augmentation
from solo_geometry.inputs.sizes import check_depth, check_one_size, probe_folders

__all__ = [
    "CIFAR_MEAN_STD",
    "IMAGENET_MEAN_STD",
    "MEANS_STDS",
    "ORBIT_T_MAX",
    "MeanStd",
    "check_image_folder",
    "load_image_folder",
    "mean_std_of",
    "probe_splits",
    "rotation_set",
    "stratified_split",
    "target_set",
]

# solo-learn normalises CIFAR with its own statistics and every other dataset with ImageNet's.
IMAGENET_MEAN_STD: MeanStd = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
CIFAR_MEAN_STD: MeanStd = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
# Per-dataset normalisation: the statistics solo-learn uses for these dataset names.
MEANS_STDS: dict[str, MeanStd] = {
    "cifar10": CIFAR_MEAN_STD,
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet100": IMAGENET_MEAN_STD,
    "imagenet": IMAGENET_MEAN_STD,
}


def mean_std_of(
    dataset: str | None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    *,
    normalise: bool = True,
) -> MeanStd:
    """The input normalisation solo-learn's pipelines use for a recipe.

    As ``solo/data/pretrain_dataloader.py``: the table's statistics for a dataset it knows
    (CIFAR, ImageNet), else the recipe's ``augmentations[*].mean/std``, else ImageNet's.

    Args:
        dataset: the recipe's ``data.dataset``.
        mean: the recipe's augmentation ``mean`` (None: absent).
        std: the recipe's augmentation ``std`` (None: absent).
        normalise: False (recipe field ``data.normalize``, lightly host): no normalisation,
            ToTensor's [0, 1] only, as the paper's code; mean 0 and std 1.

    Returns:
        ``(mean, std)``, three values each.
    """
    if not normalise:
        return ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    fallback = (tuple(mean or IMAGENET_MEAN_STD[0]), tuple(std or IMAGENET_MEAN_STD[1]))
    return MEANS_STDS.get(str(dataset), fallback)


def check_image_folder(path: str | Path, field: str) -> Path:
    """Check an image folder before the first step: images in every class, each decodes.

    The one check of a data folder both hosts run before anything is created. It opens every
    image (the file's header) and lets PIL ``verify()`` it (for PNG, every chunk's CRC), which
    finds empty, truncated and mislabelled files without decoding the pixels.

    Args:
        path: the folder, one subfolder of images per class (``ImageFolder`` layout).
        field: the recipe field or option it came from, for the message.

    Returns:
        The path.

    Raises:
        FileNotFoundError: if the folder is missing or has no class subfolders.
        ValueError: naming the first class folder without an image, the first image that
            does not decode, the first wider than 8 bits a channel (16-bit PNGs: ``convert
            ("RGB")`` would clip them), or a path this locale's file-system encoding cannot write.
    """
    root = Path(path).expanduser()
    where = f"{field}={str(path)!r}"
    try:
        os.fsencode(root)
    except UnicodeEncodeError:
        raise ValueError(
            f"{where}: the path cannot be written in this locale's file-system encoding "
            f"{sys.getfilesystemencoding()!r}; expected a UTF-8 locale (LC_ALL=C.UTF-8) or "
            f"PYTHONUTF8=1"
        ) from None
    if not root.is_dir():
        raise FileNotFoundError(f"{where}: data folder not found")
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"{where}: no class subfolders (image_folder layout expected)")
    for folder in classes:
        images = sorted(f for f in folder.rglob("*") if f.suffix.lower() in IMG_EXTENSIONS)
        if not images:
            raise ValueError(
                f"{where}: class folder {folder.name!r} holds no image; expected files ending "
                f"in {', '.join(IMG_EXTENSIONS)}"
            )
        for image in images:
            try:
                with Image.open(image) as im:
                    mode = im.mode
                    im.verify()
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
                raise ValueError(
                    f"{where}: image {str(image)!r} does not decode ({err}); expected an image "
                    f"file PIL can read"
                ) from None
            check_depth(image, mode, where)
    return root


def _decoded(folder: ImageFolder, path: str) -> Image.Image:
    """One image of ``folder`` as RGB; a file that does not decode is a ``ValueError``."""
    try:
        return folder.loader(path).convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ValueError(f"image {path!r} does not decode ({err}); expected an image") from None


def load_image_folder(
    root: str | Path, classes: Sequence[str] | None = None
) -> tuple[Tensor, Tensor, list[str]]:
    """Read an ``ImageFolder`` tree into memory.

    Args:
        root: folder with one sub-folder of images per class.
        classes: class names whose indices the labels take, matched by name (a held-out
            folder read against its train folder's); None: the folder's own, sorted.

    Returns:
        Images (N, 3, H, W) float32 in [0, 1], labels (N,) int64, class names.

    Raises:
        ValueError: if ``root`` is not a folder, holds no images or a class not in ``classes``
            (before any decoding), holds images of different sizes (naming two), or an image
            does not decode (naming the first such file).
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"image folder {str(root)!r} does not exist or is not a directory")
    try:
        folder = ImageFolder(str(root))
    except (FileNotFoundError, RuntimeError) as err:
        raise ValueError(f"no images in {str(root)!r}: {err}") from err
    check_one_size([root], f"image folder {str(root)!r}")  # before decoding any
    names = list(folder.classes if classes is None else classes)
    if absent := [c for c in folder.classes if c not in names]:
        raise ValueError(
            f"held-out folder {str(root)!r} has classes {absent} the train folder "
            f"lacks; expected class folders among {names}"
        )
    index = torch.tensor([names.index(c) for c in folder.classes], dtype=torch.long)
    images = [TF.to_tensor(_decoded(folder, path)) for path, _ in folder.samples]
    labels = torch.tensor([label for _, label in folder.samples], dtype=torch.long)
    return torch.stack(images), index[labels], names


def rotation_set(images: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Rotate each image by a random multiple of 90 degrees (exact, no resampling).

    Args:
        images: (N, C, H, W) square images.
        generator: fixes the draws.

    Returns:
        Rotated images (N, C, H, W) and the number of quarter turns (N,) in {0, 1, 2, 3}.
    """
    quarters = torch.randint(0, 4, (images.shape[0],), generator=generator)
    out = images.clone()
    for k in range(1, 4):
        idx = torch.nonzero(quarters == k).flatten()
        out[idx] = torch.rot90(images[idx], k, dims=(2, 3))
    return out, quarters


def stratified_split(
    y: Tensor, fraction: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Split indices into (fit, validation), taking ``fraction`` of every class for validation.

    Args:
        y: integer labels (N,).
        fraction: share of each class held out, in (0, 1); each class with at least two samples
            keeps one sample on each side.
        generator: CPU generator that fixes the permutation.

    Returns:
        Index tensors ``(fit_idx, val_idx)``, both sorted.

    Raises:
        ValueError: if ``fraction`` is not in (0, 1).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1); got {fraction}")
    y_cpu = y.detach().cpu()
    fit, val = [], []
    for c in torch.unique(y_cpu).tolist():
        idx = torch.nonzero(y_cpu == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_val = min(max(round(fraction * len(idx)), 1), len(idx) - 1) if len(idx) > 1 else 0
        val.append(idx[:n_val])
        fit.append(idx[n_val:])
    return torch.cat(fit).sort().values, torch.cat(val).sort().values


def probe_splits(data_dir: Path | tuple[Path, Path], seed: int) -> dict[str, tuple[Tensor, Tensor]]:
    """Train and held-out (images, labels) of a labelled image folder.

    Args:
        data_dir: a pair (train folder, held-out folder) of class folders, held-out labels
            matched to train's by class name (a class train lacks: ``ValueError``);
            ``<dir>/train`` + ``<dir>/val`` (or ``test``) class folders, the same; or one class
            folder, then split 50/50 (stratified, seeded) into train and held-out.
        seed: fixes the 50/50 split.

    Returns:
        ``{"train": (images (N, 3, H, W), labels (N,)), "test": (images, labels)}``.
    """
    folders = probe_folders(data_dir)
    if len(folders) == 2:
        images, labels, classes = load_image_folder(folders[0])
        return {"train": (images, labels), "test": load_image_folder(folders[1], classes)[:2]}
    images, labels, _ = load_image_folder(folders[0])
    tr, te = stratified_split(labels, 0.5, torch.Generator().manual_seed(seed))
    return {"train": (images[tr], labels[tr]), "test": (images[te], labels[te])}


def target_set(
    images: Tensor, labels: Tensor, target: str, gen: torch.Generator, bins: int, t_max: float
) -> tuple[Tensor, Tensor]:
    """Images and the target of one probe task.

    Args:
        images: (N, C, H, W) in [0, 1].
        labels: class labels (N,).
        target: ``class`` (labels), ``rotation`` (quarter turns 0..3) or ``jitter``
            (brightness t uniform in [-t_max, t_max], binned into ``bins`` equal bins).
        gen: fixes the draws.
        bins: number of jitter bins.
        t_max: jitter range.

    Returns:
        Transformed images (N, C, H, W) and targets (N,).
    """
    if target == "class":
        return images, labels
    if target == "rotation":
        return rotation_set(images, gen)
    t = (torch.rand(images.shape[0], generator=gen) * 2 - 1) * t_max  # (N,) in [-t_max, t_max)
    binned = ((t + t_max) / (2 * t_max) * bins).long().clamp(0, bins - 1)
    return apply_augmentation(images, "brightness", t), binned


# Orbit parameter range per family (t = 0 is the identity; units: see geometry/augment.py).
ORBIT_T_MAX: dict[str, float] = {
    "brightness": 0.4,
    "contrast": 0.4,
    "saturation": 0.4,
    "hue": 0.1,
    "rotation": 0.5,
    "scale": 0.3,
    "translation": 0.15,
}
