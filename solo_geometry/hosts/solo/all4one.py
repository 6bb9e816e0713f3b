"""The loss closure of solo-learn's All4One (NNCLR + attention over neighbours + feature term).

All4One's loss of the projector outputs z (H here) of one batch is

    0.5 * att + 0.5 * nnclr + 0.5 * feature,

* nnclr: NNCLR's loss of the first neighbour of each momentum key against predictor(z);
* feature: a Barlow-like term between column-normalised momentum keys and z;
* att: NNCLR's loss between the transformer's embedding of the 5 neighbours (``rich``) and of
  predictor2(z) followed by 4 neighbours (``strange``), both with positional encoding.

Held fixed at their training-step values: the momentum keys, the 5 nearest neighbours the step
chose from the queue (``find_nn``'s result, kept), the ``rich`` embeddings (functions of the
neighbours only) and the dropout masks of the transformer (it trains with dropout 0.1): the
random state before each of its calls is kept, and the closure replays it, so each ``strange``
embedding draws the masks the step drew. The predictors and the transformer are held fixed.
Without a captured step, the masks are one draw from the current random state, forked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.hosts.solo.queues import keys, neighbours
from solo_geometry.hosts.solo.spec import CapturedFeats, Context, LossSpec, frozen

__all__ = ["ALL4ONE", "RNG_KEY", "keep_rng_states"]

RNG_KEY = "transformer_encoder/rng"  # the CPU random state before each transformer call


def keep_rng_states(model: Any) -> None:
    """Keep the random state before each call of the transformer while capture is on."""

    def pre_hook(module: nn.Module, args: Any) -> None:
        model.capture(RNG_KEY, torch.get_rng_state())
        if args and args[0].is_cuda:
            model.capture(f"{RNG_KEY}/cuda", torch.cuda.get_rng_state(args[0].device))

    model.transformer_encoder.register_forward_pre_hook(pre_hook)


@contextmanager
def _replayed(state: Tensor | None, cuda: Tensor | None, device: torch.device) -> Iterator[None]:
    """Run with the random state ``state`` (and ``cuda``), the global one restored after."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if state is not None:
            torch.set_rng_state(state)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
        yield


def _context(model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats) -> Context:
    mz = keys(model, crops, step_feats)  # normalised momentum keys (N, p)
    nn1, nn2 = neighbours(model, mz)  # (N, 5, p) each
    pos = copy.deepcopy(model.pos_enc)  # it caches its encoding: never the model's own
    states = model.captured(RNG_KEY, 4) or [None] * 4
    cuda = model.captured(f"{RNG_KEY}/cuda", 4) or [None] * 4
    with torch.no_grad(), _replayed(states[0], cuda[0], nn1.device):
        rich = [model.transformer_encoder(pos(nn_))[:, 0, :] for nn_ in (nn1, nn2)]
        fresh = torch.get_rng_state()  # where the step's third call would start
    if states[2] is None:
        states = [None, None, fresh, None]
    return {
        "keys": mz,
        "nn": [nn1, nn2],
        "rich": rich,
        "pos": pos,
        "rng": states[2:],
        "cuda": cuda[2:],
    }


def _strange(model: Any, ctx: Context, p2: Tensor, nn_: Tensor, i: int) -> Tensor:
    """The transformer's embedding (N, p) of [predictor2(z), 4 neighbours], replayed masks.

    Runs inside a forked random state; the kept state before this call is set first (in a
    fresh draw only the first call has one, and the second continues its stream).
    """
    x = ctx["pos"](torch.cat((p2.unsqueeze(1), nn_), 1)[:, :5, :])  # (N, 5, p)
    if ctx["rng"][i] is not None:
        torch.set_rng_state(ctx["rng"][i])
    if ctx["cuda"][i] is not None:
        torch.cuda.set_rng_state(ctx["cuda"][i], x.device)
    return frozen(model.transformer_encoder, x)[:, 0, :]


def _feature(model: Any, mz: list[Tensor], H: Tensor) -> Tensor:
    """All4One's feature term between momentum keys and projections, as its training step."""
    k = [F.normalize(t, dim=0) for t in mz]
    z = [F.normalize(H[v], dim=0) for v in range(2)]
    corr = [k[0].T @ z[1], k[1].T @ z[0]]  # (p, p)
    on = (0.5 * torch.stack([torch.diagonal(c).add(-1).pow(2).mean() for c in corr]).sum()).sqrt()
    off = (0.5 * torch.stack([model.off_diagonal(c).pow(2).mean() for c in corr]).sum()).sqrt()
    return (0.5 * on + 0.5 * off) * 10


def _loss(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.nnclr import nnclr_loss_func

    p = [frozen(model.predictor, H[v]) for v in range(2)]
    p2 = [frozen(model.predictor2, H[v]) for v in range(2)]
    nn1, nn2 = (t.to(H) for t in ctx["nn"])
    rich1, rich2 = (t.to(H) for t in ctx["rich"])
    with _replayed(None, None, H.device):  # the global random state is left as it was
        strange1 = _strange(model, ctx, p2[0], nn1, 0)
        strange2 = _strange(model, ctx, p2[1], nn2, 1)
    att = nnclr_loss_func(rich1, strange2) / 2 + nnclr_loss_func(rich2, strange1) / 2
    t = model.temperature
    nnclr = (
        nnclr_loss_func(nn1[:, 0, :], p[1], temperature=t) / 2
        + nnclr_loss_func(nn2[:, 0, :], p[0], temperature=t) / 2
    )
    feature = _feature(model, [k.to(H) for k in ctx["keys"]], H)
    return 0.5 * att + 0.5 * nnclr + 0.5 * feature


def _nn_of(out: Any) -> list[Tensor]:
    return [out[1]]  # find_nn returns (index, neighbours, their indexes, their labels)


ALL4ONE = LossSpec(
    _context,
    _loss,
    momentum=True,
    keeps={"find_nn": _nn_of},
    setup=keep_rng_states,
    held="the predictors and the transformer; the momentum keys; the 5 neighbours the step "
    "chose from the queue and the transformer's embedding of them; the transformer's dropout "
    "masks (the random state before each call kept and replayed)",
    merge=None,
    ranks="its transformer's dropout masks are replayed per rank batch and cannot be joined "
    "into the global batch's",
)
