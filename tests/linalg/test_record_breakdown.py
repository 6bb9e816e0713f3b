"""benchmarks/record_breakdown.py: one record's time per part, with the products counted.

On solo-learn's VICReg loss and a BatchNorm head (the recipe's shape, smaller): the products
counted per operator are the record's own Lanczos steps, every wrapped function is restored
afterwards, and the parts' exclusive times add up to the record's time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

# solo-learn is optional (make check runs without it): the module skips, as the other solo tests
vicreg_loss_func = pytest.importorskip(
    "solo.losses.vicreg", reason="solo-learn 1.0.6 is not importable"
).vicreg_loss_func

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import record_breakdown  # noqa: E402

import solo_geometry.geometry.spectrum as spectrum  # noqa: E402
import solo_geometry.runtime.measure as measure_module  # noqa: E402
from solo_geometry.config import GeometryConfig, SpectrumConfig  # noqa: E402
from solo_geometry.linalg.operators import HeadOperators  # noqa: E402
from solo_geometry.runtime.view import GeometryView  # noqa: E402


def _view() -> GeometryView:
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 6))
    Z = torch.randn(2, 12, 8)

    def loss_of_outputs(H: Tensor) -> Tensor:
        return vicreg_loss_func(H[0], H[1])

    def loss_of_features(Z_: Tensor) -> Tensor:
        return loss_of_outputs(torch.stack([head(Z_[v]) for v in range(Z_.shape[0])]))

    return GeometryView(Z, head, loss_of_features, loss_of_outputs=loss_of_outputs)


class TestBreakdown:
    def test_counts_are_the_records_steps_and_parts_add_up(self) -> None:
        view, cfg = _view(), GeometryConfig(spectrum=SpectrumConfig(max_samples=6))
        record = measure_module.measure(
            view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False
        )
        out = record_breakdown.breakdown(view, cfg, step=1.0)
        for op in ("heff", "gn", "m"):
            assert out[f"breakdown/product/{op}/count"] == record.metrics[f"{op}/steps"]
        ends = ("/share", "/count", "in_steps", "/total")
        parts = [k for k in out if not k.endswith(ends)]
        assert abs(sum(out[k] for k in parts) - out["breakdown/total"]) < 1e-9
        assert out["breakdown/other"] >= -1e-6
        assert {"breakdown/setup", "breakdown/lanczos", "breakdown/stats"} <= set(out)

    def test_wrapped_functions_are_restored(self) -> None:
        before = (HeadOperators.heff, measure_module._stats, HeadOperators.__dict__["_grad_z"].func)
        record_breakdown.breakdown(
            _view(), GeometryConfig(spectrum=SpectrumConfig(max_samples=6)), step=1.0
        )
        after = (HeadOperators.heff, measure_module._stats, HeadOperators.__dict__["_grad_z"].func)
        assert before == after

    def test_paired_record_restores_the_row_wise_test(self) -> None:
        before = spectrum.row_wise
        out = record_breakdown.paired_record(
            _view(), GeometryConfig(spectrum=SpectrumConfig(max_samples=6)), 1.0, pairs=1
        )
        assert spectrum.row_wise is before and out["record/row_wise"] is False  # BatchNorm head
        assert out["record/ratio"] > 0
