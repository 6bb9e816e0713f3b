"""The curvature libraries' side of benchmarks/bench_peers.py: each peer on the same operator.

H_eff of ``loss(head(Z))`` in the features Z, on the sub-block of samples ``index``, float32
products, each peer stopping by its own test and its products counted:

* curvlinops' ``ActivationHessianLinearOperator`` (the Hessian in the head's input) under
  ``scipy.sparse.linalg.eigsh``;
* hessian-eigenthings' Lanczos on its ``HessianOperator`` of :class:`BlockModule`;
* PyHessian's power iteration and SLQ density on the same module.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from solo_geometry.linalg.operators import frozen_module, runs_in_training_mode

TOL = 1e-3
F32 = torch.float32
Problem = tuple[nn.Module, Callable[[Tensor], Tensor], Tensor]  # head, loss(H), Z


class BlockModule(nn.Module):
    """The sub-block rows of Z as a module's one parameter (for parameter-Hessian libraries).

    ``forward()`` puts the parameter into the whole batch's Z and returns H (V, N, p) of the
    head, a frozen copy held outside the module's children (so ``.eval()`` on this module,
    which PyHessian calls, leaves a BatchNorm head in training mode, as the monitor runs it).
    """

    z: Tensor
    index: Tensor
    _forward: Callable[[Tensor], Tensor]

    def __init__(self, head: nn.Module, Z: Tensor, index: Tensor | None) -> None:
        super().__init__()
        copied = copy.deepcopy(head).train(runs_in_training_mode(head))
        self._forward = frozen_module(copied, F32, Z.device)
        self.register_buffer("z", Z.detach().to(F32).clone())
        self.register_buffer("index", torch.arange(Z.shape[1]) if index is None else index)
        self.block = nn.Parameter(self.z[:, self.index].clone())

    def forward(self, *_: Any) -> Tensor:
        """H (V, N, p) at Z with the parameter in its sub-block (any inputs are ignored)."""
        z = self.z.index_copy(1, self.index, self.block)
        return torch.stack([self._forward(z[v]) for v in range(z.shape[0])])


def counted(A: Any) -> tuple[Any, list[int]]:
    """A scipy LinearOperator that counts the vectors it is applied to."""
    from scipy.sparse.linalg import LinearOperator

    count = [0]

    def apply(x: np.ndarray) -> np.ndarray:
        count[0] += 1 if x.ndim == 1 else x.shape[1]
        return A @ x

    return LinearOperator(A.shape, matvec=apply, matmat=apply, dtype=np.float64), count


def arpack(A: Any, start: float) -> tuple[float | None, float | None, int, str, float]:
    """Both extremes by ``eigsh(which="BE")`` and its products; ``start`` the clock's start."""
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    op, count = counted(A)
    v0 = np.random.default_rng(0).standard_normal(A.shape[0])
    try:
        ends = np.sort(eigsh(op, k=2, which="BE", tol=TOL, v0=v0, return_eigenvectors=False))
        lo, hi, converged = float(ends[0]), float(ends[-1]), "yes"
    except ArpackNoConvergence:
        lo, hi, converged = None, None, "no"
    return lo, hi, count[0], converged, time.perf_counter() - start


class PerView(nn.Module):
    """The head on each view of Z; ``z`` (an identity) marks the activation for curvlinops."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.z, self.head = nn.Identity(), head

    def forward(self, Z: Tensor) -> Tensor:
        """The head's outputs (V, N, p) of Z (V, N, d), view by view."""
        z = self.z(Z)
        return torch.stack([self.head(z[v]) for v in range(z.shape[0])])


