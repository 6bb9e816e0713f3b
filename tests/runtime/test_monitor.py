"""Tests of solo_geometry.runtime.monitor.GeometryMonitor with a real Lightning Trainer.

The module under test is a small BoringModel-like LightningModule implementing
``geometry_view`` (conv backbone with BatchNorm, BN + SiLU head with dropout, VICReg-style loss),
so every kind of state the monitor must leave alone exists: parameters, grads, optimiser
moments, BN running statistics, RNG consumption (dropout, shuffling) and train/eval modes.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from solo_geometry.config import StatsConfig
from solo_geometry.folder.records import read_records
from solo_geometry.hosts.base import capture_copy
from solo_geometry.runtime.measure import Measurement
from solo_geometry.runtime.monitor import GeometryMonitor
from solo_geometry.runtime.view import GeometryAware, GeometryView
from solo_geometry.state import preserved_state
from tests.monitor_helpers import (
    STATS_KEYS,
    BoringGeometry,
    CapturingGeometry,
    fit_boring,
    small_config,
    training_state,
)

HESSIAN_KEYS = [
    f"{op}/{q}"
    for op in ("heff", "gn", "m")
    for q in ("lambda_min", "lambda_max", "neg_fraction", "neg_fraction_std")
] + ["interaction_ratio"]


class TestMonitorConfig:
    def test_takes_the_geometry_config_only(self) -> None:
        with pytest.raises(TypeError, match="GeometryConfig"):
            GeometryMonitor({"every_n_steps": 2})  # type: ignore[arg-type]

    @pytest.mark.parametrize("make", [BoringGeometry, CapturingGeometry])
    def test_stats_queue_pools_the_last_batches(self, tmp_path: Path, make: Any) -> None:
        cfg = small_config(tmp_path, augment=False, every_n_steps=3, stats=StatsConfig(queue=2))
        fit_boring(tmp_path, [GeometryMonitor(cfg)], make, steps=6)
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 3, 6]
        # 8 samples x 2 views per batch; from step 3 on, the two batches before join the stats
        assert [r.metrics["stats/n_samples"] for r in records] == [16, 48, 48]
        assert records[1].metrics["z/n_samples"] == 48

    def test_cadence_and_settings_come_from_the_config(self, tmp_path: Path) -> None:
        cfg = small_config(
            tmp_path,
            augment=False,
            every_n_steps=3,
            spectrum={"max_samples": 4, "dtype": "float32"},
        )
        fit_boring(tmp_path, [GeometryMonitor(cfg)], steps=7)
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 3, 6, 7]
        s = records[0].settings
        assert (s.dtype, s.tau, s.n_batch, s.n_block, s.n_views) == ("float32", 1e-5, 8, 4, 2)
        assert s.dim == 2 * 4 * 8 and s.floor == pytest.approx(
            1e-5
            * max(
                abs(records[0].metrics["heff/lambda_min"]),
                abs(records[0].metrics["heff/lambda_max"]),
            )
        )

    def test_module_without_view(self, tmp_path: Path) -> None:
        class Plain(BoringGeometry):
            geometry_view = None  # type: ignore[assignment]

        with pytest.raises(TypeError, match="geometry_view"):
            fit_boring(tmp_path, [GeometryMonitor(small_config(tmp_path))], Plain)


class TestHelpers:
    def test_preserved_state_restores_everything(self) -> None:
        model = BoringGeometry()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        rng = torch.get_rng_state()
        with pytest.raises(RuntimeError), preserved_state(model):
            model.eval()
            model.projector.train()
            model.projector(torch.randn(4, 8))
            model.backbone[1].running_var.mul_(3)
            torch.rand(3)
            raise RuntimeError
        assert model.training and all(m.training for m in model.modules())
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        assert torch.equal(rng, torch.get_rng_state())

    def test_nested_guards_save_each_buffer_once(self) -> None:
        model = BoringGeometry()
        var = model.backbone[1].running_var
        before = var.clone()
        with preserved_state(model):
            var.mul_(2)  # the outer guard saved the value before this
            with preserved_state(model), preserved_state(model.backbone):
                var.mul_(3)
                model.eval()
            # the inner guards restored the modes but left the buffer to the outer one:
            # they copied no buffer (a record saves them once)
            assert model.training and torch.equal(var, before * 6)
        assert torch.equal(var, before)

    def test_kept_detaches_and_raises_half_precision(self) -> None:
        x = torch.randn(3, 4, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # *-mixed: an autocast output
            half = capture_copy((x * 2).to(torch.bfloat16))
        assert half.dtype == torch.float32 and not half.requires_grad
        # *-true: the module computes in half precision, its outputs are kept as they are
        assert capture_copy((x * 2).to(torch.bfloat16)).dtype == torch.bfloat16
        assert capture_copy(x.double()).dtype == torch.float64 and not capture_copy(x).requires_grad

    def test_protocol(self) -> None:
        assert isinstance(BoringGeometry(), GeometryAware)


class TestGeometryMonitor:
    @pytest.mark.parametrize("make", [BoringGeometry, CapturingGeometry])
    def test_never_alters_training(self, tmp_path: Path, make: Any) -> None:
        ref_model, ref_trainer = fit_boring(tmp_path / "a", [], make, steps=9)
        ref = training_state(ref_model, ref_trainer)
        cfg = small_config(tmp_path / "b", every_n_steps=3, stats=StatsConfig(queue=2))
        monitor = GeometryMonitor(cfg)  # measures and queues on every step
        model, trainer = fit_boring(tmp_path / "b", [monitor], make, steps=9)
        got = training_state(model, trainer)
        assert ref.keys() == got.keys()
        assert [k for k in ref if not torch.equal(ref[k], got[k])] == []
        assert all(m.training for m in model.modules())
        assert monitor.n_records == 4  # steps 0, 3, 6 and the final one

    def test_records(self, tmp_path: Path) -> None:
        monitor = GeometryMonitor(small_config(tmp_path), meta={"method": "boring"})
        fit_boring(tmp_path, [monitor])
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 2, 4, 6]
        assert [r.status for r in records] == ["ok"] * 4, records[0].reason
        for r in records:
            for key in [*HESSIAN_KEYS, *STATS_KEYS, "rho/brightness", "head/weight_norm"]:
                assert math.isfinite(r.metrics[key]), key
            assert r.head == "projector" and r.n_skipped == 0
            # statistics over the whole batch, all views (8 samples x 2 views)
            assert r.metrics["stats/n_samples"] == 16
        assert records[0].density and records[-1].density and records[-1].final
        assert records[1].density is None
        assert math.isclose(sum(records[0].density["weights"]), 1.0, rel_tol=1e-6)
        assert records[0].meta is not None and records[0].meta["method"] == "boring"
        assert records[0].meta["geometry"]["every_n_steps"] == 2 and records[1].meta is None

    def test_measures_on_the_training_steps_features(self, tmp_path: Path) -> None:
        views: list[Tensor] = []

        class Spy(CapturingGeometry):
            def geometry_view(self, batch: Any) -> GeometryView:
                view = super().geometry_view(batch)
                views.append(view.features)
                return view

        monitor = GeometryMonitor(small_config(tmp_path))
        model, trainer = fit_boring(tmp_path, [monitor], Spy)
        assert "geometry/heff/lambda_max" in trainer.callback_metrics  # logged after backward
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 2, 4, 6]
        assert [r.status for r in records] == ["ok"] * 4, records[0].reason
        assert model.fresh_forwards == 1  # only the final record, after training, ran its own
        assert model.kept is None  # capture switched off after each measurement
        assert [v.shape for v in views] == [torch.Size([2, 8, 8])] * 4

    def test_step_without_backward_is_measured_at_batch_end(self, tmp_path: Path) -> None:
        monitor = GeometryMonitor(small_config(tmp_path))
        model, _ = fit_boring(tmp_path, [monitor], lambda: CapturingGeometry(skip_first=1), steps=3)
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 2, 3]
        assert [r.status for r in records] == ["ok"] * 3, records[0].reason
        assert model.fresh_forwards == 2  # the skipped step 0 and the final record
        assert model.kept is None

    def test_failures_are_skipped_warned_once_and_counted(self, tmp_path: Path) -> None:
        ref_model, _ = fit_boring(tmp_path / "ref", [])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, _ = fit_boring(
                tmp_path,
                [GeometryMonitor(small_config(tmp_path))],
                lambda: BoringGeometry(fail_at=(0, 4), nan_at=(2,)),
            )
        records = read_records(tmp_path)
        assert [r.status for r in records] == ["skipped", "ok", "skipped", "ok"]
        assert [r.n_skipped for r in records] == [1, 1, 2, 2]
        assert "RuntimeError: boom" in str(records[0].reason)
        # NaN loss: the spectra fail alone, the statistics and rho are kept
        assert records[1].parts == ["stats", "augment"] and records[1].failed_parts["hessian"]
        assert all(k in records[1].metrics for k in STATS_KEYS)
        ours = [w for w in caught if "GeometryMonitor" in str(w.message)]
        assert len(ours) == 2  # warned once per kind (skips, failed parts), then only counted
        for k, v in ref_model.state_dict().items():  # damage undone, training unchanged
            assert torch.equal(v, model.state_dict()[k]), k

    def test_logs_under_geometry(self, tmp_path: Path) -> None:
        from lightning.pytorch.loggers import CSVLogger

        _, trainer = fit_boring(
            tmp_path, [GeometryMonitor(small_config(tmp_path))], logger=CSVLogger(tmp_path / "logs")
        )
        assert "geometry/heff/lambda_max" in trainer.callback_metrics
        text = next((tmp_path / "logs").rglob("metrics.csv")).read_text()
        assert "geometry/z/rankme_l2" in text

    def test_no_file_on_other_ranks(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pl.Trainer, "is_global_zero", property(lambda self: False))
        fit_boring(tmp_path, [GeometryMonitor(small_config(tmp_path))])
        assert not (tmp_path / "geometry.jsonl").exists()

    def test_checkpoint_entry_and_resume(self, tmp_path: Path) -> None:
        ckpts = tmp_path / "ckpt"
        saver = ModelCheckpoint(dirpath=ckpts, every_n_train_steps=3, save_top_k=-1)
        fit_boring(tmp_path, [GeometryMonitor(small_config(tmp_path)), saver])
        assert [r.step for r in read_records(tmp_path)] == [0, 2, 4, 6]
        mid = next(p for p in ckpts.glob("*.ckpt") if "step=3" in p.name)
        ckpt = torch.load(mid, map_location="cpu", weights_only=True)  # plain types only
        entry = ckpt["geometry"]
        assert entry["summary"] == {"n_records": 2, "n_skipped": 0, "last_step": 2}
        assert entry["config"]["every_n_steps"] == 2 and entry["last"]["step"] == 2
        json.dumps(entry)
        # what a kill after the checkpoint leaves: records up to step 4, the last one torn
        lines = (tmp_path / "geometry.jsonl").read_text().splitlines()
        (tmp_path / "geometry.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
        first = {r.step: r.seconds for r in read_records(tmp_path)}
        monitor = GeometryMonitor(small_config(tmp_path))
        fit_boring(tmp_path, [monitor], ckpt=str(mid))
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 2, 4, 6]  # no gap, no duplicate
        assert monitor.n_records == 4 and records[-1].final
        # steps up to the checkpoint kept as written; those after it written by the resumed run
        assert [r.seconds for r in records[:2]] == [first[0], first[2]]
        assert records[2].seconds != first[4]

    def test_fresh_run_overwrites(self, tmp_path: Path) -> None:
        (tmp_path / "geometry.jsonl").write_text('{"step": 99}\n')
        with pytest.warns(UserWarning, match="overwriting"):
            fit_boring(tmp_path, [GeometryMonitor(small_config(tmp_path))], steps=1)
        assert [r.step for r in read_records(tmp_path)] == [0, 1]

    def test_non_finite_metric_is_skipped(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import solo_geometry.runtime.monitor as monitor_module

        real = monitor_module.measure

        def fake(*args: Any, **kwargs: Any) -> Measurement:
            result = real(*args, **kwargs)
            metrics = {**result.metrics, "z/cond": math.inf}
            return Measurement(metrics, result.settings, result.density)

        monkeypatch.setattr(monitor_module, "measure", fake)
        fit_boring(tmp_path, [GeometryMonitor(small_config(tmp_path, augment=False))], steps=1)
        record = read_records(tmp_path)[0]
        assert record.status == "skipped" and "FloatingPointError" in str(record.reason)
        assert "z/cond" in str(record.reason)

    def test_hessian_only_without_output_loss(self, tmp_path: Path) -> None:
        class FeaturesOnly(BoringGeometry):
            def geometry_view(self, batch: Any) -> GeometryView:
                view = super().geometry_view(batch)
                return GeometryView(view.features, view.head, view.loss_of_features)

        monitor = GeometryMonitor(small_config(tmp_path, augment=False))
        fit_boring(tmp_path, [monitor], FeaturesOnly, steps=1)
        record = read_records(tmp_path)[0]
        assert record.status == "ok", record.reason
        assert "heff/lambda_max" in record.metrics and "gn/lambda_max" not in record.metrics

    def test_unwritable_folder_never_stops_training(self, tmp_path: Path) -> None:
        ref_model, _ = fit_boring(tmp_path / "ref", [])
        blocked = tmp_path / "blocked"
        blocked.write_text("a file where the run folder should be")
        with pytest.warns(UserWarning, match="GeometryMonitor"):
            model, _ = fit_boring(tmp_path, [GeometryMonitor(small_config(blocked / "run"))])
        for k, v in ref_model.state_dict().items():
            assert torch.equal(v, model.state_dict()[k]), k
