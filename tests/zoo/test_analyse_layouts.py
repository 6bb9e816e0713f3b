"""Checkpoint layouts of published SSL repositories, written here from randomly initialised models.

Each reference model below is written as its repository writes it (the module structure and
the ``torch.save`` call of facebookresearch/vicreg ``main_vicreg.py``, facebookresearch/
barlowtwins ``main.py`` and facebookresearch/dino ``main_dino.py``, with DDP's ``module.``
prefix), with small head widths; the loaded backbone and head must reproduce the reference
modules' outputs.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from safetensors.torch import save_file
from torch import nn

from solo_geometry.cli import main as cli_main
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD, probe_splits
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.checkpoint import read_checkpoint
from solo_geometry.models.solo_mlp import solo_projector
from solo_geometry.zoo.analyse import analyse
from solo_geometry.zoo.layouts import LAYOUTS, detect_layout, load_checkpoint
from tests.shared import image_folder, small_settings


def _vicreg_projector(embedding: int, mlp: str) -> nn.Sequential:
    """facebookresearch/vicreg main_vicreg.py ``Projector``."""
    f = list(map(int, f"{embedding}-{mlp}".split("-")))
    layers: list[nn.Module] = []
    for i in range(len(f) - 2):
        layers += [nn.Linear(f[i], f[i + 1]), nn.BatchNorm1d(f[i + 1]), nn.ReLU(True)]
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)


class _VICReg(nn.Module):
    def __init__(self, mlp: str) -> None:
        super().__init__()
        self.backbone = torchvision.models.resnet50(zero_init_residual=True)
        self.backbone.fc = nn.Identity()  # vicreg's resnet.py has no fc: same keys otherwise
        self.projector = _vicreg_projector(2048, mlp)


class _BarlowTwins(nn.Module):
    """facebookresearch/barlowtwins main.py ``BarlowTwins`` (module structure)."""

    def __init__(self, projector: str) -> None:
        super().__init__()
        self.backbone = torchvision.models.resnet50(zero_init_residual=True)
        self.backbone.fc = nn.Identity()
        sizes = [2048, *map(int, projector.split("-"))]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 2):
            layers += [
                nn.Linear(sizes[i], sizes[i + 1], bias=False),
                nn.BatchNorm1d(sizes[i + 1]),
                nn.ReLU(inplace=True),
            ]
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)


class _DINOHead(nn.Module):
    """facebookresearch/dino vision_transformer.py ``DINOHead`` (nlayers=3, no BN)."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int, bottleneck: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, bottleneck),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # weight_norm: as DINO stores it
            self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        self.last_layer.weight_g.data.uniform_(0.5, 1.5)  # trained g differs from 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.normalize(self.mlp(x), dim=-1, p=2)
        return self.last_layer(x)


class _MultiCropWrapper(nn.Module):
    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        backbone.fc, backbone.head = nn.Identity(), nn.Identity()
        self.backbone, self.head = backbone, head


def _vit_small() -> nn.Module:
    import timm  # noqa: PLC0415 - the test's reference for DINO's vit_small

    return timm.models.vision_transformer.VisionTransformer(
        patch_size=16,
        embed_dim=384,
        depth=12,
        num_heads=6,
        qkv_bias=True,
        num_classes=0,
        dynamic_img_size=True,
    )


def _ddp(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"module.{k}": v for k, v in state.items()}


