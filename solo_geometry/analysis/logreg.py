"""Full-batch L-BFGS multinomial logistic regression: the numerical kernel of ``linear_probe``.

Pure functions on tensors. The loss is mean cross-entropy + lam/2 ||W||^2 (bias unpenalised),
minimised by L-BFGS in a damped preconditioned basis (an exact change of variables) with a
hand-written gradient, so no autograd graph is built. Convergence is judged as scikit-learn's
``lbfgs`` judges it: the largest absolute entry of the gradient of the mean loss with respect to
(W, b) falls below ``tol``.

References:
    - [0]: Nocedal, 1980, Updating quasi-Newton matrices with limited storage, Math. Comp. 35
    - [1]: Frangella, Tropp and Udell, 2023, Randomized Nystrom preconditioning,
      arXiv 2110.02820 (preconditioning the top of the spectrum, damping the rest)
    - [2]: Hager and Zhang, 2005, A new conjugate gradient method with guaranteed descent and
      an efficient line search, SIAM J. Optim. 16 (the approximate Wolfe conditions)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "SMALL_STEP_WORK",
    "SMALL_WORK",
    "Basis",
    "Precond",
    "affine_logits",
    "eigenbasis",
    "fit_logistic",
    "lbfgs",
    "threads_for",
]

# Multiply-adds per call below which one thread is used: an L-BFGS evaluation (N * d * C) costs
# about a millisecond here; minibatch steps pay a synchronisation per small kernel, so more.
SMALL_WORK = 2e6
SMALL_STEP_WORK = 5e7

# Covariance eigenpairs (s (k,), V (d, k) or None, mean eigenvalue of the complement of V or None).
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
def threads_for(work: float, small: float = SMALL_WORK) -> Iterator[None]:
    """Use one intra-op thread when ``work`` (multiply-adds per call) is below ``small``.

    Below about a millisecond of work per call threads only add synchronisation; above it two
    threads are 1.5x faster on an idle 2-core machine (``benchmarks/bench_probes.py``). The
    thread count is restored afterwards.
    """
    before = torch.get_num_threads()
    if work < small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rank_floor(dtype: torch.dtype) -> float:
    """Relative eigenvalue below which a direction counts as numerical null space."""
    return max(1e-7, 10 * torch.finfo(dtype).eps)


class Basis(NamedTuple):
    """The orthonormal basis (d, r) that ``eigenbasis`` expresses the features in, as two maps.

    Attributes:
        features: features (M, d) -> their coordinates (M, r).
        weights: weights or gradients in the basis (r, C) -> feature coordinates (d, C).
    """

    features: Callable[[Tensor], Tensor]
    weights: Callable[[Tensor], Tensor]


def _identity(t: Tensor) -> Tensor:
    return t


def _eigh(a: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.eigh``, retried in float64 when the solver does not converge in float32.

    Raises:
        ValueError: if ``a`` holds non-finite values (features that diverged).
    """
    if not bool(torch.isfinite(a).all()):
        raise ValueError("features hold non-finite values (NaN or inf): the model diverged")
    try:
        return torch.linalg.eigh(a)
    except torch.linalg.LinAlgError:  # ill-conditioned float32 input
        evals, evecs = torch.linalg.eigh(a.double())
        return evals.to(a.dtype), evecs.to(a.dtype)


