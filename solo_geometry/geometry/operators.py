"""The operators for anyone's model: H_eff, GN and M of any head and loss, as torch and scipy.

The public face of docs/design.md section 3 for code outside a training run. Given a head
(any ``nn.Module`` mapping (N, d) to (N, p)), a loss of its outputs ``loss(H)`` ((V, N, p) to
a scalar) and features Z (V, N, d), :func:`curvature_operators` returns
:class:`CurvatureOperators`, which gives

* each operator (``heff``, ``gn``, ``m``) as a torch product, a callable on flat vectors of
  length ``dim`` (:meth:`CurvatureOperators.matvec`), and on B of them at once
  (:meth:`CurvatureOperators.matmat`, one backward pass per product of the B vectors);
* each as a :class:`scipy.sparse.linalg.LinearOperator` (float64 numpy in and out), for
  ``scipy.sparse.linalg.eigsh`` or any other scipy solver
  (:meth:`CurvatureOperators.linear_operator`);
* the extremes, the SLQ density and the convergence flags this package records
  (:meth:`CurvatureOperators.spectrum`, the same call the monitor makes).

Nothing here is a copy: the products are those of
:class:`~solo_geometry.linalg.operators.HeadOperators` (graphs built once on the first product,
reused by every later one), the sub-block is
:func:`~solo_geometry.linalg.blocks.restrict_to_block`'s and the spectrum is
:func:`~solo_geometry.geometry.spectrum.effective_hessian_spectrum`'s. The head is never
written to (parameters, ``.grad``, BatchNorm running statistics and train/eval mode stay as
found); a head with BatchNorm runs in training mode, with the batch statistics of each view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from scipy.sparse.linalg import LinearOperator
from torch import Tensor, nn

from solo_geometry.geometry.spectrum import (
    DEFAULT_TOL,
    OPERATORS,
    HessianSpectrum,
    effective_hessian_spectrum,
)
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.linalg.checks import check_features, check_head
from solo_geometry.linalg.operators import HeadOperators, LossFn, head_operators

__all__ = ["CurvatureOperators", "curvature_operators"]


def _check_name(name: str) -> None:
    if name not in OPERATORS:
        raise ValueError(f"operator must be one of {OPERATORS}; got {name!r}")


class CurvatureOperators:
    """H_eff, GN and M of ``loss(head(Z))`` at Z, on the sub-block of ``max_samples`` samples.

    Build with :func:`curvature_operators`. Vectors are flat, of length :attr:`dim` =
    V * n_block * d, ordered as Z[:, index, :] flattened (view, sample, feature).

    Attributes:
        head: the head the operators were built from.
        loss: the loss of the head outputs.
        features: Z (V, N, d), detached.
        dtype: dtype of the products (torch.float64 or torch.float32).
        max_samples: samples whose rows span the sub-block (None: the whole batch).
        index: the sub-block's sample indices (None: every sample).
    """

    def __init__(
        self,
        head: nn.Module,
        loss: LossFn,
        Z: Tensor,
        dtype: torch.dtype,
        max_samples: int | None,
    ) -> None:
        self.head, self.loss, self.features = head, loss, Z.detach()
        self.dtype, self.max_samples = dtype, max_samples
        self.index: Tensor | None = block_indices(Z.shape[1], max_samples)

    @functools.cached_property
    def products(self) -> HeadOperators:
        """The full-batch products the sub-block restricts, built on the first product."""
        return head_operators(self.head, self.loss, self.features, dtype=self.dtype)

    @property
    def dim(self) -> int:
        """Size V * n_block * d of the (sub-block) operators."""
        views, n, d = self.features.shape
        return views * (n if self.index is None else self.index.numel()) * d

    def matvec(self, name: str) -> Callable[[Tensor], Tensor]:
        """Torch product of operator ``name`` (``heff``, ``gn`` or ``m``): (dim,) -> (dim,).

        Raises:
            ValueError: if ``name`` is not one of ``("heff", "gn", "m")``.
        """
        _check_name(name)
        single = getattr(self.products, name)
        return restrict_to_block(single, self.products.shape, self.index)

    def matmat(self, name: str) -> Callable[[Tensor], Tensor]:
        """Torch product of ``name`` with B vectors at once: (B, dim) -> (B, dim).

        Raises:
            ValueError: if ``name`` is not one of ``("heff", "gn", "m")``.
        """
        _check_name(name)
        batched = self.products.batched(name)
        return restrict_to_block(batched, self.products.shape, self.index, batched=True)

    def linear_operator(self, name: str) -> Any:
        """Operator ``name`` as a symmetric :class:`scipy.sparse.linalg.LinearOperator`.

        float64 numpy vectors (dim,) or matrices (dim, B) in and out; the products run in
        :attr:`dtype`, a matrix's B columns in one batched product.

        Raises:
            ValueError: if ``name`` is not one of ``("heff", "gn", "m")``.
        """
        single, batched = self.matvec(name), self.matmat(name)
        device = self.features.device

        def apply(x: Any) -> Any:
            v = torch.as_tensor(x, dtype=self.dtype, device=device)
            out = single(v.reshape(-1)) if v.ndim == 1 or v.shape[1] == 1 else batched(v.T).T
            return out.detach().to(torch.float64).cpu().numpy().reshape(x.shape)

        return LinearOperator(
            (self.dim, self.dim),
            matvec=apply,
            rmatvec=apply,
            matmat=apply,
            rmatmat=apply,
            dtype=float,
        )

    def dense(self, name: str, *, chunk: int = 64) -> Tensor:
        """Operator ``name`` as a dense (dim, dim) matrix in :attr:`dtype` (small ``dim`` only).

        ``dim`` products, ``chunk`` of them at a time (one batched product each).

        Raises:
            ValueError: if ``name`` is not one of ``("heff", "gn", "m")``.
        """
        product = self.matmat(name)
        eye = torch.eye(self.dim, dtype=self.dtype, device=self.features.device)
        rows = [product(eye[i : i + chunk]) for i in range(0, self.dim, chunk)]
        return torch.cat(rows).T  # column j = A e_j

    def spectrum(
        self,
        *,
        max_steps: int = 200,
        tol: float = DEFAULT_TOL,
        density_probes: int = 0,
        generator: torch.Generator | None = None,
        tau: float | None = None,
        operators: Sequence[str] = OPERATORS,
    ) -> HessianSpectrum:
        """Extremes, SLQ density and convergence of the operators, as the monitor records them.

        :func:`~solo_geometry.geometry.spectrum.effective_hessian_spectrum` at these operators'
        head, loss, features, dtype and sub-block: per operator, both extremes (None where
        they did not converge, with the Ritz bounds and residuals beside them), the number of
        products, the negative fraction and the density
        (``spectrum.operators[name].density``).

        Args:
            max_steps: step cap of each Lanczos run.
            tol: relative residual tolerance of the extremes.
            density_probes: SLQ probes per operator beyond the extremes' run.
            generator: draws the start vectors (None: seeded 0).
            tau: relative negativity floor (None: the dtype's default).
            operators: which of ``("heff", "gn", "m")``; ``heff`` is required.

        Returns:
            The :class:`~solo_geometry.geometry.spectrum.HessianSpectrum`.
        """
        return effective_hessian_spectrum(
            self.head,
            self.loss,
            self.features,
            max_steps=max_steps,
            tol=tol,
            dtype=self.dtype,
            max_samples=self.max_samples,
            generator=generator,
            tau=tau,
            density_probes=density_probes,
            operators=operators,
        )


def curvature_operators(
    head: nn.Module,
    loss: LossFn,
    Z: Tensor,
    *,
    dtype: torch.dtype = torch.float64,
    max_samples: int | None = None,
) -> CurvatureOperators:
    """H_eff, GN and M of ``loss(head(Z))`` with respect to Z (docs/design.md section 3).

    H_eff = d2L/dZ2, GN v = J^T (d2 loss/dH2) (J v) with J = dH/dZ, and M v = d/dZ <g, J(Z) v>
    with g = dloss/dH held constant, so that H_eff = GN + M.

    Args:
        head: any module (N, d) -> (N, p), applied to each view: H[v] = head(Z[v]).
        loss: loss of the head outputs, (V, N, p) -> scalar, everything else held fixed
            (detached). It receives H in ``dtype``: cast captured targets with ``t.to(H)``.
        Z: features (V, N, d); a single view is (1, N, d).
        dtype: torch.float64 or torch.float32, the dtype of every product.
        max_samples: restrict the operators to the principal sub-block of this many evenly
            spaced samples (the loss still sees the whole batch); None: the whole batch.

    Returns:
        The :class:`CurvatureOperators`, their graphs built once.

    Raises:
        ValueError: if Z is not a finite floating (V, N, d) tensor with values (NaN and the
            ``meta`` device refused), ``dtype`` is neither float64 nor float32, or
            ``max_samples`` is not positive.
        TypeError: if ``head`` is not an ``nn.Module``, or ``loss`` does not return a scalar
            tensor.
    """
    check_head(head)
    check_features(Z)
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be one of (torch.float64, torch.float32); got {dtype}")
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be a positive integer or None; got {max_samples}")
    return CurvatureOperators(head, loss, Z, dtype, max_samples)
