"""Tests of solo_geometry.runtime.alert: the state machine, its diagnosis, and the monitor's use."""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from solo_geometry.config import AlertConfig, GeometryConfig, geometry_config
from solo_geometry.folder.records import GeometryRecord, read_records
from solo_geometry.geometry.stats import stats_record
from solo_geometry.runtime.alert import FLAT, SADDLE, STATES, CollapseAlert, classify, ratios
from solo_geometry.runtime.monitor import GeometryMonitor
from tests.monitor_helpers import fit_boring, small_config

M, D = 512, 128
CEILING = math.sqrt(M / ((M - 1) * D))


def metrics(std_ratio: float, rank_ratio: float, **extra: Any) -> dict[str, Any]:
    """A record's metrics of H at the given fractions of the std's and the rank's ceilings."""
    return {
        "h/normalized_std": std_ratio * CEILING,
        "h/rankme_l2": rank_ratio * D,
        "h/n_samples": M,
        "h/dim": D,
        **extra,
    }


def run(alert: CollapseAlert, readings: list[tuple[float, float]]) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [alert.observe(i, metrics(*r), None)["state"] for i, r in enumerate(readings)]


class TestRatios:
    def test_against_the_ceilings(self) -> None:
        got = ratios(metrics(0.5, 0.25), "h")
        assert got == pytest.approx((0.5, 0.25))
        # M < d: the rank's ceiling is M
        few = {"z/normalized_std": 0.1, "z/rankme_l2": 4.0, "z/n_samples": 8, "z/dim": 64}
        assert ratios(few, "z")[1] == pytest.approx(0.5)  # type: ignore[index]

    def test_missing_statistics(self) -> None:
        assert ratios({"h/normalized_std": 0.1}, "h") is None
        assert ratios(metrics(0.5, 0.5), "z") is None


class TestStateMachine:
    def test_classify_uses_enter_then_leave(self) -> None:
        cfg = AlertConfig()
        assert classify(0.07, 0.9, "healthy", cfg) == "healthy"  # above complete_enter 0.05
        assert classify(0.07, 0.9, "complete", cfg) == "complete"  # below complete_leave 0.1
        # the rank's ratio is to its running maximum: enter below 0.35, leave above 0.525
        assert classify(0.5, 0.4, "healthy", cfg) == "healthy"
        assert classify(0.5, 0.4, "dimensional", cfg) == "dimensional"
        assert classify(0.5, 0.25, "healthy", cfg) == "dimensional"
        assert classify(0.04, 0.04, "dimensional", cfg) == "complete"

    def test_one_noisy_record_does_not_flip_it(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=2))
        states = run(alert, [(0.8, 0.8), (0.01, 0.8), (0.8, 0.8), (0.01, 0.8), (0.8, 0.8)])
        assert states == ["healthy"] * 5

    def test_enters_after_patience_and_leaves_with_hysteresis(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=2))
        states = run(
            alert,
            [
                (0.8, 0.8),
                (0.01, 0.8),
                (0.02, 0.8),  # enter complete at 2
                (0.07, 0.8),
                (0.07, 0.8),
                (0.09, 0.8),  # inside the band: stays
                (0.5, 0.8),
                (0.01, 0.8),
                (0.5, 0.8),
                (0.5, 0.8),
            ],
        )
        assert states == ["healthy", "healthy"] + ["complete"] * 7 + ["healthy"]
        assert alert.since == 9

    def test_dimensional_when_the_std_holds(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=3))
        # the rank falls to 0.02 of min(M, d) from 0.8: 0.025 of its running maximum
        states = run(alert, [(0.6, 0.8)] + [(0.6, 0.02)] * 4 + [(0.6, 0.5)] * 3)
        assert states == ["healthy"] * 3 + ["dimensional"] * 4 + ["healthy"]

    def test_a_run_that_starts_low_is_not_dimensional(self) -> None:
        # the rank's own history: a run whose rank only grows never falls from its maximum
        alert = CollapseAlert(AlertConfig(patience=1))
        assert run(alert, [(0.6, r) for r in (0.02, 0.05, 0.3, 0.6)]) == ["healthy"] * 4

    def test_one_warning_per_change(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i, r in enumerate([(0.8, 0.8), (0.01, 0.8), (0.01, 0.8), (0.01, 0.8)]):
                alert.observe(i, metrics(*r), None)
        lines = [str(w.message) for w in caught if "collapse alert" in str(w.message)]
        assert len(lines) == 1 and "healthy -> complete at step 1" in lines[0]

    def test_state_dict_round_trip(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=3))
        run(alert, [(0.01, 0.8)] * 2)  # a candidate half-way
        again = CollapseAlert(AlertConfig(patience=3))
        again.load_state_dict(alert.state_dict())
        assert run(again, [(0.01, 0.8)]) == ["complete"]
        # the running maximum survives too: a resumed run's fall counts from it
        assert again.state_dict()["top"] == {"h": pytest.approx(0.8)}