def eigenbasis(x: Tensor, max_rows: int, gen: torch.Generator) -> tuple[Tensor, Precond, Basis]:
    """Features to fit on (N, r), the preconditioner, and the basis they are expressed in.

    With N <= max_rows rows the covariance's null space is dropped and the data
    rotated once into the remaining eigenbasis (N, r): W has no component there at the optimum
    (the loss does not see it and L2 removes it), and each evaluation costs N r C, not N d C.
    Computed in the dtype of ``x``; for N < d through the N x N Gram matrix, with V = X^T U S^-1
    applied as (Z X^T) U S^-1 and X^T (U S^-1 w), never formed. With more rows than
    ``max_rows`` the features stay as they are and the preconditioner is estimated.
    """
    floor = _rank_floor(x.dtype)
    if x.shape[0] < x.shape[1] and x.shape[0] <= max_rows:
        s2, u = _eigh(x @ x.T)  # X X^T = U S^2 U^T, (N,), (N, N)
        if float(s2.max()) > 0:
            keep = s2 > floor * float(s2.max())
            s2, u = s2[keep], u[:, keep]  # (r,), (N, r)
            u_over_s = u * s2.rsqrt()  # (N, r)
            basis = Basis(  # ((U S^-1 w)^T X)^T: x.T @ (...) is slower
                lambda z: (z @ x.T) @ u_over_s, lambda w: ((u_over_s @ w).T.contiguous() @ x).T
            )
            return u * s2.sqrt(), (s2 / x.shape[0], None, None), basis  # X V = U S: (N, r)
    if x.shape[0] > max_rows:
        return x, _preconditioner(x, max_rows, gen), Basis(_identity, _identity)
    evals, evecs = _eigh(x.T @ x / x.shape[0])  # (d,), (d, d)
    evals = evals.clamp_min(0.0)
    keep = evals > floor * float(evals.max()) if float(evals.max()) > 0 else evals >= 0
    v = evecs[:, keep]  # (d, r)
    return x @ v, (evals[keep], None, None), Basis(lambda z: z @ v, lambda w: v @ w)  # (N, r)


def affine_logits(params: Tensor, x: Tensor) -> Tensor:
    """Logits (N, C) of x (N, d) under params (d + 1, C): the last row is the bias."""
    return torch.addmm(params[-1], x, params[:-1])  # (N, C)


def lbfgs(
    fun: Callable[[Tensor], tuple[Tensor, Tensor]],
    a: Tensor,
    max_iter: int,
    converged: Callable[[Tensor], bool],
    history: int = 10,
) -> tuple[Tensor, int]:
    """Minimise ``fun`` from ``a`` by L-BFGS with a backtracking line search.

    A step is taken when it satisfies Armijo's sufficient decrease, or, once the change of the
    loss is below its rounding, the approximate Wolfe condition on the slope [2]; the search
    gives up (and the minimiser returns) when neither holds after 30 trials.

    Args:
        fun: a (P, C) -> (loss (), gradient (P, C)); the loss is taken in float64 so the
            sufficient-decrease test resolves small steps.
        a: starting point (P, C); not modified.
        max_iter: iterations (accepted steps) at most.
        converged: gradient (P, C) -> whether to stop.
        history: curvature pairs kept.

    Returns:
        (minimiser (P, C), function evaluations).
    """
    loss, grad = fun(a)
    n_evals, pairs = 1, list[tuple[Tensor, Tensor, float]]()  # (s, y, 1 / y.s), oldest first
    for _ in range(max_iter):
        if converged(grad):
            break
        q, alphas = grad.clone(), []
        for s, y, rho in reversed(pairs):  # two-loop recursion [0]
            alphas.append(rho * (s * q).sum())
            q -= alphas[-1] * y
        if pairs:
            s, y, _ = pairs[-1]
            q *= (s * y).sum() / (y * y).sum()
        for (s, y, rho), alpha in zip(pairs, reversed(alphas), strict=True):
            q += (alpha - rho * (y * q).sum()) * s
        slope = float(-(grad * q).sum())
        if slope >= 0:  # not a descent direction: forget the history, go down the gradient
            pairs, q, slope = [], grad.clone(), float(-(grad * grad).sum())
        step, accepted = 1.0, False
        for _ in range(30):
            trial = a - step * q
            t_loss, t_grad = fun(trial)
            n_evals += 1
            decrease = float(t_loss - loss)
            if decrease <= 1e-4 * step * slope:  # Armijo
                accepted = True
                break
            if (
                decrease <= 1e-6 * abs(float(loss))
                and float(-(t_grad * q).sum()) <= -0.9998 * slope
            ):
                accepted = True  # approximate Wolfe [2]: the decrease is below rounding
                break
            # minimiser of the quadratic through loss, slope and the trial, kept in [0.1, 0.5]
            step *= min(0.5, max(0.1, -slope * step / (2 * (decrease - slope * step))))
        if not accepted:  # no decrease left at this precision
            break
        s, y = trial - a, t_grad - grad
        ys = float((s * y).sum())
        if ys > 1e-10 * float((y * y).sum()):
            pairs = [*pairs, (s, y, 1.0 / ys)][-history:]
        a, loss, grad = trial, t_loss, t_grad
    return a, n_evals


