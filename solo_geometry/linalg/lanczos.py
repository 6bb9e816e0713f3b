"""Lanczos to converged extremes, and stochastic Lanczos quadrature (SLQ).

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

SLQ [1] reads the same runs as Gauss quadrature rules: the start vector v of a run defines the
spectral measure mu_v = sum_j (v . u_j)^2 delta(lambda_j) of A, whose k-node Gauss rule has the
Ritz values as nodes and S[0, :]^2 as weights. For a Gaussian v / ||v||, mu_v is an unbiased
estimate of the spectral density (1/n) sum_j delta(lambda_j); averaging over probes reduces its
variance. A mass read off a Gauss rule is bracketed by the Chebyshev-Markov-Stieltjes
inequalities [3]: see :meth:`SpectralDensity.fraction_below`. The bracket is as wide as the
weights of the nodes next to the threshold: a Krylov space of k steps resolves about 1/k of the
spectral range, so mass closer to the threshold than that (e.g. a near-null cluster around 0)
is not split by sign, and the bracket says so.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "CHECK_EVERY",
    "FractionEstimate",
    "LanczosResult",
    "SpectralDensity",
    "lanczos",
    "slq_density",
]

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


@dataclass(frozen=True)
class FractionEstimate:
    """Spectral mass below a threshold, from :meth:`SpectralDensity.fraction_below`.

    Attributes:
        value: mean over probes of ``per_probe``, an estimate of
            #{eigenvalues < threshold} / dim.
        quadrature: bound on the quadrature error of ``value``: the mean over probes of the
            larger weight of the two nodes next to the threshold (Chebyshev-Markov-Stieltjes);
            0 where a probe's rule is exact or the spectrum provably lies on one side of the
            threshold.
        per_probe: (P,) float64 mass of each probe's Gauss rule below the threshold.
    """

    value: float
    quadrature: float
    per_probe: Tensor

    @property
    def probes(self) -> int:
        """Number of probes P."""
        return self.per_probe.numel()

    def sampling_std(self, dim: int) -> float:
        """Standard error of ``value`` from the choice of probes, at f = ``value``.

        For a normalised Gaussian probe u, the mass of its spectral measure below the
        threshold is ||P u||^2 with P the projector on the r eigenvectors below it:
        Beta(r / 2, (dim - r) / 2) distributed, mean f = r / dim, variance
        2 f (1 - f) / (dim + 2). Over P probes: sqrt(2 f (1 - f) / ((dim + 2) P)).
        """
        f = min(max(self.value, 0.0), 1.0)
        return math.sqrt(2.0 * f * (1.0 - f) / ((dim + 2) * self.probes))


@dataclass(frozen=True)
class SpectralDensity:
    """Spectral density estimate of SLQ as a weighted sum of Dirac masses.

    Build it with :func:`slq_density` or :meth:`from_runs`; a density read back from a record
    (nodes and weights only) still supports :meth:`smoothed`, the one smoother of the package.

    Attributes:
        nodes: (K,) float64 Ritz values of every probe, probe after probe.
        weights: (K,) float64 Gauss weights divided by the number of probes; they sum to 1.
        probe: (K,) int64 index of each node's probe, or None when unknown.
        exact: (P,) bool, per probe: its rule is exact (invariant Krylov space), or None.
    """

    nodes: Tensor
    weights: Tensor
    probe: Tensor | None = None
    exact: Tensor | None = None

    @classmethod
    def from_runs(cls, runs: Sequence[LanczosResult]) -> SpectralDensity:
        """The density whose probes are the start vectors of ``runs`` (Gaussian, normalised).

        Raises:
            ValueError: if ``runs`` is empty.
        """
        if not runs:
            raise ValueError("runs must hold at least one LanczosResult; got none")
        count = len(runs)
        return cls(
            nodes=torch.cat([r.ritz_values for r in runs]),
            weights=torch.cat([r.weights for r in runs]) / count,
            probe=torch.cat([torch.full((r.steps,), p) for p, r in enumerate(runs)]),
            exact=torch.tensor([r.invariant for r in runs]),
        )

    @property
    def probes(self) -> int:
        """Number of probes (1 when unknown)."""
        return 1 if self.exact is None else self.exact.numel()

    def smoothed(self, grid: Tensor, sigma: float) -> Tensor:
        """Density on ``grid`` (G,) with every node spread as a Gaussian of width ``sigma``.

        Returns:
            (G,) float64 density that integrates to 1 over the real line.
        """
        grid = grid.to(self.nodes)
        diff = grid[:, None] - self.nodes[None, :]  # (G, K)
        kernel = torch.exp(-0.5 * (diff / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
        return kernel @ self.weights

    def fraction_below(
        self, threshold: float, *, lower: float | None = None, upper: float | None = None
    ) -> FractionEstimate:
        """Fraction of the spectrum strictly below ``threshold``, with its spread.

        Per probe with nodes theta_1 < ... < theta_k and weights w_i, of which j nodes lie below
        t, the Chebyshev-Markov-Stieltjes inequalities [3] hold the true mass mu_v((-inf, t))
        in [W - w_j, W + w_{j+1}] with W = w_1 + ... + w_j (w_0 = w_{k+1} = 0). The estimate is
        the Gauss rule's mass W (the SLQ density's mass below t), its quadrature error at most
        max(w_j, w_{j+1}); a rule that is exact (invariant Krylov space) gives W without error.
        W rather than the bracket's midpoint: a null space (exact zero eigenvalues, e.g. of GN
        when p < d) converges to one node inside the floor, which W counts correctly.
        ``lower`` / ``upper`` are certified bounds of the whole spectrum (e.g. a converged
        extreme Ritz value minus / plus its residual): if ``lower >= t`` the fraction is 0, if
        ``upper < t`` it is 1, both without error.

        Args:
            threshold: t.
            lower: a lower bound of the spectrum of A, or None.
            upper: an upper bound of the spectrum of A, or None.

        Returns:
            The :class:`FractionEstimate`.

        Raises:
            ValueError: if the density does not know which probe each node came from.
        """
        if self.probe is None or self.exact is None:
            raise ValueError("fraction_below needs the per-node probe index; got probe=None")
        count = self.probes
        if (lower is not None and lower >= threshold) or (upper is not None and upper < threshold):
            value = 0.0 if lower is not None and lower >= threshold else 1.0
            return FractionEstimate(value, 0.0, torch.full((count,), value, dtype=torch.float64))
        mass = torch.zeros(count, dtype=torch.float64)
        bracket = torch.zeros(count, dtype=torch.float64)
        for p in range(count):  # CPU tensors: no device sync
            mine = self.probe == p
            nodes, weights = self.nodes[mine], self.weights[mine] * count  # ascending nodes
            below = int((nodes < threshold).sum())
            mass[p] = weights[:below].sum()
            if not bool(self.exact[p]):
                neighbours = weights[max(below - 1, 0) : below + 1]  # w_j and w_{j+1}
                bracket[p] = neighbours.max()
        return FractionEstimate(float(mass.mean()), float(bracket.mean()), mass)


def _tridiagonal(alpha: Tensor, beta: Tensor) -> Tensor:
    """Dense symmetric tridiagonal (k, k) from its diagonal (k,) and off-diagonal (k - 1,)."""
    return torch.diag(alpha) + torch.diag(beta, 1) + torch.diag(beta, -1)


def _grown(basis: Tensor, rows: int) -> Tensor:
    """``basis`` with room for at least ``rows`` rows (capacity doubled, contents kept)."""
    if rows <= basis.shape[0]:
        return basis
    bigger = basis.new_zeros(max(rows, 2 * basis.shape[0]), basis.shape[1])
    bigger[: basis.shape[0]] = basis
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


def _run(
    matvec: MatVec, v0: Tensor, max_steps: int, tol: float, atol: float, check_every: int
) -> tuple[Tensor, _Check, int, bool]:
    """Lanczos from ``v0`` until both extremes converge, breakdown, or ``max_steps``.

    Returns:
        The basis (>= k, dim), the last check, k and whether the space became invariant.
    """
    dim = v0.numel()
    basis = v0.new_zeros(min(max_steps, _INITIAL_CAPACITY), dim)  # rows contiguous for matvec
    alpha, beta = v0.new_zeros(max_steps), v0.new_zeros(max_steps)
    broken = torch.zeros(max_steps, dtype=torch.bool, device=v0.device)
    eps = torch.finfo(v0.dtype).eps * 10.0 * math.sqrt(dim)
    size = v0.new_zeros(())  # largest tridiagonal entry so far: the breakdown scale
    basis[0] = v0 / torch.linalg.vector_norm(v0)
    for j in range(max_steps):
        w = matvec(basis[j]).reshape(-1).to(v0)
        alpha[j] = basis[j] @ w
        q = basis[: j + 1]  # (j + 1, dim)
        w = w - q.T @ (q @ w)
        w = w - q.T @ (q @ w)  # second pass: orthogonal to working precision
        b = torch.linalg.vector_norm(w)
        beta[j] = b
        size = torch.maximum(size, torch.maximum(alpha[j].abs(), b))
        broken[j] = b <= eps * size
        if j + 1 < max_steps:
            basis = _grown(basis, j + 2)
            basis[j + 1] = w / torch.clamp(b, min=torch.finfo(v0.dtype).tiny)
        k = j + 1
        if k % check_every and k < max_steps:
            continue
        packed = torch.stack([alpha[:k], beta[:k], broken[:k].to(alpha)]).double().cpu()  # sync
        a64, b64 = packed[0], packed[1]  # (k,) each, float64 on the CPU
        hits = torch.nonzero(packed[2]).flatten()
        if hits.numel():
            k = int(hits[0]) + 1
            return basis, _check(a64, b64, k, tol, atol), k, True
        result = _check(a64, b64, k, tol, atol)
        if result.converged_min and result.converged_max:
            return basis, result, k, False
    return basis, result, max_steps, False


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
        dtype: dtype of the Krylov vectors (the tridiagonal is always float64).
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
    v0 = v0.reshape(-1).to(dtype=dtype, device=device if device is not None else v0.device)
    basis, last, k, invariant = _run(matvec, v0, min(max_steps, dim), tol, atol, check_every)
    vectors = basis[:k].T @ last.s.to(basis) if return_vectors else None  # (dim, k)
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


def slq_density(
    matvec: MatVec,
    dim: int,
    *,
    steps: int,
    probes: int,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> SpectralDensity:
    """Spectral density of a symmetric operator by stochastic Lanczos quadrature.

    Each probe is a Gaussian start vector (normalised) run for ``steps`` steps (fewer on an
    invariant subspace); its tridiagonal T = S diag(theta) S^T gives the nodes theta and the
    weights S[0, :]^2, averaged over probes [1].

    Args:
        matvec: product with the operator, (dim,) -> (dim,).
        dim: size of the operator.
        steps: Lanczos steps per probe.
        probes: number of probe vectors.
        generator: draws the probes (None: fresh generator seeded 0).
        dtype: dtype of the Krylov vectors.
        device: device of the Krylov vectors.

    Returns:
        A :class:`SpectralDensity` whose weights sum to 1.

    Raises:
        ValueError: if ``probes`` or ``steps`` is not positive.
    """
    if probes < 1:
        raise ValueError(f"probes must be positive; got {probes}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    runs = [
        lanczos(matvec, dim, max_steps=steps, tol=0.0, generator=gen, dtype=dtype, device=device)
        for _ in range(probes)
    ]
    return SpectralDensity.from_runs(runs)
