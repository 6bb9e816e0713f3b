"""ProbeCallback: backbone-vs-head probes and the run report at the end of fit.

Runs :func:`solo_geometry.probes.probe_report` once when training ends, on rank zero, on the
module's ``backbone`` and head (``projector``, or ``geometry_view``'s head), then
:func:`solo_geometry.report.write_report` on the run folder. Without a labelled image folder
(``ProbesConfig.data`` or the recipe's val folder) it prints a note and does nothing. A failure
is a warning: probes never turn a finished training run into a failed one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from typing_extensions import override

from solo_geometry.config import ProbesConfig

__all__ = ["ProbeCallback"]


class ProbeCallback(Callback):
    """Probe the backbone and the head once, at the end of fit.

    Args:
        cfg: the probes node of the geometry config.
        data_dir: a labelled image folder (``<class>/*.png``, or with ``train/`` and ``val/``);
            None or missing: the probes are skipped with a note.
        run_dir: where ``probes.json`` and ``report/`` go; None: the trainer's root dir.
        train_dir: the recipe's train split, to fit the probes on (scored on ``data_dir``);
            unused when ``cfg.data`` names the folder, None or missing: ``data_dir`` alone
            provides both splits.

    Raises:
        TypeError: if ``cfg`` is not a :class:`ProbesConfig`.
    """

    def __init__(
        self,
        cfg: ProbesConfig,
        data_dir: str | Path | None,
        run_dir: str | Path | None,
        train_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(cfg, ProbesConfig):
            raise TypeError(f"cfg must be a ProbesConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.data_dir = Path(data_dir) if data_dir else None
        self.run_dir = Path(run_dir) if run_dir else None
        self.train_dir = Path(train_dir) if train_dir and not cfg.data else None
        self.result: dict[str, Any] | None = None

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or not self.cfg.enabled:
            return
        if self.data_dir is None or not self.data_dir.is_dir():
            rank_zero_info(
                f"solo-geometry: probes skipped, no labelled image folder ({self.data_dir})"
            )
            return
        run = self.run_dir or Path(trainer.default_root_dir)
        try:
            self.result = self._probe(pl_module, run)
        except Exception as err:  # noqa: BLE001 - probes never fail a finished run
            rank_zero_warn(f"solo-geometry: probes failed: {type(err).__name__}: {err}")

    def _probe(self, pl_module: pl.LightningModule, run: Path) -> dict[str, Any]:
        from solo_geometry.probes import probe_report
        from solo_geometry.report import write_report

        backbone, head = pl_module.backbone, pl_module.projector
        if not isinstance(backbone, nn.Module) or not isinstance(head, nn.Module):
            raise TypeError(f"{type(pl_module).__name__} needs 'backbone' and 'projector' modules")
        assert self.data_dir is not None
        data: Path | tuple[Path, Path] = self.data_dir
        if self.train_dir is not None and self.train_dir.is_dir():
            data = (self.train_dir, self.data_dir)  # fit on the train split, score on held-out
        was_training = pl_module.training
        try:
            pl_module.eval()
            result = probe_report(
                backbone, head, data, run,
                batch_size=self.cfg.batch_size, device=pl_module.device,
            )  # fmt: skip
        finally:
            pl_module.train(was_training)
        write_report([run])
        rank_zero_info(f"solo-geometry: probes written to {run / 'probes.json'}")
        return dict(result)
