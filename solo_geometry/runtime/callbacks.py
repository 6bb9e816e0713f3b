"""The end-of-fit steps of a geometry run, and the callbacks every host attaches.

:func:`geometry_callbacks` is what a host adds to its Trainer when geometry is on, in this order
(Lightning runs ``on_train_end`` in list order):

1. :class:`~solo_geometry.runtime.monitor.GeometryMonitor`: measurements during training, the final
   record at the end of fit;
2. :class:`ProbeCallback`: backbone-vs-head probes and the orbit table, when enabled and a
   labelled image folder exists;
3. :class:`ReportCallback`: ``report/index.html`` and its plots, probes or not (unless
   ``geometry.report`` is off, as in the reproduce sweeps, which draw a page of their own).

Their inputs are checked in ``setup``, before the first training step: a module without a
``backbone`` and a head named by its ``geometry_head()`` (DINO's is ``head``, never looked up
by an attribute name), or a probe folder that does not exist, is an error naming the value.
Failures after training (probes, report) are warnings: they never turn a finished training run
into a failed one. Output on rank zero only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from typing_extensions import override

from solo_geometry.analysis.evaluation import evaluate
from solo_geometry.analysis.report import write_report
from solo_geometry.config import GeometryConfig, ProbesConfig
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD, MeanStd
from solo_geometry.inputs.sizes import check_one_size, probe_folders
from solo_geometry.runtime.heldout import HeldOutBatch
from solo_geometry.runtime.monitor import GeometryMonitor
from solo_geometry.runtime.precision import exact_matmul, float32_copy, holds_dtype
from solo_geometry.runtime.sink import note_unwritten, one_line
from solo_geometry.runtime.updates import UpdateSizeMonitor
from solo_geometry.runtime.view import backbone_and_head
from solo_geometry.state import preserved_state

# Under ``bf16-true``, ``16-true`` and ``64-true`` the probes run float32 copies of the modules
# on their float32 images (precision.float32_copy).
OTHER_FLOATS = (torch.float16, torch.bfloat16, torch.float64)

__all__ = [
    "ProbeCallback",
    "ReportCallback",
    "check_probe_images",
    "geometry_callbacks",
    "probe_data",
    "untrained_builder",
]


def _run_of(run_dir: Path | None, trainer: pl.Trainer) -> RunFolder:
    return RunFolder(run_dir or Path(trainer.default_root_dir))


def probe_data(
    cfg: ProbesConfig, train_dir: str | Path | None, val_dir: str | Path | None
) -> Path | tuple[Path, Path] | None:
    """The probes' data: ``cfg.data``, else (recipe train split, val split), else the val split.

    Returns:
        A folder, a (probe-train, held-out) pair, or None when there is no labelled folder.
    """
    if cfg.data:
        return Path(cfg.data)
    if not val_dir:
        return None
    if train_dir and Path(train_dir).is_dir():
        return Path(train_dir), Path(val_dir)  # fit on the train split, score on held-out
    return Path(val_dir)


def check_probe_images(
    cfg: ProbesConfig, train_dir: str | Path | None, val_dir: str | Path | None
) -> None:
    """Before launch: the folders the probes will read hold images of one size.

    Raises:
        ValueError: naming the recipe field and two files of different sizes (or a
            non-square one with the rotation target); see
            :func:`solo_geometry.inputs.sizes.check_one_size`.
    """
    data = probe_data(cfg, train_dir, val_dir) if cfg.enabled else None
    if data is None:
        return
    if cfg.data:
        where = f"geometry.probes.data={cfg.data!r}"
    elif isinstance(data, tuple):
        where = f"data.train_path={str(train_dir)!r} and data.val_path={str(val_dir)!r}"
    else:
        where = f"data.val_path={str(val_dir)!r}"
    check_one_size(
        probe_folders(data),
        where,
        square="rotation" in cfg.targets,
        hint="; or turn the probes off: geometry.probes.enabled=false",
    )


def untrained_builder(pl_module: Any) -> Callable[[], tuple[nn.Module, nn.Module]] | None:
    """The module's own constructor as a ``() -> (backbone, head)`` builder, for the probes.

    A host module offers ``geometry_untrained()``: a new module built as this one was (same
    class, same recipe, head swap and initialisers), untrained. The probes call the builder
    under a fixed seed and probe the same architecture at random initialisation beside the
    trained one. None for a module without it (the rows say "not measured").
    """
    rebuild = getattr(pl_module, "geometry_untrained", None)
    if not callable(rebuild):
        return None
    return lambda: backbone_and_head(rebuild(), "probes")


class ProbeCallback(Callback):
    """Probe the backbone and the head once, at the end of fit (rank zero).

    Each probe row also holds the same probe on the same network at random initialisation
    (:func:`untrained_builder`), so ``probes.json`` says whether training helped.

    Args:
        cfg: the ``geometry.probes`` node.
        data: from :func:`probe_data`; None: probes skipped with a note.
        run_dir: where ``probes.json`` goes; None: the trainer's root dir.
        mean_std: the recipe's input normalisation.

    Raises:
        TypeError: if ``cfg`` is not a :class:`ProbesConfig`.
        ValueError: in ``setup``, for a probe folder that does not exist or a module without
            a ``backbone`` and a ``geometry_head()``.
    """

    def __init__(
        self,
        cfg: ProbesConfig,
        data: Path | tuple[Path, Path] | None,
        run_dir: str | Path | None,
        mean_std: MeanStd,
    ) -> None:
        super().__init__()
        if not isinstance(cfg, ProbesConfig):
            raise TypeError(f"cfg must be a ProbesConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.data = data
        self.run_dir = Path(run_dir) if run_dir else None
        self.mean_std = mean_std
        self.result: Any = None
        self.ran = False  # whether on_train_end ran in this fit

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        folders = self.data if isinstance(self.data, tuple) else (self.data,)
        for folder in folders:
            if folder is not None and not Path(folder).is_dir():
                key = "geometry.probes.data" if self.cfg.data else "data.train_path/val_path"
                raise ValueError(f"{key}: probe folder {str(folder)!r} does not exist")
        backbone_and_head(pl_module, "probes")

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A resume whose checkpoint ended training: the probes, unless the folder holds them."""
        if not self.ran and not _run_of(self.run_dir, trainer).probes.is_file():
            self.on_train_end(trainer, pl_module)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.ran = True
        if not trainer.is_global_zero:
            return
        if self.data is None:
            rank_zero_info("solo-geometry: probes skipped, no labelled image folder")
            return
        run = _run_of(self.run_dir, trainer)
        backbone, head = backbone_and_head(pl_module, "probes")
        try:
            with preserved_state(pl_module), exact_matmul():
                pl_module.eval()
                backbone, head = (
                    float32_copy(m, OTHER_FLOATS) if holds_dtype(m, OTHER_FLOATS) else m
                    for m in (backbone, head)
                )
                self.result = evaluate(
                    backbone,
                    head,
                    self.data,
                    run,
                    self.cfg,
                    mean_std=self.mean_std,
                    device=pl_module.device,
                    random_init=untrained_builder(pl_module),
                )
            rank_zero_info(f"solo-geometry: probes written to {run.probes}")
        except Exception as err:  # noqa: BLE001 - probes never fail a finished run
            rank_zero_warn(f"solo-geometry: probes failed: {type(err).__name__}: {err}")
            if isinstance(err, OSError):  # a full disk: the run ends non-zero (sink.py)
                note_unwritten(trainer, f"{one_line(err)}; no probes.json")


