"""Preemption inside the trainer: stop at a step boundary, checkpoint, say so.

:class:`PreemptionCallback` is attached by both hosts. On SIGTERM (Lightning's own handler
already stops the loop at the end of the current step, raising ``SIGTERMException``) or SIGUSR1
(handled here the same way, unless Lightning's SLURM auto-requeue handler owns it), it writes
``checkpoints/preempted.ckpt`` once the step is done, every record of the step written and the
monitor's state in the checkpoint, and the marker of :mod:`solo_geometry.folder.preempted`; the
command that started the run then exits non-zero with the resume line.

A scheduler signals every process of the job, data-loader workers included, and PyTorch's
workers die of a SIGTERM not sent by their parent, so the main process would fail in its next
fetch (``DataLoader worker ... is killed by signal: Terminated``) instead of checkpointing: the
callback makes the workers of the fit's train and val loaders ignore SIGTERM and SIGUSR1 (they
end when the main process shuts them down, or with SIGKILL).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import CombinedLoader, rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from solo_geometry.folder.preempted import write_marker
from solo_geometry.folder.run_folder import RunFolder

__all__ = ["PREEMPT_SIGNALS", "PreemptionCallback", "QuietWorker"]

PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class QuietWorker:
    """A ``worker_init_fn`` ignoring the preemption signals, then running the loader's own."""

    def __init__(self, inner: Callable[[int], Any] | None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        """Ignore SIGTERM and SIGUSR1 in worker ``worker_id``, then the loader's own init."""
        for signum in PREEMPT_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        if self.inner is not None:
            self.inner(worker_id)


def _fit_loaders(trainer: pl.Trainer) -> list[DataLoader]:
    """The train and val loaders given to ``fit`` (before their iterators and workers exist)."""
    loaders = []
    for loop in (trainer.fit_loop, trainer.fit_loop.epoch_loop.val_loop):
        source = getattr(getattr(loop, "_data_source", None), "instance", None)
        if isinstance(source, CombinedLoader):
            source = source.flattened
        if isinstance(source, dict):
            source = list(source.values())
        if isinstance(source, DataLoader):
            source = [source]
        found = source if isinstance(source, list | tuple) else []
        loaders += [dl for dl in found if isinstance(dl, DataLoader)]
    return loaders


class PreemptionCallback(Callback):
    """Checkpoint at the step boundary after SIGTERM or SIGUSR1 (see the module).

    Args:
        run_dir: the run folder (``checkpoints/preempted.ckpt`` and the marker go there).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run = RunFolder(Path(run_dir))
        self.received: int | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Quiet the fit's loaders' workers (their iterators are created after this hook)."""
        for loader in _fit_loaders(trainer) if stage == "fit" else []:
            if loader.num_workers > 0 and not isinstance(loader.worker_init_fn, QuietWorker):
                loader.worker_init_fn = QuietWorker(loader.worker_init_fn)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Note which signal arrives; SIGUSR1 stops the loop as SIGTERM does (Lightning's)."""
        self.received = None
        lightning_sigterm = signal.getsignal(signal.SIGTERM)

        def noted(signum: int, frame: FrameType | None) -> None:
            self.received = self.received or signum
            if callable(lightning_sigterm):
                lightning_sigterm(signum, frame)

        signal.signal(signal.SIGTERM, noted)  # Lightning restores its own at teardown
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):  # not SLURM's requeue
            signal.signal(signal.SIGUSR1, noted)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        """After the step the signal interrupted: the checkpoint (every rank), the marker."""
        if not isinstance(exception, SIGTERMException):
            return
        path = self.run.preempted_checkpoint
        trainer.save_checkpoint(path)  # a collective; rank zero writes
        if trainer.is_global_zero:
            write_marker(self.run, self.received or signal.SIGTERM, trainer.global_step - 1, path)
            rank_zero_info(f"solo-geometry: preempted, checkpoint written: {path}")
