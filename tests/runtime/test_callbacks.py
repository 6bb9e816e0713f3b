"""The end-of-fit steps (solo_geometry.runtime.callbacks) with a real Lightning Trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from solo_geometry.config import (
    GeometryConfig,
    MeasureConfig,
    OrbitsConfig,
    ProbesConfig,
    SpectrumConfig,
)
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD
from solo_geometry.inputs.digits import make_digits
from solo_geometry.runtime.callbacks import (
    ProbeCallback,
    ReportCallback,
    geometry_callbacks,
    probe_data,
)
from solo_geometry.runtime.monitor import GeometryMonitor
from tests.monitor_helpers import BoringGeometry, TwoViews


def fit_boring(
    tmp: Path, callbacks: list, make: Any = BoringGeometry, steps: int = 2
) -> pl.Trainer:
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp,
    )
    trainer.fit(make(), DataLoader(TwoViews(), batch_size=8))
    return trainer


def small_config(**probes: Any) -> GeometryConfig:
    measure = MeasureConfig(augment=False)
    small = ProbesConfig(
        targets=["class"], probes=["linear"], orbits=OrbitsConfig(families=[]), **probes
    )
    return GeometryConfig(
        every_n_steps=1,
        spectrum=SpectrumConfig(max_samples=4, max_steps=60, density_probes=1),
        measure=measure,
        probes=small,
        budget=None,
    )


@pytest.mark.slow
class TestGeometryCallbacks:
    def test_order_and_report_without_probes(self, tmp_path: Path) -> None:
        cfg = small_config(enabled=False)
        callbacks = geometry_callbacks(cfg, run_dir=tmp_path, meta={"host": "test"})
        assert [type(c) for c in callbacks] == [GeometryMonitor, ReportCallback]
        fit_boring(tmp_path, callbacks)
        run = RunFolder(tmp_path)
        assert (run.report / "index.html").is_file()  # a report with probes off
        assert [r.step for r in run.records()] == [0, 1, 2] and run.read_probes() is None

    def test_probes_and_report_on_a_labelled_folder(self, tmp_path: Path) -> None:
        data = make_digits(tmp_path / "digits", size=8)
        callbacks = geometry_callbacks(
            small_config(),
            run_dir=tmp_path / "run",
            meta={},
            train_dir=data / "train",
            val_dir=data / "val",
        )
        fit_boring(tmp_path / "run", callbacks, make=_Digits)
        table = RunFolder(tmp_path / "run").read_probes()
        assert table is not None and {r.features for r in table.rows} == {"z", "h"}
        # fitted on the recipe's train split, scored on its val split
        count = {s: len(list((data / s).rglob("*.png"))) for s in ("train", "val")}
        assert (table.settings["n_train"], table.settings["n_test"]) == (
            count["train"],
            count["val"],
        )
        assert "probe" in (tmp_path / "run" / "report" / "index.html").read_text().lower()

    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            ((None, None, None), None),
            (("x", None, "v"), Path("x")),
            ((None, "missing-train", "v"), Path("v")),
        ],
    )
    def test_probe_data(self, data: tuple, expected: Any) -> None:
        cfg_data, train, val = data
        assert probe_data(ProbesConfig(data=cfg_data), train, val) == expected


class TestSetupChecks:
    """Bad inputs stop the run in ``setup``, before the first step, naming the value."""

    def test_missing_probe_folder(self, tmp_path: Path) -> None:
        callback = ProbeCallback(ProbesConfig(), tmp_path / "nope", tmp_path, IMAGENET_MEAN_STD)
        with pytest.raises(ValueError, match="nope.*does not exist"):
            fit_boring(tmp_path, [callback])
        assert not (tmp_path / "geometry.jsonl").exists()

    def test_module_without_geometry_head(self, tmp_path: Path) -> None:
        steps: list[int] = []

        class Spy(pl.Callback):
            def on_train_batch_start(self, *args: Any) -> None:
                steps.append(1)

        with pytest.raises(ValueError, match=r"BoringGeometry: probes need .*geometry_head\(\)"):
            fit_boring(
                tmp_path, [ProbeCallback(ProbesConfig(), None, tmp_path, IMAGENET_MEAN_STD), Spy()]
            )
        assert steps == []  # no training step ran

    def test_rejects_bad_config(self) -> None:
        with pytest.raises(TypeError, match="ProbesConfig"):
            ProbeCallback({"enabled": True}, None, None, IMAGENET_MEAN_STD)  # type: ignore[arg-type]


class _Digits(BoringGeometry):
    """BoringGeometry on 8x8 images (the digits folder's size) for the probe run."""

    def geometry_head(self) -> torch.nn.Module:
        return self.projector
