"""The public operators' arguments checked where they enter, before torch sees them.

:func:`~solo_geometry.linalg.operators.head_operators`, :func:`~.operators.head_jvp`, their
products and :func:`~solo_geometry.geometry.operators.curvature_operators` are called by users
with their own heads and features. A plain function where a module belongs, features on the
``meta`` device (shapes without values), NaN features or a vector of the wrong length would
otherwise end in an error deep inside autograd; here each is a ``TypeError`` or ``ValueError``
naming the argument, the value and what was expected.

The checks cost no device synchronisation per product: the vector check compares lengths
only; the finiteness of the features is checked once, when the operators are built.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["check_features", "check_head", "check_vector"]


def check_head(head: object) -> None:
    """Refuse a head that is not an ``nn.Module`` or holds parameters on the ``meta`` device.

    Raises:
        TypeError: ``head`` is not an ``nn.Module`` (a plain function, a lambda).
        ValueError: a parameter or buffer of ``head`` is on the ``meta`` device.
    """
    if not isinstance(head, nn.Module):
        raise TypeError(
            f"head must be a torch.nn.Module, got {type(head).__name__} {head!r:.60}; wrap a "
            f"function in a module (its parameters are what the operators differentiate through)"
        )
    meta = [n for n, t in [*head.named_parameters(), *head.named_buffers()] if t.is_meta]
    if meta:
        raise ValueError(
            f"head holds tensors on the meta device ({meta[:3]}): shapes without values; "
            f"expected a head with its weights loaded (e.g. head.to_empty(device=...) and a "
            f"load_state_dict)"
        )


def check_features(Z: object, name: str = "Z", ndim: int = 3, shape: str = "(V, N, d)") -> None:
    """Refuse features that are not a finite floating tensor of ``ndim`` dimensions.

    Raises:
        TypeError: ``Z`` is not a tensor.
        ValueError: ``Z`` has another number of dimensions, is not floating, is on the ``meta``
            device, or holds NaN or infinite values (the count is named).
    """
    if not isinstance(Z, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}, got {type(Z).__name__}")
    if Z.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape}; got {tuple(Z.shape)}")
    if Z.is_meta:
        raise ValueError(
            f"{name} is on the meta device (shape {tuple(Z.shape)}, no values); expected "
            f"features with values, e.g. on cpu or cuda"
        )
    if not Z.is_floating_point():
        raise ValueError(f"{name} must be a real floating tensor; got dtype {Z.dtype}")
    bad = int((~torch.isfinite(Z)).sum())
    if bad:
        raise ValueError(
            f"{name} holds {bad} non-finite value(s) (NaN or inf) of {Z.numel()}; expected "
            f"finite features (the curvature of a loss at NaN features is undefined)"
        )


def check_vector(v: object, dim: int, name: str = "v", what: str = "V * N * d") -> None:
    """Refuse a vector that is not a tensor of ``dim`` elements.

    Raises:
        TypeError: ``v`` is not a tensor.
        ValueError: ``v`` has another number of elements (its shape and ``dim`` are named).
    """
    if not isinstance(v, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {dim} elements, got {type(v).__name__}")
    if v.numel() != dim:
        raise ValueError(
            f"{name} must have {dim} elements ({what}); got shape {tuple(v.shape)} "
            f"({v.numel()} elements)"
        )
