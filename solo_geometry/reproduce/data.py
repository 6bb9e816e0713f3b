"""The reproductions' data: the embedded digits, or CIFAR already on disk.

CIFAR is read by :mod:`solo_geometry.inputs.cifar` and never downloaded (docs/reproducing.md).
The invariance probes read image folders, so a seeded, class-stratified subset of the train and
test splits is exported once as PNGs (``<out>/data/<name>/{train,test}/<class>/``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torchvision import datasets

from solo_geometry.inputs.cifar import CIFAR_LAYOUT, CifarFiles
from solo_geometry.inputs.datasets import stratified_split

__all__ = ["DATASETS", "check_data_root", "export_cifar", "subset_folders", "train_size"]

DATASETS = ("digits", *CIFAR_LAYOUT)


def check_data_root(
    dataset: str, data_root: str | Path | None, option: str = "--dataset"
) -> Path | None:
    """Check ``dataset`` (one of ``DATASETS``); for CIFAR, that torchvision's files are there.

    Every batch file of both splits is read and checked here, before anything is written.

    Returns:
        ``data_root``, the folder holding torchvision's CIFAR folder (None for digits).

    Raises:
        ValueError: on an unknown dataset, CIFAR without ``data_root``, or a file under it that
            is not a CIFAR batch (naming it); ``option`` names the command's data option.
        FileNotFoundError: CIFAR's files not under ``data_root``.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS)}")
    if dataset == "digits":
        return None
    if data_root is None:
        raise ValueError(f"{option} {dataset} needs --data-root DIR holding torchvision's files")
    root = Path(data_root)
    try:
        for train in (True, False):
            CifarFiles(root, dataset, train=train)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"--data-root {str(root)!r} holds no torchvision {dataset} files ({err}); nothing "
            f"is downloaded: fetch them first, e.g. torchvision.datasets.{dataset.upper()}"
            f"({str(root)!r}, download=True)"
        ) from None
    except ValueError as err:
        raise ValueError(f"{option} {dataset}: {err}") from None
    return root


def train_size(dataset: str, train_path: Path) -> int:
    """Number of pretraining images: CIFAR's train split, or the image folder's files."""
    if dataset in CIFAR_LAYOUT:
        return len(CifarFiles(train_path, dataset, train=True))
    return len(datasets.ImageFolder(str(train_path)).samples)


def _export(base: Callable[[], Any], out: Path, split: str, n: int, seed: int) -> Path:
    """``out/<split>``: a seeded, class-stratified subset of ``n`` images of ``base()``, once.

    Written beside, then renamed: never a half-written folder; one already there is kept.
    """
    target = out / split
    if target.is_dir():
        return target
    data = base()
    labels = torch.tensor(data.targets)
    keep = torch.arange(labels.numel())
    if n < labels.numel():
        gen = torch.Generator().manual_seed(seed)
        keep = stratified_split(labels, n / labels.numel(), gen)[1]
    part = out / f".{split}.partial"
    shutil.rmtree(part, ignore_errors=True)
    for i in keep.tolist():
        image, label = data[i]
        folder = part / f"{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{i:05d}.png")
    return part.rename(target)


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
    splits = zip(("train", "test"), sizes, strict=True)
    train, test = (
        _export(partial(CifarFiles, data_root, dataset, train=s == "train"), out, s, n, seed)
        for s, n in splits
    )
    return train, test


def subset_folders(
    folders: tuple[Path, Path], out: Path, sizes: tuple[int, int], seed: int = 0
) -> tuple[Path, Path]:
    """Stratified subsets of the probes' two image folders, written as :func:`export_cifar`'s.

    A folder no larger than its size is kept as it is; the two folders to probe on are returned.
    """
    train, test = (
        folder
        if n >= len(datasets.ImageFolder(str(folder)).samples)
        else _export(partial(datasets.ImageFolder, str(folder)), out, split, n, seed)
        for split, folder, n in zip(("train", "test"), folders, sizes, strict=True)
    )
    return train, test