def fit_logistic(
    x: Tensor,
    y: Tensor,
    n_classes: int,
    lam: float,
    init: Tensor | None,
    precond: Precond,
    max_iter: int,
    tol: float,
    to_features: Callable[[Tensor], Tensor] = _identity,
    n_features: int | None = None,
) -> tuple[Tensor, int]:
    """Minimise mean CE + lam/2 ||W||^2 by full-batch L-BFGS; returns params (d+1, C), evals.

    L-BFGS runs on ``a`` with W = P a, P = V diag((s + lam + m)^(-1/2)) V^T (+ the same for the
    complement of V with its mean eigenvalue), (s, V) covariance eigenpairs and m their mean: an
    exact change of variables (same minimiser, same penalty). Directions with more than the
    average variance are whitened; the bulk below it keeps its scale, because near a separating
    solution the loss is flat there and inflating it slows L-BFGS [1]. V = None: x is already
    expressed in the eigenbasis and P = diag((s + lam + m)^(-1/2)).

    Convergence is scikit-learn's ``gtol`` test: the largest absolute entry of the gradient in
    (W, b) is at most ``tol``, with W in the coordinates of the original features:
    ``to_features`` maps x's basis (d, C) there (n_features, C). It is only formed once the
    gradient's norm allows it (the largest entry is at least the norm over sqrt(entries)) and,
    after a failed test, once the norm has shrunk by the factor the largest entry still had to.
    The schedule can only delay the stop by an iteration or so, never bring it early.
    """
    evals, evecs, rest = precond
    d = x.shape[1]
    mean = (float(evals.sum()) + (rest or 0.0) * (d - evals.shape[0])) / max(d, 1)
    damp = lam + mean + 1e-12
    scale = (evals + damp).rsqrt()[:, None]  # (k, 1)
    if evecs is None:  # x is in the eigenbasis: P = diag(scale)
        to_w, from_w = (lambda a: a * scale), (lambda w: w / scale)
    else:  # P = V diag(scale) V^T + c (I - V V^T), symmetric; c for the complement of V
        c = damp**-0.5 if rest is None else (rest + damp) ** -0.5
        to_w = lambda a: evecs @ ((scale - c) * (evecs.T @ a)) + c * a  # noqa: E731
        from_w = lambda w: evecs @ ((1 / scale - 1 / c) * (evecs.T @ w)) + w / c  # noqa: E731
    start = torch.zeros(d + 1, n_classes, dtype=x.dtype, device=x.device)
    if init is not None:  # init holds (W; b): map W to the new coordinates
        start[:-1] = from_w(init[:-1])
        start[-1] = init[-1]
    onehot = F.one_hot(y, n_classes).to(x.dtype)  # (N, C)
    n = x.shape[0]

    check_below = [tol * math.sqrt((n_features or d) * n_classes)]  # largest entry >= norm / sqrt

    @torch.no_grad()
    def converged(grad: Tensor) -> bool:
        grad_w = from_w(grad[:-1])  # (d, C): P^-1 (P g) = g, the gradient in x's coordinates
        norm = float(grad_w.norm())
        if float(grad[-1].abs().max()) > tol or norm > check_below[0]:
            return False
        largest = float(to_features(grad_w).abs().max())
        if largest <= tol:
            return True
        # not yet: look again once the norm has shrunk as much as the largest entry must
        check_below[0] = min(check_below[0], norm * tol / largest)
        return False

    @torch.no_grad()
    def objective(a: Tensor) -> tuple[Tensor, Tensor]:  # gradient written by hand
        weight = to_w(a[:-1])  # (d, C)
        logp = torch.log_softmax(torch.addmm(a[-1], x, weight), dim=1)  # (N, C)
        loss = -(logp.gather(1, y[:, None]).double().sum()) / n
        loss = loss + 0.5 * lam * weight.double().pow(2).sum()
        resid = (logp.exp() - onehot) / n  # (N, C): dloss/dlogits
        grad_w = (resid.T.contiguous() @ x).T + lam * weight  # (d, C); x.T @ resid is slower
        return loss, torch.cat([to_w(grad_w), resid.sum(0)[None]])  # P symmetric: P^T = P

    a, n_evals = lbfgs(objective, start, max_iter, converged)
    return torch.cat([to_w(a[:-1]), a[-1:]]), n_evals
