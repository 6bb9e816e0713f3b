"""CIFAR-10 and CIFAR-100 from torchvision's python-batch files, read without running code.

torchvision's ``CIFAR10``/``CIFAR100`` read ``cifar-10-batches-py/{data_batch_1..5,test_batch}``
and ``cifar-100-python/{train,test}`` with a plain ``pickle.load`` after checking each file's md5
sum against the official archive's. This module reads the same files with the package's
:class:`~solo_geometry.inputs.npfiles.RestrictedUnpickler` (the batches hold dicts of str keys,
NumPy uint8 arrays and lists: nothing else is rebuilt) and checks their shapes and labels
instead of their md5 sums, so a subset or a re-encoded copy in the same format is read too; any
other content is a one-line error naming the file. The lightly host and ``reproduce collapse``
read CIFAR through it; the solo host keeps solo-learn's own loading (torchvision's classes).

Images come out as torchvision lays them: ``data`` (N, 32, 32, 3) uint8, ``targets`` a list of
ints, items ``(transform(PIL image), label)``.
"""

from __future__ import annotations

import codecs
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from solo_geometry.inputs.npfiles import RestrictedUnpickler

__all__ = ["CIFAR_LAYOUT", "CifarFiles", "cifar_paths", "read_cifar"]

# dataset -> (folder, train files, test files, label key, classes): torchvision's layout.
CIFAR_LAYOUT: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str, int]] = {
    "cifar10": (
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "labels",
        10,
    ),
    "cifar100": ("cifar-100-python", ("train",), ("test",), "fine_labels", 100),
}
_PIXELS = 3 * 32 * 32


class _BatchUnpickler(RestrictedUnpickler):
    """The restricted unpickler, plus ``_codecs.encode`` (bytes in a protocol-2 pickle).

    A Python 3 pickle of protocol 2 spells bytes as ``_codecs.encode(str, "latin1")``; torch's
    ``weights_only`` loader admits it too.
    """

    def find_class(self, module: str, name: str) -> Any:
        """Return an admitted global (:data:`ALLOWED_GLOBALS` or ``_codecs.encode``).

        Raises:
            pickle.UnpicklingError: naming any other ``module.name``.
        """
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        return super().find_class(module, name)


def cifar_paths(root: str | Path, dataset: str, train: bool = True) -> list[Path]:
    """The batch files of one split under ``root`` (torchvision's ``root``).

    Raises:
        ValueError: on a dataset that is not ``cifar10`` or ``cifar100``.
    """
    if dataset not in CIFAR_LAYOUT:
        raise ValueError(f"unknown CIFAR dataset {dataset!r}; choose from {sorted(CIFAR_LAYOUT)}")
    folder, train_files, test_files, _, _ = CIFAR_LAYOUT[dataset]
    return [Path(root) / folder / f for f in (train_files if train else test_files)]


def _batch(path: Path, label_key: str, classes: int) -> tuple[np.ndarray, list[int]]:
    """One batch file's images (n, 3072) and labels, checked.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: the file is not a CIFAR batch (naming it and what was expected).
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (torchvision's CIFAR batch file)")
    try:
        with path.open("rb") as fh:
            held = _BatchUnpickler(fh, encoding="latin1").load()
    except pickle.UnpicklingError as err:
        if not str(err).startswith("the pickle in it needs"):  # not a refused global
            raise ValueError(f"{path}: truncated or corrupt CIFAR batch ({err})") from None
        raise ValueError(f"{path}: refused ({err}); expected a CIFAR batch") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise ValueError(f"{path}: truncated or corrupt CIFAR batch ({err!r})") from None
    if not isinstance(held, dict):
        raise ValueError(f"{path}: holds a {type(held).__name__}, expected a dict")
    data, labels = held.get("data"), held.get(label_key)
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or (data.shape[1] != _PIXELS)
    ):
        got = data.shape if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(f"{path}: 'data' is {got}, expected a uint8 array (n, {_PIXELS})")
    if not isinstance(labels, list | np.ndarray) or len(labels) != len(data):
        raise ValueError(f"{path}: {label_key!r} is not a list of {len(data)} labels")
    out = [int(v) for v in labels]
    if any(not 0 <= v < classes for v in out):
        raise ValueError(f"{path}: {label_key!r} holds a label outside 0..{classes - 1}")
    return data, out


def read_cifar(root: str | Path, dataset: str, train: bool = True) -> tuple[np.ndarray, list[int]]:
    """Read one split: images (N, 32, 32, 3) uint8 (HWC, as torchvision) and labels.

    Args:
        root: the folder holding ``cifar-10-batches-py`` or ``cifar-100-python``.
        dataset: ``cifar10`` or ``cifar100``.
        train: the train split (else the test split).

    Returns:
        The images and their labels, in file order.

    Raises:
        FileNotFoundError: a batch file is missing (naming it).
        ValueError: an unknown dataset, or a file that is not a CIFAR batch (naming it).
    """
    paths = cifar_paths(root, dataset, train)
    _, _, _, key, classes = CIFAR_LAYOUT[dataset]
    parts = [_batch(p, key, classes) for p in paths]
    data = np.concatenate([d for d, _ in parts]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(data), [v for _, labels in parts for v in labels]


class CifarFiles(Dataset):
    """torchvision's CIFAR-10/100 dataset read by :func:`read_cifar` (no download, no md5).

    Args:
        root: the folder holding torchvision's CIFAR folder.
        dataset: ``cifar10`` or ``cifar100``.
        train: the train split (else test).
        transform: applied to each PIL image.
    """

    def __init__(
        self,
        root: str | Path,
        dataset: str,
        train: bool = True,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self.data, self.targets = read_cifar(root, dataset, train)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        """``(transform(image), label)`` of item ``index``."""
        image: Any = Image.fromarray(self.data[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, self.targets[index]
