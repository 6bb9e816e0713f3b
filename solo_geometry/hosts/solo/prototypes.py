"""Loss closures of solo-learn's prototype and centring methods: DINO, SwAV, DeepClusterV2.

What each closure holds fixed, at its value in the training step:

* DINO: the teacher's probabilities softmax((t - c) / T_t): the momentum head's logits t of the
  step's batch, the centre c as the step read it (cloned as the step starts: ``DINOLoss``
  updates it in place after the loss) and the teacher temperature T_t of the epoch. The
  prototypes (``DINOHead.last_layer``) are part of the measured head, as DINO defines them: H are
  the student's logits, and the head is the whole ``DINOHead``;
* SwAV: the Sinkhorn codes of the large crops (``get_assignments``' result, kept: computed from
  the batch and the queue without gradient). The prototypes are a parameter of the loss, as SwAV
  defines them (a module beside the projector), held fixed like a predictor;
* DeepClusterV2: the cluster assignments of the batch's samples (k-means on the memory bank at
  the start of the epoch) and the prototypes (the k-means centroids, not trained). Before the
  first k-means (epoch 0) no sample has an assignment and the loss is undefined (solo-learn's
  own loss is NaN then, with zero gradient): the closure refuses, and the record is skipped
  with that reason.

Without a captured step (the final record) the same quantities are computed from the module's
current state, read-only: the monitor never writes the centre, a queue or a memory bank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from solo_geometry.hosts.solo import spec
from solo_geometry.hosts.solo.spec import CapturedFeats, Context, LossSpec, frozen

__all__ = ["PROTOTYPE_METHODS", "dino_loss"]


def dino_loss(student: Tensor, teacher: Tensor, student_temp: float, chunks: int = 2) -> Tensor:
    """solo-learn's ``DINOLoss.forward`` given the teacher's probabilities, without its update.

    Same steps as ``solo.losses.dino.DINOLoss.forward``: student logits divided by the student
    temperature and split into ``chunks`` views, teacher probabilities split into 2, the
    cross-entropy -sum q log softmax(s) averaged over samples for every pair of different
    views, then over pairs. The centre's update (which ``DINOLoss`` does in the same call) is
    left out: the monitor never changes it.

    Args:
        student: student logits of all views, concatenated (V * N, K).
        teacher: the teacher's centred, sharpened probabilities of the large crops (2 * N, K).
        student_temp: the student temperature.
        chunks: the loss's ``num_large_crops`` (solo-learn's DINO leaves it at 2).

    Returns:
        The scalar loss.
    """
    student_out = (student / student_temp).chunk(chunks)
    total, terms = student.new_zeros(()), 0
    for iq, q in enumerate(teacher.chunk(2)):
        for iv, v in enumerate(student_out):
            if iv != iq:
                total = total + torch.sum(-q * F.log_softmax(v, dim=-1), dim=-1).mean()
                terms += 1
    return total / terms


def _dino_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    return _dino_teacher(model, spec.momentum_features(model, crops, step_feats))


def _dino_teacher(model: Any, feats: list[Tensor]) -> Context:
    loss = model.dino_loss_func
    logits = torch.cat(spec.momentum_outputs(model, [], feats, head="momentum_head"))  # (2N, K)
    temp = loss.teacher_temp_schedule[loss.epoch]
    centre = spec.snapshot(model, "dino_loss_func.center")  # (1, K)
    return {"teacher": F.softmax((logits - centre) / temp, dim=-1).detach()}


def _dino_merge(contexts: Sequence[Context]) -> Context:
    teacher = torch.stack([c["teacher"] for c in contexts])  # (ranks, 2 * N, K), each view-major
    return {"teacher": rearrange(teacher, "r (v n) k -> (v r n) k", v=2)}  # global, view-major


def _dino(model: Any, ctx: Context, H: Tensor) -> Tensor:
    loss = model.dino_loss_func
    student = rearrange(H, "v n k -> (v n) k")  # views concatenated as the training step does
    return dino_loss(student, ctx["teacher"].to(H), loss.student_temp, loss.num_large_crops)


def _swav_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    large = model.num_large_crops
    codes = model.captured("get_assignments", large)
    if codes is None:
        with torch.no_grad():
            feats = model.geometry_features(crops)[:large]
            preds = [model.prototypes(F.normalize(model.projector(f))) for f in feats]
            codes = model._solo_base.get_assignments(model, preds)
    return {"codes": [c.detach() for c in codes]}


def _swav(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.swav import swav_loss_func

    preds = [frozen(model.prototypes, F.normalize(H[v])) for v in range(H.shape[0])]
    codes = [c.to(H) for c in ctx["codes"]]
    return swav_loss_func(preds, codes, model.temperature)


def _deepcluster_context(
    model: Any, crops: list[Tensor], batch: Any, step_feats: CapturedFeats
) -> Context:
    assignments = getattr(model, "assignments", None)
    indexes = batch[0]
    if assignments is None or bool((assignments[:, indexes] < 0).all()):
        raise ValueError(
            "deepclusterv2 has no cluster assignments for this batch yet (k-means first runs "
            "at the start of epoch 1); its loss is undefined until then"
        )
    return {"assignments": assignments[:, indexes].detach().clone()}


def _deepcluster(model: Any, ctx: Context, H: Tensor) -> Tensor:
    from solo.losses.deepclusterv2 import deepclusterv2_loss_func

    def logits(v: int) -> Tensor:
        z = F.normalize(H[v])
        return torch.stack([frozen(p, z) for p in model.prototypes])  # (P, N, C)

    preds = torch.stack([logits(0).unsqueeze(1), logits(1).unsqueeze(1)], dim=1)  # (P, 2, 1, N, C)
    return deepclusterv2_loss_func(preds, ctx["assignments"], model.temperature)


def _each(out: Any) -> list[Tensor]:
    return list(out)


PROTOTYPE_METHODS: dict[str, LossSpec] = {
    "dino": LossSpec(
        _dino_context,
        _dino,
        momentum=True,
        head="head",
        projector="head.mlp",
        snapshots=("dino_loss_func.center",),
        merge=_dino_merge,
        targets=_dino_teacher,
        held="the teacher's probabilities: the momentum head's logits, centred by "
        "the centre the step read (cloned as it starts: DINOLoss updates it in "
        "place) and sharpened at the epoch's teacher temperature. The measured head "
        "is DINOHead with its prototypes (H are the student's logits)",
    ),
    "swav": LossSpec(
        _swav_context,
        _swav,
        keeps={"get_assignments": _each},
        held="the Sinkhorn codes the step computed (no gradient, from the batch "
        "and the queue); the prototypes, a parameter of the loss beside the "
        "projector, held like a predictor",
    ),
    "deepclusterv2": LossSpec(
        _deepcluster_context,
        _deepcluster,
        merge=lambda cs: spec.merge_contexts(cs, dims={"assignments": 1}),
        held="the batch's k-means assignments and the prototypes (the "
        "k-means centroids of the epoch, not trained); before the first "
        "k-means (epoch 0) the loss is undefined: records skipped, saying "
        "so",
    ),
}
