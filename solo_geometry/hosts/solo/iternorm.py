"""A twice-differentiable twin of solo-learn's ``IterNorm``, for the Hessian products.

solo-learn's ``IterNorm`` (``solo.utils.whitening``, VIbCReg's projector) whitens through
``iterative_normalization_py``, a custom autograd Function whose hand-written backward transposes
its saved tensors in place: one gradient works, but a Hessian-vector product (a gradient of the
gradient, many times over) raises "modified by an inplace operation", so every record of a
VIbCReg run was skipped. :func:`differentiable_head` gives the measurement the head with every
``IterNorm`` replaced by :class:`IterNormTwin`: the same forward (the same Newton iterations for
Sigma^(-1/2)) in plain tensor operations on the same parameters and buffers, which autograd
differentiates to any order. The twin never writes the running buffers, and the module the
training step uses is not touched. ``tests/hosts/test_solo_iternorm.py`` checks its outputs and
gradients against solo-learn's, and its Hessian products against finite differences of
solo-learn's hand-written gradient.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["IterNormTwin", "differentiable_head"]


class IterNormTwin(nn.Module):
    """solo-learn's ``IterNorm`` forward in plain operations, sharing the original's tensors.

    Args:
        original: a ``solo.utils.whitening.IterNorm``.
    """

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.original = original

    def forward(self, X: Tensor) -> Tensor:
        """Whiten X (N, C, ...) in groups of ``num_channels``, as ``IterNorm.forward`` does."""
        o: Any = self.original  # solo.utils.whitening.IterNorm
        g = X.size(1) // o.num_channels
        x = X.transpose(0, 1).contiguous().view(g, o.num_channels, -1)  # (groups, d, N * ...)
        d, m = x.shape[1:]
        if o.training:
            xc = x - x.mean(-1, keepdim=True)
            eye = torch.eye(d, dtype=X.dtype, device=X.device).expand(g, d, d)
            sigma = torch.baddbmm(eye, xc, xc.transpose(1, 2), beta=o.eps, alpha=1.0 / m)
            r_tr = (sigma * eye).sum((1, 2), keepdim=True).reciprocal()  # 1 / trace, (g, 1, 1)
            sigma_n = sigma * r_tr
            p = eye
            for _ in range(o.T):  # Newton: P <- 1.5 P - 0.5 P^3 Sigma_N
                p = torch.baddbmm(p, torch.linalg.matrix_power(p, 3), sigma_n, beta=1.5, alpha=-0.5)
            wm = p * r_tr.sqrt()
        else:
            xc = x - o.running_mean.to(X.dtype)
            wm = o.running_wm.to(X.dtype)
        xn = wm.matmul(xc)  # (groups, d, N * ...)
        out = xn.view(X.size(1), X.size(0), *X.size()[2:]).transpose(0, 1).contiguous()
        return out * o.weight + o.bias if o.affine else out


def differentiable_head(head: nn.Module) -> nn.Module:
    """``head`` with every ``IterNorm`` replaced by its :class:`IterNormTwin` (else ``head``).

    Containers on the path to an ``IterNorm`` are shallow copies (their other children, the
    parameters and the buffers are the original objects); ``head`` itself is not modified.
    """
    from solo.utils.whitening import IterNorm  # solo-learn: imported where it is needed

    def twin(module: nn.Module) -> nn.Module:
        if isinstance(module, IterNorm):
            return IterNormTwin(module)
        children = {name: twin(child) for name, child in module.named_children()}
        if all(children[name] is child for name, child in module.named_children()):
            return module
        new = copy.copy(module)
        new._modules = dict(children)  # the copy's own dict: the original keeps its children
        return new

    return twin(head)