class TestDiagnosis:
    def test_strict_saddle_and_flat(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saddle = alert.observe(0, metrics(0.01, 0.8, **{"m/ritz_min": -2e-3}), 1e-6)
            assert saddle["diagnosis"].startswith(SADDLE) and "-0.002" in saddle["diagnosis"]
            flat = alert.observe(1, metrics(0.01, 0.8, **{"m/ritz_min": -1e-9}), 1e-6)
        assert flat["diagnosis"].startswith(FLAT) and "at step 1" in flat["diagnosis"]
        assert flat["curvature"]["floor"] == 1e-6

    def test_no_spectra_and_healthy(self) -> None:
        alert = CollapseAlert(AlertConfig(patience=1))
        assert alert.observe(0, metrics(0.8, 0.8), None)["diagnosis"] is None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert "no spectra" in alert.observe(1, metrics(0.01, 0.8), None)["diagnosis"]


class TestConfig:
    def test_bad_thresholds_name_the_key(self) -> None:
        with pytest.raises(ValueError, match="geometry.alert.complete_leave: must be >="):
            AlertConfig(complete_enter=0.2, complete_leave=0.1)
        with pytest.raises(ValueError, match=r"geometry.alert.features.*choose from"):
            AlertConfig(features="x")
        with pytest.raises(ValueError, match=r"dimensional_enter: must be in \(0, 1\)"):
            AlertConfig(dimensional_enter=1.5)

    def test_stop_from_the_command_line_words(self) -> None:
        from omegaconf import OmegaConf

        cfg = geometry_config(OmegaConf.create({"geometry": {"alert": {"stop": "on"}}}))
        assert cfg is not None and cfg.alert.stop is True and cfg.alert.stop_after == 5

    def test_version_2_records_read_without_alert(self) -> None:
        record = GeometryRecord.from_dict({"schema": 2, "step": 0, "epoch": 0, "status": "ok"})
        assert record.alert is None and CollapseAlert.scalars(record) == {}


def _always_complete(tmp: Path, **alert: Any) -> GeometryConfig:
    """Every record points to `complete` (std under 0.999 of its ceiling): the run shows it."""
    alert_cfg = AlertConfig(complete_enter=0.999, complete_leave=0.9999, **alert)
    return small_config(
        tmp, augment=False, every_n_steps=1, spectrum={"max_steps": 20}, alert=alert_cfg
    )


class TestMonitorAlert:
    def test_records_warning_logger_and_stop(self, tmp_path: Path) -> None:
        logger = CSVLogger(tmp_path, name="logs")
        cfg = _always_complete(tmp_path, patience=2, stop=True, stop_after=2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, trainer = fit_boring(tmp_path, [GeometryMonitor(cfg)], steps=8, logger=logger)
        records = read_records(tmp_path)
        states = [r.alert["state"] for r in records if r.alert]
        assert states[:3] == ["healthy", "complete", "complete"]
        assert trainer.global_step < 8  # asked to stop after complete lasted 2 records
        assert records[1].alert["diagnosis"].startswith((SADDLE, FLAT))  # spectra of M at hand
        quality = ("z/rankme", "h/rankme", "z/lidar", "h/lidar", "h/alpha_req", "cka/z_h")
        assert all(isinstance(records[0].metrics[k], float) for k in quality)
        lines = [str(w.message) for w in caught if "collapse alert" in str(w.message)]
        assert len(lines) == 1 and "healthy -> complete at step 1" in lines[0]
        with open(Path(logger.log_dir) / "metrics.csv") as f:
            logged = [row["geometry/alert"] for row in csv.DictReader(f) if row["geometry/alert"]]
        assert {float(v) for v in logged} <= {0.0, float(STATES.index("complete"))}
        assert float(STATES.index("complete")) in {float(v) for v in logged}

    def test_default_never_stops(self, tmp_path: Path) -> None:
        _, trainer = fit_boring(tmp_path, [GeometryMonitor(_always_complete(tmp_path))], steps=4)
        assert trainer.global_step == 4
        assert read_records(tmp_path)[-1].alert["state"] == "complete"


def _features(rows: int, k: int, gen: torch.Generator, d: int = 128) -> torch.Tensor:
    """``rows`` Gaussian rows of width ``d`` in ``k`` random dimensions, variances k^-2.5.

    A decaying spectrum, as trained features have: its effective rank is 0.43 of min(M, d) on
    32 rows and 0.25 on 512 (k = d), so a threshold on that ratio reads the batch.
    """
    basis = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))[0][:, :k]
    scale = torch.arange(1, k + 1, dtype=torch.float64) ** -1.25
    return (torch.randn(rows, k, generator=gen, dtype=torch.float64) * scale) @ basis.T


