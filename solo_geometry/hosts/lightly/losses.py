"""The five methods on lightly's losses, with solo-learn's heads, optimisers and schedules.

Heads have solo-learn's structure and submodule names (``projector.0.weight``, ...), so the
lightly host's checkpoints carry the same keys as solo-learn's. Losses are lightly's, weighted so
each method's loss has the value solo-learn's loss has on the same outputs:

* simclr: ``NTXentLoss(temperature)`` on the two views; with ``method_kwargs.loss=cross_view``
  the paper's one-directional cross-view cross-entropy (:class:`CrossViewCrossEntropy`);
* byol: ``sum_{v1} sum_{v2 != v1} 2 + 2 * NegativeCosineSimilarity(pred(H[v2]), target[v1])``
  (solo-learn's ``2 - 2 cos``);
* simsiam: ``(NegCos(pred(H[0]), sg(H[1])) + NegCos(pred(H[1]), sg(H[0]))) / 2`` with lightly's
  ``NegativeCosineSimilarity`` (solo-learn's ``simsiam_loss_func``, stop-gradient on targets);
* vicreg: ``VICRegLoss(lambda=sim_w, mu=2 var_w, nu=cov_w)`` (lightly averages the two views'
  variance terms, solo-learn sums them);
* barlow_twins: ``scale_loss * BarlowTwinsLoss(lambda=lamb)``.

References:
    - [0]: Chen et al., SimCLR, 2020, arXiv:2002.05709
    - [1]: Grill et al., BYOL, 2020, arXiv:2006.07733
    - [2]: Bardes et al., VICReg, 2022, arXiv:2105.04906
    - [3]: Zbontar et al., Barlow Twins, 2021, arXiv:2103.03230
    - [4]: Chen and He, Exploring Simple Siamese Representation Learning, 2021, arXiv:2011.10566
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from lightly.loss import BarlowTwinsLoss, NegativeCosineSimilarity, NTXentLoss, VICRegLoss
from lightly.utils.lars import LARS
from lightly.utils.scheduler import cosine_schedule
from torch import Tensor, nn

from solo_geometry.config import HeadConfig, PredictorConfig
from solo_geometry.hosts.lightly.nodes import (
    OPTIMIZER_KWARGS,
    AdamWKwargs,
    BarlowTwinsKwargs,
    BYOLKwargs,
    LARSKwargs,
    MethodKwargs,
    OptimizerNode,
    SGDKwargs,
    SimCLRKwargs,
    SimSiamKwargs,
    VICRegKwargs,
)
from solo_geometry.models.heads import build_configured_head, build_configured_predictor
from solo_geometry.models.solo_mlp import solo_predictor, solo_projector

__all__ = [
    "CrossViewCrossEntropy",
    "Objective",
    "build_optimizer",
    "build_predictor",
    "build_projector",
    "momentum_tau",
    "warmup_cosine_lr",
]

_Kwargs = TypeVar("_Kwargs", bound=MethodKwargs)


def _kwargs_of(method: str, kwargs: MethodKwargs, cls: type[_Kwargs]) -> _Kwargs:
    """``kwargs`` as the method's own ``method_kwargs`` type.

    Raises:
        TypeError: if they are another method's.
    """
    if not isinstance(kwargs, cls):
        raise TypeError(
            f"method_kwargs of {method} must be {cls.__name__}, got {type(kwargs).__name__}"
        )
    return kwargs


def build_projector(
    method: str, features_dim: int, kwargs: MethodKwargs, head: HeadConfig | None = None
) -> nn.Module:
    """The method's projector: solo-learn's structure, or this package's head when configured.

    Args:
        method: simclr, byol, simsiam, vicreg or barlow_twins.
        features_dim: backbone feature dimension d.
        kwargs: the parsed ``method_kwargs``.
        head: ``geometry.head``; a name other than ``projector`` swaps in that head, with
            ``hidden_dim`` defaulting to the recipe's ``proj_hidden_dim``.

    Returns:
        A module mapping (N, d) to (N, proj_output_dim).

    Raises:
        ValueError: on an unknown method or head.
    """
    hidden, out = kwargs.proj_hidden_dim, kwargs.proj_output_dim
    if head is not None and head.name != "projector":
        return build_configured_head(head, features_dim, out, default_hidden=hidden)
    return solo_projector(method, features_dim, hidden, out)


_PREDICTOR_KWARGS: dict[str, type[BYOLKwargs] | type[SimSiamKwargs]] = {
    "byol": BYOLKwargs,
    "simsiam": SimSiamKwargs,
}


def build_predictor(
    method: str,
    kwargs: MethodKwargs,
    predictor: PredictorConfig | None = None,
    head: HeadConfig | None = None,
) -> nn.Module | None:
    """The predictor of BYOL and SimSiam; None for the other methods.

    By default solo-learn's (Linear, BN, ReLU, Linear; SimSiam's first Linear without bias, the
    layout of lightly's ``SimSiamPredictionHead``); ``geometry.predictor.name=smooth_mlp``
    builds this package's MLP instead, its null options taken from ``geometry.head``.

    Args:
        method: the recipe's method.
        kwargs: the parsed ``method_kwargs``.
        predictor: ``geometry.predictor`` or None.
        head: ``geometry.head`` (fills the predictor's null options) or None.

    Returns:
        A module mapping (N, p) to (N, p), or None.

    Raises:
        TypeError: if the method's ``kwargs`` are not its own.
    """
    if method not in _PREDICTOR_KWARGS:
        return None
    own = _kwargs_of(method, kwargs, _PREDICTOR_KWARGS[method])
    out, hidden = own.proj_output_dim, own.pred_hidden_dim
    if predictor is not None and predictor.name != "predictor":
        return build_configured_predictor(predictor, head or HeadConfig(), out, hidden)
    return solo_predictor(method, out, hidden)


class CrossViewCrossEntropy(nn.Module):
    """The paper's SimCLR loss: one-directional cross-view cross-entropy (experiments.py).

    ``loss(h1, h2) = CE(z1 z2^T / t, arange(N))`` with z = h / ||h||: each first view against
    every second view, its own second view the target; no same-view negatives, no symmetrisation.
    """

    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """Loss of head outputs h1, h2 (N, p) of the two views."""
        logits = F.normalize(h1, dim=1) @ F.normalize(h2, dim=1).T / self.temperature  # (N, N)
        return F.cross_entropy(logits, torch.arange(h1.shape[0], device=h1.device))


class Objective(nn.Module):
    """A method's loss on head outputs of all views.

    ``forward(H, targets)``: H (V, N, p) online head outputs, H[v] = projector(Z[v]);
    targets (V, N, p) momentum-branch outputs (BYOL) or None. The predictor, when present, is
    part of the objective (applied to H), so ``loss(H)`` is the function whose curvature the
    monitor measures.

    Args:
        method: simclr, byol, simsiam, vicreg or barlow_twins.
        kwargs: the parsed ``method_kwargs``.
        predictor: BYOL's or SimSiam's predictor.

    Raises:
        ValueError: on an unknown method, or BYOL or SimSiam without a predictor.
        TypeError: if ``kwargs`` are not the method's.
    """

    def __init__(
        self, method: str, kwargs: MethodKwargs, predictor: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.method = method
        self.scale = 1.0
        self.stop_gradient = True
        self.loss: nn.Module
        if method == "simclr":
            simclr = _kwargs_of(method, kwargs, SimCLRKwargs)
            self.loss = (
                CrossViewCrossEntropy(simclr.temperature)
                if simclr.loss == "cross_view"
                else NTXentLoss(temperature=simclr.temperature)
            )
        elif method == "byol":
            _kwargs_of(method, kwargs, BYOLKwargs)
            if predictor is None:
                raise ValueError("byol needs its predictor")
            self.loss = NegativeCosineSimilarity()
        elif method == "simsiam":
            self.stop_gradient = _kwargs_of(method, kwargs, SimSiamKwargs).stop_gradient
            if predictor is None:
                raise ValueError("simsiam needs its predictor")
            self.loss = NegativeCosineSimilarity()
        elif method == "vicreg":
            vicreg = _kwargs_of(method, kwargs, VICRegKwargs)
            self.loss = VICRegLoss(
                lambda_param=vicreg.sim_loss_weight,
                mu_param=2.0 * vicreg.var_loss_weight,
                nu_param=vicreg.cov_loss_weight,
            )
        elif method == "barlow_twins":
            barlow = _kwargs_of(method, kwargs, BarlowTwinsKwargs)
            self.loss = BarlowTwinsLoss(lambda_param=barlow.lamb)
            self.scale = barlow.scale_loss
        else:
            raise ValueError(f"unknown method {method!r}")
        # Not registered as a submodule: the predictor belongs to the LightningModule.
        self._predictor = [predictor] if predictor is not None else []

    def forward(
        self,
        H: Tensor,
        targets: Tensor | None = None,
        predictor: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """Loss of head outputs H (V, N, p) given detached targets (V, N, p) or None.

        ``predictor`` replaces the method's own predictor (e.g. a float64 copy for
        measurements). SimSiam's targets are H itself, detached (stop-gradient) unless
        ``method_kwargs.stop_gradient`` is false.
        """
        if self.method == "simsiam":
            pred = predictor if predictor is not None else self._predictor[0]
            p0, p1 = pred(H[0]), pred(H[1])  # (N, p) each
            t0, t1 = (H[0].detach(), H[1].detach()) if self.stop_gradient else (H[0], H[1])
            return (self.loss(p0, t1) + self.loss(p1, t0)) / 2
        if self.method != "byol":
            return self.scale * self.loss(H[0], H[1])
        if targets is None:
            raise ValueError("byol's loss needs the momentum branch's targets")
        predictor = predictor if predictor is not None else self._predictor[0]
        preds = [predictor(h) for h in H]  # V x (N, p)
        total = H.new_zeros(())
        for v1 in range(targets.shape[0]):
            for v2 in range(len(preds)):
                if v2 != v1:
                    total = total + 2.0 + 2.0 * self.loss(preds[v2], targets[v1].detach())
        return total


def warmup_cosine_lr(
    step: float,
    base_lr: float,
    warmup_steps: float,
    total_steps: float,
    start_lr: float,
    min_lr: float,
) -> float:
    """solo-learn's linear-warmup cosine schedule; the cosine part is lightly's.

    Args:
        step: scheduler step (optimiser step or epoch).
        base_lr: the group's peak learning rate.
        warmup_steps: length of the linear warmup (may be fractional, as in solo-learn).
        total_steps: length of the whole schedule.
        start_lr: learning rate at step 0 (``base_lr`` when there is no warmup).
        min_lr: learning rate at the end.

    Returns:
        The learning rate at ``step``.
    """
    if step < warmup_steps:
        return start_lr + step * (base_lr - start_lr) / max(warmup_steps - 1, 1e-12)
    span = max(total_steps - warmup_steps, 1e-12)
    # lightly's cosine_schedule divides by (max_steps - 1): pass span + 1 for cos(pi * k / span).
    return cosine_schedule(int(step - warmup_steps), int(math.ceil(span)) + 1, base_lr, min_lr)


def momentum_tau(updates_done: int, max_steps: int, base_tau: float, final_tau: float) -> float:
    """Tau for the momentum update after ``updates_done`` earlier updates (solo-learn's cosine).

    ``final - (final - base) * (cos(pi * k / K) + 1) / 2`` with k = ``updates_done`` and
    K = ``max_steps``, computed by lightly's ``cosine_schedule`` (which divides by
    ``max_steps - 1``, hence K + 1).
    """
    return cosine_schedule(updates_done, max_steps + 1, base_tau, final_tau)


def _split_no_decay(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Move 1-d parameters (biases, norms) to groups without weight decay, as solo-learn."""
    out = []
    for group in groups:
        params = list(group["params"])
        decay = [p for p in params if p.ndim > 1]
        no_decay = [p for p in params if p.ndim <= 1]
        if decay:
            out.append({**group, "params": decay})
        if no_decay:
            out.append({**group, "params": no_decay, "weight_decay": 0.0})
    return out


