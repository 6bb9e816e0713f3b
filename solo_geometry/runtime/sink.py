"""Where a record goes: ``geometry.jsonl`` on rank zero, and every Lightning logger.

Neither failing stops training: an unwritable run folder and a logger that raises are each
warned once (through the monitor's ``warn`` callable) and the measurements go on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import lightning.pytorch as pl

from solo_geometry.run.records import GeometryRecord
from solo_geometry.run.run_folder import RunFolder

__all__ = ["log_record", "write_record"]

Warn = Callable[[str, str], None]


def write_record(run: RunFolder | None, record: GeometryRecord, warn: Warn) -> None:
    """Append ``record`` to the run's ``geometry.jsonl`` (rank zero's call); never raises."""
    if run is None:
        return
    try:
        run.append_record(record)
    except (OSError, ValueError) as err:  # an unwritable folder never stops training
        warn(
            "write",
            f"GeometryMonitor: cannot write {run.geometry}: {err!r}; "
            "measurements continue, unrecorded",
        )


def scalars_of(record: GeometryRecord, extra: Mapping[str, float]) -> dict[str, float]:
    """The record's numeric metrics as ``geometry/<name>``, with ``extra`` and the bookkeeping."""
    out = {
        f"geometry/{k}": float(v)
        for k, v in record.metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    out.update({"geometry/n_skipped": float(record.n_skipped), **extra})
    out["geometry/seconds"] = record.seconds
    return out


def log_record(
    trainer: pl.Trainer,
    pl_module: pl.LightningModule,
    record: GeometryRecord,
    extra: Mapping[str, float],
    warn: Warn,
) -> None:
    """Log the record's scalars: through ``pl_module.log`` mid-fit, to the loggers at the end."""
    scalars = scalars_of(record, extra)
    try:
        if record.final:
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=record.step)
        else:
            for key, value in scalars.items():
                pl_module.log(key, value, on_step=True, on_epoch=False, rank_zero_only=True)
    except Exception as err:  # noqa: BLE001 - logging must not stop training either
        warn("log", f"GeometryMonitor: could not log metrics: {err!r}")
