"""Backbone features Z and head outputs H of a labelled image set, cached in the run folder.

Images are read as RGB in [0, 1] (``ImageFolder`` layout ``root/<class>/*.png``), optionally
transformed there (rotations, colour jitter, augmentation orbits: nuisance targets), normalised
with the training statistics, and passed through the backbone and the head in eval mode (the
modules' modes are restored afterwards). Every named set goes into one ``features.pt``:

    {"format": 1, "tag": str | None,
     "sets": {name: {"z": (N, d), "h": (N, p), "labels": (N,), <extras>: (N,)}},
     "meta": {name: {key: {"shape": [...], "dtype": "torch.float32"}, "source": str}}}

so probing a run again reads the tensors back without a forward pass. A cache written for
another model (another ``tag``) is ignored and replaced.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = [
    "CIFAR_MEAN_STD",
    "IMAGENET_MEAN_STD",
    "MEANS_STDS",
    "Features",
    "extract_features",
    "load_cache",
    "ORBIT_T_MAX",
    "load_image_folder",
    "orbit_table",
    "probe_splits",
    "rotation_set",
    "target_set",
]

MeanStd = tuple[Sequence[float], Sequence[float]]
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
_FORMAT = 1


@dataclass(frozen=True)
class Features:
    """Features of one image set.

    Attributes:
        z: backbone features (N, d), float32 on CPU.
        h: head outputs (N, p), float32 on CPU.
        labels: class labels (N,), int64.
        extras: further per-sample tensors (N,), e.g. ``target``, ``t``, ``orbit``.
    """

    z: Tensor
    h: Tensor
    labels: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)

    def tensors(self) -> dict[str, Tensor]:
        """All tensors by name (``z``, ``h``, ``labels`` and the extras)."""
        return {"z": self.z, "h": self.h, "labels": self.labels, **self.extras}

    def meta(self) -> dict[str, dict[str, Any]]:
        """Shape and dtype of every tensor, as recorded in ``features.pt``."""
        tensors = self.tensors().items()
        return {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in tensors}


def load_image_folder(root: str | Path) -> tuple[Tensor, Tensor, list[str]]:
    """Read an ``ImageFolder`` tree into memory.

    Args:
        root: folder with one sub-folder of images per class.

    Returns:
        Images (N, 3, H, W) float32 in [0, 1], labels (N,) int64, class names.

    Raises:
        ValueError: if ``root`` is not a folder or holds no images.
    """
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import functional as TF

    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"image folder {str(root)!r} does not exist or is not a directory")
    try:
        folder = ImageFolder(str(root))
    except (FileNotFoundError, RuntimeError) as err:
        raise ValueError(f"no images in {str(root)!r}: {err}") from err
    images = [TF.to_tensor(folder.loader(path).convert("RGB")) for path, _ in folder.samples]
    labels = torch.tensor([label for _, label in folder.samples], dtype=torch.long)
    return torch.stack(images), labels, list(folder.classes)


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


def load_cache(path: str | Path, tag: str | None = None) -> dict[str, Any]:
    """Read ``features.pt``; an absent file, another format or another ``tag`` gives no sets.

    Args:
        path: the cache file.
        tag: identifies the model; a cache written with another tag is not used.

    Returns:
        The cache dictionary (``sets`` possibly empty).

    Raises:
        ValueError: if the file exists but cannot be read.
    """
    empty: dict[str, Any] = {"format": _FORMAT, "tag": tag, "sets": {}, "meta": {}}
    path = Path(path)
    if not path.is_file():
        return empty
    try:
        cache = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ValueError(f"cannot read feature cache {str(path)!r}: {err}") from err
    if not isinstance(cache, dict) or cache.get("format") != _FORMAT or cache.get("tag") != tag:
        return empty
    return cache


def _save_cache(path: Path, cache: dict[str, Any]) -> None:
    """Write atomically: a crash never leaves a half-written file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".features-", suffix=".pt")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a cache is an ordinary file
        torch.save(cache, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _as_dataset(data: Dataset | str | Path | tuple[Tensor, Tensor]) -> Dataset:
    if isinstance(data, str | Path):
        images, labels, _ = load_image_folder(data)
        return TensorDataset(images, labels)
    if isinstance(data, tuple):
        return TensorDataset(*data)
    return data


def _source(data: object) -> str:
    return str(data) if isinstance(data, str | Path) else type(data).__name__


def _modules_mode(modules: Sequence[nn.Module]) -> list[bool]:
    return [m.training for m in modules]


@torch.no_grad()
def _forward(
    backbone: nn.Module,
    head: nn.Module,
    loader: DataLoader,
    device: torch.device,
    normalize: Callable[[Tensor], Tensor],
    progress: bool,
    desc: str,
) -> tuple[Tensor, Tensor, Tensor]:
    zs, hs, ys = [], [], []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(loader.dataset), desc=desc, unit="img", file=sys.stderr)  # type: ignore[arg-type]
    for images, labels in loader:
        z = backbone(normalize(images.to(device, torch.float32)))  # (B, d)
        z = z.flatten(1)  # (B, d) for backbones that keep spatial dims of size 1
        zs.append(z.float().cpu())
        hs.append(head(z).float().cpu())  # (B, p)
        ys.append(labels.long().cpu())
        if bar is not None:
            bar.update(len(labels))
    if bar is not None:
        bar.close()
    return torch.cat(zs), torch.cat(hs), torch.cat(ys)


