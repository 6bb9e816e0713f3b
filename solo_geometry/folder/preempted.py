"""A run stopped by a scheduler's signal, and the one line that says how to resume it.

A scheduler ends a job by sending SIGTERM to all its processes (Slurm; SIGKILL follows after a
grace period), or SIGUSR1 as Lightning's requeue signal. The trainer
(:class:`solo_geometry.runtime.preempt.PreemptionCallback`) then stops at the next step
boundary, writes ``checkpoints/preempted.ckpt`` (the monitor's state travels in it) and
``.preempted.json`` (the signal, the step, the checkpoint); the command that started it reads
the marker and ends with :class:`Preempted`: one line naming the checkpoint and the resume
command, exit status 128 + the signal's number (143 for SIGTERM), never 0.

Example:
    >>> err = preempted_error(RunFolder(path))
    >>> str(err)
    "preempted by SIGTERM after step 2: checkpoint '.../preempted.ckpt'; resume with: ..."
"""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

from solo_geometry.folder.atomic import write_text
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import MAX_JSON_BYTES, read_text

__all__ = ["Preempted", "clear_marker", "preempted_error", "read_marker", "write_marker"]


class Preempted(Exception):
    """A run stopped by a signal; ``status`` is the exit status (128 + the signal's number)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def write_marker(run: RunFolder, signum: int, step: int, checkpoint: Path) -> None:
    """Say, atomically, that ``run`` was preempted by ``signum`` after training step ``step``."""
    data = {"signal": signal.Signals(signum).name, "step": step, "checkpoint": str(checkpoint)}
    write_text(run.preempted, json.dumps(data) + "\n")


def read_marker(run: RunFolder) -> dict | None:
    """The marker :func:`write_marker` left, None when there is none (or it is unreadable)."""
    try:
        data = json.loads(read_text(run.preempted, MAX_JSON_BYTES, "preemption marker"))
    except (OSError, ValueError):  # a link or an oversized file too: not this package's marker
        return None
    return data if isinstance(data, dict) and "signal" in data else None


def clear_marker(run: RunFolder) -> None:
    """Remove a previous preemption's marker (a run starting or resuming)."""
    run.preempted.unlink(missing_ok=True)


def _status(name: str) -> int:
    return 128 + int(getattr(signal, name, signal.SIGTERM))


def preempted_error(run: RunFolder, received: int | None = None) -> Preempted:
    """The error a command ends with after its run was stopped by a signal.

    Args:
        run: the run folder.
        received: the signal the command itself received (None: the one in the marker).

    Returns:
        :class:`Preempted` naming the checkpoint written at the signal (or, when none was, the
        newest one) and the command resuming the run.
    """
    marker = read_marker(run) or {}
    name = marker.get("signal") or signal.Signals(received or signal.SIGTERM).name
    resume = f"solo-geometry pretrain --resume {shlex.quote(str(run.path))}"
    if marker:
        ckpt = marker.get("checkpoint")
        return Preempted(
            f"preempted by {name} after step {marker.get('step')}: checkpoint {ckpt!r} written; "
            f"resume with: {resume}",
            _status(name),
        )
    latest = run.latest_checkpoint() if run.path.is_dir() else None
    where = (
        f"resume from the newest checkpoint {str(latest)!r} with: {resume}"
        if latest is not None
        else "the run has no checkpoint to resume from; start it again"
    )
    return Preempted(
        f"stopped by {name} before a checkpoint was taken at the signal; {where}", _status(name)
    )
