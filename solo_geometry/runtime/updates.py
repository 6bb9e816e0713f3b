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

And the paper's collapse statistic from the step's own training forward (no extra forward): the
projector's outputs of every view of the step, captured by a forward hook between the batch's
start and the backward, concatenated to (V N, p), rows L2-normalised, ``std(dim=0).mean()``
(experiments.py: ``torch.std(F.normalize(cat(z1, z2)), dim=0).mean()``, the monitor's
:func:`~solo_geometry.geometry.stats.normalized_std`): ``head/output_std``, averaged over the
epoch's steps like the rest. It is at most
:func:`~solo_geometry.geometry.stats.std_ceiling` of its rows and width, recorded as
``head/output_rows`` and ``head/output_dim``.

:class:`UpdateSizeMonitor` writes one :class:`UpdateRecord` per epoch to ``<run>/updates.jsonl``
(rank zero). It only reads parameters and gradients under ``no_grad``: training is unchanged.
A step whose numbers are not all finite (under ``16-mixed``, a step the GradScaler skips for
inf/NaN gradients) is left out of the epoch means and counted in ``nonfinite_steps``.

Logged metrics (per epoch, in the record, ``<module>`` one of :data:`TRACKED_MODULES`):
    ``<module>/grad_norm``, ``<module>/grad_rms``, ``<module>/weight_norm``,
    ``<module>/rel_update``, ``<module>/step_ratio``, ``<module>/lr``, ``timescale_ratio``
    (head over backbone ``rel_update``, the epoch means), ``head/output_std``,
    ``head/output_rows`` and ``head/output_dim``.
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

from solo_geometry.folder.atomic import append_line
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import MAX_RECORDS_BYTES, read_text
from solo_geometry.geometry.stats import normalized_std
from solo_geometry.runtime.view import backbone_and_head

__all__ = [
    "TRACKED_MODULES",
    "UPDATES_SCHEMA",
    "UpdateRecord",
    "UpdateSizeMonitor",
    "read_update_records",
]

UPDATES_SCHEMA = 1
# The modules tracked: the head is the host's ``geometry_head()`` (DINO's ``head``), the backbone
# its ``backbone`` (``view.backbone_and_head``).
TRACKED_MODULES = ("head", "backbone")
_EPS = 1e-7  # the paper's guard in lr ||g|| / (||w|| + 1e-7)


@dataclass(frozen=True)
class UpdateRecord:
    """One epoch of ``updates.jsonl``.

    Attributes:
        schema: format version (``UPDATES_SCHEMA``).
        epoch: the training epoch (0-based).
        steps: optimiser steps averaged over.
        metrics: epoch means, keys as in the module docstring.
        nonfinite_steps: steps left out of the means for a non-finite number (inf/NaN
            gradients: steps a GradScaler skips).
    """

    schema: int
    epoch: int
    steps: int
    metrics: dict[str, float] = field(default_factory=dict)
    nonfinite_steps: int = 0

    @classmethod
    def from_json(cls, line: str) -> UpdateRecord:
        """Parse one line; ValueError on an unknown schema version."""
        raw = json.loads(line)
        if raw.get("schema") != UPDATES_SCHEMA:
            raise ValueError(
                f"updates.jsonl: unknown schema {raw.get('schema')!r}; this reader knows "
                f"{UPDATES_SCHEMA}"
            )
        return cls(
            int(raw["schema"]),
            int(raw["epoch"]),
            int(raw["steps"]),
            dict(raw["metrics"]),
            int(raw.get("nonfinite_steps", 0)),
        )


