"""Every measurement in full precision, whatever the trainer's precision (docs/design.md 3).

A measurement re-evaluates the head and the loss at the features the training step computed:

* under ``*-mixed`` precision (autocast) the features are the mixed-precision forward's, kept in
  float32 (:func:`solo_geometry.hosts.base.capture_copy`), and the head and loss run in the
  measurement's own dtype (``geometry.spectrum.dtype``) outside autocast: the record's
  ``dtype`` is that of the products, its ``features_dtype`` the one the backbone computed the
  features in, its ``precision`` the trainer's;
* under ``bf16-true`` and ``16-true`` the modules themselves hold half-precision parameters:
  :func:`full_precision` measures on float32 copies of the head and the backbone, at the same
  (exactly representable) parameter values, the features and images raised to float32.

:func:`exact_matmul` turns TF32 and reduced-precision float32 matmul off for the measurement
(they carry about 1e-3 relative error, the size of ``spectrum.tol``) and restores the user's
settings afterwards; it yields them, so the record can say what the user had.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "HALF",
    "exact_matmul",
    "float32_copy",
    "full_precision",
    "holds_dtype",
    "matmul_settings",
]

HALF = (torch.float16, torch.bfloat16)  # the dtypes a measurement never computes in


def matmul_settings() -> dict[str, Any]:
    """The float32 matmul and convolution settings in force: TF32 flags, matmul precision."""
    return {
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


@contextmanager
def exact_matmul() -> Iterator[dict[str, Any]]:
    """TF32 and reduced-precision float32 matmul off inside; the user's settings restored after.

    Yields:
        The user's settings (:func:`matmul_settings`) as they were on entry.
    """
    user = matmul_settings()
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        yield user
    finally:  # the matmul precision last: setting allow_tf32 resets it to "high" or "highest"
        torch.backends.cuda.matmul.allow_tf32 = user["cuda_matmul_allow_tf32"]
        torch.backends.cudnn.allow_tf32 = user["cudnn_allow_tf32"]
        torch.set_float32_matmul_precision(user["float32_matmul_precision"])


def holds_dtype(module: nn.Module | None, dtypes: tuple[torch.dtype, ...] = HALF) -> bool:
    """Whether ``module`` has a floating parameter or buffer of one of ``dtypes``."""
    if module is None:
        return False
    tensors = [*module.parameters(), *module.buffers()]
    return any(t.is_floating_point() and t.dtype in dtypes for t in tensors)


def float32_copy(module: nn.Module, dtypes: tuple[torch.dtype, ...] = HALF) -> nn.Module:
    """A copy of ``module`` (mode and structure kept) with its ``dtypes`` tensors in float32.

    The module itself is untouched; parameters of other dtypes are copied as they are.
    """
    twin = copy.deepcopy(module)
    return twin._apply(lambda t: t.float() if t.is_floating_point() and t.dtype in dtypes else t)


def _raised(t: Tensor | None) -> Tensor | None:
    return t.float() if t is not None and t.dtype in HALF else t


def full_precision(view: Any) -> Any:
    """The view with float32 copies of a half-precision head and backbone (``*-true``).

    The loss of the features is rebuilt on the copied head from ``loss_of_outputs`` (the
    closures cast what they hold to H's dtype); without it the spectra cannot be taken in
    float32, and that part fails saying so (the statistics and rho are kept). A view with no
    half-precision module is returned with its half-precision features and images (if any)
    raised to float32.

    Args:
        view: a :class:`~solo_geometry.runtime.view.GeometryView`.
    """
    changes: dict[str, Any] = {"features": _raised(view.features), "images": _raised(view.images)}
    if holds_dtype(view.backbone):
        changes["backbone"] = float32_copy(view.backbone)
    if holds_dtype(view.head):
        head = float32_copy(view.head)
        changes["head"] = head
        loss_of_outputs = view.loss_of_outputs

        def loss_of_features(Z: Tensor) -> Tensor:
            if loss_of_outputs is None:
                raise TypeError(
                    "a half-precision head's loss cannot be re-evaluated in float32 "
                    "without the view's loss_of_outputs; the spectra need it"
                )
            return loss_of_outputs(torch.stack([head(Z[v]) for v in range(Z.shape[0])]))

        changes["loss_of_features"] = loss_of_features
    return dataclasses.replace(view, **changes)
