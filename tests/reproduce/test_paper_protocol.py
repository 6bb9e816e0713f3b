"""The paper's protocol as package options: stem, loss, input without normalisation, probes.

References are the authors' code transcribed (experiments.py: ``ResNetBackbone``, the SimCLR
loss lines of ``run_guillotine_experiment``, ``RotationDataset``) or closed forms in float64.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch import Tensor, nn

from solo_geometry.analysis.paper_probes import (
    PaperProbeSettings,
    paper_rotation_probes,
    paper_rotations,
)
from solo_geometry.hosts.lightly.data import build_pipeline
from solo_geometry.hosts.lightly.losses import CrossViewCrossEntropy, Objective
from solo_geometry.hosts.lightly.nodes import SimCLRKwargs
from solo_geometry.hosts.lightly.recipe import parse_recipe
from solo_geometry.models.backbones import build_backbone, resolve_stem
from solo_geometry.models.checkpoint import build_from_config
from solo_geometry.recipe import load_recipe
from solo_geometry.reproduce.data import subset_folders
from solo_geometry.reproduce.invariance import RECIPE


def authors_backbone() -> nn.Module:
    """experiments.py's ResNetBackbone, transcribed."""
    resnet = torchvision.models.resnet18(weights=None)
    resnet.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    resnet.maxpool = nn.Identity()
    resnet.fc = nn.Identity()
    return resnet


def authors_loss(h1: Tensor, h2: Tensor) -> Tensor:
    """experiments.py's SimCLR loss lines, transcribed."""
    z1, z2 = F.normalize(h1, dim=1), F.normalize(h2, dim=1)
    logits = torch.mm(z1, z2.t()) / 0.1
    return F.cross_entropy(logits, torch.arange(h1.size(0)))


class TestStem:
    def test_the_papers_stem_is_their_backbone(self) -> None:
        ours, d = build_backbone("resnet18", stem="cifar_paper")
        theirs = authors_backbone()
        theirs.load_state_dict(ours.state_dict())
        x = torch.rand(4, 3, 32, 32)
        ours.eval(), theirs.eval()
        assert d == 512
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)

    def test_small_inputs_keep_a_4x4_last_map(self) -> None:
        sizes = {}
        for stem in ("imagenet", "cifar", "cifar_paper"):
            net, _ = build_backbone("resnet18", stem=stem)
            net.eval()
            seen: list[tuple[int, ...]] = []
            net.layer4.register_forward_hook(lambda m, i, o, seen=seen: seen.append(o.shape))
            net(torch.rand(1, 3, 32, 32))
            sizes[stem] = tuple(seen[0][-2:])
        assert sizes == {"imagenet": (1, 1), "cifar": (5, 5), "cifar_paper": (4, 4)}

    def test_auto_is_solo_learns_rule(self) -> None:
        assert resolve_stem("auto", "cifar10") == "cifar"
        assert resolve_stem("auto", "custom") == "imagenet"
        with pytest.raises(ValueError, match="backbone.stem='big'.*cifar_paper"):
            resolve_stem("big", "custom")


class TestLoss:
    def test_cross_view_is_the_authors_loss(self) -> None:
        h = torch.randn(2, 16, 8, dtype=torch.float64)
        loss = CrossViewCrossEntropy(0.1)(h[0], h[1])
        torch.testing.assert_close(loss, authors_loss(h[0], h[1]))
        z1, z2 = F.normalize(h[0], dim=1), F.normalize(h[1], dim=1)
        s = (z1 @ z2.T / 0.1).tolist()
        ref = -sum(s[i][i] - math.log(sum(math.exp(v) for v in s[i])) for i in range(16)) / 16
        assert float(loss) == pytest.approx(ref, rel=1e-12)

    def test_the_objective_picks_it_and_it_is_not_ntxent(self) -> None:
        h = torch.randn(2, 16, 8, dtype=torch.float64)
        kwargs = dict(proj_hidden_dim=8, proj_output_dim=8, temperature=0.1)
        paper = Objective("simclr", SimCLRKwargs(**kwargs, loss="cross_view"))(h)  # type: ignore[arg-type]
        ntxent = Objective("simclr", SimCLRKwargs(**kwargs))(h)  # type: ignore[arg-type]
        torch.testing.assert_close(paper, authors_loss(h[0], h[1]))
        assert abs(float(paper) - float(ntxent)) > 1e-3

    def test_unknown_loss_names_the_choices(self) -> None:
        with pytest.raises(ValueError, match="method_kwargs.loss.*cross_view"):
            SimCLRKwargs(proj_hidden_dim=8, proj_output_dim=8, temperature=0.1, loss="info")