def curvlinops_operator(problem: Problem, index: Tensor | None) -> Any:
    """Curvlinops' activation Hessian in Z as a scipy operator, restricted to the sub-block."""
    from curvlinops.experimental import ActivationHessianLinearOperator
    from scipy.sparse.linalg import LinearOperator

    head, loss, Z = problem

    class Loss(nn.Module):
        reduction = "sum"  # no rescaling by curvlinops

        def forward(self, H: Tensor, _y: Tensor) -> Tensor:
            return loss(H)

    model = PerView(copy.deepcopy(head).float().train(runs_in_training_mode(head)))
    # curvlinops' determinism check differentiates the loss in every parameter; a frozen one (DINO's
    # weight-normalised prototypes, weight_g) would make it raise. The copy's parameters are
    # constants of the Hessian in z either way.
    for param in model.parameters():
        param.requires_grad_(True)
    data = [(Z.detach().to(F32).clone().requires_grad_(), torch.zeros(Z.shape[0]))]
    full = ActivationHessianLinearOperator(model, Loss(), ("z", "output", 0), data).to_scipy()
    grid = torch.arange(Z.numel()).reshape(Z.shape)
    coords = (grid if index is None else grid[:, index]).reshape(-1).numpy()

    def sub(x: np.ndarray) -> np.ndarray:
        wide = np.zeros((Z.numel(), *x.shape[1:]))
        wide[coords] = x
        return (full @ wide)[coords]

    return LinearOperator((coords.size, coords.size), matvec=sub, matmat=sub, dtype=np.float64)


def peer_curvlinops(problem: Problem, index: Tensor | None) -> Any:
    """The activation Hessian under ``eigsh(which="BE")``, construction timed with it."""
    start = time.perf_counter()
    return arpack(curvlinops_operator(problem, index), start)


def eigenthings_operator(problem: Problem, index: Tensor | None) -> tuple[Any, list[int]]:
    """hessian-eigenthings' HessianOperator of the block module, counting its products."""
    import hessian_eigenthings as he

    head, loss, Z = problem
    model = BlockModule(head, Z, index)
    op = he.HessianOperator(model, [torch.zeros(1)], lambda m, _b: loss(m()))
    count = [0]

    def product(v: Tensor) -> Tensor:
        count[0] += 1
        return op.matvec(v)

    return he.LambdaOperator(product, op.size, dtype=F32), count


def peer_eigenthings(problem: Problem, index: Tensor | None) -> Any:
    """Lanczos runs of 16, 32, 64, ... steps until both extremes' flags say converged."""
    import hessian_eigenthings as he

    start = time.perf_counter()
    op, count = eigenthings_operator(problem, index)
    steps = 16
    while True:
        steps = min(steps, op.size)
        run = he.lanczos(
            op, k=steps, max_iter=steps, tol=TOL, which="LA", seed=0, reorthogonalize=True
        )
        converged = bool(run.converged[0]) and bool(run.converged[-1])
        if converged or steps >= min(op.size, 256):
            break
        steps *= 2
    values = run.eigenvalues  # descending
    return (
        float(values[-1]),
        float(values[0]),
        count[0],
        "yes" if converged else "no",
        time.perf_counter() - start,
    )


def pyhessian_hessian(problem: Problem, index: Tensor | None) -> tuple[Any, list[int]]:
    """PyHessian's hessian object on the block module, its products counted."""
    import pyhessian  # noqa: F401  (its module object: sys.modules, the class shadows the name)

    module: Any = sys.modules["pyhessian.hessian"]
    count, hvp = [0], module.hessian_vector_product
    if not getattr(hvp, "counted", False):

        def product(*args: Any) -> Any:
            module._bench_count[0] += 1
            return hvp(*args)

        product.counted = True  # type: ignore[attr-defined]
        module.hessian_vector_product = product
    module._bench_count = count
    head, loss, Z = problem
    torch.manual_seed(0)
    model = BlockModule(head, Z, index)
    hess = module.hessian(
        model, lambda H, _y: loss(H), data=(torch.zeros(1), torch.zeros(1)), cuda=False
    )
    return hess, count


def peer_pyhessian(problem: Problem, index: Tensor | None, reference: tuple[float, float]) -> Any:
    """The dominant eigenvalue by power iteration, put on the side of the larger extreme."""
    start = time.perf_counter()
    hess, count = pyhessian_hessian(problem, index)
    (value,), _ = hess.eigenvalues(maxIter=100, tol=TOL, top_n=1)
    low_side = abs(reference[0]) > abs(reference[1])
    lo, hi = (value, None) if low_side else (None, value)
    return lo, hi, count[0], "not reported", time.perf_counter() - start


def torch1_eig(T: Tensor, eigenvectors: bool = True) -> tuple[Tensor, Tensor]:
    """torch.eig of torch 1 (real eigenvalues as a (n, 2) real/imaginary table) by eigh."""
    values, vectors = torch.linalg.eigh(T)
    return torch.stack([values, torch.zeros_like(values)], 1), vectors
