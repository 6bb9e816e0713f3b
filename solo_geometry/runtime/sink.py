"""Where a record goes: ``geometry.jsonl`` on rank zero, and every Lightning logger.

Neither failing stops training: an unwritable run folder and a logger that raises are each
warned once (through the monitor's ``warn`` callable) and the measurements go on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import NoReturn

import lightning.pytorch as pl

from solo_geometry.folder.records import GeometryRecord
from solo_geometry.folder.run_folder import RunFolder

__all__ = [
    "UNWRITTEN_STATUS",
    "Unwritten",
    "exit_unwritten",
    "log_record",
    "note_unwritten",
    "one_line",
    "unwritten_in",
    "write_record",
]

Warn = Callable[[str, str], None]
# The exit status of a run that trained to the end but could not write all its files (a full
# disk): not 0 (something is missing), not 2 (no bad input), not 128 + n (no signal).
UNWRITTEN_STATUS = 3


class Unwritten(Exception):
    """A finished run some of whose files could not be written; the message is one line."""

    status = UNWRITTEN_STATUS


def exit_unwritten(message: str) -> NoReturn:
    """Print ``message`` as the last line on stderr and exit :data:`UNWRITTEN_STATUS`."""
    sys.stdout.flush()
    print(f"solo-geometry: {message}", file=sys.stderr, flush=True)
    raise SystemExit(UNWRITTEN_STATUS)


def one_line(err: Exception) -> str:
    """An error's message without the ``[Errno n]`` prefix an ``OSError`` prints, its file named."""
    if not isinstance(err, OSError) or not err.strerror:
        return str(err)
    if err.filename is None or str(err.filename) in err.strerror:  # WriteError names it
        return err.strerror
    return f"cannot write {str(err.filename)!r}: {err.strerror}"


def unwritten_in(trainer: pl.Trainer) -> str | None:
    """The first failed write the run's monitor kept (a callback's ``unwritten``), or None."""
    found = (getattr(c, "unwritten", None) for c in trainer.callbacks)  # type: ignore[attr-defined]
    return next((message for message in found if message), None)


def note_unwritten(trainer: pl.Trainer, message: str) -> None:
    """Tell the run's monitor (any callback with ``unwritten``) of the first failed write."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if hasattr(callback, "unwritten") and callback.unwritten is None:
            callback.unwritten = message


def write_record(run: RunFolder | None, record: GeometryRecord, warn: Warn) -> str | None:
    """Append ``record`` to the run's ``geometry.jsonl`` (rank zero's call); never raises.

    Returns:
        None, or the one line saying what could not be written (the file is as before).
    """
    if run is None:
        return None
    try:
        run.append_record(record)
        return None
    except (OSError, ValueError) as err:  # an unwritable folder never stops training
        warn(
            "write",
            f"GeometryMonitor: cannot write {run.geometry}: {err!r}; "
            "measurements continue, unrecorded",
        )
        return f"{one_line(err)}; the record of step {record.step} is missing (and any after it)"


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
