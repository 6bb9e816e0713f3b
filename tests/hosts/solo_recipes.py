"""solo-learn's own cifar recipes, made CPU-tiny, and the checks every wrapped method passes.

The recipes are solo-learn's ``scripts/pretrain/cifar/<method>.yaml`` composed as its
``main_pretrain.py`` composes them, with the overrides of the issue (``data.dataset=custom`` on
an image folder, CPU, float32) and sizes a CPU test affords (small projector, queue, batch).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from solo_helpers import solo_root
from torch import Tensor
from torch.autograd.functional import hessian, jacobian

from solo_geometry.linalg.operators import frozen_module, head_operators

CPU = ["accelerator=cpu", "devices=[0]", "strategy=auto", "precision=32", "sync_batchnorm=False"]
# Per method: sizes a CPU test affords (queues divisible by the batch, few prototypes).
SMALL: dict[str, list[str]] = {
    "mocov2plus": ["method_kwargs.queue_size=64"],
    "nnclr": ["method_kwargs.queue_size=64", "method_kwargs.pred_hidden_dim=64"],
    "nnbyol": ["method_kwargs.queue_size=64", "method_kwargs.pred_hidden_dim=64"],
    "nnsiam": ["method_kwargs.queue_size=64", "method_kwargs.pred_hidden_dim=64"],
    "ressl": ["+method_kwargs.queue_size=64"],
    "all4one": ["method_kwargs.queue_size=64", "method_kwargs.pred_hidden_dim=64"],
    "dino": ["method_kwargs.num_prototypes=48"],
    "swav": [
        "method_kwargs.queue_size=16",
        "method_kwargs.num_prototypes=24",
        "method_kwargs.epoch_queue_starts=0",
    ],
    "deepclusterv2": ["method_kwargs.num_prototypes=[12,12]"],
}
TINY_DIMS = ["method_kwargs.proj_hidden_dim=64", "method_kwargs.proj_output_dim=32"]


def recipe(method: str) -> Path:
    """solo-learn's cifar recipe of ``method``."""
    return solo_root() / "scripts" / "pretrain" / "cifar" / f"{method}.yaml"


def cifar_overrides(method: str, train_dir: Path) -> list[str]:
    """The overrides that make ``method``'s cifar recipe a tiny CPU run on ``train_dir``."""
    return [
        *CPU,
        "data.dataset=custom",
        f"data.train_path={train_dir}",
        "data.val_path=null",
        "data.format=image_folder",
        "data.num_workers=0",
        "wandb.enabled=False",
        "optimizer.batch_size=8",
        "auto_resume.enabled=False",
        "checkpoint.enabled=False",
        *TINY_DIMS,
        *SMALL.get(method, []),
    ]


def batch(n: int = 8, views: int = 2, seed: int = 0, size: int = 8) -> list[Any]:
    """A solo-learn training batch ``[indexes, [X_1, ..., X_V], targets]`` of small images.

    8x8 by default: the cifar ResNet-18 (no stem pooling) costs 16 times less than at 32x32.
    """
    g = torch.Generator().manual_seed(seed)
    X = [torch.randn(n, 3, size, size, generator=g) for _ in range(views)]
    return [torch.arange(n), X, torch.randint(0, 10, (n,), generator=g)]


def ssl_loss(model: Any, b: list[Any]) -> Tensor:
    """The SSL term of ``training_step``: the total minus the online classifiers' part."""
    from solo.methods.base import BaseMethod, BaseMomentumMethod

    with torch.no_grad():
        total = model.training_step(b, 0)
        base = BaseMomentumMethod if isinstance(model, BaseMomentumMethod) else BaseMethod
        class_loss = base.training_step(model, b, 0)["loss"]
    return total - class_loss


def assert_hvps_match_dense(view: Any, k: int = 12, seed: int = 0) -> None:
    """H_eff, GN and M products on ``k`` random directions against a dense float64 Hessian.

    The dense reference is ``torch.autograd.functional.hessian`` of the loss restricted to the
    span of the directions, c -> L(Z + B c) with B (V*N*d, k): its Hessian is B^T H_eff B. GN's
    reference is B^T J^T (d2 loss/dH2) J B from the dense Jacobian of c -> H(Z + B c) and the
    dense Hessian of the loss in H; M = H_eff - GN.
    """
    Z = view.features.detach().double()
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(Z.numel(), k, generator=g, dtype=torch.float64)
    head = frozen_module(view.head, torch.float64, Z.device)
    was_training = view.head.training
    view.head.train(True)

    def outputs(c: Tensor) -> Tensor:
        z = Z + (B @ c).reshape(Z.shape)  # (V, N, d)
        return torch.stack([head(z[v]) for v in range(z.shape[0])])  # (V, N, p)

    try:
        c0 = torch.zeros(k, dtype=torch.float64)
        h_ref = hessian(lambda c: view.loss_of_outputs(outputs(c)), c0, vectorize=True)  # (k, k)
        J = jacobian(outputs, c0, vectorize=True).reshape(-1, k)  # (V*N*p, k)
        H0 = outputs(c0).detach()
        hl = hessian(
            lambda h: view.loss_of_outputs(h.reshape(H0.shape)), H0.reshape(-1), vectorize=True
        )  # (V*N*p, V*N*p)
        gn_ref = J.T @ hl @ J  # (k, k)
        ops = head_operators(view.head, view.loss_of_outputs, Z)
        heff = torch.stack([B.T @ ops.heff(B[:, i]) for i in range(k)], 1)
        gn = torch.stack([B.T @ ops.gn(B[:, i]) for i in range(k)], 1)
        m = torch.stack([B.T @ ops.m(B[:, i]) for i in range(k)], 1)
    finally:
        view.head.train(was_training)
    scale = h_ref.abs().max().item()
    assert scale > 0 and math.isfinite(scale)
    torch.testing.assert_close(heff, h_ref, rtol=1e-8, atol=1e-10 * scale)
    torch.testing.assert_close(gn, gn_ref, rtol=1e-8, atol=1e-10 * scale)
    torch.testing.assert_close(m, h_ref - gn_ref, rtol=1e-7, atol=1e-9 * scale)


def state_of(model: torch.nn.Module) -> dict[str, Tensor]:
    """Every parameter and buffer (queues, centres, running statistics), cloned."""
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def assert_same_state(a: dict[str, Tensor], b: dict[str, Tensor]) -> None:
    """Bit-for-bit equal states (same keys, same dtypes, equal values)."""
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert differ == [], differ
