"""Lanczos with full reorthogonalisation and stochastic Lanczos quadrature (SLQ).

Pure kernels on a symmetric operator given only by its product ``matvec(v)``. The Krylov basis
is kept and every new vector is orthogonalised against all previous ones twice (classical
Gram-Schmidt, twice is enough), so Ritz values do not duplicate ("ghost") as in plain Lanczos.
The tridiagonal matrix is always solved in float64 with :func:`torch.linalg.eigvalsh` /
:func:`torch.linalg.eigh`. There is no ``.item()`` per iteration: the invariant-subspace test
is evaluated on the device and looked at on the host once every ``_SYNC_EVERY`` steps; the run
is then truncated at the first breakdown exactly.

References:
    - [0]: Lanczos, 1950, J. Res. Nat. Bur. Standards 45(4)
    - [1]: Ubaru, Chen, Saad, 2017, SIAM J. Matrix Anal. Appl. 38(4) (stochastic Lanczos
      quadrature)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["LanczosResult", "SpectralDensity", "lanczos", "slq_density"]

MatVec = Callable[[Tensor], Tensor]

_SYNC_EVERY = 8  # host looks at the breakdown flags once per this many steps


@dataclass(frozen=True)
class LanczosResult:
    """Outcome of :func:`lanczos`.

    Attributes:
        ritz_values: (k,) float64, ascending.
        ritz_vectors: (dim, k) in the run's dtype, columns matching ``ritz_values``, or None.
        steps: k, the number of Lanczos steps kept (fewer than asked on an invariant subspace).
    """

    ritz_values: Tensor
    ritz_vectors: Tensor | None
    steps: int


@dataclass(frozen=True)
class SpectralDensity:
    """Spectral density estimate of :func:`slq_density` as a weighted sum of Dirac masses.

    Attributes:
        nodes: (probes * steps,) float64 Ritz values of every probe (fewer on early breakdown).
        weights: same shape, squared first components of the Ritz vectors divided by the number
            of probes; they sum to 1.
    """

    nodes: Tensor
    weights: Tensor

    def smoothed(self, grid: Tensor, sigma: float) -> Tensor:
        """Density on ``grid`` (G,) with every node spread as a Gaussian of width ``sigma``.

        Returns:
            (G,) float64 density that integrates to 1 over the real line.
        """
        grid = grid.to(self.nodes)
        diff = grid[:, None] - self.nodes[None, :]  # (G, K)
        kernel = torch.exp(-0.5 * (diff / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
        return kernel @ self.weights


def _tridiagonal(matvec: MatVec, v0: Tensor, steps: int) -> tuple[Tensor, Tensor, Tensor]:
    """Run ``steps`` Lanczos steps from ``v0``.

    Returns:
        alpha (k,), beta (k - 1,) in float64, and the orthonormal basis Q (k, dim).
    """
    dim = v0.numel()
    basis = v0.new_zeros(steps, dim)  # (steps, dim): rows contiguous for matvec
    alpha = v0.new_zeros(steps)
    beta = v0.new_zeros(steps)
    broken = torch.zeros(steps, dtype=torch.bool, device=v0.device)
    eps = torch.finfo(v0.dtype).eps * 10.0 * math.sqrt(dim)
    scale = v0.new_zeros(())
    basis[0] = v0 / torch.linalg.vector_norm(v0)
    for j in range(steps):
        w = matvec(basis[j]).reshape(-1).to(v0)
        alpha[j] = basis[j] @ w
        q = basis[: j + 1]  # (j + 1, dim)
        w = w - q.T @ (q @ w)
        w = w - q.T @ (q @ w)  # second pass: orthogonal to working precision
        b = torch.linalg.vector_norm(w)
        beta[j] = b
        scale = torch.maximum(scale, torch.maximum(alpha[j].abs(), b))
        broken[j] = b <= eps * scale
        if j + 1 < steps:
            basis[j + 1] = w / torch.clamp(b, min=torch.finfo(v0.dtype).tiny)
        if j % _SYNC_EVERY == _SYNC_EVERY - 1 and bool(broken[: j + 1].any()):
            break
    hits = torch.nonzero(broken).flatten()
    k = int(hits[0]) + 1 if hits.numel() else steps
    return alpha[:k].double(), beta[: k - 1].double(), basis[:k]


def _eigh_tridiagonal(alpha: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """Eigen-decomposition of the symmetric tridiagonal (alpha, beta) in float64."""
    t = torch.diag(alpha) + torch.diag(beta, 1) + torch.diag(beta, -1)  # (k, k)
    return torch.linalg.eigh(t)


def _start_vector(
    dim: int, generator: torch.Generator | None, dtype: torch.dtype, device: torch.device | None
) -> Tensor:
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    v0 = torch.randn(dim, generator=gen, dtype=torch.float64, device=gen.device)
    return v0.to(device=device, dtype=dtype)


def lanczos(
    matvec: MatVec,
    dim: int,
    steps: int,
    *,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    return_vectors: bool = False,
    v0: Tensor | None = None,
) -> LanczosResult:
    """Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalisation.

    Args:
        matvec: product with the operator, (dim,) -> (dim,) (any shape with dim elements).
        dim: size of the operator.
        steps: Lanczos steps (matvecs); capped at ``dim``. The run stops earlier when the Krylov
            space becomes invariant (residual norm below 10 sqrt(dim) eps times the largest
            tridiagonal entry), where the Ritz values are exact eigenvalues.
        generator: draws the Gaussian start vector (on the generator's device, then moved);
            None uses a fresh generator seeded 0. The global RNG is never used.
        dtype: dtype of the Krylov vectors (the tridiagonal is always float64).
        device: device of the Krylov vectors.
        return_vectors: also return the Ritz vectors (dim, k).
        v0: start vector (dim,) instead of a random one.

    Returns:
        A :class:`LanczosResult` with ascending float64 Ritz values.

    Raises:
        ValueError: if ``dim`` or ``steps`` is not positive, or ``v0`` has the wrong size.
    """
    if dim < 1 or steps < 1:
        raise ValueError(f"dim and steps must be positive; got dim={dim}, steps={steps}")
    if v0 is None:
        v0 = _start_vector(dim, generator, dtype, torch.device(device) if device else None)
    elif v0.numel() != dim:
        raise ValueError(f"v0 must have {dim} elements; got {v0.numel()}")
    v0 = v0.reshape(-1).to(dtype=dtype, device=device if device is not None else v0.device)
    alpha, beta, basis = _tridiagonal(matvec, v0, min(steps, dim))
    if not return_vectors:
        t = torch.diag(alpha) + torch.diag(beta, 1) + torch.diag(beta, -1)  # (k, k)
        return LanczosResult(torch.linalg.eigvalsh(t), None, alpha.numel())
    values, s = _eigh_tridiagonal(alpha, beta)
    vectors = basis.T @ s.to(basis)  # (dim, k)
    return LanczosResult(values, vectors, alpha.numel())


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

    Each probe is a normalised Rademacher vector; its Lanczos tridiagonal T = S diag(theta) S^T
    gives the quadrature nodes theta and weights S[0, :]^2, averaged over probes [1].

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
        ValueError: if ``probes`` is not positive.
    """
    if probes < 1:
        raise ValueError(f"probes must be positive; got {probes}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    nodes, weights = [], []
    for _ in range(probes):
        signs = torch.randint(0, 2, (dim,), generator=gen, device=gen.device) * 2 - 1
        v0 = signs.to(dtype=dtype, device=device) / math.sqrt(dim)
        alpha, beta, _ = _tridiagonal(matvec, v0, min(steps, dim))
        theta, s = _eigh_tridiagonal(alpha, beta)
        nodes.append(theta)
        weights.append(s[0] ** 2 / probes)
    return SpectralDensity(torch.cat(nodes), torch.cat(weights))
