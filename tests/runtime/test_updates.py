"""UpdateSizeMonitor against the same training replayed in plain torch, and its read-only-ness."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from solo_geometry.runtime.updates import UpdateSizeMonitor, read_update_records
from tests.monitor_helpers import TinyHead

STEPS, LR, MOMENTUM = 3, 0.1, 0.9


def _data() -> DataLoader:
    x = torch.randn(STEPS * 4, 5, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(x), batch_size=4, shuffle=False)


def _norm(ts: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))


def _reference() -> dict[str, float]:
    """The same steps in plain torch: the paper's formulas, averaged over the steps."""
    model = TinyHead(lr=LR, momentum=MOMENTUM)
    opt = model.configure_optimizers()
    sums: dict[str, float] = {}
    for (x,) in _data():
        opt.zero_grad()
        model.training_step((x,), 0).backward()
        for part in ("head", "backbone"):
            mod = model.head if part == "head" else model.backbone
            params = list(mod.parameters())
            g, w = _norm([p.grad for p in params]), _norm(params)
            before = [p.detach().clone() for p in params]
            sums[f"{part}/grad_norm"] = sums.get(f"{part}/grad_norm", 0) + g
            sums[f"{part}/rel_update"] = sums.get(f"{part}/rel_update", 0) + LR * g / (w + 1e-7)
            sums[f"{part}/before"] = before  # type: ignore[assignment]
            sums[f"{part}/w"] = w
        opt.step()
        for part in ("head", "backbone"):
            mod = model.head if part == "head" else model.backbone
            delta = _norm(
                [p - b for p, b in zip(mod.parameters(), sums[f"{part}/before"], strict=True)]
            )
            key = f"{part}/step_ratio"
            sums[key] = sums.get(key, 0) + delta / (sums[f"{part}/w"] + 1e-7)
    return {k: v / STEPS for k, v in sums.items() if not k.endswith(("/before", "/w"))}


def test_epoch_means_match_plain_torch(tmp_path: Path) -> None:
    model = TinyHead(lr=LR, momentum=MOMENTUM)
    reference_state = copy.deepcopy(model.state_dict())
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[UpdateSizeMonitor(tmp_path)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(model, _data())
    (record,) = read_update_records(tmp_path)
    assert record.epoch == 0 and record.steps == STEPS
    want = _reference()
    for key, value in want.items():
        assert record.metrics[key] == pytest.approx(value, rel=1e-6), key
    assert record.metrics["head/lr"] == pytest.approx(LR)
    ratio = want["head/rel_update"] / (want["backbone/rel_update"] + 1e-8)
    assert record.metrics["timescale_ratio"] == pytest.approx(ratio, rel=1e-6)
    # read-only: the trained weights equal the plain-torch replay's
    replay = TinyHead(lr=LR, momentum=MOMENTUM)
    replay.load_state_dict(reference_state)
    opt = replay.configure_optimizers()
    for (x,) in _data():
        opt.zero_grad()
        replay.training_step((x,), 0).backward()
        opt.step()
    for (k, a), b in zip(model.state_dict().items(), replay.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)


def test_unknown_schema_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "updates.jsonl").write_text(
        json.dumps({"schema": 9, "epoch": 0, "steps": 1, "metrics": {}}) + "\n"
    )
    with pytest.raises(ValueError, match="unknown schema 9"):
        read_update_records(tmp_path)


class NoHead(TinyHead):
    geometry_head = None  # type: ignore[assignment]


def test_module_without_geometry_head_fails_at_setup(tmp_path: Path) -> None:
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[UpdateSizeMonitor(tmp_path)],
        logger=False,
        enable_progress_bar=False,
        accelerator="cpu",
    )
    with pytest.raises(ValueError, match=r"NoHead: update sizes need .*geometry_head\(\)"):
        trainer.fit(NoHead(lr=LR, momentum=MOMENTUM), _data())


class TwoViews(TinyHead):
    """Two views through the projector per step, and a third call after the backward (as the
    geometry monitor makes) that is not the step's forward."""

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        h1, h2 = self.head(self.backbone(x)), self.head(self.backbone(x.flip(0) * 2))
        return -torch.nn.functional.cosine_similarity(h1, h2.detach() + 1).mean()

    def on_after_backward(self) -> None:
        with torch.no_grad():
            self.head(torch.randn(7, 4))  # a measurement's forward: must not be counted


def test_output_std_is_the_papers_statistic_of_the_steps_forward(tmp_path: Path) -> None:
    model = TwoViews(lr=LR, momentum=MOMENTUM)
    replay = copy.deepcopy(model)
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[UpdateSizeMonitor(tmp_path)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(model, _data())
    (record,) = read_update_records(tmp_path)
    # the paper's loop (experiments.py): std of F.normalize(cat(z1, z2)) after the forward
    opt, stds = replay.configure_optimizers(), []
    for (x,) in _data():
        z1, z2 = (
            replay.head(replay.backbone(x)),
            replay.head(replay.backbone(x.flip(0) * 2)),
        )
        z = torch.cat([z1, z2]).detach().double()
        z = z / z.norm(dim=1, keepdim=True)
        stds.append(float(z.std(dim=0).mean()))
        opt.zero_grad()
        (-torch.nn.functional.cosine_similarity(z1, z2.detach() + 1).mean()).backward()
        opt.step()
    assert record.metrics["head/output_std"] == pytest.approx(sum(stds) / STEPS, rel=1e-9)
    assert record.metrics["head/output_rows"] == 8 and record.metrics["head/output_dim"] == 3
