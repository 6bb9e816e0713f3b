"""Full-batch L-BFGS multinomial logistic regression: the numerical kernel of ``linear_probe``.

Pure functions on tensors. The loss is mean cross-entropy + lam/2 ||W||^2 (bias unpenalised),
minimised in a preconditioned basis (an exact change of variables) with a hand-written gradient,
so weakly regularised fits on correlated features need few iterations and no autograd graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Precond", "affine_logits", "eigenbasis", "fit_logistic", "threads_for"]

# Multiply-adds per L-BFGS function evaluation (N * d * C) below which one thread is used.
_SMALL_WORK = 5e7

Precond = tuple[Tensor, Tensor | None, float | None]


def _preconditioner(x: Tensor, max_rows: int, generator: torch.Generator) -> Precond:
    """Covariance eigenpairs of at most ``max_rows`` rows: (s (k,), V (d, k), rest).

    For d > 512 only the top 256 pairs (randomised SVD) and ``rest``, the mean eigenvalue of
    the complement of V; otherwise all d pairs and ``rest`` None.
    """
    if x.shape[0] > max_rows:
        x = x[torch.randperm(x.shape[0], generator=generator)[:max_rows].to(x.device)]
    if x.shape[1] <= 512:
        cov = x.T.double() @ x.double() / x.shape[0]  # (d, d)
        evals, evecs = torch.linalg.eigh(cov)
        return evals.clamp_min(0.0).to(x.dtype), evecs.to(x.dtype), None
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # svd_lowrank draws from the global RNG
        torch.manual_seed(seed)
        _, sv, v = torch.svd_lowrank(x, q=min(256, *x.shape), niter=2)  # v: (d, q)
    evals = sv.pow(2) / x.shape[0]  # (q,)
    total = float(x.pow(2).sum()) / x.shape[0]  # trace of the covariance
    rest = max((total - float(evals.sum())) / (x.shape[1] - evals.shape[0]), 1e-12)
    return evals, v, rest


@contextlib.contextmanager
def threads_for(work: float) -> Iterator[None]:
    """Use one intra-op thread for small problems, restoring the count afterwards.

    Per-iteration work of a few milliseconds gains nothing from threads and loses 10x when
    another process holds a core.
    """
    before = torch.get_num_threads()
    if work < _SMALL_WORK:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def eigenbasis(
    x: Tensor, max_rows: int, gen: torch.Generator
) -> tuple[Tensor, Precond, Tensor | None]:
    """Features to fit on, preconditioner, and the basis they are expressed in (or None).

    With every row in the covariance (N <= max_rows) its null space is dropped and the data
    rotated once into the remaining eigenbasis (N, r): W has no component there at the optimum
    (the loss does not see it and L2 removes it), and each evaluation costs N r C, not N d C.
    """
    gram = x.double() @ x.double().T if x.shape[0] < x.shape[1] else None
    if gram is not None and float(gram.diagonal().max()) > 0:  # eigenpairs from X X^T
        s2, u = torch.linalg.eigh(gram)  # X X^T = U S^2 U^T, (N,), (N, N)
        keep = s2 > 1e-7 * float(s2.max())
        s2, u = s2[keep], u[:, keep]  # (r,), (N, r)
        basis = (x.double().T @ u / s2.sqrt()).to(x.dtype)  # (d, r): V = X^T U S^-1
        return (u * s2.sqrt()).to(x.dtype), ((s2 / x.shape[0]).to(x.dtype), None, None), basis
    if x.shape[0] > max_rows:
        return x, _preconditioner(x, max_rows, gen), None
    evals, evecs = torch.linalg.eigh(x.T.double() @ x.double() / x.shape[0])  # (d,), (d, d)
    evals, evecs = evals.clamp_min(0.0).to(x.dtype), evecs.to(x.dtype)
    keep = evals > 1e-7 * float(evals.max()) if float(evals.max()) > 0 else evals >= 0
    basis = evecs[:, keep]  # (d, r)
    return x @ basis, (evals[keep], None, None), basis  # (N, r)


def affine_logits(params: Tensor, x: Tensor) -> Tensor:
    """Logits (N, C) of x (N, d) under params (d + 1, C): the last row is the bias."""
    return torch.addmm(params[-1], x, params[:-1])  # (N, C)


def fit_logistic(
    x: Tensor,
    y: Tensor,
    n_classes: int,
    lam: float,
    init: Tensor | None,
    precond: Precond,
    max_iter: int,
    tol: float,
) -> tuple[Tensor, int]:
    """Minimise mean CE + lam/2 ||W||^2 by full-batch L-BFGS; returns params (d+1, C), evals.

    L-BFGS runs on ``a`` with W = P a, P = V diag((s + lam)^(-1/2)) V^T (+ the same for the
    complement of V with its mean eigenvalue), (s, V) covariance eigenpairs: an exact change of
    variables (same minimiser, same penalty) that makes the problem close to isotropic, so
    weakly regularised fits on correlated features need few iterations. V = None: x is already
    expressed in the eigenbasis and P = diag((s + lam)^(-1/2)).
    """
    evals, evecs, rest = precond
    scale = (evals + lam).clamp_min(1e-6 * float(evals.max()) + 1e-12).rsqrt()[:, None]  # (k, 1)
    if evecs is None:  # x is in the eigenbasis: P = diag(scale)
        to_w, from_w = (lambda a: a * scale), (lambda w: w / scale)
    else:  # P = V diag(scale) V^T + c (I - V V^T), symmetric; c for the complement of V
        c = 1.0 if rest is None else (rest + lam) ** -0.5
        to_w = lambda a: evecs @ ((scale - c) * (evecs.T @ a)) + c * a  # noqa: E731
        from_w = lambda w: evecs @ ((1 / scale - 1 / c) * (evecs.T @ w)) + w / c  # noqa: E731
    params = torch.zeros(x.shape[1] + 1, n_classes, dtype=x.dtype, device=x.device)
    if init is not None:  # init holds (W; b): map W to the new coordinates
        params[:-1] = from_w(init[:-1])
        params[-1] = init[-1]
    opt = torch.optim.LBFGS(
        [params],
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=tol,
        tolerance_change=tol * 1e-3,
        line_search_fn="strong_wolfe",
    )
    n_evals = [0]
    onehot = F.one_hot(y, n_classes).to(x.dtype)  # (N, C)

    @torch.no_grad()
    def closure() -> Tensor:  # loss and its gradient written by hand: no autograd graph
        weight = to_w(params[:-1])  # (d, C)
        logits = torch.addmm(params[-1], x, weight)  # (N, C)
        logp = torch.log_softmax(logits, dim=1)
        loss = -(logp * onehot).sum() / x.shape[0] + 0.5 * lam * weight.pow(2).sum()
        resid = (logp.exp() - onehot) / x.shape[0]  # (N, C): dloss/dlogits
        grad_w = (resid.T.contiguous() @ x).T + lam * weight  # (d, C); x.T @ resid is slower
        params.grad = torch.cat([to_w(grad_w), resid.sum(0)[None]])  # P symmetric: P^T = P
        n_evals[0] += 1
        return loss

    opt.step(closure)
    return torch.cat([to_w(params[:-1]), params[-1:]]), n_evals[0]
