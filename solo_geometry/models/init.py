"""In-place initialisers: pseudo-collapse, and the statistic that records its effect.

Pseudo-collapse starts training next to the collapsed point, where the theory predicts that a
smooth head makes collapse a strict saddle (negative curvature of the loss w.r.t. the
representation) while ReLU and linear heads cannot.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["pseudo_collapse_", "pseudo_collapse_backbone_"]

_SCALED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)


def _check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"alpha must be a number > 0, got {alpha!r}")


@torch.no_grad()
def pseudo_collapse_(module: nn.Module, alpha: float = 0.1) -> nn.Module:
    """Multiply every Linear weight in ``module`` by ``alpha``, in place.

    Modules that carry their linear map otherwise (``MetricLinearHead``) are scaled through
    their ``scale_(alpha)`` method. Biases and norm layers are left as they are.

    Args:
        module: the head (or any module).
        alpha: the factor, > 0 (0.1 in the paper's experiments).

    Returns:
        ``module`` itself.

    Raises:
        ValueError: if ``alpha`` is not a positive number.
        TypeError: if ``module`` is not an ``nn.Module``.
    """
    _check_alpha(alpha)
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            sub.weight.mul_(alpha)
        elif callable(scale := getattr(sub, "scale_", None)):
            scale(alpha)
    return module


@torch.no_grad()
def pseudo_collapse_backbone_(backbone: nn.Module, alpha: float = 0.1) -> nn.Module:
    """Scale the backbone's last weighted layer (weight and bias) by ``alpha``, in place.

    The last layer is the last module, in registration order, that is a Linear, convolution or
    norm layer. For torchvision ResNets this is the last block's final BatchNorm, which scales
    that block's residual branch (scaling its convolution would be undone by the norm).

    Args:
        backbone: the backbone.
        alpha: the factor, > 0.

    Returns:
        ``backbone`` itself.

    Raises:
        ValueError: if ``alpha`` is not positive or the backbone has no such layer.
    """
    _check_alpha(alpha)
    last = [m for m in backbone.modules() if isinstance(m, _SCALED)]
    if not last:
        raise ValueError(
            f"backbone {type(backbone).__name__} has no layer of types "
            f"{[t.__name__ for t in _SCALED]} to scale"
        )
    layer = last[-1]
    for name in ("weight", "bias"):
        param = getattr(layer, name, None)
        if isinstance(param, torch.Tensor):
            param.mul_(alpha)
    return backbone
