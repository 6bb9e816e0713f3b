"""Lanczos to converged extremes.

Pure kernels on a symmetric operator A given only by its product ``matvec(v)``.

Lanczos keeps its Krylov basis Q and orthogonalises every new vector against all previous ones
twice (classical Gram-Schmidt, twice is enough [2]), so Ritz values do not duplicate ("ghost") as
in plain Lanczos. The tridiagonal T_k = Q_k^T A Q_k is solved in float64 on the CPU with
:func:`torch.linalg.eigh`, T_k = S diag(theta) S^T. The residual of Ritz pair i is
||A y_i - theta_i y_i|| = |beta_k S[k-1, i]| (beta_k the norm of the next Lanczos vector) and
some eigenvalue of A lies within it of theta_i [0]. The run stops once the smallest and the
largest Ritz values both have a residual under ``tol`` times the spectral scale max |theta| (or
under an absolute ``atol``), on an invariant subspace (beta_k at round-off: the Ritz values are
then exact eigenvalues), or at ``max_steps``. It looks at the device only at those checks, once
every ``check_every`` steps: no host sync per step.

Stochastic Lanczos quadrature on these runs is in :mod:`solo_geometry.linalg.slq`.

References:
    - [0]: Parlett, 1998, The Symmetric Eigenvalue Problem, SIAM (section 13.2)
    - [1]: Ubaru, Chen, Saad, 2017, SIAM J. Matrix Anal. Appl. 38(4) (stochastic Lanczos
      quadrature)
    - [2]: Giraud, Langou, Rozloznik, 2005, Comput. Math. Appl. 50 ("twice is enough")
    - [3]: Golub, Meurant, 2010, Matrices, Moments and Quadrature with Applications, Princeton
      (Theorem 6.4, Chebyshev-Markov-Stieltjes)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CHECK_EVERY", "LanczosResult", "MatVec", "lanczos", "lanczos_side_by_side"]

MatVec = Callable[[Tensor], Tensor]

CHECK_EVERY = 4  # steps between two convergence checks (each a host sync and a small eigh)
_INITIAL_CAPACITY = 32  # rows of the Krylov basis allocated up front; doubled when full


@dataclass(frozen=True)
class LanczosResult:
    """Outcome of :func:`lanczos`.

    Attributes:
        ritz_values: (k,) float64 (CPU), ascending. The smallest is an upper bound on
            lambda_min(A) and the largest a lower bound on lambda_max(A), converged or not.
        residuals: (k,) float64 residual bounds |beta_k S[k-1, i]|: an eigenvalue of A lies
            within ``residuals[i]`` of ``ritz_values[i]``.
        weights: (k,) float64 Gauss quadrature weights S[0, i]^2 of the start vector; they
            sum to 1.
        steps: k, the number of products taken.
        threshold: the absolute residual threshold of the convergence test,
            max(tol * max_i |theta_i|, atol).
        converged_min: the smallest Ritz value's residual is under ``threshold``, or the
            Krylov space is invariant.
        converged_max: the same for the largest Ritz value.
        invariant: the run stopped on an invariant subspace (every Ritz value is then an
            eigenvalue of A to round-off, and the quadrature rule is exact for mu_v).
        ritz_vectors: (dim, k) in the run's dtype and device, columns matching
            ``ritz_values``, or None.
    """

    ritz_values: Tensor
    residuals: Tensor
    weights: Tensor
    steps: int
    threshold: float
    converged_min: bool
    converged_max: bool
    invariant: bool
    ritz_vectors: Tensor | None = None

    @property
    def converged(self) -> bool:
        """Both extremes converged."""
        return self.converged_min and self.converged_max

    @property
    def converged_values(self) -> Tensor:
        """(k,) bool: which Ritz values converged (residual under ``threshold``)."""
        if self.invariant:
            return torch.ones_like(self.residuals, dtype=torch.bool)
        return self.residuals <= self.threshold


def _tridiagonal(alpha: Tensor, beta: Tensor) -> Tensor:
    """Dense symmetric tridiagonal (k, k) from its diagonal (k,) and off-diagonal (k - 1,)."""
    return torch.diag(alpha) + torch.diag(beta, 1) + torch.diag(beta, -1)


def _grown(basis: Tensor, rows: int) -> Tensor:
    """``basis`` (B, cap, dim) with room for at least ``rows`` rows (capacity doubled)."""
    if rows <= basis.shape[1]:
        return basis
    bigger = basis.new_zeros(basis.shape[0], max(rows, 2 * basis.shape[1]), basis.shape[2])
    bigger[:, : basis.shape[1]] = basis
    return bigger


@dataclass(frozen=True)
class _Check:
    """What one convergence check read off the tridiagonal of the first k steps."""

    theta: Tensor  # (k,) float64 CPU
    s: Tensor  # (k, k) float64 CPU eigenvectors of T_k
    residuals: Tensor  # (k,)
    threshold: float
    converged_min: bool
    converged_max: bool


def _check(alpha: Tensor, beta: Tensor, k: int, tol: float, atol: float) -> _Check:
    """Solve T_k in float64 and test both extremes (alpha, beta already on the CPU)."""
    theta, s = torch.linalg.eigh(_tridiagonal(alpha[:k], beta[: k - 1]))
    residuals = beta[k - 1].abs() * s[k - 1].abs()  # (k,) |beta_k S[k-1, i]|
    bound = max(tol * float(theta.abs().max()), atol)
    return _Check(
        theta, s, residuals, bound, bool(residuals[0] <= bound), bool(residuals[-1] <= bound)
    )


@dataclass(frozen=True)
class _Runs:
    """Side-by-side runs.

    The basis (B, >= k, dim), tridiagonals (B, steps) on the CPU in float64, each run's
    breakdown step (or None), and the leading run's last check and steps k.
    """

    basis: Tensor
    alpha: Tensor
    beta: Tensor
    breaks: list[int | None]
    last: _Check
    k: int

    def follower(self, i: int) -> tuple[_Check, int, bool]:
        """Run ``i``'s check (tol 0), steps and whether it stopped on an invariant subspace."""
        stop = self.breaks[i]
        k = self.k if stop is None else min(self.k, stop + 1)
        return _check(self.alpha[i], self.beta[i], k, 0.0, 0.0), k, stop is not None and stop < k


