"""The package's one MLP builder, ``build_mlp``, in either key layout, and solo-learn's MLPs.

Two state-dict layouts exist in checkpoints and both are built here (``layout``):

* ``"solo"``: solo-learn's inline projectors (and BYOL's and SimSiam's predictors), Linear,
  BatchNorm1d and ReLU numbered as ``nn.Sequential`` numbers them (``0.weight``,
  ``1.running_mean``, ``3.weight``); the lightly host, the checkpoint loaders and the MLP probe
  rebuild them so solo-learn's checkpoints load strictly;
* ``"blocks"``: this package's heads (:class:`~solo_geometry.models.heads.ProjectionHead`,
  lightly's ``ProjectionHead`` style), three slots per Linear, Linear, norm or Identity,
  activation or Identity (``0.weight``, ``1.weight``, ``3.weight``), from :func:`block_layers`.

Depends on torch alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from torch import nn

__all__ = [
    "MLP_LAYOUTS",
    "SOLO_PREDICTORS",
    "SOLO_PROJECTORS",
    "Block",
    "block_layers",
    "build_mlp",
    "solo_predictor",
    "solo_projector",
]

LayerFactory = Callable[..., nn.Module]
# (in_features, out_features, norm_layer, act_layer); None stands for nn.Identity.
Block = tuple[int, int, LayerFactory | None, LayerFactory | None]
# The state-dict key layouts build_mlp writes (the module docstring says which is whose).
MLP_LAYOUTS = ("solo", "blocks")

# solo-learn's inline projectors of Linear-BN-ReLU shape (mocov3 and vibcreg add other layers):
# (hidden Linear layers, BatchNorm after each hidden Linear).
SOLO_PROJECTORS: dict[str, tuple[int, bool]] = {
    "simclr": (1, False),
    "supcon": (1, False),
    "byol": (1, True),
    "vicreg": (2, True),
    "barlow_twins": (2, True),
    "simsiam": (2, True),
}
# SimSiam's projector also drops the hidden Linears' biases and ends in BatchNorm1d(affine=False)
# (solo/methods/simsiam.py), its last Linear's bias frozen: build_mlp's keyword options.
_SOLO_PROJECTOR_OPTIONS: dict[str, dict[str, bool]] = {
    "simsiam": {"hidden_bias": False, "out_norm": True},
}
# solo-learn's predictors: Linear(p, hidden) - BN - ReLU - Linear(hidden, p); SimSiam's first
# Linear has no bias (as lightly's SimSiamPredictionHead). Keyword options of build_mlp.
SOLO_PREDICTORS: dict[str, dict[str, bool]] = {
    "byol": {"norm": True},
    "simsiam": {"norm": True, "hidden_bias": False},
}


def block_layers(blocks: Sequence[Block], *, bias: bool = True) -> nn.Sequential:
    """The ``"blocks"`` layout: Linear, norm (or Identity), activation (or Identity) per block.

    Args:
        blocks: the blocks, in order; at least one.
        bias: False drops every Linear's bias; otherwise a Linear has one unless a norm follows
            (the norm's shift replaces it).

    Raises:
        ValueError: with no blocks.
    """
    if not blocks:
        raise ValueError("an MLP needs at least one block, got none")
    layers: list[nn.Module] = []
    for in_f, out_f, norm_layer, act_layer in blocks:
        layers.append(nn.Linear(in_f, out_f, bias=bias and norm_layer is None))
        layers.append(norm_layer(out_f) if norm_layer is not None else nn.Identity())
        layers.append(act_layer() if act_layer is not None else nn.Identity())
    return nn.Sequential(*layers)


def build_mlp(
    dims: Sequence[int],
    *,
    norm: bool = False,
    act_layer: LayerFactory = nn.ReLU,
    hidden_bias: bool = True,
    out_norm: bool = False,
    layout: str = "solo",
) -> nn.Sequential:
    """Linear layers joined by ``[BatchNorm1d,] act``, in either key layout.

    The one MLP builder of the package: solo-learn-shaped projectors and predictors (lightly
    host, checkpoint loader), the MLP probe and (``layout="blocks"``) the package's heads.

    Args:
        dims: layer widths, input first, e.g. ``[d, hidden, out]``; at least two.
        norm: BatchNorm1d after every hidden Linear.
        act_layer: activation after every hidden Linear (and its norm).
        hidden_bias: biases of the hidden Linears (SimSiam's are dropped).
        out_norm: end in ``BatchNorm1d(dims[-1], affine=False)`` (SimSiam's projector).
        layout: one of :data:`MLP_LAYOUTS`. ``"solo"`` keeps every Linear's bias unless
            ``hidden_bias`` drops a hidden one; ``"blocks"`` follows :func:`block_layers`
            (no bias before a norm), the output norm in the last block's norm slot.

    Returns:
        ``nn.Sequential`` mapping (N, dims[0]) to (N, dims[-1]).

    Raises:
        ValueError: with fewer than two widths, a width below 1, or an unknown layout.
    """
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(f"dims must hold at least two positive widths, got {list(dims)}")
    if layout not in MLP_LAYOUTS:
        raise ValueError(f"unknown MLP layout {layout!r}; choose from {', '.join(MLP_LAYOUTS)}")
    if layout == "blocks":
        return _blocks_mlp(dims, norm, act_layer, hidden_bias, out_norm)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        hidden = i < len(dims) - 2
        layers.append(nn.Linear(a, b, bias=hidden_bias or not hidden))
        if hidden:
            layers += [nn.BatchNorm1d(b), act_layer()] if norm else [act_layer()]
    if out_norm:
        layers.append(nn.BatchNorm1d(dims[-1], affine=False))
    return nn.Sequential(*layers)


def _blocks_mlp(
    dims: Sequence[int], norm: bool, act_layer: LayerFactory, hidden_bias: bool, out_norm: bool
) -> nn.Sequential:
    hidden: list[Block] = [
        (a, b, nn.BatchNorm1d if norm else None, act_layer)
        for a, b in zip(dims[:-2], dims[1:-1], strict=True)
    ]
    last_norm = functools.partial(nn.BatchNorm1d, affine=False) if out_norm else None
    mlp = block_layers([*hidden, (dims[-2], dims[-1], last_norm, None)])
    if not hidden_bias:
        for layer in list(mlp)[:-3:3]:
            layer.bias = None  # type: ignore[assignment]  # hidden Linears only ("solo" layout)
    return mlp


def solo_projector(method: str, in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """The projector solo-learn's ``method`` builds inline (same structure and keys).

    Args:
        method: one of ``SOLO_PROJECTORS``.
        in_dim: backbone feature dimension d.
        hidden_dim: ``proj_hidden_dim``.
        out_dim: ``proj_output_dim``.

    Returns:
        The projector, (N, d) -> (N, out_dim).

    Raises:
        ValueError: for a method whose projector is not of this shape.
    """
    if method not in SOLO_PROJECTORS:
        raise ValueError(
            f"no solo-learn projector layout for method {method!r}; "
            f"choose from {sorted(SOLO_PROJECTORS)}"
        )
    n_hidden, norm = SOLO_PROJECTORS[method]
    options = _SOLO_PROJECTOR_OPTIONS.get(method, {})
    mlp = build_mlp(
        [in_dim] + [hidden_dim] * n_hidden + [out_dim],
        norm=norm,
        hidden_bias=options.get("hidden_bias", True),
        out_norm=options.get("out_norm", False),
    )
    if options.get("out_norm"):
        last = mlp[-2]
        assert isinstance(last, nn.Linear)  # the Linear before the output norm
        last.bias.requires_grad = False  # solo-learn's: "not use bias as it is followed by BN"
    return mlp


def solo_predictor(method: str, dim: int, hidden_dim: int) -> nn.Sequential:
    """The predictor solo-learn's ``method`` builds inline (same structure and keys).

    Args:
        method: one of ``SOLO_PREDICTORS`` (byol, simsiam).
        dim: ``proj_output_dim`` (the predictor maps it to itself).
        hidden_dim: ``pred_hidden_dim``.

    Returns:
        The predictor, (N, dim) -> (N, dim).

    Raises:
        ValueError: for a method without a predictor of this shape.
    """
    if method not in SOLO_PREDICTORS:
        raise ValueError(
            f"no solo-learn predictor layout for method {method!r}; "
            f"choose from {sorted(SOLO_PREDICTORS)}"
        )
    options = SOLO_PREDICTORS[method]
    return build_mlp(
        [dim, hidden_dim, dim],
        norm=options.get("norm", False),
        hidden_bias=options.get("hidden_bias", True),
    )
