"""The lightly host's LightningModule: SimCLR, BYOL, SimSiam, VICReg and Barlow Twins.

Submodule names follow solo-learn (``backbone``, ``projector``, ``predictor``,
``momentum_backbone``, ``momentum_projector``, ``classifier``), and so does training: each large
crop through the backbone and projector separately, an online linear classifier on detached
features (solo-learn's ``classifier_lr``, no weight decay), SimSiam's predictor at a constant
rate (solo-learn's ``static_lr``), momentum updates after every
optimiser step with tau following a cosine from ``base_tau`` to ``final_tau`` (lightly's
``update_momentum`` and ``cosine_schedule``). ``geometry_view(batch)`` gives the monitor the
batch's features, head and loss closure (``solo_geometry.runtime.monitor.GeometryAware``).

Logged metrics:
    train_loss: the method's loss.
    train_class_loss, train_acc1: online classifier on detached backbone features.
    tau: momentum coefficient used in the last update (BYOL).
"""

from __future__ import annotations

import bisect
import copy
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightly.models.utils import deactivate_requires_grad, update_momentum
from torch import Tensor, nn
from typing_extensions import override

from solo_geometry.config import GeometryConfig
from solo_geometry.hosts.base import GeometryHost, LossOfOutputs
from solo_geometry.hosts.lightly.losses import (
    Objective,
    build_optimizer,
    build_predictor,
    build_projector,
    momentum_tau,
    warmup_cosine_lr,
)
from solo_geometry.hosts.lightly.recipe import MOMENTUM_METHODS, ParsedRecipe
from solo_geometry.inputs.datasets import MeanStd
from solo_geometry.linalg.operators import frozen_module, has_batch_norm
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.init import pseudo_collapse_, pseudo_collapse_backbone_
from solo_geometry.runtime.chunks import sync_batch_norm

__all__ = ["LightlyMethod"]

# Methods whose predictor keeps the base rate while the others follow the schedule (solo-learn's
# ``static_lr`` in the method's ``learnable_params``).
_STATIC_PREDICTOR = ("simsiam",)


def _constant(k: int) -> float:
    """The schedule factor of a static group: its base rate throughout."""
    return 1.0


