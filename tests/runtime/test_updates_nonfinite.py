"""UpdateSizeMonitor under ``16-mixed``: the steps the GradScaler skips are counted, not averaged.

A real Lightning Trainer with its ``16-mixed`` plugin on the CPU (its own GradScaler) trains a
tiny module on four batches; the first two give non-finite gradients (the scaled gradients, then
the forward, overflow float16) and the scaler skips them. The epoch means must be those of the
two finite ones, against the same training replayed in plain torch with ``torch.autocast`` and a
GradScaler.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.utils.data import DataLoader, TensorDataset

from solo_geometry.runtime.updates import UpdateSizeMonitor, read_update_records
from tests.monitor_helpers import TinyHead

LR = 0.1


def _data() -> DataLoader:
    x = torch.randn(16, 5, generator=torch.Generator().manual_seed(1))
    # the first step's scaled gradients overflow float16 at the scaler's initial scale 2^16, as
    # they often do; the second batch overflows float16 in the forward: both steps are skipped
    x[4:8] *= 1e6
    return DataLoader(TensorDataset(x), batch_size=4, shuffle=False)


def _norm(ts: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))


def _reference() -> tuple[dict[str, float], int, int]:
    """Plain torch: autocast float16, GradScaler; the means over the steps it did not skip."""
    model = TinyHead(lr=LR)
    opt, scaler = model.configure_optimizers(), torch.amp.GradScaler("cpu")
    sums: dict[str, float] = {}
    steps = skipped = 0
    for (x,) in _data():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model.training_step((x,), 0)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        parts = {"head": model.head, "backbone": model.backbone}
        norms = {
            f"{p}/grad_norm": _norm([q.grad for q in m.parameters()]) for p, m in parts.items()
        }
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        if not all(math.isfinite(v) for v in norms.values()):
            assert scaler.get_scale() < scale  # the scaler did skip it
            skipped += 1
            continue
        steps += 1
        for k, v in norms.items():
            sums[k] = sums.get(k, 0.0) + v
    return {k: v / steps for k, v in sums.items()}, steps, skipped


def test_skipped_steps_are_counted_not_averaged(tmp_path: Path) -> None:
    monitor = UpdateSizeMonitor(tmp_path)
    # Lightning maps precision="16-mixed" to bf16-mixed on a CPU; its float16 plugin, GradScaler
    # included, runs there when passed as such (on a GPU it is what "16-mixed" selects)
    plugin = MixedPrecision("16-mixed", "cpu")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        plugins=[plugin],
        max_epochs=1,
        callbacks=[monitor],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(TinyHead(lr=LR), _data())
    (record,) = read_update_records(tmp_path)
    ref, steps, skipped = _reference()
    assert (steps, skipped) == (2, 2)
    assert (record.steps, record.nonfinite_steps) == (steps, skipped)
    assert all(math.isfinite(v) for v in record.metrics.values()), record.metrics
    for key, value in ref.items():
        assert record.metrics[key] == pytest.approx(value, rel=1e-5), key
    # the line is strict JSON: no Infinity or NaN
    line = (tmp_path / "updates.jsonl").read_text().splitlines()[0]
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-finite constant {c} written"))


def test_an_old_record_reads_with_no_count() -> None:
    from solo_geometry.runtime.updates import UpdateRecord

    old = UpdateRecord.from_json('{"schema": 1, "epoch": 0, "steps": 3, "metrics": {}}')
    assert old.nonfinite_steps == 0