def _lars(groups: list[dict[str, Any]], opt: OptimizerNode, kw: LARSKwargs) -> LARS:
    """Lightly's LARS with solo-learn's ``eta``, ``exclude_bias_n_norm`` and ``clip_lr``.

    ``exclude_bias_n_norm``: lightly's LARS skips scaling and weight decay for groups with zero
    weight decay, exactly what solo-learn does for 1-d parameters. ``clip_lr`` (local rate
    ``min(lars_lr / lr, 1)``) is applied by setting each parameter's trust coefficient before
    every step, one parameter per group.
    """
    if kw.exclude_bias_n_norm:
        groups = [{**g, "params": [p for p in g["params"] if p.ndim > 1]} for g in groups] + [
            {**g, "params": [p for p in g["params"] if p.ndim <= 1], "weight_decay": 0.0}
            for g in groups
        ]
        groups = [g for g in groups if g["params"]]
    if kw.clip_lr:
        groups = [{**g, "params": [p], "clip_lr": True} for g in groups for p in g["params"]]
    optimizer = LARS(
        groups,
        lr=opt.lr,
        weight_decay=opt.weight_decay,
        trust_coefficient=kw.eta,
        momentum=kw.momentum,
        nesterov=kw.nesterov,
        dampening=kw.dampening,
    )
    if kw.clip_lr:
        optimizer.register_step_pre_hook(_clip_hook(kw.eta))
    return optimizer


