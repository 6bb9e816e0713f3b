"""The paper's rotation probes (``probes.protocol=paper``), beside this package's own.

experiments.py (``run_guillotine_experiment``) and head_depth_ablations.py probe the 4-way
rotation as follows, reproduced exactly here:

* data: every image of the probe-train and held-out sets, each rotated by one fixed multiple of
  90 degrees drawn by ``random.Random(seed).randint(0, 3)`` per image in order (the same seed for
  both sets, as ``RotationDataset(train=..., seed=0)``);
* features: raw z = backbone(x) and h = head(z), backbone and head in eval mode, no
  standardisation, no L2 normalisation;
* probes: ``nn.Linear(d, 4)`` (with bias) and an MLP ``Linear(d, m) - ReLU - Linear(m, 4)`` with
  m = 256 on Z and 512 on H; each trained by Adam at 1e-3 on cross-entropy for 5 epochs of
  shuffled batches of 256, no weight decay, no early stopping; accuracy on the held-out set.

The features are computed once (eval mode makes them the same at every epoch). This package's
probes (:mod:`solo_geometry.analysis.probes`: tuned L2 logistic regression, early-stopped MLP on
standardised features) answer the same question with less optimisation noise; the reproduction
reports both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.geometry.augment import MeanStd, apply_normalisation, deterministic_mode

__all__ = ["PaperProbeSettings", "paper_rotations", "paper_rotation_probes"]


@dataclass(frozen=True)
class PaperProbeSettings:
    """The paper's probe settings (its values are the defaults)."""

    epochs: int = 5
    batch_size: int = 256
    lr: float = 1e-3
    hidden_z: int = 256
    hidden_h: int = 512
    seed: int = 0


def paper_rotations(images: Tensor, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Each image (N, 3, H, W) rotated by its fixed ``random.Random(seed)`` quarter turn."""
    rng = random.Random(seed)
    labels = torch.tensor([rng.randint(0, 3) for _ in range(len(images))], dtype=torch.long)
    # counter-clockwise quarter turns, as torchvision's rotate(img, 90 k), exactly
    turns = zip(images, labels.tolist(), strict=True)
    rotated = torch.stack([torch.rot90(x, k, dims=(-2, -1)) for x, k in turns])
    return rotated, labels


@torch.no_grad()
def _features(
    backbone: nn.Module, head: nn.Module, x: Tensor, normalise: MeanStd | None
) -> tuple[Tensor, Tensor]:
    zs, hs = [], []
    # the model's device (a backbone without parameters: the CPU); features come back to the CPU
    device = next((p.device for p in backbone.parameters()), torch.device("cpu"))
    with deterministic_mode(nn.ModuleList([backbone, head]), batch_stats=False):
        for chunk in x.split(256):
            chunk = chunk.to(device)
            z = backbone(chunk if normalise is None else apply_normalisation(chunk, normalise))
            zs.append(z.flatten(1).cpu())
            hs.append(head(z.flatten(1)).cpu())
    return torch.cat(zs), torch.cat(hs)


def _fit(
    probe: nn.Module, x: Tensor, y: Tensor, s: PaperProbeSettings, gen: torch.Generator
) -> None:
    opt = torch.optim.Adam(probe.parameters(), lr=s.lr)
    for _ in range(s.epochs):
        order = torch.randperm(len(x), generator=gen)
        for idx in order.split(s.batch_size):
            loss = F.cross_entropy(probe(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()


def _accuracy(probe: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((probe(x).argmax(dim=1) == y).double().mean())


def paper_rotation_probes(
    backbone: nn.Module,
    head: nn.Module,
    train_x: Tensor,
    test_x: Tensor,
    *,
    normalise: MeanStd | None = None,
    settings: PaperProbeSettings = PaperProbeSettings(),
) -> dict[str, Any]:
    """The paper's linear and MLP rotation probes on Z and on H.

    Args:
        backbone: images -> raw features (N, d).
        head: raw features -> head outputs (N, p).
        train_x: probe-train images (N, 3, H, W) in [0, 1].
        test_x: held-out images (M, 3, H, W) in [0, 1].
        normalise: the recipe's input normalisation (None: none, as the paper).
        settings: the probe settings (the paper's by default).

    Returns:
        ``linear`` and ``mlp``: [accuracy on Z, accuracy on H]; ``n`` (held-out images),
        ``protocol`` ("paper") and ``settings``.
    """
    torch.manual_seed(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    (xtr, ytr), (xte, yte) = (paper_rotations(x, settings.seed) for x in (train_x, test_x))
    ztr, htr = _features(backbone, head, xtr, normalise)
    zte, hte = _features(backbone, head, xte, normalise)
    out: dict[str, Any] = {"linear": [], "mlp": []}
    for (tr, te), hidden in (((ztr, zte), settings.hidden_z), ((htr, hte), settings.hidden_h)):
        d = tr.shape[1]
        linear = nn.Linear(d, 4)
        mlp = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, 4))
        for name, probe in (("linear", linear), ("mlp", mlp)):
            _fit(probe, tr, ytr, settings, gen)
            out[name].append(_accuracy(probe, te, yte))
    return {**out, "n": len(yte), "protocol": "paper", "settings": vars(settings)}