def read_update_records(run: str | Path) -> list[UpdateRecord]:
    """Read ``<run>/updates.jsonl`` (a torn last line is dropped); [] when absent."""
    path = RunFolder(Path(run)).updates
    if not path.is_file() and not path.is_symlink():
        return []
    lines = read_text(path, MAX_RECORDS_BYTES, "update records file").splitlines()
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
    """The L2 norm of all entries of ``tensors``.

    Each tensor's ``norm(2)`` in its dtype (the paper's ``p.grad.norm(2).item()``), their
    squares summed in float64. A float64 copy of every tensor would be exact to more digits but
    costs about 30x as much on a CPU (0.6 s against 0.02 s for ResNet-18's parameters), more
    than the training step itself.
    """
    if not tensors:
        return 0.0
    return math.sqrt(sum(float(torch.linalg.vector_norm(t.detach())) ** 2 for t in tensors))


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
        self._step: dict[str, float] = {}  # this step's numbers, added once all are finite
        self._steps = 0
        self._nonfinite = 0
        self._before: dict[str, list[Tensor]] = {}
        self._weights: dict[str, float] = {}
        self._outputs: list[Tensor] | None = None  # the step's projector outputs while armed
        self._pending: dict[str, float] = {}  # the step's output std, added with its step
        self._hook: torch.utils.hooks.RemovableHandle | None = None

    def _tracked(self, pl_module: pl.LightningModule) -> dict[str, list[Tensor]]:
        backbone, head = backbone_and_head(pl_module, "update sizes")
        return {"head": _params(head), "backbone": _params(backbone)}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        _, head = backbone_and_head(pl_module, "update sizes")  # the host's geometry_head()
        if self._hook is None:
            self._hook = head.register_forward_hook(self._capture)

    def _capture(self, module: nn.Module, inputs: Any, output: Any) -> None:
        """Keep the projector's output of the training forward (a reference, detached)."""
        if self._outputs is not None and isinstance(output, Tensor):
            self._outputs.append(output.detach())

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._outputs = []

    @override
    @torch.no_grad()
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor
    ) -> None:
        outputs, self._outputs = self._outputs, None  # disarmed: later forwards are not the step's
        if outputs:
            h = torch.cat([o.flatten(1) for o in outputs])  # (views * batch, dim)
            rows, dim = h.shape
            self._pending = {
                "head/output_std": normalized_std(h) if rows > 1 else math.nan,
                "head/output_rows": float(rows),
                "head/output_dim": float(dim),
            }

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sums, self._step, self._steps, self._nonfinite = {}, {}, 0, 0

    def _add(self, key: str, value: float) -> None:
        self._step[key] = value

    def _end_step(self) -> None:
        """Add this step's numbers to the epoch's sums, or count it if one is not finite."""
        step, self._step = self._step, {}
        if not all(math.isfinite(v) for v in step.values()):
            self._nonfinite += 1
            return
        for key, value in step.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._steps += 1

    @override
    @torch.no_grad()
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        for name, params in self._tracked(pl_module).items():
            grads = [p.grad for p in params if p.grad is not None]
            g = _norm(grads)
            w = _norm([p for p in params if p.grad is not None])
            numel = sum(t.numel() for t in grads)
            lr = _lr_of(optimizer, params)
            self._add(f"{name}/grad_norm", g)
            self._add(f"{name}/grad_rms", g / math.sqrt(numel) if numel else 0.0)
            self._add(f"{name}/weight_norm", w)
            self._add(f"{name}/rel_update", lr * g / (w + _EPS))
            self._add(f"{name}/lr", lr)
            self._before[name] = [p.detach().clone() for p in params]
            self._weights[name] = _norm(params)

    @override
    @torch.no_grad()
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self._before:
            return  # no optimiser step in this batch
        for name, params in self._tracked(pl_module).items():
            before = self._before[name]
            delta = _norm([p - b for p, b in zip(params, before, strict=True)])
            self._add(f"{name}/step_ratio", delta / (self._weights[name] + _EPS))
        self._before = {}
        for key, value in self._pending.items():
            self._add(key, value)
        self._pending = {}
        self._end_step()

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self._steps + self._nonfinite == 0:
            return
        metrics = {k: v / self._steps for k, v in sorted(self._sums.items())}
        if self._steps:
            bb = metrics.get("backbone/rel_update", 0.0)
            metrics["timescale_ratio"] = metrics.get("head/rel_update", 0.0) / (bb + 1e-8)
        record = UpdateRecord(
            UPDATES_SCHEMA, int(trainer.current_epoch), self._steps, metrics, self._nonfinite
        )
        path = RunFolder(self.run_dir or Path(trainer.default_root_dir)).updates
        path.parent.mkdir(parents=True, exist_ok=True)
        append_line(path, json.dumps(asdict(record)))