def _clip_hook(eta: float) -> Callable[..., None]:
    """Step pre-hook making lightly's local rate ``min(eta*|p|/(|g|+wd|p|) / lr, 1)``."""

    @torch.no_grad()
    def hook(optimizer: torch.optim.Optimizer, *_: Any) -> None:
        for group in optimizer.param_groups:
            (p,) = group["params"]
            if p.grad is None or group["weight_decay"] == 0:
                continue
            wd, lr = group["weight_decay"], group["lr"]
            p_norm, g_norm = torch.norm(p), torch.norm(p.grad)
            lars_lr = eta * p_norm / (g_norm + p_norm * wd + group["eps"])
            # lightly multiplies by trust * |p| / (...) = (trust / eta) * lars_lr.
            clipped = torch.clamp(lars_lr / lr, max=1.0) if lr > 0 else torch.ones_like(lars_lr)
            group["trust_coefficient"] = eta * clipped / lars_lr.clamp_min(1e-30)

    return hook


def build_optimizer(groups: Iterable[dict[str, Any]], opt: OptimizerNode) -> torch.optim.Optimizer:
    """Build the recipe's optimiser over named parameter groups.

    Args:
        groups: ``{"name", "params", ["lr", "weight_decay"]}`` dicts (solo-learn's
            ``learnable_params``).
        opt: ``ParsedRecipe.optimizer`` (learning rates already scaled).

    Returns:
        SGD, AdamW or lightly's LARS.

    Raises:
        ValueError: on an unknown optimiser.
    """
    groups = [dict(g, params=list(g["params"])) for g in groups]
    if opt.exclude_bias_n_norm_wd:
        groups = _split_no_decay(groups)
    kw = opt.kwargs
    if isinstance(kw, SGDKwargs):
        return torch.optim.SGD(
            groups,
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            momentum=kw.momentum,
            nesterov=kw.nesterov,
            dampening=kw.dampening,
        )
    if isinstance(kw, AdamWKwargs):
        return torch.optim.AdamW(
            groups,
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            betas=kw.betas,
            eps=kw.eps,
            amsgrad=kw.amsgrad,
        )
    if isinstance(kw, LARSKwargs):
        return _lars(groups, opt, kw)
    raise ValueError(f"unknown optimizer {opt.name!r}; choose from {sorted(OPTIMIZER_KWARGS)}")