class LightlyMethod(GeometryHost, pl.LightningModule):
    """SimCLR, BYOL, SimSiam, VICReg or Barlow Twins as a solo-learn recipe describes it.

    Args:
        recipe: the parsed recipe.
        num_classes: classes of the online classifier.
        geometry: the geometry node (head swap and initialisers), or None.
    """

    def __init__(
        self, recipe: ParsedRecipe, num_classes: int, geometry: GeometryConfig | None = None
    ) -> None:
        super().__init__()
        self.recipe = recipe
        self._arguments = (recipe, num_classes, geometry)  # geometry_untrained() rebuilds
        self.backbone, self.features_dim = build_backbone(
            recipe.backbone, stem=recipe.backbone_stem
        )
        head_cfg = geometry.head if geometry is not None else None
        pred_cfg = geometry.predictor if geometry is not None else None
        kwargs = recipe.method_kwargs
        self.projector = build_projector(recipe.method, self.features_dim, kwargs, head_cfg)
        predictor = build_predictor(recipe.method, kwargs, pred_cfg, head_cfg)
        if predictor is not None:
            self.predictor = predictor
        self.classifier = nn.Linear(self.features_dim, num_classes)
        if geometry is not None:
            self._initialise(geometry)
        self.momentum = recipe.method in MOMENTUM_METHODS
        if self.momentum:
            self.momentum_backbone = copy.deepcopy(self.backbone)
            self.momentum_projector = copy.deepcopy(self.projector)
            deactivate_requires_grad(self.momentum_backbone)
            deactivate_requires_grad(self.momentum_projector)
        self.objective = Objective(recipe.method, kwargs, predictor)
        self._last_step = 0
        self._max_steps = 1  # optimiser steps of the fit, set in on_train_start

    def _initialise(self, geometry: GeometryConfig) -> None:
        """Apply the geometry group's opt-in initialisers (before momentum copies are made)."""
        if geometry.init.pseudo_collapse:
            pseudo_collapse_(self.projector, geometry.init.alpha)
            if geometry.init.backbone:
                pseudo_collapse_backbone_(self.backbone, geometry.init.alpha)

    def geometry_untrained(self) -> LightlyMethod:
        """A new module from this one's constructor and arguments: the same network, untrained.

        The end-of-fit probes seed it (``evaluation.random_init_modules``) and probe its
        backbone and head beside the trained ones.
        """
        return LightlyMethod(*self._arguments)

    @override
    def forward(self, x: Tensor) -> Tensor:
        """Backbone features (N, d) of images (N, 3, H, W)."""
        return self.backbone(x)

    @torch.no_grad()
    def _targets(self, views: list[Tensor]) -> Tensor | None:
        """Momentum-branch outputs (V, N, p) of the views, or None without a momentum branch."""
        if not self.momentum:
            return None
        outs = [self.momentum_projector(self.momentum_backbone(x)) for x in views]
        return torch.stack(outs)  # (views, batch, p)

    def _class_loss(self, feats: list[Tensor], labels: Tensor) -> tuple[Tensor, Tensor]:
        """Online classifier: mean over views of cross-entropy and top-1 accuracy."""
        losses, accs = [], []
        for f in feats:
            logits = self.classifier(f.detach())
            losses.append(F.cross_entropy(logits, labels, ignore_index=-1))
            accs.append((logits.argmax(-1) == labels).float().mean())
        return sum(losses) / len(losses), sum(accs) / len(accs)  # type: ignore[return-value]

    @override
    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One step: the method's loss plus the online classifier's."""
        _, views, labels = batch
        feats = [self.backbone(x) for x in views]  # V x (N, d)
        H = torch.stack([self.projector(f) for f in feats])  # (views, batch, p)
        targets = self._targets(views)
        for f in feats:  # the monitor measures this step: keep its inputs (capture on)
            self.capture("feats", f)
        if targets is not None:
            self.capture("targets", targets)
        loss = self.objective(H, targets)
        class_loss, acc1 = self._class_loss(feats, labels)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True)
        self.log_dict({"train_class_loss": class_loss, "train_acc1": acc1}, on_epoch=True)
        return loss + class_loss

    @override
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Momentum update after each optimiser step, tau on a cosine (solo-learn's order)."""
        step = self.trainer.global_step
        if self.momentum and step > self._last_step:
            mom = self.recipe.momentum
            tau = momentum_tau(step - 1, self._max_steps, mom.base_tau, mom.final_tau)
            update_momentum(self.backbone, self.momentum_backbone, m=tau)
            update_momentum(self.projector, self.momentum_projector, m=tau)
            self.log("tau", tau)
        self._last_step = step

    @override
    def on_train_start(self) -> None:
        """Reset the momentum step counter (solo-learn's ``on_train_start``); count the steps."""
        self._last_step = self.trainer.global_step
        self._max_steps = max(int(self.trainer.estimated_stepping_batches), 1)

    def _param_groups(self) -> list[dict[str, Any]]:
        """solo-learn's ``learnable_params``: classifier at ``classifier_lr``, no decay."""
        groups: list[dict[str, Any]] = [
            {"name": "backbone", "params": self.backbone.parameters()},
            {"name": "projector", "params": self.projector.parameters()},
        ]
        if hasattr(self, "predictor"):
            static = self.recipe.method in _STATIC_PREDICTOR
            groups.append(
                {"name": "predictor", "params": self.predictor.parameters(), "static_lr": static}
            )
        groups.append(
            {
                "name": "classifier",
                "params": self.classifier.parameters(),
                "lr": self.recipe.optimizer.classifier_lr,
                "weight_decay": 0.0,
            }
        )
        return groups

    @override
    def configure_optimizers(self) -> Any:
        """The recipe's optimiser and scheduler (``warmup_cosine``, ``step`` or ``none``)."""
        optimizer = build_optimizer(self._param_groups(), self.recipe.optimizer)
        sch = self.recipe.scheduler
        if sch.name == "none":
            return optimizer
        static = [bool(g.get("static_lr", False)) for g in optimizer.param_groups]
        if sch.name == "step":
            milestones = sorted(sch.lr_decay_steps)

            def decay(k: int) -> float:  # MultiStepLR's factor, gamma 0.1
                return 0.1 ** bisect.bisect_right(milestones, k)

            step = torch.optim.lr_scheduler.LambdaLR(
                optimizer, [_constant if s else decay for s in static]
            )
            return [optimizer], [{"scheduler": step, "interval": sch.interval}]
        per_epoch = self.trainer.estimated_stepping_batches / self.recipe.max_epochs
        by_step = sch.interval == "step"
        warmup = sch.warmup_epochs * (per_epoch if by_step else 1)
        total = self.trainer.estimated_stepping_batches if by_step else self.recipe.max_epochs

        def factor(base: float) -> Any:
            start = sch.warmup_start_lr if sch.warmup_epochs > 0 else base

            def f(k: int) -> float:
                lr = warmup_cosine_lr(k, base, warmup, total, start, sch.min_lr)
                return lr / base if base > 0 else 0.0

            return f

        lambdas = [
            _constant if s else factor(g["lr"])
            for g, s in zip(optimizer.param_groups, static, strict=True)
        ]
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
        return [optimizer], [{"scheduler": scheduler, "interval": sch.interval, "frequency": 1}]

    def geometry_crops(self, batch: Any) -> list[Tensor]:
        """The views of a batch ``(indexes, [views], labels)``."""
        return list(batch[1])

    def geometry_forward(self, crops: list[Tensor]) -> list[Tensor]:
        """Backbone features of each view, as ``training_step`` computes them."""
        return [self.backbone(x) for x in crops]

    def geometry_normalisation(self) -> MeanStd:
        """The recipe's normalisation of the first pipeline (as ``data.build_pipeline``)."""
        return self.recipe.normalisation()

    def geometry_context(self, batch: Any, crops: list[Tensor]) -> Tensor | None:
        """The momentum targets the loss holds fixed (None for methods without them).

        The training step's own when captured, else the momentum branch's outputs computed here
        (under the base's state guard, so its BatchNorm statistics are restored).
        """
        captured = self.captured("targets", 1)
        return captured[0] if captured is not None else self._targets(crops)

    def geometry_global_loss(self, contexts: list[Any]) -> LossOfOutputs:
        """The objective of H (V, R * N, p), the momentum targets and the predictor held fixed.

        lightly's losses do not gather across ranks here (``gather_distributed`` is off), so
        under DDP each rank's loss sees its own chunk: the global loss is the mean over ranks
        of the objective of each rank's chunk of H with its own targets (DDP averages their
        gradients). One rank: the objective of the batch. Under sync BatchNorm across ranks a
        predictor or momentum head with BatchNorm saw the global batch inside each rank's loss,
        which this per-rank objective cannot rebuild: ValueError (the record is skipped).
        """
        objective = self.objective
        predictor = getattr(self, "predictor", None)
        ranks = len(contexts)
        fixed = [m for m in (predictor, getattr(self, "momentum_projector", None)) if m is not None]
        if ranks > 1 and sync_batch_norm(self) and any(has_batch_norm(m) for m in fixed):
            raise ValueError(
                "the lightly host is not measured across ranks under sync BatchNorm "
                "with a BatchNorm predictor or momentum head"
            )

        def loss_of_outputs(H: Tensor) -> Tensor:
            pred = None if predictor is None else frozen_module(predictor, H.dtype, H.device)
            chunks = H.chunk(ranks, dim=1)  # R x (V, N, p)
            losses = [
                objective(h, None if t is None else t.to(H), pred)
                for h, t in zip(chunks, contexts, strict=True)
            ]
            return torch.stack(losses).mean()

        return loss_of_outputs
