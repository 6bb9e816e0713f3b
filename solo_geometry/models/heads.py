"""Projection heads as declarative blocks, and the ``HEADS`` registry.

A head h: Z -> H is read as a trainable Riemannian metric on the representation Z:

* ``MetricLinearHead``: h(z) = W z, a global metric M = W^T W (implicit whitening), with the
  metric's eigenvalues as parameters in its ``spectral`` form;
* ``SmoothMLPHead``: Linear-norm-activation blocks; a smooth activation (Swish, GELU, Softplus,
  tanh, ELU) has a non-zero second derivative and so adds curvature, ReLU and identity do not.

Heads depend on torch alone and follow solo-learn's conventions (``nn.Module`` taking and
returning (N, D) tensors), so they can be offered upstream unchanged. Submodule and parameter
names are part of the checkpoint format: they never change once released.

References:
    - [0]: Chen et al., A Simple Framework for Contrastive Learning (SimCLR), 2020, 2002.05709
    - [1]: Gupta et al., Understanding and Improving the Role of Projection Head in
      Self-Supervised Learning, 2022, 2212.11491
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from solo_geometry.config import HeadConfig, PredictorConfig
from solo_geometry.config.choices import (
    ACTIVATION_LAYERS,
    BUILT_HEADS,
    NORM_LAYERS,
    PARAMETRIZATION_CHOICES,
)
from solo_geometry.models.solo_mlp import Block, LayerFactory, block_layers

__all__ = [
    "ACTIVATIONS",
    "HEADS",
    "NORMS",
    "MetricLinearHead",
    "ProjectionHead",
    "SmoothMLPHead",
    "build_configured_head",
    "build_configured_predictor",
    "build_head",
    "get_activation",
]


# Activations and norms by name, the layers config.choices names (its one list). relu and
# identity are the controls the theory needs: their second derivative is zero (almost
# everywhere), so they add no curvature to the loss landscape. "none": no norm layer.
ACTIVATIONS: dict[str, LayerFactory] = {
    name: getattr(nn, layer) for name, layer in ACTIVATION_LAYERS.items()
}
NORMS: dict[str, LayerFactory | None] = {
    name: getattr(nn, layer) if layer is not None else None for name, layer in NORM_LAYERS.items()
}


def get_activation(name: str, *, beta: float = 1.0) -> LayerFactory:
    """Return the activation class for ``name``.

    Args:
        name: one of ``ACTIVATIONS``.
        beta: sharpness of ``softplus`` (``log(1 + exp(beta x)) / beta``); ignored otherwise.

    Returns:
        A zero-argument factory of the activation module.

    Raises:
        ValueError: if ``name`` is unknown or ``beta`` is not positive.
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}")
    if name == "softplus":
        if not beta > 0:
            raise ValueError(f"softplus beta must be > 0, got {beta!r}")
        return functools.partial(nn.Softplus, beta=beta)
    return ACTIVATIONS[name]


class ProjectionHead(nn.Module):
    """A stack of Linear -> norm -> activation blocks (lightly's ``ProjectionHead`` style).

    Each block is ``(in_features, out_features, norm_layer, act_layer)``; ``None`` stands for
    ``nn.Identity``. The Linear drops its bias when a norm follows (the norm's shift replaces it).

    Args:
        blocks: the blocks, in order.
        bias: False drops every Linear's bias, norm or not.
    """

    def __init__(self, blocks: Sequence[Block], bias: bool = True) -> None:
        super().__init__()
        if not blocks:
            raise ValueError("a ProjectionHead needs at least one block, got none")
        self.layers = block_layers(blocks, bias=bias)  # the "blocks" layout of build_mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map representations (N, in) to head outputs (N, out)."""
        return self.layers(x)


class SmoothMLPHead(ProjectionHead):
    """An MLP head with a chosen (by default smooth) activation.

    Args:
        in_dim: representation dimension d.
        hidden_dim: width of the hidden layers.
        out_dim: output dimension p.
        depth: number of Linear layers; depth 1 is a linear head with bias.
        activation: one of ``ACTIVATIONS`` (swish, gelu, softplus, tanh, elu, relu, identity).
        norm: one of ``NORMS``: ``"bn"`` (BatchNorm1d, as SimCLR/BYOL projectors), ``"ln"``
            (LayerNorm) or ``"none"``.
        beta: softplus sharpness.
        bias: Linear biases where no norm follows; False drops every bias (the paper's heads,
            experiments.py ``ProjectionHead``: ``nn.Linear(..., bias=False)`` throughout).
        out_norm: also put ``norm`` after the last Linear (the paper's head with BatchNorm);
            the norm takes the place of the block's ``nn.Identity``, so keys do not move.

    Raises:
        ValueError: on an unknown activation or norm, or a non-positive size or depth.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        depth: int = 2,
        activation: str = "swish",
        norm: str = "bn",
        beta: float = 1.0,
        bias: bool = True,
        out_norm: bool = False,
    ) -> None:
        for arg, value in (("in_dim", in_dim), ("hidden_dim", hidden_dim), ("out_dim", out_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg} must be a positive int, got {value!r}")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1 (Linear layers), got {depth!r}")
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; choose from {sorted(NORMS)}")
        act = get_activation(activation, beta=beta)
        norm_layer = NORMS[norm]
        dims = [in_dim] + [hidden_dim] * (depth - 1) + [out_dim]
        blocks: list[Block] = [
            (a, b, norm_layer, act) for a, b in zip(dims[:-2], dims[1:-1], strict=True)
        ]
        blocks.append((dims[-2], dims[-1], norm_layer if out_norm else None, None))
        super().__init__(blocks, bias=bias)
        self.activation = activation


def _orthonormal(raw: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning ``raw`` (rows >= cols), unique by a positive diag(R)."""
    q, r = torch.linalg.qr(raw)
    signs = torch.sign(torch.diagonal(r))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return q * signs  # (rows, k): column j flipped where R_jj < 0


