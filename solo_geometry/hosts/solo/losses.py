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
VICReg, VIbCReg and Barlow Twins evaluate their D x D decorrelation terms through N x N Gram
matrices when N < D (:mod:`solo_geometry.geometry.decorrelation`): the same function, equal to
solo-learn's to round-off, and several times cheaper to differentiate twice at D = 2048.

Supported methods (``SUPPORTED``): simclr, supcon, byol, mocov3, simsiam, vicreg, vibcreg,
barlow_twins here; the queue methods (mocov2plus, ressl, nnclr, nnbyol, nnsiam) in
:mod:`.queues`, the prototype and centring methods (dino, swav, deepclusterv2) in
:mod:`.prototypes`, all4one in :mod:`.all4one`. Each spec says what it holds fixed
(:func:`methods_table`, docs/methods.md's table). Refused, with the reason (``UNSUPPORTED``):
mae, wmse.
"""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import Tensor

from solo_geometry.geometry.decorrelation import (
    barlow_twins_loss,
    standardised,
    vibcreg_loss,
    vicreg_loss,
)
from solo_geometry.hosts.solo.all4one import ALL4ONE
from solo_geometry.hosts.solo.prototypes import PROTOTYPE_METHODS
from solo_geometry.hosts.solo.queues import QUEUE_METHODS
from solo_geometry.hosts.solo.spec import (
    CapturedFeats,
    Context,
    LossSpec,
    frozen,
    momentum_features,
    momentum_targets,
    no_context,
)
from solo_geometry.runtime.chunks import rank_chunks

__all__ = ["SUPPORTED", "UNSUPPORTED", "LossSpec", "barlow_loss", "methods_table"]


def _index_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return {"indexes": batch[0].detach()}


def _label_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return {"indexes": batch[-1].detach()}


def _momentum_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return momentum_targets(model, momentum_features(model, crops, step_feats))


def _contrastive(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.simclr import simclr_loss_func

    z = rearrange(H, "v n p -> (v n) p")  # views concatenated as solo-learn does
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
    from solo.utils.misc import gather

    weights = (model.sim_loss_weight, model.var_loss_weight, model.cov_loss_weight)
    return vicreg_loss(H[0], H[1], gather(H[0]), gather(H[1]), *weights)


def _vibcreg(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.utils.misc import gather

    weights = (model.sim_loss_weight, model.var_loss_weight, model.cov_loss_weight)
    return vibcreg_loss(H[0], H[1], gather(H[0]), gather(H[1]), *weights)


def barlow_loss(z1: Tensor, z2: Tensor, lamb: float, scale_loss: float) -> Tensor:
    """solo-learn's ``barlow_loss_func`` computed in the inputs' dtype.

    Same steps as ``solo.losses.barlow.barlow_loss_func``: each view standardised per feature
    with its batch mean and biased variance (``BatchNorm1d(affine=False)`` in training mode,
    eps 1e-5), cross-correlation averaged over the batch, off-diagonal terms weighted by
    ``lamb``, the sum scaled by ``scale_loss``. On the global batch of R ranks
    (:func:`~solo_geometry.runtime.chunks.rank_chunks`), each rank's chunk is standardised
    with its own statistics and the cross-correlation averaged over ranks, as solo-learn
    all-reduces it.

    Args:
        z1: head outputs of view 1 (N, D).
        z2: head outputs of view 2 (N, D).
        lamb: off-diagonal weight.
        scale_loss: overall scale.

    Returns:
        The scalar loss.
    """
    ranks = rank_chunks()
    if ranks == 1:
        return barlow_twins_loss(z1, z2, lamb, scale_loss)  # the same sum, N x N Gram form
    pairs = zip(z1.chunk(ranks), z2.chunk(ranks), strict=True)
    corr = torch.stack([standardised(a).T @ standardised(b) / a.shape[0] for a, b in pairs])
    corr = corr.mean(0)  # (D, D): each rank's cross-correlation, averaged as solo all-reduces
    eye = torch.eye(corr.shape[0], dtype=corr.dtype, device=corr.device)  # (D, D)
    cdif = (corr - eye).pow(2)
    weights = torch.where(eye.bool(), torch.ones_like(eye), torch.full_like(eye, lamb))
    return scale_loss * (cdif * weights).sum()


def _barlow(model: Any, ctx: Context, H: Tensor) -> Tensor:
    return barlow_loss(H[0], H[1], lamb=model.lamb, scale_loss=model.scale_loss)


_OWN = "nothing: a function of this batch's outputs only"

SUPPORTED: dict[str, LossSpec] = {
    "simclr": LossSpec(
        _index_context, _contrastive, held="nothing: the batch's other samples are its negatives"
    ),
    "supcon": LossSpec(
        _label_context, _contrastive, held="the labels (they say which samples are positives)"
    ),
    "byol": LossSpec(
        _momentum_context,
        _byol,
        momentum=True,
        targets=momentum_targets,
        held="the predictor; the momentum branch's targets (another network)",
    ),
    "mocov3": LossSpec(
        _momentum_context,
        _mocov3,
        momentum=True,
        targets=momentum_targets,
        held="the predictor; the momentum branch's keys (another network)",
    ),
    "simsiam": LossSpec(
        no_context,
        _simsiam,
        held="the predictor; the targets are H under stop-gradient, as in the step",
    ),
    "vicreg": LossSpec(no_context, _vicreg, held=_OWN),
    "vibcreg": LossSpec(no_context, _vibcreg, held=_OWN),
    "barlow_twins": LossSpec(no_context, _barlow, held=_OWN),
    **QUEUE_METHODS,
    **PROTOTYPE_METHODS,
    "all4one": ALL4ONE,
}

UNSUPPORTED: dict[str, str] = {
    "mae": "a masked autoencoder: its loss reconstructs masked patches through a decoder, "
    "there is no projection head whose outputs it is a function of",
    "wmse": "its loss whitens random sub-batches of whitening_size samples drawn by "
    "torch.randperm inside training_step, a grouping the step does not keep, so the loss of "
    "the measured batch cannot be rebuilt",
}
"""Methods geometry refuses, with the reason the error gives."""


def methods_table() -> str:
    """docs/methods.md's table of solo-learn methods: supported or refused, what each holds fixed.

    Returns:
        A Markdown table, one row per method (supported first, each group sorted by name).
    """
    rows = [
        "| method | geometry | measured head | held fixed at its training-step value (why) |",
        "|---|---|---|---|",
    ]
    rows += [
        f"| {n} | on | `{SUPPORTED[n].head}` | {SUPPORTED[n].held} |" for n in sorted(SUPPORTED)
    ]
    rows += [f"| {n} | refused | - | {UNSUPPORTED[n]} |" for n in sorted(UNSUPPORTED)]
    return "\n".join(rows)
