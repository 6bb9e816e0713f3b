"""Data of the invariance reproduction: the embedded digits, or CIFAR already on disk.

CIFAR is read from torchvision's files under ``--data-root`` (``cifar-10-batches-py`` or
``cifar-100-python``) by :mod:`solo_geometry.inputs.cifar`'s restricted unpickler (a batch file
cannot run code), and never downloaded: absent or malformed files are a one-line error naming
the file before anything is written. The probes read image folders, so a seeded,
class-stratified subset of the train and test splits is exported once as PNGs
(``<out>/data/<name>/{train,test}/<class>/``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from torchvision import datasets

from solo_geometry.inputs.cifar import CIFAR_LAYOUT, CifarFiles
from solo_geometry.inputs.datasets import stratified_split

__all__ = ["DATASETS", "check_data_root", "export_cifar", "train_size"]

DATASETS = ("digits", *CIFAR_LAYOUT)


def check_data_root(dataset: str, data_root: str | Path | None) -> Path | None:
    """Check the dataset choice; for CIFAR, that torchvision's files are under ``data_root``.

    Args:
        dataset: one of ``DATASETS``.
        data_root: the folder holding torchvision's CIFAR folder (its ``root``).

    Returns:
        The data root (None for digits).

    Raises:
        ValueError: on an unknown dataset, or a file under ``data_root`` that is not a CIFAR
            batch (naming it).
        FileNotFoundError: CIFAR without ``data_root`` or without its files there.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS)}")
    if dataset == "digits":
        return None
    if data_root is None:
        raise FileNotFoundError(f"--dataset {dataset} needs --data-root (torchvision's files)")
    root = Path(data_root)
    try:
        for train in (True, False):
            CifarFiles(root, dataset, train=train)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"--data-root {str(root)!r} holds no torchvision {dataset} files ({err}); this "
            "command never downloads (fetch them with torchvision first)"
        ) from None
    return root


def train_size(dataset: str, train_path: Path) -> int:
    """Number of pretraining images: CIFAR's train split, or the image folder's files."""
    if dataset in CIFAR_LAYOUT:
        return len(CifarFiles(train_path, dataset, train=True))
    return len(datasets.ImageFolder(str(train_path)).samples)


def _export(base: CifarFiles, out: Path, n: int, seed: int) -> Path:
    labels = torch.tensor(base.targets)
    keep = labels.numel()
    if n < keep:
        keep_idx = stratified_split(labels, n / keep, torch.Generator().manual_seed(seed))[1]
    else:
        keep_idx = torch.arange(keep)
    for i in keep_idx.tolist():
        image, label = base[i]
        folder = out / f"{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{i:05d}.png")
    return out


def export_cifar(
    dataset: str, data_root: Path, out: Path, sizes: tuple[int, int], seed: int = 0
) -> tuple[Path, Path]:
    """Export stratified subsets of CIFAR's train and test splits as class folders (once).

    Args:
        dataset: ``cifar10`` or ``cifar100``.
        data_root: torchvision's root holding the files.
        out: ``<out>/train`` and ``<out>/test`` are written unless already there.
        sizes: images kept from train and from test.
        seed: fixes the subsets.

    Returns:
        The train and test folders.
    """
    folders = []
    for split, n in zip(("train", "test"), sizes, strict=True):
        target = out / split
        if not target.is_dir():  # written beside, then renamed: never a half-written folder
            base = CifarFiles(data_root, dataset, train=split == "train")
            partial = out / f".{split}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            _export(base, partial, n, seed).rename(target)
        folders.append(target)
    return folders[0], folders[1]


def subset_folders(
    folders: tuple[Path, Path], out: Path, sizes: tuple[int, int], seed: int = 0
) -> tuple[Path, Path]:
    """Stratified subsets of the probes' two image folders, where a size is below a folder's.

    Args:
        folders: probe-train and held-out class folders.
        out: ``<out>/train`` and ``<out>/test`` are written unless already there.
        sizes: images kept from each.
        seed: fixes the subsets.

    Returns:
        The two folders to probe on (a folder no larger than its size is kept as it is).
    """
    kept = []
    for split, folder, n in zip(("train", "test"), folders, sizes, strict=True):
        base = datasets.ImageFolder(str(folder))
        target = out / split
        if n >= len(base.samples):
            kept.append(folder)
            continue
        if not target.is_dir():
            partial = out / f".{split}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            _export(base, partial, n, seed).rename(target)
        kept.append(target)
    return kept[0], kept[1]
