"""The contract a module offers the monitor: a :class:`GeometryView` of a training batch.

A LightningModule the monitor measures is :class:`GeometryAware`; the probes and the update
sizes find its backbone and head through :func:`backbone_and_head`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

from solo_geometry.geometry.augment import MeanStd

__all__ = ["GeometryAware", "GeometryView", "backbone_and_head"]


@dataclass(frozen=True)
class GeometryView:
    """What the monitor needs from a module for one batch.

    Attributes:
        features: backbone features Z (V, N, d) of the whole batch, detached.
        head: the projection head h, applied per view: H[v] = h(Z[v]).
        loss_of_features: Z (V, N, d) -> scalar loss, everything but Z held fixed and detached;
            the training step's loss on this batch.
        backbone: the backbone f, for augmentation tangents (optional).
        images: one view's images (N, C, H, W) matching ``features[0]`` (optional).
        loss_of_outputs: H (V, N, p) -> scalar, the same loss as a function of the head's
            outputs, needed to split H_eff into GN + M (optional: without it only the H_eff
            spectrum is recorded). It may receive H in float64: cast captured tensors with
            ``t.to(H)``.
        normalisation: the recipe's ``(mean, std)`` with which ``images`` were normalised, so
            augmentation tangents act in pixel space; None: the images are pixels.
        features_dtype: the dtype the backbone computed the features in (``bfloat16`` under
            ``bf16-mixed``, before they were kept in float32); None: ``features``' own.
    """

    features: Tensor
    head: nn.Module
    loss_of_features: Callable[[Tensor], Tensor]
    backbone: nn.Module | None = None
    images: Tensor | None = None
    loss_of_outputs: Callable[[Tensor], Tensor] | None = None
    normalisation: MeanStd | None = None
    features_dtype: str | None = None


@runtime_checkable
class GeometryAware(Protocol):
    """A LightningModule the monitor can measure.

    Optionally it also implements ``geometry_capture(enabled: bool) -> None``: while enabled, its
    training step keeps (detached) the features it computes, and ``geometry_view`` uses them
    instead of running the backbone again. Disabling drops what was kept.
    """

    def geometry_view(self, batch: Any) -> GeometryView:
        """Return the :class:`GeometryView` of ``batch`` (a training batch)."""
        ...


def backbone_and_head(module: Any, user: str) -> tuple[nn.Module, nn.Module]:
    """The module's ``backbone`` and the head its host names in ``geometry_head()``.

    The head is never looked up by an attribute name: DINO's is ``head`` (projector and
    prototypes), a user's module may call it anything.

    Args:
        module: the LightningModule being trained.
        user: what needs them, for the error (e.g. ``"probes"``).

    Raises:
        ValueError: naming what is missing or not an ``nn.Module``.
    """
    name = type(module).__name__
    get_head = getattr(module, "geometry_head", None)
    if not callable(get_head):
        raise ValueError(
            f"{name}: {user} need the module's head from geometry_head(); the module has no "
            "geometry_head() method (mix in solo_geometry.hosts.base.GeometryHost or define it)"
        )
    try:
        head = get_head()
    except AttributeError as err:  # the host's default head, ``projector``, is missing
        head = err
    backbone = getattr(module, "backbone", None)
    bad = [f"backbone: {type(backbone).__name__}"] if not isinstance(backbone, nn.Module) else []
    if not isinstance(head, nn.Module):
        got = head if isinstance(head, AttributeError) else type(head).__name__
        bad.append(f"geometry_head(): {got}")
    if bad:
        raise ValueError(f"{name}: {user} need nn.Module backbone and head; {'; '.join(bad)}")
    assert isinstance(backbone, nn.Module) and isinstance(head, nn.Module)
    return backbone, head