class ReportCallback(Callback):
    """Write ``report/index.html`` and its plots at the end of fit (rank zero).

    Args:
        run_dir: the run folder; None: the trainer's root dir.
    """

    def __init__(self, run_dir: str | Path | None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir) if run_dir else None
        self.index: Path | None = None
        self.ran = False  # whether on_train_end ran in this fit

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A resume whose checkpoint ended training (no loop ran): the report, drawn again."""
        if not self.ran:
            self.on_train_end(trainer, pl_module)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.ran = True
        if not trainer.is_global_zero:
            return
        run = _run_of(self.run_dir, trainer)
        try:
            self.index = write_report([run.path])
            rank_zero_info(f"solo-geometry: report written to {self.index}")
        except Exception as err:  # noqa: BLE001 - the report never fails a finished run
            rank_zero_warn(f"solo-geometry: report failed: {type(err).__name__}: {err}")
            if isinstance(err, OSError):
                note_unwritten(trainer, f"{one_line(err)}; no report")


def geometry_callbacks(
    cfg: GeometryConfig,
    *,
    run_dir: str | Path | None,
    meta: Mapping[str, Any],
    train_dir: str | Path | None = None,
    val_dir: str | Path | None = None,
    normalisation: MeanStd = IMAGENET_MEAN_STD,
) -> list[Callback]:
    """The monitor, the probes (when enabled) and the report, for one run.

    Args:
        cfg: the validated ``geometry`` node.
        run_dir: the run folder (None: the trainer's root dir).
        meta: plain facts stored with the first record and the checkpoint (host, method).
        train_dir: the recipe's ``data.train_path``.
        val_dir: the recipe's ``data.val_path``.
        normalisation: the recipe's input ``(mean, std)`` (``datasets.mean_std_of``), which
            the probes apply to their images.

    Returns:
        The callbacks, in the order they must run.
    """
    out_cfg = cfg if cfg.out_dir or run_dir is None else _with_out_dir(cfg, run_dir)
    monitor = GeometryMonitor(out_cfg, meta=meta)
    rows = cfg.alert.heldout if cfg.alert.enabled else 0
    monitor.heldout = HeldOutBatch(rows, val_dir or cfg.probes.data or None, normalisation)
    callbacks: list[Callback] = [monitor]
    if cfg.measure.updates:
        callbacks.append(UpdateSizeMonitor(run_dir))
    if cfg.probes.enabled:
        data = probe_data(cfg.probes, train_dir, val_dir)
        callbacks.append(ProbeCallback(cfg.probes, data, run_dir, normalisation))
    if cfg.report:
        callbacks.append(ReportCallback(run_dir))
    return callbacks


def _with_out_dir(cfg: GeometryConfig, run_dir: str | Path) -> GeometryConfig:
    return dataclasses.replace(cfg, out_dir=str(run_dir))
