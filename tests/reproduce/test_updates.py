"""UpdateSizeMonitor against the same training replayed in plain torch, and its read-only-ness."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from solo_geometry.updates import UpdateSizeMonitor, read_update_records

STEPS, LR, MOMENTUM = 3, 0.1, 0.9


class Tiny(pl.LightningModule):
    """Its head is ``head`` (as DINO's), named to the monitor by ``geometry_head()`` only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Linear(5, 4)
        self.head = nn.Sequential(nn.Linear(4, 6), nn.SiLU(), nn.Linear(6, 3))

    def geometry_head(self) -> nn.Module:
        return self.head

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.head(self.backbone(x)).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            [{"params": self.backbone.parameters()}, {"params": self.head.parameters()}],
            lr=LR, momentum=MOMENTUM,
        )  # fmt: skip


def _data() -> DataLoader:
    x = torch.randn(STEPS * 4, 5, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(x), batch_size=4, shuffle=False)


def _norm(ts: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))


def _reference() -> dict[str, float]:
    """The same steps in plain torch: the paper's formulas, averaged over the steps."""
    model = Tiny()
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
    model = Tiny()
    reference_state = copy.deepcopy(model.state_dict())
    trainer = pl.Trainer(max_epochs=1, callbacks=[UpdateSizeMonitor(tmp_path)], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")  # fmt: skip
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
    replay = Tiny()
    replay.load_state_dict(reference_state)
    opt = replay.configure_optimizers()
    for (x,) in _data():
        opt.zero_grad()
        replay.training_step((x,), 0).backward()
        opt.step()
    for (k, a), b in zip(model.state_dict().items(), replay.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)


def test_unknown_schema_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "updates.jsonl").write_text(json.dumps({"schema": 9, "epoch": 0, "steps": 1,
                                                        "metrics": {}}) + "\n")  # fmt: skip
    with pytest.raises(ValueError, match="unknown schema 9"):
        read_update_records(tmp_path)


class NoHead(Tiny):
    geometry_head = None  # type: ignore[assignment]


def test_module_without_geometry_head_fails_at_setup(tmp_path: Path) -> None:
    trainer = pl.Trainer(max_epochs=1, callbacks=[UpdateSizeMonitor(tmp_path)], logger=False,
                         enable_progress_bar=False, accelerator="cpu")  # fmt: skip
    with pytest.raises(ValueError, match=r"NoHead: update sizes need .*geometry_head\(\)"):
        trainer.fit(NoHead(), _data())
