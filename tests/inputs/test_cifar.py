"""solo_geometry.inputs.cifar: torchvision's CIFAR batch files read by the restricted unpickler.

The reference is torchvision's own reader (``CIFAR10``/``CIFAR100``) on the same files, its md5
check switched off in a subclass: the images and labels must be identical, item by item.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from torchvision import datasets

from solo_geometry.inputs.cifar import CifarFiles, cifar_paths, read_cifar
from tests.shared import write_fake_cifar


class _Unchecked10(datasets.CIFAR10):
    """torchvision's reader without its md5 sums (and without the class-names file)."""

    def _check_integrity(self) -> bool:
        return True

    def _load_meta(self) -> None:
        self.classes = []


class _Unchecked100(_Unchecked10, datasets.CIFAR100):
    pass


@pytest.mark.parametrize(
    ("dataset", "reference"), [("cifar10", _Unchecked10), ("cifar100", _Unchecked100)]
)
@pytest.mark.parametrize("train", [True, False])
def test_matches_torchvisions_reader(
    tmp_path: Path, dataset: str, reference: type, train: bool
) -> None:
    root = write_fake_cifar(tmp_path, dataset)
    data, labels = read_cifar(root, dataset, train)
    theirs = reference(str(root), train=train, download=False)
    assert data.dtype == np.uint8 and data.shape == theirs.data.shape
    assert np.array_equal(data, theirs.data) and labels == list(theirs.targets)
    ours = CifarFiles(root, dataset, train)
    image, label = ours[3]
    assert np.array_equal(np.asarray(image), np.asarray(theirs[3][0])) and label == theirs[3][1]
    assert len(ours) == (5 * 8 if dataset == "cifar10" and train else 8)


def _rewrite(path: Path, value: object) -> None:
    path.write_bytes(pickle.dumps(value, protocol=2))


class _Payload:
    def __reduce__(self) -> tuple:
        return (print, ("unpickled",))


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "uint8 array"),
        ({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}, "uint8 array"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "not a list of 2"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "outside 0..9"),
        ([1, 2], "holds a list"),
        ({"data": _Payload()}, "refused"),
    ],
)
def test_bad_batch_is_one_error_naming_the_file(
    tmp_path: Path, value: object, says: str, capsys: pytest.CaptureFixture
) -> None:
    root = write_fake_cifar(tmp_path)
    bad = cifar_paths(root, "cifar10")[2]
    _rewrite(bad, value)
    with pytest.raises(ValueError, match=says) as info:
        read_cifar(root, "cifar10")
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
    assert "unpickled" not in capsys.readouterr().out  # the payload never ran


def test_truncated_and_missing(tmp_path: Path) -> None:
    root = write_fake_cifar(tmp_path / "a")
    first = cifar_paths(root, "cifar10")[0]
    first.write_bytes(first.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated or corrupt") as info:
        read_cifar(root, "cifar10")
    assert str(first) in str(info.value)
    root = write_fake_cifar(tmp_path / "b")
    cifar_paths(root, "cifar10")[-1].unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_5: missing"):
        read_cifar(root, "cifar10")
    assert len(read_cifar(root, "cifar10", train=False)[1]) == 8  # the test split is whole
    with pytest.raises(ValueError, match="unknown CIFAR dataset 'svhn'"):
        read_cifar(root, "svhn")


def test_lightly_host_reads_cifar_through_it(tmp_path: Path) -> None:
    from solo_geometry.hosts.lightly.data import train_dataset
    from solo_geometry.hosts.lightly.nodes import DataNode

    root = write_fake_cifar(tmp_path, "cifar100")
    node = DataNode(dataset="cifar100", train_path=str(root), val_path=None)
    ds = train_dataset(node, lambda image: np.asarray(image))
    index, image, label = ds[7]
    data, labels = read_cifar(root, "cifar100")
    assert index == 7 and np.array_equal(image, data[7]) and label == labels[7]
    assert sorted(p.name for p in root.iterdir()) == ["cifar-100-python"]  # nothing downloaded
