"""What a solo-learn method's loss closure is built from: :class:`LossSpec` and its helpers.

A spec says how to rebuild one method's SSL loss as a function of its head's outputs H (V, N, p)
of one batch, every other quantity held fixed at its value in the training step:

* ``context`` gathers those fixed quantities (detached) once per measured batch: momentum-branch
  targets, a queue, the chosen nearest neighbours, Sinkhorn codes, cluster assignments, DINO's
  teacher probabilities. From the training step's own values when the monitor captured the step
  (``model.captured(...)``), else computed now from the module's current state, read-only;
* ``loss`` is the method's loss of H given that context;
* ``keeps`` names solo-learn methods (``find_nn``, ``get_assignments``) whose results the
  training step computes and the wrapped module keeps while capture is on, and ``snapshots``
  the state (queues, DINO's centre) the step reads and then updates in place: it is cloned as the
  step starts, so the closure sees the values the step's loss saw, never the updated ones.

Neither changes the step: kept values are detached references or clones taken aside.

Under DDP, ``merge`` joins the ranks' contexts into the context of the global batch
(:func:`merge_contexts`: per-sample tensors concatenated in rank order, state every rank shares
taken from rank zero), and :func:`frozen` applies a fixed module with BatchNorm per rank chunk.
Under sync BatchNorm those modules see the whole global batch instead, and ``targets`` rebuilds
the momentum head's outputs from every rank's momentum features (its BatchNorm saw them all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import torch
from torch import Tensor, nn

from solo_geometry.linalg.operators import frozen_module
from solo_geometry.runtime.chunks import per_rank

__all__ = [
    "Context",
    "CapturedFeats",
    "LossSpec",
    "frozen",
    "merge_contexts",
    "momentum_features",
    "momentum_outputs",
    "momentum_targets",
    "no_context",
    "snapshot",
]

Context = dict[str, Any]
# The momentum-backbone features (B, d) the training step captured, per crop (None: not captured).
CapturedFeats = list[Tensor] | None


def merge_contexts(
    contexts: Sequence[Context], shared: tuple[str, ...] = (), dims: Mapping[str, int] | None = None
) -> Context:
    """The context of the global batch from each rank's, in rank order.

    Args:
        contexts: each rank's context.
        shared: keys whose value every rank holds alike (a queue, a centre): rank zero's.
        dims: key -> the sample dimension of its tensors (default 0).

    Returns:
        The merged context: tensors (and each tensor of a list) concatenated along their
        sample dimension.
    """
    out: Context = {}
    for key, first in contexts[0].items():
        values = [c[key] for c in contexts]
        dim = (dims or {}).get(key, 0)
        if key in shared:
            out[key] = first
        elif isinstance(first, Tensor):
            out[key] = torch.cat(values, dim=dim)
        elif isinstance(first, list | tuple):
            out[key] = [torch.cat(list(ts), dim=dim) for ts in zip(*values, strict=True)]
        else:
            raise TypeError(f"cannot merge context entry {key!r} ({type(first).__name__})")
    return out


@dataclass(frozen=True)
class LossSpec:
    """How to rebuild one method's SSL loss.

    Attributes:
        context: (model, images per crop, batch, momentum-backbone features of the large
            crops kept from the training step (its whole batch) or None) -> detached
            quantities the loss needs.
        loss: (model, context, H (V, N, p)) -> scalar SSL loss.
        momentum: the method has a momentum copy of the head to keep in sync with it.
        head: attribute path of the measured head (its outputs are H).
        projector: attribute path of the MLP that ``geometry.head`` swaps and pseudo-collapse
            scales (the head itself, or its MLP when the head also holds prototypes).
        keeps: solo-learn method name -> the tensors of its result to keep, per call.
        snapshots: attribute paths of tensors cloned at the start of a captured training step.
        setup: called with the module once it is built (e.g. to register hooks that keep what
            the step computes inside a submodule), or None.
        held: what the closure holds fixed besides the parameters, and why (docs/methods.md's
            table).
        merge: the ranks' contexts -> the global batch's (DDP); None: not measurable across
            ranks, for the reason ``ranks``.
        ranks: why the method cannot be measured across ranks (when ``merge`` is None).
        targets: (model, momentum-backbone features (R * N, d) of each large crop of the
            global batch) -> the context entries made by the momentum head's outputs. Under
            sync BatchNorm across ranks they replace the merged ones: the momentum head's
            BatchNorm normalised the global batch, not each rank's chunk. None: no momentum head.
    """

    context: Callable[[Any, list[Tensor], Any, CapturedFeats], Context]
    loss: Callable[[Any, Context, Tensor], Tensor]
    momentum: bool = False
    head: str = "projector"
    projector: str = "projector"
    keeps: Mapping[str, Callable[[Any], list[Tensor]]] = field(default_factory=dict)
    snapshots: tuple[str, ...] = ()
    setup: Callable[[Any], None] | None = None
    held: str = ""
    merge: Callable[[Sequence[Context]], Context] | None = merge_contexts
    ranks: str = ""
    targets: Callable[[Any, list[Tensor]], Context] | None = None


def frozen(module: nn.Module, x: Tensor) -> Tensor:
    """``module(x)`` on detached copies of its state in x's dtype (module left untouched).

    On a global batch of several ranks, a module with BatchNorm acts per rank chunk.
    """
    return per_rank(frozen_module(module, x.dtype, x.device), module, x)


def no_context(model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats) -> Context:
    """No fixed quantity besides the model's parameters."""
    return {}


def momentum_features(model: Any, crops: list[Tensor], step_feats: CapturedFeats) -> list[Tensor]:
    """The momentum-backbone features (B, d) of each large crop: the step's, else fresh ones."""
    from solo.methods.base import BaseMomentumMethod

    if step_feats is not None:
        return [f.detach() for f in step_feats]
    with torch.no_grad():
        large = crops[: model.num_large_crops]
        return [BaseMomentumMethod.momentum_forward(model, x)["feats"].detach() for x in large]


def momentum_outputs(
    model: Any, crops: list[Tensor], step_feats: CapturedFeats, head: str = "momentum_projector"
) -> list[Tensor]:
    """The momentum head's outputs (B, p) of each large crop, as the training step computed them.

    From the momentum-backbone features the step kept (its whole batch, so the momentum head's
    BatchNorm sees the step's batch statistics), else from a fresh momentum forward.
    """
    feats = momentum_features(model, crops, step_feats)
    with torch.no_grad():
        module = attrgetter(head)(model)
        return [module(f).detach() for f in feats]


def momentum_targets(model: Any, feats: list[Tensor]) -> Context:
    """BYOL's and MoCo v3's context: the momentum projector's outputs (B, p) of ``feats``."""
    return {"targets": momentum_outputs(model, [], feats)}


def snapshot(model: Any, path: str) -> Tensor:
    """The tensor at ``path`` as the training step read it (its clone), else as it is now."""
    step_feats = model.captured(path, 1)
    return (step_feats[0] if step_feats is not None else attrgetter(path)(model)).detach().clone()