class MetricLinearHead(nn.Module):
    """A linear head h(z) = W z whose metric M = W^T W is a parameter.

    ``parametrization="factor"`` learns W (out_dim, in_dim) directly. ``"spectral"`` learns
    W = U diag(s) Q^T with k = min(in_dim, out_dim), U (out_dim, k) and Q (in_dim, k) with
    orthonormal columns (QR of free matrices) and s = softplus(s_raw) > 0, so
    M = Q diag(s^2) Q^T has s^2 as its non-zero eigenvalues and Q as their eigenvectors:

    * out_dim >= in_dim: k = in_dim, M is full rank; U embeds the in_dim directions in R^out_dim;
    * out_dim < in_dim: k = out_dim, M has rank out_dim and is exactly 0 on the
      (in_dim - out_dim)-dimensional complement of Q's columns (the head discards it).

    Args:
        in_dim: representation dimension d.
        out_dim: output dimension p.
        parametrization: ``"spectral"`` or ``"factor"``.

    Raises:
        ValueError: on an unknown parametrization or non-positive sizes.
    """

    PARAMETRIZATIONS = PARAMETRIZATION_CHOICES

    def __init__(self, in_dim: int, out_dim: int, parametrization: str = "spectral") -> None:
        super().__init__()
        if parametrization not in self.PARAMETRIZATIONS:
            raise ValueError(
                f"unknown parametrization {parametrization!r}; "
                f"choose from {sorted(self.PARAMETRIZATIONS)}"
            )
        for arg, value in (("in_dim", in_dim), ("out_dim", out_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg} must be a positive int, got {value!r}")
        self.in_dim, self.out_dim, self.parametrization = in_dim, out_dim, parametrization
        if parametrization == "factor":
            w = torch.empty(out_dim, in_dim)
            nn.init.kaiming_uniform_(w, a=5**0.5)  # nn.Linear's default
            self.weight = nn.Parameter(w)
        else:
            k = min(in_dim, out_dim)
            self.q_raw = nn.Parameter(torch.randn(in_dim, k))
            self.u_raw = nn.Parameter(torch.randn(out_dim, k))
            # softplus^-1 of 1/sqrt(in_dim): the output scale of nn.Linear's default init
            s0 = torch.full((k,), in_dim**-0.5)
            self.s_raw = nn.Parameter(s0 + torch.log(-torch.expm1(-s0)))

    def singular_values(self) -> torch.Tensor:
        """The spectral form's s (k,) = softplus(s_raw); the factor form's singular values."""
        if self.parametrization == "spectral":
            return F.softplus(self.s_raw)
        return torch.linalg.svdvals(self.weight)

    def linear_map(self) -> torch.Tensor:
        """The matrix W (out_dim, in_dim)."""
        if self.parametrization == "factor":
            return self.weight
        u, q = _orthonormal(self.u_raw), _orthonormal(self.q_raw)  # (p, k), (d, k)
        return (u * self.singular_values()) @ q.T

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Map representations (N, in_dim) to W z (N, out_dim)."""
        return z @ self.linear_map().T

    def metric(self) -> torch.Tensor:
        """The metric M = W^T W (in_dim, in_dim)."""
        w = self.linear_map()
        return w.T @ w

    def metric_spectrum(self) -> torch.Tensor:
        """Eigenvalues of M (in_dim,), ascending.

        The spectral form returns its parameters exactly: s^2 sorted, preceded by
        in_dim - k zeros when out_dim < in_dim. The factor form diagonalises M.
        """
        if self.parametrization == "factor":
            return torch.linalg.eigvalsh(self.metric())
        s2 = self.singular_values() ** 2
        zeros = s2.new_zeros(self.in_dim - s2.numel())
        return torch.cat([zeros, torch.sort(s2).values])

    @torch.no_grad()
    def scale_(self, alpha: float) -> MetricLinearHead:
        """Multiply W by ``alpha`` > 0 in place (used by ``pseudo_collapse_``)."""
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha!r}")
        if self.parametrization == "factor":
            self.weight.mul_(alpha)
        else:
            s = F.softplus(self.s_raw) * alpha
            self.s_raw.copy_(s + torch.log(-torch.expm1(-s)))  # softplus^-1
        return self

    def extra_repr(self) -> str:
        """Sizes and parametrization, for ``print(head)``."""
        return (
            f"in_dim={self.in_dim}, out_dim={self.out_dim}, parametrization={self.parametrization}"
        )


# The heads config.choices.BUILT_HEADS names, in its order.
HEADS: dict[str, type[nn.Module]] = dict(
    zip(BUILT_HEADS, (MetricLinearHead, SmoothMLPHead), strict=True)
)


def build_head(name: str, in_dim: int, out_dim: int, **options: Any) -> nn.Module:
    """Build a registered head.

    Args:
        name: one of ``HEADS``.
        in_dim: representation dimension d.
        out_dim: output dimension p.
        **options: the head's other constructor arguments (e.g. ``activation="gelu"``).

    Returns:
        The head module.

    Raises:
        ValueError: on an unknown head name or an option the head does not take.
    """
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; choose from {sorted(HEADS)}")
    cls = HEADS[name]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in {"self"}]
    accepted = [p for p in accepted if p not in {"in_dim", "out_dim"}]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for head {name!r}; choose from {accepted}")
    return cls(in_dim=in_dim, out_dim=out_dim, **options)


def build_configured_head(
    hcfg: HeadConfig, in_dim: int, out_dim: int, default_hidden: int | None = None
) -> nn.Module:
    """Build the head a ``geometry.head`` node names.

    Args:
        hcfg: the head node; ``name`` must not be ``"projector"`` (the host keeps its own).
        in_dim: backbone feature dimension d.
        out_dim: head output dimension p.
        default_hidden: hidden width when ``hcfg.hidden_dim`` is None (the recipe's
            ``proj_hidden_dim``); None falls back to ``in_dim``.

    Returns:
        The head, mapping (N, in_dim) to (N, out_dim).

    Raises:
        ValueError: for ``"projector"`` or an unknown head name.
    """
    if hcfg.name == "projector":
        raise ValueError("geometry.head.name='projector' keeps the host's own projector")
    if hcfg.name == "metric_linear":
        return build_head(hcfg.name, in_dim, out_dim, parametrization=hcfg.parametrization)
    hidden = next(h for h in (hcfg.hidden_dim, default_hidden, in_dim) if h is not None)
    return build_head(
        hcfg.name,
        in_dim,
        out_dim,
        hidden_dim=hidden,
        depth=hcfg.depth,
        activation=hcfg.activation,
        norm=hcfg.norm,
        beta=hcfg.beta,
        bias=hcfg.bias,
        out_norm=hcfg.out_norm,
    )


def build_configured_predictor(
    pcfg: PredictorConfig, hcfg: HeadConfig, dim: int, default_hidden: int | None = None
) -> nn.Module:
    """Build the predictor a ``geometry.predictor`` node names, following the head's options.

    Every predictor option left null takes the ``geometry.head`` node's value, so
    ``geometry.head.activation=gelu geometry.predictor.name=smooth_mlp`` gives projector and
    predictor the same activation, norm, bias and output norm (the paper's SimSiam).

    ``geometry.predictor.name=identity`` gives ``nn.Identity``: no predictor, the ablation with
    which Chen and He (2021, 2011.10566, Table 1) show SimSiam collapse without one.

    Args:
        pcfg: the predictor node; ``name`` must not be ``"predictor"`` (the host keeps its own).
        hcfg: the head node whose options fill the predictor's nulls.
        dim: the predictor's input and output dimension (``proj_output_dim``).
        default_hidden: hidden width when ``pcfg.hidden_dim`` is None (the recipe's
            ``pred_hidden_dim``); None falls back to ``dim``.

    Returns:
        The predictor, mapping (N, dim) to (N, dim).

    Raises:
        ValueError: for ``"predictor"``.
    """
    if pcfg.name == "predictor":
        raise ValueError("geometry.predictor.name='predictor' keeps the host's own predictor")
    if pcfg.name == "identity":
        return nn.Identity()
    hidden = next(h for h in (pcfg.hidden_dim, default_hidden, dim) if h is not None)
    return build_head(
        pcfg.name,
        dim,
        dim,
        hidden_dim=hidden,
        depth=pcfg.depth,
        activation=hcfg.activation if pcfg.activation is None else pcfg.activation,
        norm=hcfg.norm if pcfg.norm is None else pcfg.norm,
        beta=hcfg.beta if pcfg.beta is None else pcfg.beta,
        bias=hcfg.bias if pcfg.bias is None else pcfg.bias,
        out_norm=hcfg.out_norm if pcfg.out_norm is None else pcfg.out_norm,
    )