def extract_features(
    backbone: nn.Module,
    head: nn.Module,
    dataset_or_dir: Dataset | str | Path | tuple[Tensor, Tensor],
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    cache: str | Path | None = None,
    name: str = "default",
    tag: str | None = None,
    mean_std: MeanStd = IMAGENET_MEAN_STD,
    extras: dict[str, Tensor] | None = None,
    progress: bool = True,
) -> Features:
    """Z = backbone(x) and H = head(Z) for every image, in eval mode, batched, cached.

    Args:
        backbone: maps images (B, 3, H, W) to features (B, d).
        head: maps features (B, d) to outputs (B, p).
        dataset_or_dir: an ``ImageFolder`` root, a dataset of (image in [0, 1], label) pairs,
            or a tuple (images (N, 3, H, W) in [0, 1], labels (N,)); read in order.
        batch_size: images per forward pass.
        device: where to run (default: the backbone's device).
        cache: ``features.pt`` path; the set ``name`` is read from it when present (no forward
            pass) and written to it otherwise (other sets kept).
        name: the set's key in the cache.
        tag: identifies the model; a cache written with another tag is replaced.
        mean_std: per-channel normalisation applied to images before the backbone.
        extras: per-sample tensors (N,) stored with the set (targets, orbit ids, t, ...).
        progress: show a progress bar on stderr.

    Returns:
        The set's features.

    Raises:
        ValueError: if ``batch_size`` < 1 or the cache cannot be read.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    store = load_cache(cache, tag) if cache is not None else None
    if store is not None and name in store["sets"]:
        saved = dict(store["sets"][name])
        return Features(saved.pop("z"), saved.pop("h"), saved.pop("labels"), saved)
    dev = torch.device(device) if device is not None else next(backbone.parameters()).device
    mean = torch.tensor(mean_std[0], device=dev).view(1, -1, 1, 1)
    std = torch.tensor(mean_std[1], device=dev).view(1, -1, 1, 1)
    loader = DataLoader(_as_dataset(dataset_or_dir), batch_size=batch_size, shuffle=False)
    modes = _modules_mode([backbone, head])
    try:
        backbone.eval()
        head.eval()
        z, h, labels = _forward(
            backbone, head, loader, dev, lambda x: (x - mean) / std, progress, name
        )
    finally:
        backbone.train(modes[0])
        head.train(modes[1])
    feats = Features(z, h, labels, {k: v.cpu() for k, v in (extras or {}).items()})
    if store is not None and cache is not None:
        store["sets"][name] = feats.tensors()
        store["meta"][name] = {**feats.meta(), "source": _source(dataset_or_dir)}
        _save_cache(Path(cache), store)
    return feats


def probe_splits(data_dir: Path | tuple[Path, Path], seed: int) -> dict[str, tuple[Tensor, Tensor]]:
    """Train and held-out (images, labels) of a labelled image folder.

    Args:
        data_dir: a pair (train folder, held-out folder) of class folders;
            ``<dir>/train`` + ``<dir>/val`` (or ``test``) class folders; or one class
            folder, then split 50/50 (stratified, seeded) into train and held-out.
        seed: fixes the 50/50 split.

    Returns:
        ``{"train": (images (N, 3, H, W), labels (N,)), "test": (images, labels)}``.
    """
    from solo_geometry.probes import stratified_split

    if isinstance(data_dir, tuple):
        train_dir, held_dir = data_dir
        return {"train": load_image_folder(train_dir)[:2], "test": load_image_folder(held_dir)[:2]}
    held = next((data_dir / s for s in ("val", "test") if (data_dir / s).is_dir()), None)
    if (data_dir / "train").is_dir() and held is not None:
        train = load_image_folder(data_dir / "train")
        return {"train": train[:2], "test": load_image_folder(held)[:2]}
    images, labels, _ = load_image_folder(data_dir)
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
    from solo_geometry.geometry.augment import apply_augmentation

    if target == "class":
        return images, labels
    if target == "rotation":
        return rotation_set(images, gen)
    t = (torch.rand(images.shape[0], generator=gen) * 2 - 1) * t_max  # (N,) in [-t_max, t_max)
    binned = ((t + t_max) / (2 * t_max) * bins).long().clamp(0, bins - 1)
    return apply_augmentation(images, "brightness", t), binned


# Orbit parameter range per family (t = 0 is the identity; units: see geometry/augment.py).
ORBIT_T_MAX: dict[str, float] = {
    "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1,
    "rotation": 0.5, "scale": 0.3, "translation": 0.15,
}  # fmt: skip


def orbit_table(
    extract: Any, images: Tensor, labels: Tensor, families: Sequence[str], k: int
) -> dict[str, dict[str, Any]]:
    """``orbit_compression`` of Z and H per family, K copies of each image along t.

    Args:
        extract: ``extract(data, name, extras) -> Features`` (cached extraction).
        images: held-out images (n, C, H, W) in [0, 1].
        labels: their classes (n,).
        families: augmentation families; t evenly spaced in [-t_max, t_max] (``ORBIT_T_MAX``).
        k: copies per orbit.

    Returns:
        ``{family: orbit_compression dict + {"t_max": float}}``.
    """
    from solo_geometry.geometry.orbits import make_orbits, orbit_compression

    table = {}
    for family in families:
        t_max = ORBIT_T_MAX.get(family, 0.3)
        x, orbit, t = make_orbits(images, family, k, t_max)  # (n*K, C, H, W), (n*K,), (K,)
        t_all = t.repeat(images.shape[0])  # (n * K,), orbit-major like x
        feats = extract((x, labels[orbit]), f"test/orbit/{family}", {"orbit": orbit, "t": t_all})
        table[family] = dict(orbit_compression(feats.z, feats.h, orbit, feats.labels))
        table[family]["t_max"] = t_max
    return table
