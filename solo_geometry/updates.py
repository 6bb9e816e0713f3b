"""Per-epoch gradient norms and relative update sizes of the head and the backbone.

The paper's collapse experiment (experiments.py, ``run_collapse_experiment``) tracks, at every
step after the backward and before the optimiser step, for the projection head ("head", the
host's ``geometry_head()``) and the backbone separately, and averages them over the epoch's
steps:

* ``grad_norm``: ||g||_2 over every parameter with a gradient (the paper's "residual gradient
  norm" of the head, ``proj_update_norms_unnormalized``);
* ``grad_rms``: sqrt(||g||^2 / numel), the paper's parameter-count-normalised norm;
* ``rel_update``: lr ||g||_2 / (||theta||_2 + 1e-7), the paper's relative update size, lr the
  current rate of the parameter group that holds the part (its "timescale separation" is the
  head's over the backbone's);
* ``step_ratio``: ||theta_after - theta_before||_2 / ||theta_before||_2, the update the optimiser
  actually made (momentum and weight decay included), which the paper's formula approximates.

:class:`UpdateSizeMonitor` writes one :class:`UpdateRecord` per epoch to ``<run>/updates.jsonl``
(rank zero). It only reads parameters and gradients under ``no_grad``: training is unchanged.

Logged metrics (per epoch, in the record, ``<part>`` = ``head`` or ``backbone``):
    ``<part>/grad_norm``, ``<part>/grad_rms``, ``<part>/weight_norm``, ``<part>/rel_update``,
    ``<part>/step_ratio``, ``<part>/lr``, and ``timescale_ratio`` (head over backbone
    ``rel_update``, the epoch means).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn
from typing_extensions import override

from solo_geometry.measure import backbone_and_head
from solo_geometry.run_folder import RunFolder

__all__ = ["PARTS", "UPDATES_SCHEMA", "UpdateRecord", "UpdateSizeMonitor", "read_update_records"]

UPDATES_SCHEMA = 1
# The parts tracked: the head is the host's ``geometry_head()`` (DINO's ``head``), the backbone
# its ``backbone`` (``measure.backbone_and_head``).
PARTS = ("head", "backbone")
_EPS = 1e-7  # the paper's guard in lr ||g|| / (||w|| + 1e-7)


@dataclass(frozen=True)
class UpdateRecord:
    """One epoch of ``updates.jsonl``.

    Attributes:
        schema: format version (``UPDATES_SCHEMA``).
        epoch: the training epoch (0-based).
        steps: optimiser steps averaged over.
        metrics: epoch means, keys as in the module docstring.
    """

    schema: int
    epoch: int
    steps: int
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, line: str) -> UpdateRecord:
        """Parse one line; ValueError on an unknown schema version."""
        raw = json.loads(line)
        if raw.get("schema") != UPDATES_SCHEMA:
            raise ValueError(
                f"updates.jsonl: unknown schema {raw.get('schema')!r}; this reader knows "
                f"{UPDATES_SCHEMA}"
            )
        return cls(int(raw["schema"]), int(raw["epoch"]), int(raw["steps"]), dict(raw["metrics"]))


def read_update_records(run: str | Path) -> list[UpdateRecord]:
    """Read ``<run>/updates.jsonl`` (a torn last line is dropped); [] when absent."""
    path = RunFolder(Path(run)).updates
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(UpdateRecord.from_json(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return out


def _params(module: nn.Module) -> list[Tensor]:
    return [p for p in module.parameters() if p.requires_grad]


def _norm(tensors: list[Tensor]) -> float:
    """The square root of the sum of squared entries, accumulated in float64."""
    if not tensors:
        return 0.0
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


def _lr_of(optimizer: torch.optim.Optimizer, params: list[Tensor]) -> float:
    """The current rate of the group holding the first of ``params`` (0 when none does)."""
    if not params:
        return 0.0
    first = params[0]
    for group in optimizer.param_groups:
        if any(p is first for p in group["params"]):
            return float(group["lr"])
    return 0.0


class UpdateSizeMonitor(Callback):
    """Average head and backbone gradient norms and update sizes per epoch (read-only).

    Args:
        run_dir: the run folder for ``updates.jsonl``; None: the trainer's root dir.

    Raises:
        ValueError: in ``setup``, if the module lacks a ``backbone`` or a ``geometry_head()``.
    """

    def __init__(self, run_dir: str | Path | None = None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir) if run_dir else None
        self._sums: dict[str, float] = {}
        self._steps = 0
        self._before: dict[str, list[Tensor]] = {}
        self._weights: dict[str, float] = {}

    def _parts(self, pl_module: pl.LightningModule) -> dict[str, list[Tensor]]:
        backbone, head = backbone_and_head(pl_module, "update sizes")
        return {"head": _params(head), "backbone": _params(backbone)}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        backbone_and_head(pl_module, "update sizes")

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sums, self._steps = {}, 0

    def _add(self, key: str, value: float) -> None:
        self._sums[key] = self._sums.get(key, 0.0) + value

    @override
    @torch.no_grad()
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        for part, params in self._parts(pl_module).items():
            grads = [p.grad for p in params if p.grad is not None]
            g = _norm(grads)
            w = _norm([p for p in params if p.grad is not None])
            numel = sum(t.numel() for t in grads)
            lr = _lr_of(optimizer, params)
            self._add(f"{part}/grad_norm", g)
            self._add(f"{part}/grad_rms", g / math.sqrt(numel) if numel else 0.0)
            self._add(f"{part}/weight_norm", w)
            self._add(f"{part}/rel_update", lr * g / (w + _EPS))
            self._add(f"{part}/lr", lr)
            self._before[part] = [p.detach().clone() for p in params]
            self._weights[part] = _norm(params)

    @override
    @torch.no_grad()
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if not self._before:
            return  # no optimiser step in this batch
        for part, params in self._parts(pl_module).items():
            before = self._before[part]
            delta = _norm([p - b for p, b in zip(params, before, strict=True)])
            self._add(f"{part}/step_ratio", delta / (self._weights[part] + _EPS))
        self._before = {}
        self._steps += 1

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self._steps == 0:
            return
        metrics = {k: v / self._steps for k, v in sorted(self._sums.items())}
        bb = metrics.get("backbone/rel_update", 0.0)
        metrics["timescale_ratio"] = metrics.get("head/rel_update", 0.0) / (bb + 1e-8)
        record = UpdateRecord(UPDATES_SCHEMA, int(trainer.current_epoch), self._steps, metrics)
        path = RunFolder(self.run_dir or Path(trainer.default_root_dir)).updates
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(asdict(record)) + "\n")