def _run(
    matvec: MatVec,
    v0: Tensor,
    max_steps: int,
    tol: float,
    atol: float,
    check_every: int,
    matvec_dtype: torch.dtype,
) -> _Runs:
    """Lanczos from each row of ``v0`` (B, dim) side by side, one batched product per step.

    Row 0 leads: all stop when both its extremes converge, it breaks down, or at ``max_steps``.
    The other rows follow with tolerance 0 (SLQ probes as long as the leading run); a follower
    that breaks down goes on with zero vectors, its steps counted up to its breakdown.
    """
    runs, dim = v0.shape
    basis = v0.new_zeros(runs, min(max_steps, _INITIAL_CAPACITY), dim)  # rows contiguous
    alpha, beta = v0.new_zeros(runs, max_steps), v0.new_zeros(runs, max_steps)
    broken = torch.zeros(runs, max_steps, dtype=torch.bool, device=v0.device)
    # breakdown at the products' round-off: a float32 product of a zero operator is not 0
    eps = max(torch.finfo(v0.dtype).eps, torch.finfo(matvec_dtype).eps) * 10.0 * math.sqrt(dim)
    size = v0.new_zeros(runs)  # largest tridiagonal entry so far per run: the breakdown scale
    basis[:, 0] = v0 / torch.linalg.vector_norm(v0, dim=1, keepdim=True)
    for j in range(max_steps):
        w = matvec(basis[:, j].to(matvec_dtype)).reshape(runs, dim).to(v0)  # (B, dim)
        alpha[:, j] = (basis[:, j] * w).sum(1)
        q = basis[:, : j + 1]  # (B, j + 1, dim)
        w = w - (q.mT @ (q @ w.unsqueeze(2))).squeeze(2)
        w = w - (q.mT @ (q @ w.unsqueeze(2))).squeeze(2)  # second pass: orthogonal to round-off
        b = torch.linalg.vector_norm(w, dim=1)  # (B,)
        beta[:, j] = b
        size = torch.maximum(size, torch.maximum(alpha[:, j].abs(), b))
        broken[:, j] = b <= eps * size
        if j + 1 < max_steps:
            basis = _grown(basis, j + 2)
            live = ~broken[:, : j + 1].any(1, keepdim=True)  # (B, 1)
            basis[:, j + 1] = torch.where(
                live, w / torch.clamp(b, min=torch.finfo(v0.dtype).tiny).unsqueeze(1), 0.0
            )
        k = j + 1
        if k % check_every and k < max_steps:
            continue
        hits = torch.nonzero(broken[0, :k].cpu()).flatten()  # sync
        a64, b64 = alpha[0, :k].double().cpu(), beta[0, :k].double().cpu()
        if hits.numel():
            k = int(hits[0]) + 1
            last = _check(a64, b64, k, tol, atol)
            break
        last = _check(a64, b64, k, tol, atol)
        if last.converged_min and last.converged_max:
            break
    first = [torch.nonzero(row).flatten() for row in broken.cpu()]
    breaks = [int(f[0]) if f.numel() else None for f in first]
    return _Runs(basis, alpha.double().cpu(), beta.double().cpu(), breaks, last, k)