def _measured(prefix: str, X: torch.Tensor) -> dict[str, Any]:
    return {**stats_record(prefix, X), f"{prefix}/dim": X.shape[1]}


class TestBatchSizeAndBackbone:
    def test_state_does_not_change_with_batch_size(self) -> None:
        # the same distributions measured on 32 and on 512 rows: healthy, then 2 dimensions
        states, batch_ratios = {}, {}
        for rows in (32, 512):
            gen = torch.Generator().manual_seed(0)
            seq = [_features(rows, 128, gen) for _ in range(3)]
            seq += [_features(rows, 2, gen) for _ in range(3)]
            alert = CollapseAlert(AlertConfig(patience=2))
            states[rows] = run_metrics(alert, [_measured("h", X) for X in seq])
            batch_ratios[rows] = ratios(_measured("h", seq[0]), "h")[1]  # type: ignore[index]
        assert states[32] == states[512] == ["healthy"] * 4 + ["dimensional"] * 2
        # the same healthy features read 0.43 and 0.25 of min(M, d): the default 0.35 on that
        # ratio (the former rule's kind) would call only the larger batch dimensional
        assert batch_ratios[32] > AlertConfig().dimensional_enter > batch_ratios[512]

    def test_a_batchnorm_ended_head_cannot_hide_a_collapsed_backbone(self) -> None:
        gen = torch.Generator().manual_seed(1)
        head = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32)).double()
        healthy = torch.randn(128, 64, generator=gen, dtype=torch.float64)
        collapsed = 1.0 + 1e-4 * torch.randn(128, 64, generator=gen, dtype=torch.float64)
        readings = []
        for Z in (healthy, healthy, collapsed, collapsed):
            with torch.no_grad():
                H = head(Z)  # training mode: BatchNorm rescales the tiny spread to unit variance
            readings.append({**_measured("z", Z), **_measured("h", H)})
        h_std = ratios(readings[-1], "h")[0]  # type: ignore[index]
        assert h_std > 0.5  # the head's output looks healthy
        with_z = run_metrics(CollapseAlert(AlertConfig(patience=2)), readings)
        only_h = run_metrics(CollapseAlert(AlertConfig(patience=2, read_z=False)), readings)
        assert with_z[-1] == "complete" and only_h == ["healthy"] * 4


def run_metrics(alert: CollapseAlert, records: list[dict[str, Any]]) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [alert.observe(i, m, None)["state"] for i, m in enumerate(records)]
