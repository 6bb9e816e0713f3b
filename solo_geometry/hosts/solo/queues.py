"""Loss closures of solo-learn's queue methods: MoCo v2+, ReSSL, NNCLR, NNBYOL, NNSiam.

Each keeps a queue of past projections that its ``training_step`` reads and then updates in
place. What the closure holds fixed, at its value in the training step:

* MoCo v2+ and ReSSL: the queue (the negatives / the relation targets), cloned as the step
  starts, and the momentum branch's keys;
* NNCLR, NNBYOL, NNSiam: the nearest neighbours the step chose from the queue (``find_nn``'s
  result, kept): a neighbour is a queue entry, constant in the backbone features, and which
  entry is chosen is an argmax, piecewise constant in them.

The predictor (NNCLR, NNBYOL, NNSiam) is held fixed as in the other methods. Without a captured
step (the final record) the same quantities are computed from the module's current state,
read-only: the queue is never written by the monitor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from solo_geometry.hosts.solo.spec import (
    CapturedFeats,
    Context,
    LossSpec,
    frozen,
    merge_contexts,
    momentum_outputs,
    snapshot,
)

__all__ = ["QUEUE_METHODS", "keys", "neighbours"]


def neighbours(model: Any, queries: list[Tensor]) -> list[Tensor]:
    """The nearest neighbours the training step chose for each query batch (``find_nn``).

    Args:
        model: the wrapped solo-learn module.
        queries: the step's queries (N, p), one per ``find_nn`` call, in call order; used only
            when the step was not captured.

    Returns:
        The neighbours (N, p) (All4One: (N, 5, p)), detached.
    """
    step_feats = model.captured("find_nn", len(queries))
    if step_feats is None:
        with torch.no_grad():
            step_feats = [model._solo_base.find_nn(model, q)[1] for q in queries]
    return [t.detach() for t in step_feats]


def _online(model: Any, crops: list[Tensor]) -> list[Tensor]:
    """The projector's outputs (N, p) of each crop, as the training step computed them."""
    with torch.no_grad():
        return [model.projector(f) for f in model.geometry_features(crops)]


def keys(model: Any, crops: list[Tensor], step_feats: CapturedFeats) -> list[Tensor]:
    """The momentum branch's normalised keys (N, p) of the large crops, as the step had them."""
    return [F.normalize(t, dim=-1) for t in momentum_outputs(model, crops, step_feats)]


def _queue_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return {"keys": keys(model, crops, step_feats), "queue": snapshot(model, "queue")}


def _queue_keys(model: Any, feats: list[Tensor]) -> Context:
    return {"keys": keys(model, [], feats)}  # under sync BatchNorm, of the global batch


def _mocov2plus(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.mocov2plus import mocov2plus_loss_func

    q = [F.normalize(H[v], dim=-1) for v in range(2)]
    k = [t.to(H) for t in ctx["keys"]]
    queue = ctx["queue"].to(H)  # (2, p, K)
    t = model.temperature
    return (
        mocov2plus_loss_func(q[0], k[1], queue[1], t)
        + mocov2plus_loss_func(q[1], k[0], queue[0], t)
    ) / 2


def _ressl(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.ressl import ressl_loss_func

    q = F.normalize(H[0], dim=-1)  # only the first view's query enters ReSSL's loss
    k = ctx["keys"][1].to(H)
    return ressl_loss_func(q, k, ctx["queue"].to(H), model.temperature_q, model.temperature_k)


def _online_nn_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    zs = [F.normalize(z, dim=-1) for z in _online(model, crops)[:2]]
    return {"nn": neighbours(model, zs)}


def _momentum_nn_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return {"nn": neighbours(model, keys(model, crops, step_feats))}


def _predictions(model: Any, H: Tensor) -> list[Tensor]:
    return [frozen(model.predictor, H[v]) for v in range(2)]


def _nnclr(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.nnclr import nnclr_loss_func

    p = _predictions(model, H)
    nn1, nn2 = (t.to(H) for t in ctx["nn"])
    t = model.temperature
    return (
        nnclr_loss_func(nn1, p[1], temperature=t) / 2
        + nnclr_loss_func(nn2, p[0], temperature=t) / 2
    )


def _nnbyol(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.byol import byol_loss_func

    p = _predictions(model, H)
    nn1, nn2 = (t.to(H) for t in ctx["nn"])
    return byol_loss_func(p[0], nn2) + byol_loss_func(p[1], nn1)


def _nnsiam(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.simsiam import simsiam_loss_func

    p = _predictions(model, H)
    nn1, nn2 = (t.to(H) for t in ctx["nn"])
    return simsiam_loss_func(p[0], nn2) / 2 + simsiam_loss_func(p[1], nn1) / 2


def _nn_of(out: Any) -> list[Tensor]:
    return [out[1]]  # find_nn returns (index, neighbour, ...)


_FIND_NN = {"find_nn": _nn_of}


def _queue_merge(contexts: Sequence[Context]) -> Context:
    return merge_contexts(contexts, shared=("queue",))  # the queue holds every rank's keys


_QUEUE = (
    "the momentum keys (another network); the queue as the step read it (cloned as the step "
    "starts: the step then enqueues this batch's keys)"
)
_NN = (
    "the predictor; the nearest neighbours the step chose from the queue of {of}: queue "
    "entries, constant in Z, chosen by an argmax, piecewise constant in Z"
)

QUEUE_METHODS: dict[str, LossSpec] = {
    "mocov2plus": LossSpec(
        _queue_context,
        _mocov2plus,
        momentum=True,
        snapshots=("queue",),
        held=_QUEUE,
        merge=_queue_merge,
        targets=_queue_keys,
    ),
    "ressl": LossSpec(
        _queue_context,
        _ressl,
        momentum=True,
        snapshots=("queue",),
        merge=_queue_merge,
        targets=_queue_keys,
        held=_QUEUE + "; only view 1's query enters the loss (view 2's rows of H_eff are zero)",
    ),
    "nnclr": LossSpec(
        _online_nn_context, _nnclr, keeps=_FIND_NN, held=_NN.format(of="the projections")
    ),
    "nnbyol": LossSpec(
        _momentum_nn_context,
        _nnbyol,
        momentum=True,
        keeps=_FIND_NN,
        held=_NN.format(of="the momentum keys"),
    ),
    "nnsiam": LossSpec(
        _online_nn_context, _nnsiam, keeps=_FIND_NN, held=_NN.format(of="the projections")
    ),
}