def _start_vector(
    dim: int, generator: torch.Generator | None, dtype: torch.dtype, device: torch.device | None
) -> Tensor:
    """Gaussian (dim,) drawn in float64 on the generator's device, then moved and cast."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    v0 = torch.randn(dim, generator=gen, dtype=torch.float64, device=gen.device)
    return v0.to(device=device, dtype=dtype)


def lanczos(
    matvec: MatVec,
    dim: int,
    *,
    max_steps: int,
    tol: float,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    atol: float = 0.0,
    check_every: int = CHECK_EVERY,
    return_vectors: bool = False,
    v0: Tensor | None = None,
    matvec_dtype: torch.dtype | None = None,
) -> LanczosResult:
    """Extreme eigenvalues of a symmetric operator, run until both have converged.

    Full reorthogonalisation; the tridiagonal is solved in float64. Every ``check_every``
    steps (and at the last one) the residual bounds r_i = |beta_k S[k-1, i]| of the smallest
    and the largest Ritz values are compared with ``max(tol * max_i |theta_i|, atol)``; the
    run stops when both are under it, or when the Krylov space becomes invariant (beta_k under
    10 sqrt(dim) eps times the largest tridiagonal entry: every Ritz value is then exact and
    counts as converged), or at ``max_steps``. An extreme that did not converge is flagged in
    the result: its Ritz value is then only a bound (``ritz_values[0] >= lambda_min``).

    Args:
        matvec: product with the operator, (dim,) -> (dim,) (any shape with dim elements).
        dim: size of the operator.
        max_steps: most Lanczos steps (products); capped at ``dim``.
        tol: relative residual tolerance; 0 runs to ``max_steps`` (or an invariant subspace).
        generator: draws the Gaussian start vector (on the generator's device, then moved);
            None uses a fresh generator seeded 0. The global RNG is never used.
        dtype: dtype of the Krylov vectors and the recurrences (the tridiagonal is always
            solved in float64).
        matvec_dtype: dtype the product is taken in (the vector is cast to it, the product
            back to ``dtype``), e.g. float32 products under float64 recurrences; None:
            ``dtype``. The breakdown test then works at the coarser of the two round-offs.
        device: device of the Krylov vectors.
        atol: absolute residual tolerance: a floor under which residuals count as converged
            whatever the operator's own scale (e.g. the resolution of a larger operator this one
            is part of, so that an operator of pure round-off converges at once).
        check_every: steps between two convergence checks (each syncs with the device).
        return_vectors: also return the Ritz vectors (dim, k).
        v0: start vector (dim,) instead of a random one.

    Returns:
        A :class:`LanczosResult` with ascending float64 Ritz values and their residuals.

    Raises:
        ValueError: if ``dim``, ``max_steps`` or ``check_every`` is not positive, ``tol`` or
            ``atol`` is negative, or ``v0`` has the wrong size.
    """
    if dim < 1 or max_steps < 1 or check_every < 1:
        raise ValueError(
            f"dim, max_steps and check_every must be positive; got dim={dim}, "
            f"max_steps={max_steps}, check_every={check_every}"
        )
    if tol < 0 or atol < 0:
        raise ValueError(f"tol and atol must be >= 0; got tol={tol}, atol={atol}")
    if v0 is None:
        v0 = _start_vector(dim, generator, dtype, torch.device(device) if device else None)
    elif v0.numel() != dim:
        raise ValueError(f"v0 must have {dim} elements; got {v0.numel()}")
    v0 = v0.reshape(1, -1).to(dtype=dtype, device=device if device is not None else v0.device)
    runs = _run(
        lambda v: matvec(v[0]).reshape(1, -1),
        v0,
        min(max_steps, dim),
        tol,
        atol,
        check_every,
        matvec_dtype or dtype,
    )
    k, invariant = runs.k, runs.breaks[0] is not None and runs.breaks[0] < runs.k
    vectors = runs.basis[0, :k].T @ runs.last.s.to(runs.basis) if return_vectors else None
    return _result(runs.last, k, invariant, vectors)


def _result(last: _Check, k: int, invariant: bool, vectors: Tensor | None) -> LanczosResult:
    return LanczosResult(
        ritz_values=last.theta,
        residuals=last.residuals,
        weights=last.s[0] ** 2,
        steps=k,
        threshold=last.threshold,
        converged_min=invariant or last.converged_min,
        converged_max=invariant or last.converged_max,
        invariant=invariant,
        ritz_vectors=vectors,
    )


def lanczos_side_by_side(
    matvec: MatVec,
    dim: int,
    *,
    followers: int,
    max_steps: int,
    tol: float,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    atol: float = 0.0,
    check_every: int = CHECK_EVERY,
    matvec_dtype: torch.dtype | None = None,
) -> list[LanczosResult]:
    """An extremes' run and ``followers`` SLQ probes as long as it, side by side.

    The same numbers as :func:`lanczos` for the extremes' run followed by ``followers`` runs
    of its length with ``tol=0`` (start vectors drawn from ``generator`` in that order), each
    run's recurrences its own, but every step takes one batched product of all the runs'
    vectors: ``matvec`` maps (B, dim) to (B, dim), B = 1 + ``followers``.

    Args:
        matvec: batched product with the operator, (B, dim) -> (B, dim).
        dim: size of the operator.
        followers: probes that follow the extremes' run (>= 0).
        max_steps: most steps of the extremes' run (and so of every run).
        tol: relative residual tolerance of the extremes' run, as in :func:`lanczos`.
        generator: draws the start vectors, the extremes' run's first.
        dtype: dtype of the Krylov vectors and recurrences.
        device: device of the Krylov vectors.
        atol: absolute residual tolerance of the extremes' run.
        check_every: steps between two convergence checks.
        matvec_dtype: dtype of the products; None: ``dtype``.

    Returns:
        The extremes' run's result, then each follower's.

    Raises:
        ValueError: on a non-positive ``dim``, ``max_steps`` or ``check_every``, negative
            ``followers``, ``tol`` or ``atol``.
    """
    if dim < 1 or max_steps < 1 or check_every < 1 or followers < 0:
        raise ValueError(
            f"dim, max_steps, check_every must be positive and followers >= 0; got dim={dim}, "
            f"max_steps={max_steps}, check_every={check_every}, followers={followers}"
        )
    if tol < 0 or atol < 0:
        raise ValueError(f"tol and atol must be >= 0; got tol={tol}, atol={atol}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    place = torch.device(device) if device else None
    v0 = torch.stack([_start_vector(dim, gen, dtype, place) for _ in range(1 + followers)])
    runs = _run(matvec, v0, min(max_steps, dim), tol, atol, check_every, matvec_dtype or dtype)
    lead = runs.breaks[0] is not None and runs.breaks[0] < runs.k
    out = [_result(runs.last, runs.k, lead, None)]
    for i in range(1, 1 + followers):
        out.append(_result(*runs.follower(i), None))
    return out
