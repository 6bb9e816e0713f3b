"""The one MLP builder's two key layouts: solo-learn's and the package's heads' ("blocks").

Checkpoints of both layouts must keep loading: a state dict saved from the modules each layout
stood for before the builder was shared (solo-learn's inline projector, built here by hand as
solo-learn builds it; the package's ``SmoothMLPHead``) loads strictly into what
``build_mlp`` builds, and the two compute the same function.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solo_geometry.models.heads import SmoothMLPHead
from solo_geometry.models.solo_mlp import block_layers, build_mlp, solo_projector


def _solo_learn_byol_projector(d: int, hidden: int, out: int) -> nn.Sequential:
    """solo/methods/byol.py's projector, written out as solo-learn writes it."""
    return nn.Sequential(
        nn.Linear(d, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out)
    )


def _same_function(a: nn.Module, b: nn.Module, d: int) -> None:
    a.eval(), b.eval()
    x = torch.randn(6, d, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)


class TestLayouts:
    def test_solo_layout_loads_solo_learns_checkpoint(self) -> None:
        torch.manual_seed(0)
        theirs = _solo_learn_byol_projector(8, 16, 4)
        ours = build_mlp([8, 16, 4], norm=True, layout="solo")
        ours.load_state_dict(theirs.state_dict(), strict=True)
        _same_function(theirs, ours, 8)
        assert list(ours.state_dict()) == list(solo_projector("byol", 8, 16, 4).state_dict())

    def test_blocks_layout_is_the_heads_layout(self) -> None:
        torch.manual_seed(0)
        head = SmoothMLPHead(8, 16, 4, depth=3, activation="relu", norm="bn")
        mlp = build_mlp([8, 16, 16, 4], norm=True, layout="blocks")
        assert list(mlp.state_dict()) == [k.removeprefix("layers.") for k in head.state_dict()]
        mlp.load_state_dict({k.removeprefix("layers."): v for k, v in head.state_dict().items()})
        _same_function(head, mlp, 8)
        assert mlp[0].bias is None and mlp[-3].bias is not None  # no bias before a norm

    def test_blocks_layout_options(self) -> None:
        mlp = build_mlp([8, 16, 4], layout="blocks", hidden_bias=False, out_norm=True)
        assert mlp[0].bias is None and isinstance(mlp[-2], nn.BatchNorm1d)
        assert not mlp[-2].affine and mlp[-3].bias is None  # the output norm replaces it
        assert len(block_layers([(8, 4, None, None)])) == 3

    def test_the_layouts_differ_in_keys(self) -> None:
        solo = build_mlp([8, 16, 4], norm=True, layout="solo")
        blocks = build_mlp([8, 16, 4], norm=True, layout="blocks")
        with pytest.raises(RuntimeError, match="Missing key|Unexpected key"):
            blocks.load_state_dict(solo.state_dict(), strict=True)

    def test_unknown_layout_names_the_choices(self) -> None:
        with pytest.raises(ValueError, match=r"'lightly'; choose from solo, blocks"):
            build_mlp([8, 4], layout="lightly")
        with pytest.raises(ValueError, match="at least one block"):
            block_layers([])
