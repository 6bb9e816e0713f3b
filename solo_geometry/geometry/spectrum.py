"""Spectra of the effective Hessian and of its Gauss-Newton and interaction parts.

Implements "Spectra" of docs/design.md section 3 on the operators of
:mod:`solo_geometry.linalg.operators`. Per operator (H_eff, GN, M), one Lanczos run with full
reorthogonalisation until both extreme Ritz values converge (residual bound under ``tol`` times
the operator's spectral scale max|lambda|, or under the negativity floor) or ``max_steps``;
extremes that did not converge are reported as None, with their Ritz values (bounds) and
residuals alongside. One negativity floor for all three operators, set by H_eff's scale:
tau * max|lambda(H_eff)|. The negative part of
each spectrum is a fraction of the dimension read off the SLQ density, whose first probe is the
extremes' run itself (a Gaussian start vector) and whose further ``density_probes`` probes run
as many steps; never a count of Ritz values, which grows with the number of steps.

Cost: the head and the loss are evaluated once, every product reuses that one graph (M has its
own on top of it), no product is taken twice, float32 products (half float64's on a CPU; the
floor is then 1e-5) run under float64 recurrences, and the density probes go side by side with
the extremes' run, one batched product per step. A head that is a chain of Linear layers and
piecewise-linear activations without BatchNorm (solo-learn's SimCLR and MoCo v2+ projectors) has
M = 0 almost everywhere, so GN = H_eff exactly: GN's spectrum is then H_eff's run, not a second
Lanczos run of the same operator (``gn_is_heff`` in the record). A head that maps each row
alone (those two projectors among them) has its sub-block's products taken with those rows
alone in the graph (:mod:`solo_geometry.linalg.blocks`): the same operator, cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import torch
from torch import Tensor, nn

from solo_geometry.linalg.blocks import block_indices, row_operators, row_wise
from solo_geometry.linalg.lanczos import LanczosResult
from solo_geometry.linalg.operators import LossFn, head_operators, piecewise_linear
from solo_geometry.linalg.slq import ExtremesRunner, SpectralDensity

__all__ = [
    "DEFAULT_TAU",
    "DEFAULT_TOL",
    "OPERATORS",
    "HessianSpectrum",
    "OperatorSpectrum",
    "SpectrumSettings",
    "effective_hessian_spectrum",
    "operator_spectrum",
]

DEFAULT_TAU: dict[torch.dtype, float] = {torch.float64: 1e-10, torch.float32: 1e-5}
# Residual bound over the operator's max|lambda|: each extreme certified within 1e-3 of its
# operator's spectral scale (the actual error, about residual^2 / gap, is often far smaller:
# benchmarks/bench_spectrum.py). Each tenfold change costs or saves about 8-12 products per
# operator.
DEFAULT_TOL = 1e-3
OPERATORS = ("heff", "gn", "m")


@dataclass(frozen=True)
class OperatorSpectrum:
    """One operator's extreme eigenvalues, condition number and negative fraction.

    Attributes:
        lambda_min: smallest eigenvalue, the smallest Ritz value if it converged, else None.
        lambda_max: largest eigenvalue if converged, else None.
        ritz_min: smallest Ritz value, converged or not: lambda_min <= ritz_min always.
        ritz_max: largest Ritz value: lambda_max >= ritz_max always.
        residual_min: residual bound of ``ritz_min``: an eigenvalue lies within it.
        residual_max: residual bound of ``ritz_max``.
        converged_min: ``residual_min`` <= max(tol * max|theta|, floor), max|theta| this
            operator's largest Ritz magnitude (or an invariant subspace).
        converged_max: the same for the largest.
        steps: Lanczos steps (products) of the extremes' run.
        cond: condition number on the numerical rank, max|lambda| / min{|lambda| > floor},
            where converged extremes give it: the operator is definite beyond the floor
            (lambda_min - residual_min > floor, or lambda_max + residual_max < -floor), so the
            smallest magnitude is an extreme, and that extreme's residual is under tol times
            its own magnitude (``cond`` is then within about 2 tol of the truth). None
            otherwise: an extreme did not converge to that accuracy, or the smallest
            magnitudes are interior eigenvalues (indefinite or singular operator), which
            Lanczos does not resolve.
        neg_fraction: SLQ estimate of #{lambda < -floor} / dim.
        neg_fraction_std: its standard error from the choice of the P probes,
            sqrt(2 f (1 - f) / ((dim + 2) P)) at f = ``neg_fraction`` (see
            :meth:`FractionEstimate.sampling_std`).
        neg_fraction_quad: bound on its quadrature error (Chebyshev-Markov-Stieltjes, see
            :meth:`SpectralDensity.fraction_below`); the estimate is within
            ``neg_fraction_quad`` plus a few ``neg_fraction_std`` of the true fraction.
        seconds: wall time of this operator's Lanczos runs (extremes and density probes).
        density: the SLQ density (not part of the record).
    """

    lambda_min: float | None
    lambda_max: float | None
    ritz_min: float
    ritz_max: float
    residual_min: float
    residual_max: float
    converged_min: bool
    converged_max: bool
    steps: int
    cond: float | None
    neg_fraction: float
    neg_fraction_std: float
    neg_fraction_quad: float
    seconds: float
    density: SpectralDensity = field(repr=False, compare=False)

    @property
    def norm(self) -> float | None:
        """Spectral norm max(|lambda_min|, |lambda_max|) if both converged, else None."""
        if self.lambda_min is None or self.lambda_max is None:
            return None
        return max(abs(self.lambda_min), abs(self.lambda_max))

    def as_record(self, prefix: str) -> dict[str, float | int | bool | None]:
        """Flat ``<prefix>/<field>`` entries of every field but ``density``."""
        return {
            f"{prefix}/{f.name}": getattr(self, f.name) for f in fields(self) if f.name != "density"
        }


@dataclass(frozen=True)
class SpectrumSettings:
    """What defines a :class:`HessianSpectrum`'s numbers, named as a record's settings name them.

    The fields are the spectrum's own (see :class:`HessianSpectrum`): ``lanczos_tol`` is its
    ``tol``, ``lanczos_max_steps`` its ``max_steps``, ``slq_probes`` its ``probes``.
    """

    floor: float
    tau: float
    lanczos_tol: float
    lanczos_max_steps: int
    slq_probes: int
    dim: int
    n_batch: int
    n_block: int


@dataclass(frozen=True)
class HessianSpectrum:
    """Spectra of H_eff, GN and M at one batch, with the settings that define them.

    Attributes:
        operators: spectrum per operator name (``heff`` always; ``gn`` and ``m`` if asked).
        interaction_ratio: ||M|| / ||H_eff|| from converged extremes, else None.
        floor: the absolute negativity floor tau * max|theta(H_eff)| used for all three.
        tau: the relative floor.
        tol: the relative residual tolerance of the extremes.
        max_steps: the step cap of each Lanczos run.
        probes: SLQ probes per operator (the extremes' run and ``density_probes`` more).
        dim: size of the operators, V * n_block * d.
        n_batch: samples N in the batch the loss sees.
        n_block: samples whose rows span the operators' principal sub-block.
        gn_is_heff: GN's spectrum is H_eff's run: the head is piecewise linear
            (:func:`piecewise_linear`), so GN = H_eff exactly and a second run would repeat it.
    """

    operators: dict[str, OperatorSpectrum]
    interaction_ratio: float | None
    floor: float
    tau: float
    tol: float
    max_steps: int
    probes: int
    dim: int
    n_batch: int
    n_block: int
    gn_is_heff: bool = False

    @property
    def heff(self) -> OperatorSpectrum:
        """Spectrum of H_eff."""
        return self.operators["heff"]

    @property
    def gn(self) -> OperatorSpectrum:
        """Spectrum of GN (KeyError if it was not asked for)."""
        return self.operators["gn"]

    @property
    def m(self) -> OperatorSpectrum:
        """Spectrum of M (KeyError if it was not asked for)."""
        return self.operators["m"]

    @property
    def settings(self) -> SpectrumSettings:
        """The settings that define these spectra (see the fields)."""
        return SpectrumSettings(
            floor=self.floor,
            tau=self.tau,
            lanczos_tol=self.tol,
            lanczos_max_steps=self.max_steps,
            slq_probes=self.probes,
            dim=self.dim,
            n_batch=self.n_batch,
            n_block=self.n_block,
        )

    def as_record(self) -> dict[str, float | int | bool | None]:
        """Flat metrics: ``<op>/<field>`` per operator, ``interaction_ratio``, ``gn_is_heff``.

        The settings that define them are :attr:`settings`, apart.
        """
        record: dict[str, float | int | bool | None] = {}
        for name, spectrum in self.operators.items():
            record.update(spectrum.as_record(name))
        if "m" in self.operators:
            record["interaction_ratio"] = self.interaction_ratio
        if "gn" in self.operators:
            record["gn_is_heff"] = self.gn_is_heff
        return record


def _condition(run: LanczosResult, floor: float, tol: float) -> float | None:
    """``cond`` of :class:`OperatorSpectrum`: defined only where it is read off the extremes."""
    if not run.converged:
        return None
    theta, residual = run.ritz_values, run.residuals
    lo, hi = float(theta[0]), float(theta[-1])
    r_lo, r_hi = float(residual[0]), float(residual[-1])
    if lo - r_lo > floor and r_lo <= tol * lo:  # positive definite beyond the floor
        return hi / lo
    if hi + r_hi < -floor and r_hi <= tol * -hi:  # negative definite beyond the floor
        return lo / hi
    return None


def operator_spectrum(
    run: LanczosResult,
    density: SpectralDensity,
    *,
    floor: float,
    tol: float,
    dim: int,
    seconds: float = 0.0,
) -> OperatorSpectrum:
    """Summarise one operator's extremes' run and SLQ density given the absolute floor (>= 0).

    Args:
        run: the extremes' Lanczos run.
        density: the SLQ density whose probes include ``run``'s start vector.
        floor: absolute negativity floor.
        tol: the relative residual tolerance of the run (``cond`` needs its smallest
            magnitude to this relative accuracy).
        dim: size of the operator.
        seconds: wall time to record.

    Returns:
        The :class:`OperatorSpectrum` (see it for the exact definitions).
    """
    theta, residual = run.ritz_values, run.residuals
    lower = float(theta[0] - residual[0]) if run.converged_min else None
    upper = float(theta[-1] + residual[-1]) if run.converged_max else None
    negative = density.fraction_below(-floor, lower=lower, upper=upper)
    return OperatorSpectrum(
        lambda_min=float(theta[0]) if run.converged_min else None,
        lambda_max=float(theta[-1]) if run.converged_max else None,
        ritz_min=float(theta[0]),
        ritz_max=float(theta[-1]),
        residual_min=float(residual[0]),
        residual_max=float(residual[-1]),
        converged_min=run.converged_min,
        converged_max=run.converged_max,
        steps=run.steps,
        cond=_condition(run, floor, tol),
        neg_fraction=negative.value,
        neg_fraction_std=negative.sampling_std(dim),
        neg_fraction_quad=negative.quadrature,
        seconds=seconds,
        density=density,
    )


def _check_arguments(
    Z: Tensor,
    max_steps: int,
    tol: float,
    dtype: torch.dtype,
    max_samples: int | None,
    density_probes: int,
    operators: Sequence[str],
) -> None:
    if dtype not in DEFAULT_TAU:
        raise ValueError(f"dtype must be torch.float64 or torch.float32; got {dtype}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be positive; got {max_steps}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0; got {tol}")
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be positive or None; got {max_samples}")
    if density_probes < 0:
        raise ValueError(f"density_probes must be >= 0; got {density_probes}")
    if "heff" not in operators or not set(operators) <= set(OPERATORS):
        raise ValueError(f"operators must include 'heff', from {OPERATORS}; got {operators}")
    if Z.ndim != 3:
        raise ValueError(f"Z must have shape (V, N, d); got {tuple(Z.shape)}")


def effective_hessian_spectrum(
    head: nn.Module,
    loss_fn: LossFn,
    Z: Tensor,
    *,
    max_steps: int = 200,
    tol: float = DEFAULT_TOL,
    dtype: torch.dtype = torch.float64,
    max_samples: int | None = None,
    generator: torch.Generator | None = None,
    tau: float | None = None,
    density_probes: int = 0,
    operators: Sequence[str] = OPERATORS,
) -> HessianSpectrum:
    """Spectra of H_eff, GN and M of ``loss_fn(head(Z))`` with respect to Z.

    Each operator runs until both its extremes have a residual bound under tol times its own
    spectral scale, or under the floor. H_eff runs first: its largest |Ritz value| sets the
    floor tau * max|lambda(H_eff)| below which an eigenvalue of any of the three counts as
    negative (docs/design.md section 3), and under which a residual needs no further steps (so M of
    a linear or ReLU head, pure round-off, converges at once). For a piecewise-linear head
    (:func:`piecewise_linear`) GN = H_eff, and GN's spectrum is H_eff's run (``gn_is_heff``).
    Start vectors are drawn in turn from ``generator``: H_eff's, its density probes, then GN's
    (unless GN is H_eff), then M's. Leaves the head, its
    ``.grad``, BatchNorm running statistics, train/eval mode and the global RNG state as found.

    Args:
        head: projection head (N, d) -> (N, p), applied per view.
        loss_fn: loss of the head outputs (V, N, p) -> scalar, other quantities detached.
        Z: backbone features (V, N, d), the whole batch.
        max_steps: step cap of each extremes' run.
        tol: relative residual tolerance: an extreme has converged when its residual bound is
            under tol times its operator's max|lambda| (or under the floor); it then lies within
            that of an eigenvalue.
        dtype: torch.float64 or torch.float32 for the operator products; the Krylov
            vectors, their recurrences and reorthogonalisation are float64 either way (so
            float32 products lose no orthogonality), the tridiagonal solved in float64.
        max_samples: if set and smaller than N, restrict the operators to the coordinates of
            ``max_samples`` evenly spaced samples (every view), i.e. their principal sub-block.
            The loss still sees the whole batch (features, BatchNorm batch statistics and
            negatives); by Cauchy interlacing the sub-block's extreme eigenvalues lie inside
            the full operator's. For a :func:`row_wise` head only the block's rows enter the
            graph (the same operator, cheaper products).
        generator: draws the start vectors (CPU generator; None: seeded 0).
        tau: relative floor; default 1e-10 for float64 and 1e-5 for float32.
        density_probes: SLQ probes per operator beyond the extremes' own start vector, each a
            Lanczos run of as many steps as the extremes' run took.
        operators: which of ``("heff", "gn", "m")`` to compute; ``heff`` is required.

    Returns:
        The :class:`HessianSpectrum`.

    Raises:
        ValueError: on a bad ``dtype``, ``max_steps``, ``tol``, ``max_samples``,
            ``density_probes``, ``operators`` or Z shape.
    """
    _check_arguments(Z, max_steps, tol, dtype, max_samples, density_probes, operators)
    tau = DEFAULT_TAU[dtype] if tau is None else tau
    index = block_indices(Z.shape[1], max_samples, Z.device)  # on the features' device
    n_block = Z.shape[1] if index is None else index.numel()
    if index is not None and row_wise(head):  # the block's rows alone in the graph: same numbers
        ops, index = row_operators(head, loss_fn, Z, index, dtype=dtype), None
    else:
        ops = head_operators(head, loss_fn, Z, dtype=dtype)  # forks the global RNG itself
    runner = ExtremesRunner(
        dim=Z.shape[0] * n_block * Z.shape[2],
        max_steps=max_steps,
        tol=tol,
        probes=density_probes + 1,
        generator=generator if generator is not None else torch.Generator().manual_seed(0),
        dtype=dtype,
        device=Z.device,
    )
    runs = {"heff": runner.run(ops, "heff", index, 0.0)}
    floor = tau * float(runs["heff"][0].ritz_values.abs().max())
    gn_is_heff = "gn" in operators and piecewise_linear(head)
    for name in (n for n in OPERATORS[1:] if n in operators):
        if name == "gn" and gn_is_heff:  # the same operator: its run, at no further cost
            runs[name] = (*runs["heff"][:2], 0.0)
            continue
        runs[name] = runner.run(ops, name, index, floor)
    spectra = {
        name: operator_spectrum(run, density, floor=floor, tol=tol, dim=runner.dim, seconds=seconds)
        for name, (run, density, seconds) in runs.items()
    }
    h_norm, m_norm = spectra["heff"].norm, spectra["m"].norm if "m" in spectra else None
    ratio = m_norm / h_norm if h_norm and m_norm is not None else None
    return HessianSpectrum(
        operators=spectra,
        interaction_ratio=ratio,
        floor=floor,
        tau=tau,
        tol=tol,
        max_steps=max_steps,
        probes=runner.probes,
        dim=runner.dim,
        n_batch=Z.shape[1],
        n_block=n_block,
        gn_is_heff=gn_is_heff,
    )
