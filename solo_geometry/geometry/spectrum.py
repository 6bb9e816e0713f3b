"""Extreme spectra of the effective Hessian and of its Gauss-Newton and interaction parts.

Implements "Spectra" of DESIGN.md section 3 on the operators of
:mod:`solo_geometry.linalg.operators`: Lanczos with full reorthogonalisation on H_eff, GN and
M, every number read off the Ritz values (float64), with one negativity floor for all three
operators set by H_eff's scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from solo_geometry.linalg.lanczos import lanczos
from solo_geometry.linalg.operators import LossFn, head_operators

__all__ = [
    "DEFAULT_TAU",
    "HessianSpectrum",
    "OperatorSpectrum",
    "effective_hessian_spectrum",
    "operator_spectrum",
    "subsample_indices",
]

DEFAULT_TAU: dict[torch.dtype, float] = {torch.float64: 1e-10, torch.float32: 1e-5}


@dataclass(frozen=True)
class OperatorSpectrum:
    """Summary of one operator's Ritz values (see :func:`operator_spectrum`).

    Attributes:
        lambda_min: smallest Ritz value.
        lambda_max: largest Ritz value.
        neg_count: number of Ritz values below the floor -tau * max|lambda(H_eff)|. By
            Cauchy interlacing the j-th smallest Ritz value bounds the j-th smallest eigenvalue
            from above, so this is a lower bound on the number of eigenvalues below the floor.
        neg_mass: sum of |theta| over Ritz values theta below the floor, divided by the sum of
            |theta| over all Ritz values (0 when that sum is 0); computed on the Ritz values.
        cond: condition number on the numerical rank, computed on the Ritz values:
            max |theta| / min{|theta| : |theta| > tau * max|lambda(H_eff)|}; NaN when no Ritz
            value is above the floor (numerical rank 0, e.g. M of a linear or ReLU head).
    """

    lambda_min: float
    lambda_max: float
    neg_count: int
    neg_mass: float
    cond: float


@dataclass(frozen=True)
class HessianSpectrum:
    """Spectra of H_eff, GN and M at one batch.

    Attributes:
        heff: spectrum of the effective Hessian d2L/dZ2.
        gn: spectrum of the Gauss-Newton part J^T (d2 loss/dH2) J.
        m: spectrum of the interaction part M (g = dloss/dH held constant).
        interaction_ratio: ||M|| / ||H_eff||, spectral norms max |theta| from the Ritz values.
        floor: the absolute negativity floor tau * max|lambda(H_eff)| used for all three.
        dim: size of the operators (after ``max_samples``).
    """

    heff: OperatorSpectrum
    gn: OperatorSpectrum
    m: OperatorSpectrum
    interaction_ratio: float
    floor: float
    dim: int

    def as_record(self) -> dict[str, float]:
        """Flat record: ``heff/lambda_min`` ... ``m/cond`` and ``interaction_ratio``."""
        record: dict[str, float] = {}
        for name in ("heff", "gn", "m"):
            for key, value in asdict(getattr(self, name)).items():
                record[f"{name}/{key}"] = value
        record["interaction_ratio"] = self.interaction_ratio
        return record


def operator_spectrum(ritz: Tensor, floor: float) -> OperatorSpectrum:
    """Summarise ascending Ritz values ``ritz`` (k,) given the absolute floor (>= 0).

    See :class:`OperatorSpectrum` for the exact definitions.
    """
    ritz = ritz.double().cpu()
    magnitude = ritz.abs()
    negative = ritz < -floor
    total = float(magnitude.sum())
    above = magnitude[magnitude > floor]
    return OperatorSpectrum(
        lambda_min=float(ritz[0]),
        lambda_max=float(ritz[-1]),
        neg_count=int(negative.sum()),
        neg_mass=float(magnitude[negative].sum()) / total if total > 0 else 0.0,
        cond=float(above.max() / above.min()) if above.numel() else math.nan,
    )


def subsample_indices(n: int, max_samples: int | None) -> Tensor | None:
    """Deterministic, evenly spaced sample indices, or None when no subsampling is needed."""
    if max_samples is None or max_samples >= n:
        return None
    return torch.linspace(0, n - 1, max_samples, dtype=torch.float64).round().long()


def _restrict(
    matvec: Callable[[Tensor], Tensor], shape: torch.Size, index: Tensor | None
) -> Callable[[Tensor], Tensor]:
    """Principal sub-block of ``matvec`` on the coordinates of samples ``index``."""
    if index is None:
        return matvec
    views, _, d = shape

    def sub(v: Tensor) -> Tensor:
        full = v.new_zeros(shape)  # (V, N, d)
        full[:, index] = v.reshape(views, -1, d)  # (V, m, d) into the batch
        return matvec(full.reshape(-1)).reshape(shape)[:, index].reshape(-1)

    return sub


def _check_arguments(Z: Tensor, steps: int, dtype: torch.dtype, max_samples: int | None) -> None:
    if dtype not in DEFAULT_TAU:
        raise ValueError(f"dtype must be torch.float64 or torch.float32; got {dtype}")
    if steps < 1:
        raise ValueError(f"steps must be positive; got {steps}")
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be positive or None; got {max_samples}")
    if Z.ndim != 3:
        raise ValueError(f"Z must have shape (V, N, d); got {tuple(Z.shape)}")


def effective_hessian_spectrum(
    head: nn.Module,
    loss_fn: LossFn,
    Z: Tensor,
    *,
    steps: int = 30,
    dtype: torch.dtype = torch.float64,
    max_samples: int | None = None,
    generator: torch.Generator | None = None,
    tau: float | None = None,
) -> HessianSpectrum:
    """Extreme spectra of H_eff, GN and M of ``loss_fn(head(Z))`` with respect to Z.

    Each operator gets its own ``steps``-step Lanczos run (start vectors drawn in turn from
    ``generator``). An eigenvalue of any of the three counts as negative only below
    -tau * max|lambda(H_eff)| (DESIGN.md section 3). Leaves the head, its ``.grad``, BatchNorm
    running statistics, train/eval mode and the global RNG state exactly as found.

    Args:
        head: projection head (N, d) -> (N, p), applied per view.
        loss_fn: loss of the head outputs (V, N, p) -> scalar, other quantities detached.
        Z: backbone features (V, N, d).
        steps: Lanczos steps per operator.
        dtype: torch.float64 or torch.float32 for the products and Krylov vectors.
        max_samples: if set and smaller than N, restrict the operators to the coordinates of
            ``max_samples`` evenly spaced samples (every view), i.e. their principal sub-block.
            The loss is still evaluated on the whole batch, so loss closures holding per-sample
            targets stay valid and BatchNorm sees the real batch; by Cauchy interlacing the
            sub-block's extreme eigenvalues lie inside the full operator's.
        generator: draws the Lanczos start vectors (CPU generator; None: seeded 0).
        tau: relative floor; default 1e-10 for float64 and 1e-5 for float32.

    Returns:
        The :class:`HessianSpectrum`.

    Raises:
        ValueError: on a bad ``dtype``, ``steps``, ``max_samples`` or Z shape.
    """
    _check_arguments(Z, steps, dtype, max_samples)
    tau = DEFAULT_TAU[dtype] if tau is None else tau
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    ops = head_operators(head, loss_fn, Z, dtype=dtype)  # forks the global RNG itself
    index = subsample_indices(Z.shape[1], max_samples)
    dim = ops.dim if index is None else Z.shape[0] * index.numel() * Z.shape[2]
    ritz = {}
    for name in ("heff", "gn", "m"):  # start vectors from ``gen`` only
        matvec = _restrict(getattr(ops, name), ops.shape, index)
        result = lanczos(matvec, dim, steps, generator=gen, dtype=dtype, device=Z.device)
        ritz[name] = result.ritz_values
    scale = float(ritz["heff"].abs().max())
    floor = tau * scale
    m_norm = float(ritz["m"].abs().max())
    return HessianSpectrum(
        heff=operator_spectrum(ritz["heff"], floor),
        gn=operator_spectrum(ritz["gn"], floor),
        m=operator_spectrum(ritz["m"], floor),
        interaction_ratio=m_norm / scale if scale > 0 else math.nan,
        floor=floor,
        dim=dim,
    )
