"""Sweeps on Hydra's own launchers: how a sweep is launched, and its progress lines.

A sweep (``reproduce collapse``, or any user multirun) runs on the launchers maintained with
Hydra, never on one of this package's own:

* locally on ``hydra/launcher=joblib`` (``hydra-joblib-launcher``: a loky process pool),
  ``n_jobs`` = the cores this process may use // the threads per job, so that jobs times
  threads never oversubscribe the machine (:func:`launch_overrides`);
* on one machine through submitit's executor (``hydra/launcher=submitit_local``), or on a Slurm
  cluster (``hydra/launcher=submitit_slurm`` with ``hydra.launcher.partition``,
  ``hydra.launcher.gpus_per_task``, ``hydra.launcher.timeout_min``): the same jobs, the same
  task function, the same output folders; ``cpus_per_task`` carries the threads per job.

:class:`SweepProgress` is a Hydra callback (``hydra.callbacks``) printing one line per finished
job, ``[sweep] 3/8 done (41 s): <the job's return value or overrides>``, whichever launcher runs
it: it counts finished jobs in ``<hydra.sweep.dir>/.progress``, which every job can reach.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

__all__ = ["PROGRESS_CALLBACK", "SweepProgress", "available_cores", "finish", "launch_overrides"]

# The override that attaches :class:`SweepProgress` to a multirun.
PROGRESS_CALLBACK = "+hydra.callbacks.progress._target_=solo_geometry.hosts.sweeps.SweepProgress"
_PROGRESS = ".progress"  # under hydra.sweep.dir: start.json and one line per finished job


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def launch_overrides(jobs: int | None, threads: int, extra: Sequence[str] = ()) -> list[str]:
    """Hydra overrides that launch a sweep: joblib locally, unless ``extra`` picks a launcher.

    Args:
        jobs: jobs at once on joblib (None: available cores // ``threads``, at least 1).
        threads: torch threads per job; with a submitit launcher, its ``cpus_per_task``.
        extra: the user's overrides; one of ``hydra/launcher=...`` replaces joblib.

    Returns:
        The launcher, its size and the progress callback, to put before ``extra``.

    Raises:
        ValueError: if ``jobs`` or ``threads`` is below 1.
    """
    if threads < 1 or (jobs is not None and jobs < 1):
        raise ValueError(f"--jobs and --threads must be >= 1, got jobs={jobs}, threads={threads}")
    chosen = [o.split("=", 1)[1] for o in extra if o.startswith("hydra/launcher=")]
    if chosen and chosen[-1].startswith("submitit"):
        return [PROGRESS_CALLBACK, f"hydra.launcher.cpus_per_task={threads}"]
    if chosen:
        return [PROGRESS_CALLBACK]
    n_jobs = jobs if jobs is not None else max(1, available_cores() // threads)
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}", PROGRESS_CALLBACK]


def sweep_size(overrides: Sequence[str]) -> int:
    """Jobs of a multirun over ``overrides`` (the product of its sweep lengths)."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    sizes = [len(list(o.sweep_iterator())) for o in parsed if o.is_sweep_override()]
    return math.prod(sizes)


def finish(folder: str | Path, num: int) -> int:
    """Add job ``num`` to a multirun's finished jobs in ``folder``; its place among them (from 1).

    One short O_APPEND write per job orders the jobs' lines as they finished. The place is where
    the job's own line lies, not how many lines the file holds when it reads it back: two jobs
    that finish together each get their own count.
    """
    path = Path(folder) / "finished"
    with path.open("a") as fh:
        fh.write(f"{num}\n")
    return path.read_text().splitlines().index(str(num)) + 1


class SweepProgress(Callback):
    """One line per finished job of a multirun, with the count and the time since its start.

    Attach it with
    ``+hydra.callbacks.progress._target_=solo_geometry.hosts.sweeps.SweepProgress``.
    The line names what the job returned when that is a string (``reproduce collapse``'s
    account of a cell), else the job's overrides.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Note the sweep's size and start time where its jobs will find them."""
        folder = Path(str(config.hydra.sweep.dir)) / _PROGRESS
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "finished").unlink(missing_ok=True)
        total = sweep_size(list(config.hydra.overrides.task))
        (folder / "start.json").write_text(json.dumps({"total": total, "time": time.time()}))
        print(
            f"[sweep] {total} job(s) on {config.hydra.launcher._target_.split('.')[-1]}", flush=True
        )

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Print the job's progress line (in the job's process, whichever launcher runs it)."""
        folder = Path(str(config.hydra.sweep.dir)) / _PROGRESS
        start = folder / "start.json"
        if not start.is_file():
            return  # a single run, not a multirun
        info = json.loads(start.read_text())
        ok = job_return.status == JobStatus.COMPLETED
        said = job_return.return_value if ok and isinstance(job_return.return_value, str) else None
        what = said or " ".join(config.hydra.overrides.task)
        done = finish(folder, int(config.hydra.job.num))
        elapsed = time.time() - float(info["time"])
        state = "done" if ok else "FAILED"
        # One write of the whole line: jobs finishing together print at once, and print()
        # writes the newline apart under PYTHONUNBUFFERED (python -u): two lines could interleave.
        sys.stdout.write(f"[sweep] {done}/{info['total']} {state} ({elapsed:.0f} s): {what}\n")
        sys.stdout.flush()
