"""The lightly host's LightningModule: one class for SimCLR, BYOL, VICReg and Barlow Twins.

Submodule names follow solo-learn (``backbone``, ``projector``, ``predictor``,
``momentum_backbone``, ``momentum_projector``, ``classifier``), and so does training: each large
crop through the backbone and projector separately, an online linear classifier on detached
features (solo-learn's ``classifier_lr``, no weight decay), momentum updates after every
optimiser step with tau following a cosine from ``base_tau`` to ``final_tau`` (lightly's
``update_momentum`` and ``cosine_schedule``). ``geometry_view(batch)`` gives the monitor the
batch's features, head and loss closure (``solo_geometry.monitor.GeometryAware``).

Logged metrics:
    train_loss: the method's loss.
    train_class_loss, train_acc1: online classifier on detached backbone features.
    tau: momentum coefficient used in the last update (BYOL).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightly.models.utils import deactivate_requires_grad, update_momentum
from torch import Tensor, nn
from typing_extensions import override

from solo_geometry.backbones import build_backbone
from solo_geometry.hosts.lightly_methods import (
    Objective,
    build_optimizer,
    build_predictor,
    build_projector,
    momentum_tau,
    warmup_cosine_lr,
)
from solo_geometry.hosts.lightly_recipe import MOMENTUM_METHODS, ParsedRecipe
from solo_geometry.monitor import kept

if TYPE_CHECKING:
    from solo_geometry.config import GeometryConfig
    from solo_geometry.monitor import GeometryView

__all__ = ["LightlyMethod", "frozen_buffers"]


@contextmanager
def frozen_buffers(*modules: nn.Module) -> Iterator[None]:
    """Restore every buffer (BatchNorm running statistics) of ``modules`` on exit."""
    saved = [{k: b.clone() for k, b in m.named_buffers()} for m in modules]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, state in zip(modules, saved, strict=True):
                for k, b in m.named_buffers():
                    b.copy_(state[k])


class LightlyMethod(pl.LightningModule):
    """SimCLR, BYOL, VICReg or Barlow Twins as a solo-learn recipe describes it.

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
        self.backbone, self.features_dim = build_backbone(recipe.backbone, cifar=recipe.cifar)
        head_cfg = geometry.head if geometry is not None else None
        kwargs = recipe.method_kwargs
        self.projector = build_projector(recipe.method, self.features_dim, kwargs, head_cfg)
        predictor = build_predictor(recipe.method, kwargs)
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
        self._geometry_kept: dict[str, Tensor | None] | None = None  # see geometry_capture

    def _initialise(self, geometry: GeometryConfig) -> None:
        """Apply the geometry group's opt-in initialisers (before momentum copies are made)."""
        from solo_geometry.init import pseudo_collapse_, pseudo_collapse_backbone_

        if geometry.init.pseudo_collapse:
            pseudo_collapse_(self.projector, geometry.init.alpha)
            if geometry.init.backbone:
                pseudo_collapse_backbone_(self.backbone, geometry.init.alpha)

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
        if self._geometry_kept is not None:  # the monitor measures this step: keep its inputs
            self._geometry_kept["feats"] = kept(torch.stack(feats))  # (views, batch, d)
            self._geometry_kept["targets"] = None if targets is None else kept(targets)
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
            tau = momentum_tau(step - 1, self._max_steps, mom["base_tau"], mom["final_tau"])
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
            groups.append({"name": "predictor", "params": self.predictor.parameters()})
        groups.append(
            {
                "name": "classifier",
                "params": self.classifier.parameters(),
                "lr": self.recipe.optimizer["classifier_lr"],
                "weight_decay": 0.0,
            }
        )
        return groups

    @override
    def configure_optimizers(self) -> Any:
        """The recipe's optimiser and scheduler (``warmup_cosine``, ``step`` or ``none``)."""
        optimizer = build_optimizer(self._param_groups(), self.recipe.optimizer)
        sch = self.recipe.scheduler
        if sch["name"] == "none":
            return optimizer
        if sch["name"] == "step":
            step = torch.optim.lr_scheduler.MultiStepLR(optimizer, sch["lr_decay_steps"])
            return [optimizer], [{"scheduler": step, "interval": sch["interval"]}]
        per_epoch = self.trainer.estimated_stepping_batches / self.recipe.max_epochs
        by_step = sch["interval"] == "step"
        warmup = sch["warmup_epochs"] * (per_epoch if by_step else 1)
        total = self.trainer.estimated_stepping_batches if by_step else self.recipe.max_epochs

        def factor(base: float) -> Any:
            start = sch["warmup_start_lr"] if sch["warmup_epochs"] > 0 else base

            def f(k: int) -> float:
                lr = warmup_cosine_lr(k, base, warmup, total, start, sch["min_lr"])
                return lr / base if base > 0 else 0.0

            return f

        lambdas = [factor(g["lr"]) for g in optimizer.param_groups]
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
        return [optimizer], [{"scheduler": scheduler, "interval": sch["interval"], "frequency": 1}]

    def geometry_capture(self, enabled: bool) -> None:
        """Keep (or stop keeping and drop) the features and targets of the training step."""
        self._geometry_kept = {} if enabled else None

    def geometry_view(self, batch: Any) -> GeometryView:
        """The monitor's view of a training batch (``GeometryAware``).

        Features and targets are those the training step computed when capture is on (the
        batch being the first samples of that step's); otherwise they are computed as in
        ``training_step`` (training mode, so BatchNorm uses batch statistics) with every buffer
        restored afterwards and no gradient.

        Args:
            batch: a training batch ``(indexes, [views], labels)``.

        Returns:
            features (V, N, d) detached, the projector as head, a loss closure Z -> scalar with
            the momentum targets detached, the same loss as a function of head outputs, the
            backbone and the first view's images. Closures given fewer samples than the batch
            (the monitor's ``max_samples``) use the first samples' targets.
        """
        from solo_geometry.monitor import GeometryView

        _, views, _ = batch
        reuse, n = self._geometry_kept or {}, views[0].shape[0]
        feats = reuse.get("feats")
        if feats is not None and feats.shape[0] == len(views) and feats.shape[1] >= n:
            Z, targets = feats[:, :n], reuse["targets"]  # (views, n, d)
        else:
            modules = [self.backbone] + (
                [self.momentum_backbone, self.momentum_projector] if self.momentum else []
            )
            with torch.no_grad(), frozen_buffers(*modules):
                Z = torch.stack([self.backbone(x) for x in views]).detach()  # (views, batch, d)
                targets = self._targets(views)  # no_grad: detached
        head, objective = self.projector, self.objective
        predictors: dict[torch.dtype, nn.Module] = {}

        def loss_of_outputs(H: Tensor) -> Tensor:
            # The monitor may measure the first n samples only: take the same targets.
            tgt = None if targets is None else targets[:, : H.shape[1]].to(H)
            pred = None
            if hasattr(self, "predictor"):  # a copy in H's dtype: measurements never touch it
                if H.dtype not in predictors:
                    predictors[H.dtype] = copy.deepcopy(self.predictor).to(H.dtype)
                pred = predictors[H.dtype]
            return objective(H, tgt, pred)

        def loss_of_features(z: Tensor) -> Tensor:
            return loss_of_outputs(torch.stack([head(z_v) for z_v in z]))  # (views, batch, p)

        return GeometryView(
            features=Z,
            head=head,
            loss_of_features=loss_of_features,
            backbone=self.backbone,
            images=views[0].detach(),
            loss_of_outputs=loss_of_outputs,
        )
