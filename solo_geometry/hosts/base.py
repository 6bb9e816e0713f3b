"""What every host shares: feature capture, the state guard and the assembly of the view.

A host's LightningModule mixes in :class:`GeometryHost` and supplies only what is its own:

* ``geometry_crops(batch)``: the batch's image crops, large crops first;
* ``geometry_forward(crops)``: fresh backbone features of each crop (used when nothing was
  captured from the training step);
* ``geometry_context(batch, crops)``: the quantities the method's loss holds fixed at their
  training-step value (momentum targets, indexes, ...), tensors in plain containers;
* ``geometry_global_loss(contexts)``: the method's loss as a function of the head outputs H
  (V, R * N, p) of the global batch of R ranks (R = 1 outside DDP), from each rank's context;
* ``geometry_normalisation()``: the recipe's input normalisation (tangents in pixel space).

The base owns the rest: capture of the training step's own features (``geometry_capture``,
:meth:`GeometryHost.keep`), the state guard around any fresh forward
(:func:`solo_geometry.state.preserved_state`), and the :class:`GeometryView` of the whole batch.
The view never cuts the batch: the loss is the training step's loss (same features, BatchNorm
statistics, negatives); restricting the operators to a sub-block is the measurement's business.
The module must call its backbone ``backbone`` and its head ``projector``, as solo-learn does,
or say which module is its head in ``geometry_head()``. Under DDP the view is assembled from
every rank's :class:`~solo_geometry.runtime.distributed.ViewParts`
(:mod:`solo_geometry.runtime.distributed`); a single process takes the same path with one part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from solo_geometry.inputs.datasets import MeanStd
from solo_geometry.runtime.chunks import global_head, sync_batch_norm
from solo_geometry.runtime.distributed import ViewParts
from solo_geometry.runtime.view import GeometryView
from solo_geometry.state import preserved_state

__all__ = ["GeometryHost", "assemble_view", "capture_copy"]

LossOfOutputs = Callable[[Tensor], Tensor]


def capture_copy(t: Tensor) -> Tensor:
    """A tensor as a module captures it under ``geometry_capture``.

    Detached; half precision under autocast (``*-mixed``) is raised to float32, as a fresh
    forward outside autocast would give it. Outside autocast (``bf16-true``, ``16-true``: the
    module itself is half precision) it stays as it is, so the fixed quantities computed from
    it (momentum targets) are the training step's; the measurement raises it
    (:func:`~solo_geometry.runtime.precision.full_precision`).
    """
    t = t.detach()
    half = t.dtype in (torch.float16, torch.bfloat16)
    return t.float() if half and torch.is_autocast_enabled(t.device.type) else t


def assemble_view(
    features: Tensor,
    head: torch.nn.Module,
    loss_of_outputs: LossOfOutputs,
    backbone: torch.nn.Module | None = None,
    images: Tensor | None = None,
    normalisation: MeanStd | None = None,
    features_dtype: str | None = None,
) -> GeometryView:
    """The view of one batch, the loss of Z built as the loss of H[v] = head(Z[v]).

    Args:
        features: backbone features Z (V, N, d), detached.
        head: the projection head.
        loss_of_outputs: H (V, N, p) -> scalar, everything but H held fixed.
        backbone: the backbone, for augmentation tangents.
        images: the first crop's images (N, C, H, W).
        normalisation: the ``(mean, std)`` the images were normalised with.
        features_dtype: the dtype the backbone computed the features in (None: theirs).

    Returns:
        The :class:`GeometryView`.
    """

    def loss_of_features(Z: Tensor) -> Tensor:
        return loss_of_outputs(torch.stack([head(Z[v]) for v in range(Z.shape[0])]))  # (V, N, p)

    return GeometryView(
        features=features.detach(),
        head=head,
        loss_of_features=loss_of_features,
        backbone=backbone,
        images=images,
        loss_of_outputs=loss_of_outputs,
        normalisation=normalisation,
        features_dtype=features_dtype,
    )


class GeometryHost:
    """Mixin of a host's LightningModule: capture, state guard and view (module docstring)."""

    # What the training step captured while capture is on: key -> tensors in call order.
    _geometry_captured: dict[str, list[Tensor]] | None = None
    # The dtype each key's tensors had before :func:`capture_copy` (autocast's), and the
    # features' of the last view's parts (``Settings.features_dtype``).
    _geometry_dtypes: dict[str, str] | None = None
    _geometry_features_dtype: str | None = None

    def geometry_capture(self, enabled: bool) -> None:
        """Capture (or stop capturing and drop) what the training step computes."""
        self._geometry_captured = {} if enabled else None
        self._geometry_dtypes = {}

    def capture(self, key: str, tensor: Tensor) -> None:
        """Capture ``tensor`` (detached) under ``key`` if capture is on and the module trains."""
        if self._geometry_captured is not None and getattr(self, "training", False):
            self._geometry_captured.setdefault(key, []).append(capture_copy(tensor))
            dtype = str(tensor.dtype).removeprefix("torch.")
            self._geometry_dtypes = {**(self._geometry_dtypes or {}), key: dtype}

    def captured(self, key: str, count: int) -> list[Tensor] | None:
        """The tensors captured under ``key`` if exactly ``count`` were, else None."""
        tensors = (self._geometry_captured or {}).get(key, [])
        return list(tensors) if len(tensors) == count else None

    def geometry_crops(self, batch: Any) -> list[Tensor]:
        """The batch's image crops (each (N, C, H, W)), large crops first."""
        raise NotImplementedError

    def geometry_forward(self, crops: list[Tensor]) -> list[Tensor]:
        """Fresh backbone features (N, d) of each crop, as the training step computes them."""
        raise NotImplementedError

    def geometry_context(self, batch: Any, crops: list[Tensor]) -> Any:
        """What the method's loss holds fixed for this rank's batch (tensors, lists, dicts)."""
        raise NotImplementedError

    def geometry_global_loss(self, contexts: list[Any]) -> LossOfOutputs:
        """The loss of the head outputs H (V, R * N, p) of the global batch of R ranks.

        Args:
            contexts: each rank's :meth:`geometry_context`, in rank order (one outside DDP).
        """
        raise NotImplementedError

    def geometry_head(self) -> torch.nn.Module:
        """The measured head (its outputs are H): the module's ``projector``."""
        module: Any = self
        return module.projector

    def geometry_measured_head(self) -> torch.nn.Module:
        """The head the Hessian products run through: ``geometry_head()`` by default.

        A host may give a twice-differentiable twin of it (same tensors, same outputs).
        """
        return self.geometry_head()

    def geometry_normalisation(self) -> MeanStd | None:
        """The recipe's input ``(mean, std)`` (pixel-space tangents); None: images are pixels."""
        return None

    def geometry_parts(self, batch: Any) -> ViewParts:
        """This rank's features, loss context and images of a training batch.

        Features are the training step's own when capture was on during it; otherwise they
        are computed here in the module's current mode, without gradients, with every buffer
        (BatchNorm running statistics), mode and RNG state restored afterwards.
        """
        module: Any = self
        crops = self.geometry_crops(batch)
        with torch.no_grad(), preserved_state(module):
            feats = self.captured("feats", len(crops))
            own = None if feats is None else (self._geometry_dtypes or {}).get("feats")
            if feats is None:
                feats = self.geometry_forward(crops)
            self._geometry_features_dtype = own or str(feats[0].dtype).removeprefix("torch.")
            context = self.geometry_context(batch, crops)
        Z = torch.stack([f.detach() for f in feats])  # (views, batch, d)
        return ViewParts(Z, context, crops[0])

    def geometry_global_view(self, parts: list[ViewParts]) -> GeometryView:
        """The view of the global batch from every rank's parts, in rank order.

        Z (V, R * N, d) is the ranks' features concatenated within each view; the head acts
        per rank chunk when it has BatchNorm (as each rank's did), on the whole global batch
        under sync BatchNorm (:func:`~solo_geometry.runtime.chunks.sync_batch_norm`); the
        images are rank zero's.
        """
        module: Any = self
        sizes = [tuple(p.features.shape) for p in parts]
        if len(set(sizes)) > 1:
            raise ValueError(f"the ranks' features differ in shape: {sizes}")
        Z = torch.cat([p.features for p in parts], dim=1)  # (views, ranks * batch, d)
        synced = sync_batch_norm(module)
        head = global_head(self.geometry_measured_head(), len(parts), Z.shape[1], synced)
        loss_of_outputs = self.geometry_global_loss([p.context for p in parts])
        return assemble_view(
            Z,
            head,
            loss_of_outputs,
            module.backbone,
            parts[0].images,
            self.geometry_normalisation(),
            self._geometry_features_dtype,
        )

    def geometry_view(self, batch: Any) -> GeometryView:
        """The monitor's view of a whole training batch (``GeometryAware``), one process."""
        return self.geometry_global_view([self.geometry_parts(batch)])