class TestRecipe:
    def test_invariance_recipe_sets_the_papers_protocol(self) -> None:
        recipe = parse_recipe(load_recipe(RECIPE, ["data.train_path=/tmp/x"]))
        assert recipe.backbone_stem == "cifar_paper"
        assert recipe.method_kwargs.loss == "cross_view"  # type: ignore[attr-defined]
        assert recipe.normalisation() == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
        (aug,) = recipe.augmentations
        white = Image.new("RGB", (32, 32), (255, 255, 255))
        black = Image.new("RGB", (32, 32), (0, 0, 0))
        pipe = build_pipeline("custom", aug, normalise=False)
        # ToTensor only: pixels stay in [0, 1] whatever the random jitter did (a mean/std
        # normalisation would send black below 0)
        for _ in range(4):
            assert float(pipe(black).min()) >= 0.0 and float(pipe(white).max()) <= 1.0
        normalised = build_pipeline("custom", aug, normalise=True)
        assert float(normalised(black).min()) < 0.0
        cifar = parse_recipe(load_recipe(RECIPE, ["data.dataset=cifar10", "data.train_path=/x"]))
        assert cifar.backbone_stem == "cifar_paper"  # the authors' padding on CIFAR too

    def test_a_checkpoint_rebuilds_stem_and_input(self) -> None:
        cfg = {
            "method": "simclr",
            "method_kwargs": {"proj_hidden_dim": 8, "proj_output_dim": 8},
            "backbone": {"name": "resnet18", "stem": "cifar_paper"},
            "data": {"dataset": "custom", "normalize": False},
        }
        backbone, _, mean_std, notes = build_from_config(cfg)
        assert backbone.conv1.padding == (1, 1)  # type: ignore[union-attr]
        assert mean_std == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
        cfg["backbone"] = {"name": "resnet18"}
        cfg["data"] = {"dataset": "cifar10"}
        backbone, _, mean_std, _ = build_from_config(cfg)
        assert backbone.conv1.padding == (2, 2)  # type: ignore[union-attr]
        assert mean_std[0][0] == pytest.approx(0.4914)


class TestPaperProbes:
    def test_rotations_are_the_authors_draws(self) -> None:
        x = torch.rand(50, 3, 8, 8)
        rotated, labels = paper_rotations(x, seed=0)
        rng = random.Random(0)
        assert labels.tolist() == [rng.randint(0, 3) for _ in range(50)]
        for i in (0, 7, 31):
            k = int(labels[i])
            torch.testing.assert_close(rotated[i], torch.rot90(x[i], k, dims=(1, 2)))

    def test_probes_read_rotation_from_an_informative_backbone(self) -> None:
        """A backbone that sees the image's corners reads the quarter turn; one that sees only
        the mean colour cannot (chance 0.25)."""
        g = torch.Generator().manual_seed(0)
        x = torch.rand(600, 3, 8, 8, generator=g)
        x[:, :, :2, :2] += 2.0  # a marked corner: its position gives the rotation
        corner = nn.Sequential(nn.Flatten())  # raw pixels
        colour = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        head = nn.Linear(192, 16)
        quick = PaperProbeSettings(epochs=20, batch_size=64)
        good = paper_rotation_probes(corner, head, x[:400], x[400:], settings=quick)
        blind = paper_rotation_probes(colour, nn.Linear(3, 16), x[:400], x[400:], settings=quick)
        assert good["n"] == 200 and good["protocol"] == "paper"
        assert min(good["linear"][0], good["mlp"][0]) > 0.9
        assert max(blind["linear"][0], blind["mlp"][0]) < 0.45


class TestProbeSubsets:
    def test_stratified_subsets_below_the_folder_size_only(self, tmp_path: Path) -> None:
        for split, per_class in (("train", 20), ("val", 6)):
            for c in range(3):
                folder = tmp_path / split / str(c)
                folder.mkdir(parents=True)
                for i in range(per_class):
                    Image.new("RGB", (4, 4), (c * 80, i, 0)).save(folder / f"{i:02d}.png")
        folders = (tmp_path / "train", tmp_path / "val")
        train, test = subset_folders(folders, tmp_path / "sub", (30, 100))
        assert test == tmp_path / "val"  # 18 images, fewer than 100: kept as it is
        counts = sorted(len(list(d.glob("*.png"))) for d in train.iterdir())
        assert train == tmp_path / "sub" / "train" and counts == [10, 10, 10]
