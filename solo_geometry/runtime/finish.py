"""Finishing a run whose training was already done: a resume from the checkpoint of its end.

A run killed after its last checkpoint (while writing the final record, the probes or the
report) holds a checkpoint that ends training; ``pretrain --resume`` then restores it and
Lightning skips the training loop, so ``on_train_start`` and ``on_train_end`` never run. The
callbacks finish in ``on_fit_end`` instead what the folder lacks: the final record (measured on
the first batch of the train loader, the loop having no batch of its own), the probes, the
report. These helpers say what is lacking and find the batch.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from solo_geometry.folder.records import RecordsError
from solo_geometry.folder.run_folder import RunFolder

__all__ = ["first_train_batch", "lacks_final_record"]


def lacks_final_record(trainer: pl.Trainer, run: RunFolder | None) -> bool:
    """Whether ``run``'s ``geometry.jsonl`` ends without a final record (rank zero's answer).

    Every rank gets rank zero's answer, so that all of them measure (a collective) or none.
    """
    lacks = False
    if trainer.is_global_zero and run is not None:
        try:
            records = run.records() if run.geometry.is_file() else []
        except (OSError, RecordsError):
            records = []
        lacks = not (records and records[-1].final)
    return bool(trainer.strategy.broadcast(lacks, src=0))


def first_train_batch(trainer: pl.Trainer) -> Any:
    """The first batch of the fit's train loader, None when there is none."""
    loaders = trainer.train_dataloader
    if isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    if isinstance(loaders, list | tuple):
        loaders = loaders[0] if loaders else None
    if loaders is None:
        return None
    return next(iter(loaders), None)
