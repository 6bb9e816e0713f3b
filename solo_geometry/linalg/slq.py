"""Stochastic Lanczos quadrature (SLQ): spectral densities and masses from Lanczos runs.

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
    - [1]: Ubaru, Chen, Saad, 2017, SIAM J. Matrix Anal. Appl. 38(4) (stochastic Lanczos
      quadrature)
    - [3]: Golub, Meurant, 2010, Matrices, Moments and Quadrature with Applications, Princeton
      (Theorem 6.4, Chebyshev-Markov-Stieltjes)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from solo_geometry.linalg.blocks import restrict_to_block
from solo_geometry.linalg.lanczos import (
    CHECK_EVERY,
    LanczosResult,
    MatVec,
    lanczos,
    lanczos_side_by_side,
)
from solo_geometry.linalg.operators import HeadOperators

__all__ = ["ExtremesRunner", "FractionEstimate", "SpectralDensity", "slq_density"]


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


@dataclass(frozen=True)
class ExtremesRunner:
    """The Lanczos settings shared by every operator's runs in one measurement.

    Attributes:
        dim: size of the (sub-block) operator.
        max_steps: step cap of each run.
        tol: relative residual tolerance of the extremes.
        probes: SLQ probes per operator, the extremes' run included.
        generator: draws the start vectors, one run after another.
        dtype: dtype of the products (the recurrences are float64).
        device: where the Krylov vectors live.
    """

    dim: int
    max_steps: int
    tol: float
    probes: int
    generator: torch.Generator
    dtype: torch.dtype
    device: torch.device

    def run(
        self, ops: HeadOperators, name: str, index: Tensor | None, atol: float
    ) -> tuple[LanczosResult, SpectralDensity, float]:
        """Extremes' run and ``probes - 1`` density probes of as many steps; wall time.

        With probes, the runs go side by side, one batched product per step (same numbers).

        Args:
            ops: the operators of one batch.
            name: which of them, ``heff``, ``gn`` or ``m``.
            index: sample indices of the principal sub-block (None: the whole batch).
            atol: absolute residual under which an extreme needs no further steps (the floor).

        Returns:
            The extremes' run, the SLQ density of all ``probes`` runs, the seconds they took.
        """
        start = time.perf_counter()
        options = dict(
            max_steps=self.max_steps,
            tol=self.tol,
            atol=atol,
            generator=self.generator,
            dtype=torch.float64,  # Krylov basis and recurrences
            device=self.device,
            matvec_dtype=self.dtype,  # the products
            # a check (a small eigh) costs nothing next to a CPU product: check every step there
            check_every=1 if self.device.type == "cpu" else CHECK_EVERY,
        )
        if self.probes == 1:
            runs = [
                lanczos(
                    restrict_to_block(getattr(ops, name), ops.shape, index),
                    self.dim,
                    **options,  # type: ignore[arg-type]
                )
            ]
        else:
            product = restrict_to_block(ops.batched(name), ops.shape, index, batched=True)
            runs = lanczos_side_by_side(product, self.dim, followers=self.probes - 1, **options)  # type: ignore[arg-type]
        density = SpectralDensity.from_runs(runs)
        return runs[0], density, time.perf_counter() - start
