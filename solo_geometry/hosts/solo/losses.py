"""Loss closures of solo-learn methods as functions of the projector's outputs.

For each supported method, a :class:`LossSpec` rebuilds the method's SSL loss (never the online
classifier's) from ``solo.losses`` with the method's own hyperparameters, as a function of the
projector outputs H (V, N, p) of one batch: L(H) = loss(H, targets), where every other quantity
(predictor parameters, momentum-branch targets, indexes) is held fixed and detached. Evaluated at
H[v] = projector(Z[v]) it equals the SSL term of the method's ``training_step`` on that batch.

The closures accept H in any floating dtype (the monitor works in float64): captured targets are
cast to H's dtype and fixed modules (the predictor) run on detached copies of their state in that
dtype. torch's global default dtype is never changed: Barlow Twins, whose ``barlow_loss_func``
builds a float32 BatchNorm inside (which refuses float64 input), is evaluated by
:func:`barlow_loss`, solo-learn's formula in H's dtype, tested equal to ``barlow_loss_func``.

Supported methods (``SUPPORTED``): simclr, supcon, byol, mocov3, simsiam, vicreg, vibcreg,
barlow_twins. Not supported, because their loss depends on state the adapter cannot rebuild
from ``solo.losses`` alone (queues, prototypes, Sinkhorn, centering, nearest-neighbour support
sets or a decoder): all4one, deepclusterv2, dino, mae, mocov2plus, nnbyol, nnclr, nnsiam,
ressl, swav, wmse.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from solo_geometry.hosts.solo.queues import QUEUE_METHODS
from solo_geometry.hosts.solo.spec import (
    Context,
    Kept,
    LossSpec,
    frozen,
    momentum_outputs,
    no_context,
)

__all__ = ["SUPPORTED", "UNSUPPORTED", "LossSpec", "barlow_loss"]


def _index_context(model: Any, crops: list[Tensor], batch: Any, kept: Kept) -> Context:
    return {"indexes": batch[0].detach()}


def _label_context(model: Any, crops: list[Tensor], batch: Any, kept: Kept) -> Context:
    return {"indexes": batch[-1].detach()}


def _momentum_context(model: Any, crops: list[Tensor], batch: Any, kept: Kept) -> Context:
    return {"targets": momentum_outputs(model, crops, kept)}


def _contrastive(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.simclr import simclr_loss_func

    z = H.reshape(-1, H.shape[-1])  # (V * N, p), views concatenated as solo-learn does
    indexes = ctx["indexes"].repeat(H.shape[0])
    return simclr_loss_func(z, indexes=indexes, temperature=model.temperature)


def _byol(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.byol import byol_loss_func

    P = [frozen(model.predictor, H[v]) for v in range(H.shape[0])]
    loss = H.new_zeros(())
    for v1 in range(model.num_large_crops):
        for v2 in range(H.shape[0]):
            if v2 != v1:
                loss = loss + byol_loss_func(P[v2], ctx["targets"][v1].to(H))
    return loss


def _mocov3(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.mocov3 import mocov3_loss_func

    Q = [frozen(model.predictor, H[v]) for v in range(2)]
    K = [k.to(H) for k in ctx["targets"]]
    t = model.temperature
    return mocov3_loss_func(Q[0], K[1], temperature=t) + mocov3_loss_func(Q[1], K[0], temperature=t)


def _simsiam(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.simsiam import simsiam_loss_func

    P = [frozen(model.predictor, H[v]) for v in range(2)]
    return simsiam_loss_func(P[0], H[1]) / 2 + simsiam_loss_func(P[1], H[0]) / 2


def _vicreg(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.vicreg import vicreg_loss_func

    return vicreg_loss_func(
        H[0],
        H[1],
        sim_loss_weight=model.sim_loss_weight,
        var_loss_weight=model.var_loss_weight,
        cov_loss_weight=model.cov_loss_weight,
    )


def _vibcreg(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.vibcreg import vibcreg_loss_func

    return vibcreg_loss_func(
        H[0],
        H[1],
        sim_loss_weight=model.sim_loss_weight,
        var_loss_weight=model.var_loss_weight,
        cov_loss_weight=model.cov_loss_weight,
    )


def barlow_loss(z1: Tensor, z2: Tensor, lamb: float, scale_loss: float) -> Tensor:
    """solo-learn's ``barlow_loss_func`` computed in the inputs' dtype.

    Same steps as ``solo.losses.barlow.barlow_loss_func``: each view standardised per feature
    with its batch mean and biased variance (``BatchNorm1d(affine=False)`` in training mode,
    eps 1e-5), cross-correlation averaged over the batch (and over ranks under DDP, as solo-learn
    all-reduces it), off-diagonal terms weighted by ``lamb``, the sum scaled by ``scale_loss``.

    Args:
        z1: head outputs of view 1 (N, D).
        z2: head outputs of view 2 (N, D).
        lamb: off-diagonal weight.
        scale_loss: overall scale.

    Returns:
        The scalar loss.
    """
    n = z1.shape[0]

    def standardised(z: Tensor) -> Tensor:
        return (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + 1e-5)  # (N, D)

    corr = torch.einsum("bi, bj -> ij", standardised(z1), standardised(z2)) / n  # (D, D)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(corr)
        corr = corr / dist.get_world_size()
    eye = torch.eye(corr.shape[0], dtype=corr.dtype, device=corr.device)
    cdif = (corr - eye).pow(2)
    weights = torch.where(eye.bool(), torch.ones_like(eye), torch.full_like(eye, lamb))
    return scale_loss * (cdif * weights).sum()


def _barlow(model: Any, ctx: Context, H: Tensor) -> Tensor:
    return barlow_loss(H[0], H[1], lamb=model.lamb, scale_loss=model.scale_loss)


SUPPORTED: dict[str, LossSpec] = {
    "simclr": LossSpec(_index_context, _contrastive),
    "supcon": LossSpec(_label_context, _contrastive),
    "byol": LossSpec(_momentum_context, _byol, momentum=True),
    "mocov3": LossSpec(_momentum_context, _mocov3, momentum=True),
    "simsiam": LossSpec(no_context, _simsiam),
    "vicreg": LossSpec(no_context, _vicreg),
    "vibcreg": LossSpec(no_context, _vibcreg),
    "barlow_twins": LossSpec(no_context, _barlow),
    **QUEUE_METHODS,
}

UNSUPPORTED: dict[str, str] = {
    "all4one": "not yet",
    "deepclusterv2": "not yet",
    "dino": "not yet",
    "mae": "not yet",
    "swav": "not yet",
    "wmse": "not yet",
}
"""Methods geometry refuses, with the reason the error gives."""
