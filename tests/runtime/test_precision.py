"""Measurements in full precision whatever the trainer's: TF32 off, half-precision modules copied.

* :func:`exact_matmul` turns TF32 and reduced-precision float32 matmul off inside and restores
  every user setting after (the flags can be set on a CPU), also when the body raises;
* a ``bf16-true`` view (bfloat16 head, backbone, features and images) is measured exactly as a
  float32 view of the same parameter values whose features say they were bfloat16, the modules
  left untouched;
* the statistics read every rank at the features' precision: a BatchNorm-ended head's centred
  rank M - 2, not round-off's M - 1, with the tolerance's epsilons in the record's settings;
* each part of a record fails alone, the others kept;
* a real Trainer at ``bf16-mixed`` writes records whose settings say the precision, the
  features' dtype (bfloat16: the training step's autocast output) and the user's TF32 settings;
* the probes run under every precision Lightning accepts on a CPU;
* the sub-block's index reaches the vectors' device once, never per product.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from solo_geometry.config import GeometryConfig, MeasureConfig, SpectrumConfig
from solo_geometry.folder.records import read_records
from solo_geometry.hosts.base import assemble_view
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.models.heads import build_head
from solo_geometry.runtime.measure import Measurement, measure
from solo_geometry.runtime.monitor import GeometryMonitor
from solo_geometry.runtime.precision import (
    exact_matmul,
    float32_copy,
    full_precision,
    matmul_settings,
)

USER_SETTINGS = [
    (True, True, "high"),
    (False, True, "highest"),
    (True, False, "medium"),
    (False, False, "highest"),
]


def _set(cuda: bool, cudnn: bool, precision: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = cuda
    torch.backends.cudnn.allow_tf32 = cudnn
    torch.set_float32_matmul_precision(precision)


def _new_api() -> dict[str, str]:
    """The fp32_precision attributes of the newer API, where this torch has them."""
    out = {}
    for name, obj in (
        ("matmul", torch.backends.cuda.matmul),
        ("cudnn", torch.backends.cudnn),
        ("conv", getattr(torch.backends.cudnn, "conv", None)),
    ):
        if obj is not None and hasattr(obj, "fp32_precision"):
            out[name] = obj.fp32_precision
    return out


@pytest.fixture
def restore_flags() -> Any:
    before = matmul_settings()
    yield
    _set(
        before["cuda_matmul_allow_tf32"],
        before["cudnn_allow_tf32"],
        before["float32_matmul_precision"],
    )


@pytest.mark.parametrize("user", USER_SETTINGS)
def test_exact_matmul_turns_tf32_off_and_restores(user: tuple, restore_flags: Any) -> None:
    _set(*user)
    before, new_api = matmul_settings(), _new_api()
    assert before["float32_matmul_precision"] == user[2]
    with exact_matmul() as seen:
        assert seen == before
        assert not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
    assert matmul_settings() == before and _new_api() == new_api
    with pytest.raises(RuntimeError, match="inside"), exact_matmul():
        raise RuntimeError("inside")
    assert matmul_settings() == before and _new_api() == new_api


def _modules(dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    backbone = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )
    head = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.SiLU(), nn.Linear(8, 5))
    return backbone.to(dtype), head.to(dtype)


def _loss(H: Tensor) -> Tensor:
    std = torch.sqrt(H.var(dim=1) + 1e-4)
    return (H[0] - H[1]).pow(2).mean() + torch.relu(1 - std).mean()


def _view(backbone: nn.Module, head: nn.Module, dtype: torch.dtype, **kw: Any) -> Any:
    g = torch.Generator().manual_seed(3)
    images = [torch.rand(8, 3, 6, 6, generator=g).to(dtype) for _ in range(2)]
    with torch.no_grad():
        Z = torch.stack([backbone(x) for x in images])  # (2, 8, 4)
    return assemble_view(Z, head, kw.pop("loss", _loss), backbone, images[0], **kw)


def _cfg(**kw: Any) -> GeometryConfig:
    measure_cfg = MeasureConfig(augment_samples=4, augment_families=["brightness"], **kw)
    spectrum = SpectrumConfig(max_samples=6, max_steps=60, density_probes=1)
    return GeometryConfig(spectrum=spectrum, measure=measure_cfg, budget=None)


def _measured(view: Any, cfg: GeometryConfig, **kw: Any) -> Measurement:
    """:func:`measure` with the pieces of ``cfg`` it takes."""
    return measure(view, cfg.measure, cfg.spectrum, seed=cfg.seed, **kw)


def test_bf16_true_view_measured_as_float32_of_the_same_values() -> None:
    backbone, head = _modules(torch.bfloat16)
    before = copy.deepcopy(head.state_dict())
    half = _measured(_view(backbone, head, torch.bfloat16), _cfg(), density=False)
    # the reference: float32 modules holding the bfloat16 values, fed the same (raised) inputs,
    # whose features say they were bfloat16 (the ranks' precision)
    view = _view(backbone, head, torch.bfloat16)
    ref_view = assemble_view(
        view.features.float(),
        float32_copy(head),
        _loss,
        float32_copy(backbone),
        view.images.float(),
        features_dtype="bfloat16",
    )
    ref = _measured(ref_view, _cfg(), density=False)
    assert half.failed == {} and half.parts == ["stats", "hessian", "augment"]
    timing = {k for k in ref.metrics if k.endswith("/seconds")}
    assert {k: v for k, v in half.metrics.items() if k not in timing} == {
        k: v for k, v in ref.metrics.items() if k not in timing
    }
    assert "heff/lambda_max" in half.metrics and "rho/brightness" in half.metrics
    assert half.settings.features_dtype == "bfloat16" and half.settings.dtype == "float32"
    # the modules themselves untouched
    assert all(p.dtype == torch.bfloat16 for p in head.parameters())
    assert all(torch.equal(before[k], v) for k, v in head.state_dict().items())


def test_a_half_view_without_loss_of_outputs_keeps_stats_and_rho() -> None:
    backbone, head = _modules(torch.float16)
    view = dataclasses.replace(_view(backbone, head, torch.float16), loss_of_outputs=None)
    full = full_precision(view)
    assert full.features.dtype == torch.float32 and full.images.dtype == torch.float32
    assert all(
        p.dtype == torch.float32 for p in [*full.head.parameters(), *full.backbone.parameters()]
    )
    result = _measured(view, _cfg(), density=False)
    assert result.parts == ["stats", "augment"]
    assert "without the view's loss_of_outputs" in result.failed["hessian"]
    assert result.settings.features_dtype == "float16"


def test_each_part_fails_alone() -> None:
    backbone, head = _modules(torch.float32)
    nan_loss = _view(backbone, head, torch.float32, loss=lambda H: _loss(H) * float("nan"))
    result = _measured(nan_loss, _cfg(), density=True)
    assert result.parts == ["stats", "augment"] and result.density is None
    assert result.failed["hessian"].startswith("FloatingPointError: non-finite loss")
    assert "z/rankme_l2" in result.metrics and "rho/brightness" in result.metrics
    assert not any(k.startswith("heff/") for k in result.metrics)

    class Broken(nn.Module):  # the backbone raises: rho fails, spectra and statistics kept
        def forward(self, x: Tensor) -> Tensor:
            raise RuntimeError("no tangents")

    result = _measured(
        dataclasses.replace(_view(backbone, head, torch.float32), backbone=Broken()),
        _cfg(),
        density=False,
    )
    assert result.parts == ["stats", "hessian"]
    assert result.failed == {"augment": "RuntimeError: no tangents"}
    assert "heff/lambda_max" in result.metrics and "z/cond" in result.metrics
    with pytest.raises(RuntimeError, match="^hessian: .*non-finite loss"):  # every due part
        _measured(nan_loss, _cfg(stats=False, augment=False), density=False)


class MixedModule(pl.LightningModule):
    """Two-view SSL module with capture: its training step keeps the autocast features."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone, self.projector = _modules(torch.float32)
        self.feats: list[Tensor] | None = None

    def geometry_capture(self, enabled: bool) -> None:
        self.feats = [] if enabled else None

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        (x,) = batch
        views = [x, x.flip(-1)]
        Z = [self.backbone(v) for v in views]
        if self.feats is not None:
            self.feats = [z.detach() for z in Z]  # autocast output: bfloat16
        return _loss(torch.stack([self.projector(z) for z in Z]))

    def geometry_view(self, batch: Any) -> Any:
        (x,) = batch
        Z = torch.stack(self.feats) if self.feats else None
        if Z is None:
            with torch.no_grad():
                Z = torch.stack([self.backbone(v) for v in (x, x.flip(-1))])
        return assemble_view(
            Z.float(),
            self.projector,
            _loss,
            self.backbone,
            x,
            features_dtype=str(Z.dtype).removeprefix("torch."),
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int = 16) -> Any:
    x = torch.rand(n, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=8)


