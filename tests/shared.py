"""What several test modules share: builders and independent references, in one place.

No test module imports from another; what two of them need lives here (or in ``conftest.py``
for fixtures). ``build_once``: folders several tests read, built once per test session
(marker ``shared``).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.spatial.distance import pdist
from torch import nn

from solo_geometry.config import OrbitsConfig, ProbesConfig
from solo_geometry.inputs.cifar import cifar_paths
from solo_geometry.zoo.measurements import MeasureSettings

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COLLAPSE_AUTHORS = FIXTURES / "collapse_authors.json"  # the authors' released collapse curves
PAPER_INVARIANCE = FIXTURES / "paper_invariance.json"  # from the authors' released arrays


def build_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """The folder ``build(folder)`` fills, built once per test session; the folder.

    Under pytest-xdist each worker has its own temporary folder inside one folder of the session:
    the build goes there, under a file lock, so whichever worker asks first builds it and the
    others wait for it or find it built (a module-scoped fixture alone is built once per worker).
    A failed build is retried by the next worker that asks. Without xdist, a new folder.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # the session's, shared by its workers
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(out, ignore_errors=True)
            build(out)
            done.touch()
    return out


def write_fake_cifar(root: Path, dataset: str = "cifar10", n: int = 8, seed: int = 0) -> Path:
    """A tiny CIFAR in torchvision's on-disk format (pickled batches), random pixels.

    Protocol 2, as the official files; written by Python 3, so bytes values are pickled through
    ``_codecs.encode`` (which the reader admits).
    """
    rng = np.random.default_rng(seed)
    classes, key = (10, "labels") if dataset == "cifar10" else (100, "fine_labels")
    for train in (True, False):
        for path in cifar_paths(root, dataset, train):
            path.parent.mkdir(parents=True, exist_ok=True)
            batch: dict = {
                "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                key: [int(v) for v in rng.integers(0, classes, n)],
                "filenames": [f"img{i}.png" for i in range(n)],
            }
            batch["batch_label"] = b"fake batch"
            path.write_bytes(pickle.dumps(batch, protocol=2))
    return root


def paper_metrics(X: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> dict:
    """The paper's plot_results.py ``_calculate_geometric_metrics`` (float64)."""
    intra = [np.mean(pdist(X[ids == o])) for o in np.unique(ids) if np.sum(ids == o) > 1]
    cents = np.array([np.mean(X[labels == c], axis=0) for c in np.unique(labels)])
    inter = pdist(cents)
    spread = [np.mean(np.sum((X[ids == o] - X[ids == o].mean(0)) ** 2, 1)) for o in np.unique(ids)]
    ratio = np.mean(inter) / (np.mean(intra) + 1e-10)
    err = ratio * np.sqrt(
        (np.std(inter) / (np.mean(inter) + 1e-10)) ** 2
        + (np.std(intra) / (np.mean(intra) + 1e-10)) ** 2
    )
    return {
        "spread": [np.mean(spread), np.std(spread)],
        "d_intra": [np.mean(intra), np.std(intra)],
        "d_inter": [np.mean(inter), np.std(inter)],
        "separation": [ratio, err],
    }


def digits_subset(digits: Path, out: Path, per_class: dict[str, int]) -> Path:
    """The first ``per_class[split]`` images of each class of a digits export, as a new folder.

    For probes and reports that need real images of every class but not 1,797 of them.
    """
    for split, n in per_class.items():
        for cls in sorted(p for p in (digits / split).iterdir() if p.is_dir()):
            (out / split / cls.name).mkdir(parents=True)
            for png in sorted(cls.glob("*.png"))[:n]:
                shutil.copy(png, out / split / cls.name / png.name)
    return out


def image_folder(root: Path, n_per_class: int = 12, size: int = 8) -> Path:
    """train/ and val/ with 3 classes of small RGB images whose colour gives the class."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(3):
            folder = root / split / str(c)
            folder.mkdir(parents=True)
            for i in range(n_per_class):
                img = rng.uniform(0, 0.3, (size, size, 3))
                img[..., c] += 0.6
                Image.fromarray((img * 255).astype(np.uint8)).save(folder / f"{i}.png")
    return root


def small_settings() -> MeasureSettings:
    """Probes of the class target, a linear probe, one orbit family: seconds on a CPU."""
    probes = ProbesConfig(
        targets=["class"],
        probes=["linear"],
        orbits=OrbitsConfig(families=["rotation"], images=6, k=3),
    )
    return MeasureSettings(
        probes=dataclasses.asdict(probes),
        stats_images=12,
        rho_images=4,
        rho_families=("brightness",),
    )


def orbit_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """The paper's layout: 5 classes x 3 images x 12 angles, unit rows, Z (M, 8), H (M, 5)."""
    gen = np.random.default_rng(seed)
    n, k = 15, 12

    def rows(d: int, width: float) -> np.ndarray:
        x = np.repeat(gen.normal(size=(n, d)), k, axis=0) + width * gen.normal(size=(n * k, d))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return {
        "orbits_z": rows(8, 0.4),
        "orbits_h": rows(5, 0.05),
        "orbit_ids": np.repeat(np.arange(n), k),
        "orbit_labels": np.repeat(np.array([0, 2, 4, 6, 9]), 3 * k),
        "orbit_angles": np.tile(np.arange(0.0, 360.0, 30.0), n),
    }


def png_of_size(width: int, height: int) -> bytes:
    """A PNG whose header (valid CRCs) claims ``width`` x ``height`` over one short row."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 25))
        + chunk(b"IEND", b"")
    )


class CountingNet(nn.Module):
    """A small convolutional backbone (3 -> 6 features) that counts its forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 6, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.net(x)
