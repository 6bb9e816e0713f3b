"""The invariance recipe: the paper's augmentations, read by the lightly host."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from torch import nn
from torchvision import transforms as T

from solo_geometry.config import geometry_config
from solo_geometry.hosts.lightly.data import ROTATION_DEGREES, build_pipeline
from solo_geometry.hosts.lightly.nodes import AugmentationNode, AugmentationProbs
from solo_geometry.hosts.lightly.recipe import parse_recipe
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD
from solo_geometry.models.heads import build_configured_head
from solo_geometry.recipe import load_recipe
from solo_geometry.reproduce.collapse.protocol import paper_head
from solo_geometry.reproduce.invariance.experiment import RECIPE, geometry_on


def _steps(pipeline: T.Compose) -> list[object]:
    out = []
    for step in pipeline.transforms:
        out += list(step.transforms) if isinstance(step, T.RandomApply) else [step]
    return out


class TestInvarianceRecipe:
    def test_the_papers_augmentations(self) -> None:
        recipe = parse_recipe(load_recipe(RECIPE, ["data.train_path=/tmp/x"]))
        (aug,) = recipe.augmentations
        assert aug.num_crops == 2 and aug.rrc and aug.scale == (0.08, 1.0)
        assert aug.jitter == (0.4, 0.4, 0.4, 0.1)
        assert (aug.probs.color_jitter, aug.probs.rotation, aug.probs.horizontal_flip) == (
            0.8,
            1.0,
            0.5,
        )
        assert recipe.method_kwargs.temperature == 0.1  # type: ignore[attr-defined]
        assert recipe.optimizer.name == "adamw" and recipe.optimizer.weight_decay == 0.0
        assert recipe.optimizer.lr == pytest.approx(1e-3)  # after solo-learn's batch / 256
        rotations = [
            s for s in _steps(build_pipeline("custom", aug)) if isinstance(s, T.RandomRotation)
        ]
        assert len(rotations) == 1 and list(rotations[0].degrees) == [-45.0, 45.0]
        assert ROTATION_DEGREES == 45.0

    @pytest.mark.parametrize("prob", [0.0, 1.0])
    def test_rotation_turns_the_image(self, prob: float) -> None:
        """A white image keeps its corners white without rotation; rotated, they are zero-filled."""
        aug = AugmentationNode(crop_size=32, num_crops=2, probs=AugmentationProbs(rotation=prob))
        pipeline = build_pipeline("custom", aug)
        white = Image.new("RGB", (32, 32), (255, 255, 255))
        black = (0.0 - IMAGENET_MEAN_STD[0][0]) / IMAGENET_MEAN_STD[1][0]
        torch.manual_seed(0)
        corners = [float(pipeline(white)[0, 0, 0]) for _ in range(20)]
        filled = sum(abs(c - black) < 1e-5 for c in corners)
        assert filled == (0 if prob == 0 else pytest.approx(20, abs=2))


def _paper_head(in_dim: int, hidden: int, out: int, depth: int, act: type[nn.Module]) -> nn.Module:
    """head_depth_ablations.py's FlexibleProjectionHead(use_bn=True), transcribed (depth 2 with
    ReLU is experiments.py's ProjectionHead(activation='relu', use_bn=True))."""
    if depth == 1:
        return nn.Sequential(nn.Linear(in_dim, out, bias=False), nn.BatchNorm1d(out))
    layers: list[nn.Module] = [nn.Linear(in_dim, hidden, bias=False), nn.BatchNorm1d(hidden), act()]
    for _ in range(depth - 2):
        layers += [nn.Linear(hidden, hidden, bias=False), nn.BatchNorm1d(hidden), act()]
    return nn.Sequential(*layers, nn.Linear(hidden, out, bias=False), nn.BatchNorm1d(out))


class TestPaperHeads:
    """The invariance runs' heads are the paper's: same layers, same function."""

    @pytest.mark.parametrize(
        ("activation", "depth", "act"),
        [("relu", 2, nn.ReLU), ("swish", 1, nn.SiLU), ("swish", 2, nn.SiLU), ("swish", 3, nn.SiLU)],
    )
    def test_same_layers_and_outputs(self, activation: str, depth: int, act: type) -> None:
        dotlist = [o.lstrip("+") for o in geometry_on(paper_head(activation, depth), every=1)]
        gcfg = geometry_config(OmegaConf.from_dotlist(dotlist))
        assert gcfg is not None
        torch.manual_seed(0)
        ours = build_configured_head(gcfg.head, 12, 6, default_hidden=10)
        paper = _paper_head(12, 10, 6, depth, act)
        layers = [m for m in ours.modules() if not isinstance(m, nn.Sequential | nn.Identity)][1:]
        assert [type(m) for m in layers] == [type(m) for m in paper]
        for mine, theirs in zip(layers, paper, strict=True):
            if isinstance(mine, nn.Linear):
                assert mine.bias is None and mine.weight.shape == theirs.weight.shape
        state = ours.state_dict().values()  # the same tensors in the same order, other names
        paper.load_state_dict(dict(zip(paper.state_dict(), state, strict=True)))
        x = torch.randn(16, 12)
        for train in (True, False):
            ours.train(train), paper.train(train)
            torch.testing.assert_close(ours(x), paper(x))