def test_bf16_mixed_records_say_precision_and_dtype(tmp_path: Path, restore_flags: Any) -> None:
    _set(True, True, "high")  # as Lightning advises on a GPU
    cfg = dataclasses.replace(_cfg(), every_n_steps=1, out_dir=str(tmp_path))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision="bf16-mixed",
        max_steps=2,
        callbacks=[GeometryMonitor(cfg)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(MixedModule(), _loader())
    records = read_records(tmp_path)
    assert [r.step for r in records] == [0, 1, 2] and all(r.ok for r in records), records
    user = {
        "cuda_matmul_allow_tf32": True,
        "cudnn_allow_tf32": True,
        "float32_matmul_precision": "high",
    }
    for r in records:
        assert r.settings.precision == "bf16-mixed" and r.settings.dtype == "float32"
        assert r.settings.user_matmul == user and r.failed_parts == {}
    assert [r.settings.features_dtype for r in records] == ["bfloat16", "bfloat16", "float32"]
    f32 = torch.finfo(torch.float32).eps  # the ranks' tolerance: the features' eps
    assert [r.settings.rank_eps for r in records] == [2.0**-7, 2.0**-7, f32]
    assert [r.settings.rank_work_eps for r in records] == [f32] * 3
    assert matmul_settings() == user  # restored after every measurement


@pytest.mark.parametrize("features_dtype", [None, "bfloat16"])
def test_statistics_read_ranks_at_the_features_precision(features_dtype: str | None) -> None:
    """SimSiam's BN-ended head on 2 x 64 rows: centred rank M - 2 = 126, not 127 (round-off)."""
    torch.manual_seed(0)
    options = dict(hidden_dim=512, activation="relu", norm="bn", bias=False, out_norm=True)
    head = build_head("smooth_mlp", 512, 512, **options).train()
    Z = torch.relu(torch.randn(2, 64, 512, generator=torch.Generator().manual_seed(1)))
    if features_dtype is not None:  # a bf16-mixed forward's features, kept in float32
        Z = Z.bfloat16().float()
    view = assemble_view(Z, head, _loss, features_dtype=features_dtype)
    result = _measured(view, _cfg(), density=False, stats_only=True)
    H64 = torch.stack([copy.deepcopy(head).double()(Z[v].double()) for v in range(2)])
    Hn = H64.reshape(128, -1) / H64.reshape(128, -1).norm(dim=1, keepdim=True)
    s = torch.linalg.svdvals(Hn - Hn.mean(dim=0))  # float64 reference: 126 above round-off
    assert s[125] > 0.1 > 1e-12 > s[126] / s[0]
    m = result.metrics
    assert m["h/rank"] == 126 and m["z/rank"] == 127
    assert m["h/cond"] == pytest.approx(float(s[0] ** 2 / s[125] ** 2), rel=0.02)
    assert m["whitening/rank"] == 126
    eps = torch.finfo(getattr(torch, features_dtype or "float32")).eps
    assert result.settings.rank_eps == eps
    assert result.settings.rank_work_eps == torch.finfo(torch.float32).eps


class ProbeModule(MixedModule):
    def geometry_head(self) -> nn.Module:
        return self.projector


@pytest.mark.parametrize("precision", ["64-true", "32-true", "bf16-mixed", "bf16-true", "16-true"])
def test_probes_under_every_cpu_precision(precision: str, tmp_path: Path) -> None:
    from PIL import Image

    from solo_geometry.config import OrbitsConfig, ProbesConfig
    from solo_geometry.runtime.callbacks import ProbeCallback

    rng = torch.Generator().manual_seed(0)
    for c in range(2):  # a labelled folder of 2 x 12 small images
        (tmp_path / "data" / str(c)).mkdir(parents=True)
        for i in range(12):
            pixels = (torch.rand(8, 8, 3, generator=rng) * 127 + 128 * c).to(torch.uint8)
            Image.fromarray(pixels.numpy()).save(tmp_path / "data" / str(c) / f"{i}.png")
    cfg = ProbesConfig(
        probes=["linear"],
        targets=["class"],
        orbits=OrbitsConfig(families=["brightness"], images=4, k=2),
    )
    probes = ProbeCallback(cfg, tmp_path / "data", tmp_path, ((0.5,) * 3, (0.25,) * 3))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=1,
        callbacks=[probes],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with _no_probe_warning():
        trainer.fit(ProbeModule(), _loader())
    assert probes.result is not None and (tmp_path / "probes.json").is_file()


class _no_probe_warning:  # noqa: N801 - a context manager read as a phrase
    """Fail on the callback's ``probes failed`` warning (it never raises)."""

    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._seen = self._catch.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)
        failed = [str(w.message) for w in self._seen if "probes failed" in str(w.message)]
        assert not failed, failed


class _Devices(TorchDispatchMode):
    """Records the ops whose tensor arguments lie on more than one device."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: list[str] = []
        self.copies = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        flat = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        devices = {t.device.type for t in flat if isinstance(t, Tensor)}
        if len(devices) > 1:
            self.mixed.append(str(func))
        if "_to_copy" in str(func) and (kwargs or {}).get("device") is not None:
            self.copies += 1
        return func(*args, **(kwargs or {}))


def test_block_index_on_the_vectors_device() -> None:
    shape = torch.Size([2, 6, 3])
    index = block_indices(6, 4)  # made on the CPU
    assert block_indices(6, 4, "meta").device.type == "meta"
    sub = restrict_to_block(lambda v: 2 * v, shape, index)
    with _Devices() as seen:
        for _ in range(3):
            out = sub(torch.ones(2 * 4 * 3, device="meta"))
    assert out.device.type == "meta" and out.shape == (24,)
    assert seen.mixed == [] and seen.copies == 1  # moved once, on the first product
    cpu = restrict_to_block(lambda v: 2 * v, shape, index)(torch.ones(24))
    assert torch.equal(cpu, torch.full((24,), 2.0))
