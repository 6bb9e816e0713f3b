"""A small real LightningModule with ``geometry_view``, its data and a Trainer around it.

``BoringGeometry``, ``TwoViews``, ``small_config`` and ``fit_boring``: the tests of the monitor,
the callbacks and the alert share them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from solo_geometry.config import GeometryConfig, MeasureConfig, SpectrumConfig
from solo_geometry.runtime.view import GeometryView


class TwoViews(Dataset):
    """Random images in two noisy views, solo-learn's batch layout [index, [X1, X2], y]."""

    def __init__(self, n: int = 32) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.rand(n, 3, 8, 8, generator=g)
        self.noise = 0.05 * torch.randn(2, n, 3, 8, 8, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        return i, [self.x[i] + self.noise[0, i], self.x[i] + self.noise[1, i]], 0


class BoringGeometry(pl.LightningModule):
    """A minimal SSL module with a BN backbone, a BN + dropout head and ``geometry_view``."""

    def __init__(self, fail_at: tuple[int, ...] = (), nan_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.projector = nn.Sequential(
            nn.Linear(8, 16), nn.BatchNorm1d(16), nn.SiLU(), nn.Linear(16, 6)
        )
        self.dropout = nn.Dropout(0.2)
        self.fail_at, self.nan_at = fail_at, nan_at

    def ssl_loss(self, H: Tensor) -> Tensor:
        h1, h2 = H[0], H[1]
        std = torch.sqrt(H.var(dim=1) + 1e-4)
        return F.mse_loss(h1, h2) + F.relu(1 - std).mean()

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        _, X, _ = batch
        H = torch.stack([self.projector(self.dropout(self.backbone(x))) for x in X])
        return self.ssl_loss(H)

    def features(self, X: list[Tensor]) -> Tensor:
        """Backbone features (V, N, d) for the view, without gradients."""
        with torch.no_grad():
            return torch.stack([self.backbone(x) for x in X])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def geometry_view(self, batch: Any) -> GeometryView:
        step = self.trainer.global_step if self._trainer is not None else -1
        if step in self.fail_at:
            self.projector[1].running_mean.add_(1.0)  # state damage the monitor must undo
            self.eval()
            raise RuntimeError("boom")
        _, X, _ = batch
        Z = self.features(X)  # (V, N, d)
        scale = math.nan if step in self.nan_at else 1.0

        def loss_of_outputs(H: Tensor) -> Tensor:
            return self.ssl_loss(H) * scale

        def loss_of_features(Z_: Tensor) -> Tensor:
            return loss_of_outputs(torch.stack([self.projector(z) for z in Z_]))

        return GeometryView(
            Z, self.projector, loss_of_features, self.backbone, X[0], loss_of_outputs
        )


def small_config(
    out: Path, augment: bool = True, spectrum: dict[str, Any] | None = None, **kw: Any
) -> GeometryConfig:
    """A small config writing to ``out``; ``spectrum``: options of the spectrum node."""
    measure = MeasureConfig(augment=augment, augment_samples=4, augment_families=["brightness"])
    base = dict(
        every_n_steps=2,
        spectrum=SpectrumConfig(
            **{"max_samples": 8, "max_steps": 80, "density_probes": 1, **(spectrum or {})}
        ),
        measure=measure,
        out_dir=str(out),
        budget=None,
    )
    base.update(kw)
    return GeometryConfig(**base)


def fit_boring(
    tmp: Path,
    callbacks: list,
    make: Any = BoringGeometry,
    *,
    steps: int = 6,
    ckpt: str | None = None,
    logger: Any = False,
) -> tuple[BoringGeometry, pl.Trainer]:
    pl.seed_everything(0, verbose=False)
    model = make()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp,
    )
    loader = DataLoader(TwoViews(), batch_size=8, shuffle=True)
    trainer.fit(model, loader, ckpt_path=ckpt)
    return model, trainer


STATS_KEYS = [
    f"{p}/{q}" for p in ("z", "h") for q in ("normalized_std", "cond", "rank", "rankme_l2")
]


class CapturingGeometry(BoringGeometry):
    """BoringGeometry that hands the monitor the features of its training step."""

    def __init__(self, skip_first: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.kept: dict[str, Tensor] | None = None
        self.skip_first = skip_first  # first batches whose training_step returns None
        self.fresh_forwards = 0  # views that ran the backbone themselves

    def geometry_capture(self, enabled: bool) -> None:
        self.kept = {} if enabled else None

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        if self.skip_first:  # Lightning skips backward and the optimiser step
            self.skip_first -= 1
            return None
        _, X, _ = batch
        feats = [self.backbone(x) for x in X]
        if self.kept is not None:
            self.kept["Z"] = torch.stack(feats).detach()  # (V, B, d)
        return self.ssl_loss(torch.stack([self.projector(self.dropout(f)) for f in feats]))

    def features(self, X: list[Tensor]) -> Tensor:
        if self.kept and "Z" in self.kept:
            return self.kept["Z"][:, : X[0].shape[0]]
        self.fresh_forwards += 1
        return super().features(X)


def training_state(model: pl.LightningModule, trainer: pl.Trainer) -> dict[str, Tensor]:
    out = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    opt = trainer.optimizers[0].state_dict()["state"]
    for i, s in opt.items():
        out.update({f"opt.{i}.{k}": torch.as_tensor(v).clone() for k, v in s.items()})
    out["rng"] = torch.get_rng_state()
    return out


class TinyHead(pl.LightningModule):
    """A linear backbone and a SiLU head named by ``geometry_head()`` only (as DINO's).

    SGD over two parameter groups (backbone, head) at ``lr`` and ``momentum``: the update
    sizes' tests.
    """

    def __init__(self, lr: float = 0.1, momentum: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lr, self.momentum = lr, momentum
        self.backbone = nn.Linear(5, 4)
        self.head = nn.Sequential(nn.Linear(4, 6), nn.SiLU(), nn.Linear(6, 3))

    def geometry_head(self) -> nn.Module:
        return self.head

    def training_step(self, batch: tuple, batch_idx: int) -> Tensor:
        (x,) = batch
        return self.head(self.backbone(x)).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": self.backbone.parameters()}, {"params": self.head.parameters()}]
        return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum)