def _randomise_bn(model: nn.Module) -> None:
    """Non-trivial BatchNorm statistics, as a trained checkpoint has."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d) and m.running_mean is not None:
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
            if m.affine:
                m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)


def _write(kind: str, path: Path) -> tuple[nn.Module, nn.Module]:
    """Write a checkpoint of ``kind``; return its reference (backbone, head) in eval mode."""
    torch.manual_seed(0)
    if kind in ("vicreg-resnet50", "barlowtwins-resnet50"):
        model = _VICReg("64-64-32") if kind == "vicreg-resnet50" else _BarlowTwins("64-64-32")
        _randomise_bn(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        state = {"epoch": 3, "model": _ddp(model.state_dict()), "optimizer": opt.state_dict()}
        torch.save(state, path)
        return model.backbone.eval(), model.projector.eval()
    vit = kind == "dino-vit_small16"
    backbone = _vit_small() if vit else torchvision.models.resnet50()
    wrapper = _MultiCropWrapper(backbone, _DINOHead(384 if vit else 2048, 16, 32, 8))
    _randomise_bn(wrapper)
    teacher = wrapper.state_dict() if vit else _ddp(wrapper.state_dict())  # DDP only with BN
    args = argparse.Namespace(arch="vit_small" if vit else "resnet50", out_dim=16, patch_size=16)
    torch.save(
        {
            "student": _ddp(wrapper.state_dict()),
            "teacher": teacher,
            "optimizer": {},
            "epoch": 100,
            "args": args,
            "dino_loss": {"center": torch.zeros(1, 16)},
        },
        path,
    )
    return wrapper.backbone.eval(), wrapper.head.eval()


PUBLISHED = ("vicreg-resnet50", "barlowtwins-resnet50", "dino-resnet50", "dino-vit_small16")


class TestPublishedLayouts:
    @pytest.mark.parametrize("kind", PUBLISHED)
    def test_loaded_model_reproduces_the_reference(self, tmp_path: Path, kind: str) -> None:
        path = tmp_path / f"{kind}.pth"
        ref_backbone, ref_head = _write(kind, path)
        model, found = load_checkpoint(path)
        assert found == kind
        x = torch.rand(2, 3, 32, 32)
        with torch.no_grad():
            z_ref, z = ref_backbone(x), model.backbone(x)
            torch.testing.assert_close(z, z_ref, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(model.head(z_ref), ref_head(z_ref), rtol=1e-5, atol=1e-6)

    def test_dino_student_branch(self, tmp_path: Path) -> None:
        path = tmp_path / "dino.pth"
        _write("dino-vit_small16", path)
        model, _ = load_checkpoint(path, branch="student")
        assert "branch: student" in model.notes

    def test_solo_learn_layout_is_detected(self, tmp_path: Path) -> None:
        backbone, d = build_backbone("resnet18")
        state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
        state |= {
            f"projector.{k}": v for k, v in solo_projector("simclr", d, 16, 8).state_dict().items()
        }
        assert detect_layout({"state_dict": state, "epoch": 1}) == "solo-learn"

    def test_unknown_layout_lists_the_known_ones(self, tmp_path: Path) -> None:
        path = tmp_path / "odd.pth"
        torch.save({"net": {"w": torch.zeros(2)}}, path)
        with pytest.raises(ValueError, match="unknown checkpoint layout") as info:
            load_checkpoint(path)
        for name in LAYOUTS:
            assert name in str(info.value)

    def test_unknown_layout_cli_exits_2_and_writes_nothing(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path, data, out = (
            tmp_path / "odd.pth",
            image_folder(tmp_path / "data", 10, 16),
            tmp_path / "out",
        )
        torch.save({"net": {"w": torch.zeros(2)}}, path)
        assert cli_main(["analyse", str(path), "--data", str(data), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "dino-vit_small16" in err and "vicreg-resnet50" in err
        assert not out.exists()


class _Opaque:
    """Not a plain data class: a weights-only load must refuse it."""

    def __init__(self) -> None:
        self.value = 1


class TestSafeReading:
    def test_pickle_needing_code_is_refused_unless_trusted(self, tmp_path: Path) -> None:
        path = tmp_path / "x.pth"
        torch.save({"state_dict": {"w": torch.ones(1)}, "extra": _Opaque()}, path)
        with pytest.raises(ValueError, match="--trust-pickle"):
            read_checkpoint(path)
        assert isinstance(read_checkpoint(path, trust_pickle=True)["extra"], _Opaque)

    def test_safetensors_read_through_safetensors(self, tmp_path: Path) -> None:
        save_file({"a": torch.arange(3.0)}, str(tmp_path / "m.safetensors"))
        torch.testing.assert_close(
            read_checkpoint(tmp_path / "m.safetensors")["a"], torch.arange(3.0)
        )


class TestAnalyse:
    def test_dino_vit_analysis_matches_a_direct_computation(self, tmp_path: Path) -> None:
        path = tmp_path / "dino.pth"
        ref_backbone, ref_head = _write("dino-vit_small16", path)
        data = image_folder(tmp_path / "data", 10, 16)
        result = analyse(path, data, tmp_path / "out", settings=small_settings())
        assert result["layout"] == "dino-vit_small16"
        assert (tmp_path / "out" / "analysis.json").is_file()
        # effective rank of Z recomputed here from the reference backbone (RankMe, eps 1e-7)
        x = probe_splits(data, 0)["test"][0][:12]
        mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in IMAGENET_MEAN_STD)
        with torch.no_grad():
            z = ref_backbone((x - mean) / std).double()
        z = z / z.norm(dim=1, keepdim=True)
        s = np.linalg.svd(z.numpy(), compute_uv=False)
        p = s / s.sum() + 1e-7
        want = float(np.exp(-(p * np.log(p)).sum()))
        assert result["measurements"]["stats"]["z/rankme_l2"] == pytest.approx(want, rel=1e-4)
        rows = result["measurements"]["probes"]["rows"]
        assert {(r["features"], r["target"]) for r in rows} == {("z", "class"), ("h", "class")}
