"""Feature extraction: backbone features Z and head outputs H of an image set, cached.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from tqdm import tqdm

from solo_geometry.folder.safe_files import MAX_CHECKPOINT_BYTES, LinkRefused, TooLarge, open_read
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD, MeanStd, load_image_folder
from solo_geometry.state import preserved_state

__all__ = ["Features", "extract_features", "load_cache"]

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


def load_cache(
    path: str | Path, tag: str | None = None, *, any_tag: bool = False
) -> dict[str, Any]:
    """Read ``features.pt``; an absent file, another format or another ``tag`` gives no sets.

    Args:
        path: the cache file.
        tag: identifies the model; a cache written with another tag is not used.
        any_tag: accept whatever model wrote the cache (readers such as the report).

    Returns:
        The cache dictionary (``sets`` possibly empty).

    Raises:
        ValueError: if the file exists but cannot be read, is a symbolic link or is over
            :data:`~solo_geometry.folder.safe_files.MAX_CHECKPOINT_BYTES`.
    """
    empty: dict[str, Any] = {"format": _FORMAT, "tag": tag, "sets": {}, "meta": {}}
    path = Path(path)
    if not path.is_file() and not path.is_symlink():
        return empty
    try:
        with open_read(path, MAX_CHECKPOINT_BYTES, "feature cache") as fh:  # no link followed
            cache = torch.load(fh, map_location="cpu", weights_only=True)
    except (LinkRefused, TooLarge):
        raise  # the message names the file
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ValueError(f"cannot read feature cache {str(path)!r}: {err}") from err
    if not isinstance(cache, dict) or cache.get("format") != _FORMAT:
        return empty
    if not any_tag and cache.get("tag") != tag:
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


@torch.no_grad()
def _forward(
    backbone: nn.Module,
    head: nn.Module,
    loader: DataLoader,
    device: torch.device,
    normalise: Callable[[Tensor], Tensor],
    progress: bool,
    desc: str,
) -> tuple[Tensor, Tensor, Tensor]:
    zs, hs, ys = [], [], []
    bar = None
    if progress:
        bar = tqdm(total=len(loader.dataset), desc=desc, unit="img", file=sys.stderr)  # type: ignore[arg-type]
    for images, labels in loader:
        z = backbone(normalise(images.to(device, torch.float32)))  # (B, d)
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
    with preserved_state(backbone, head):
        backbone.eval()
        head.eval()
        z, h, labels = _forward(
            backbone, head, loader, dev, lambda x: (x - mean) / std, progress, name
        )
    feats = Features(z, h, labels, {k: v.cpu() for k, v in (extras or {}).items()})
    if store is not None and cache is not None:
        store["sets"][name] = feats.tensors()
        store["meta"][name] = {**feats.meta(), "source": _source(dataset_or_dir)}
        _save_cache(Path(cache), store)
    return feats
