"""A check both hosts' tests share: ``geometry_view`` reuses what the training step computed."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def assert_view_reuses_training_step(model: Any, batch: Any, backbones: list[nn.Module]) -> None:
    """A captured view equals a fresh one, and costs no backbone forward.

    ``model`` is in training mode; ``backbones`` are every backbone (online and momentum) a
    fresh view would run. The view is of the whole batch, as the training step's loss is.
    """
    fresh = model.geometry_view(batch)
    model.geometry_capture(True)
    with torch.no_grad():
        model.training_step(batch, 0)
    calls: list[int] = []
    hooks = [b.register_forward_hook(lambda *_: calls.append(1)) for b in backbones]
    try:
        whole = model.geometry_view(batch)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == []  # the training step's features: no second backbone forward
    torch.testing.assert_close(whole.features, fresh.features)
    torch.testing.assert_close(
        whole.loss_of_features(whole.features), fresh.loss_of_features(fresh.features)
    )
    model.geometry_capture(False)
    assert model._geometry_captured is None  # dropped when capture ends
