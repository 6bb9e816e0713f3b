"""Hydra Launcher ``hydra/launcher=solo_geometry_pool``: sweep jobs in a process pool.

Hydra's own ``basic`` launcher runs a sweep's jobs one after the other; its joblib launcher is a
separate package. This one runs them in ``n_jobs`` worker processes of joblib's loky backend
(joblib comes with scikit-learn; loky pickles Hydra's context with cloudpickle, as the joblib
launcher does), each job exactly as Hydra runs one (``run_job``: its own config, output folder
and ``.hydra/`` record), and prints one progress line per finished job. ``n_jobs: null`` uses
every core this process may run on, divided by ``threads_per_job``.

Like every module in ``hydra_plugins`` it is imported at start-up of every Hydra application,
so it imports neither torch nor solo-geometry.
"""

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from joblib import Parallel, delayed
from omegaconf import DictConfig, open_dict

__all__ = ["PoolLauncher", "PoolLauncherConf", "available_cores", "pool_size"]


@dataclass
class PoolLauncherConf:
    """The launcher's options (``hydra.launcher.*``)."""

    _target_: str = "hydra_plugins.solo_geometry_launcher.solo_geometry_launcher.PoolLauncher"
    # Worker processes; null: available cores // threads_per_job (at least 1).
    n_jobs: int | None = None
    # Torch threads each job is meant to use (only sizes the pool; the job sets its threads).
    threads_per_job: int = 1


ConfigStore.instance().store(
    group="hydra/launcher", name="solo_geometry_pool", node=PoolLauncherConf,
    provider="solo-geometry",
)  # fmt: skip


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def pool_size(n_jobs: int | None, threads_per_job: int, n_tasks: int) -> int:
    """Workers for ``n_tasks`` jobs: ``n_jobs``, else cores // threads, never above the jobs.

    Raises:
        ValueError: if ``n_jobs`` or ``threads_per_job`` is below 1.
    """
    if threads_per_job < 1:
        raise ValueError(f"hydra.launcher.threads_per_job must be >= 1, got {threads_per_job}")
    if n_jobs is not None and n_jobs < 1:
        raise ValueError(f"hydra.launcher.n_jobs must be >= 1 or null, got {n_jobs}")
    wanted = n_jobs if n_jobs is not None else max(1, available_cores() // threads_per_job)
    return max(1, min(wanted, n_tasks))


def _execute(
    idx: int,
    overrides: Sequence[str],
    hydra_context: HydraContext,
    config: DictConfig,
    task_function: TaskFunction,
    singleton_state: dict[Any, Any],
) -> tuple[int, JobReturn]:
    """Run one job in a worker, as Hydra's basic launcher runs it in-process."""
    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    return idx, ret


class PoolLauncher(Launcher):
    """Run a sweep's jobs in a pool of spawned processes, reporting progress.

    Args:
        n_jobs: worker processes (None: cores // threads_per_job).
        threads_per_job: threads each job uses, to size the pool.
    """

    def __init__(self, n_jobs: int | None = None, threads_per_job: int = 1) -> None:
        self.n_jobs = n_jobs
        self.threads_per_job = threads_per_job
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Keep what ``launch`` needs (Hydra calls this once per sweep)."""
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Run every job; returns their results in the order of ``job_overrides``."""
        assert self.config is not None and self.task_function is not None
        assert self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        total = len(job_overrides)
        workers = pool_size(self.n_jobs, self.threads_per_job, total)
        print(f"[pool] {total} job(s) on {workers} worker process(es)", flush=True)
        state = Singleton.get_state()
        results: list[JobReturn | None] = [None] * total
        start = time.perf_counter()
        jobs = (
            delayed(_execute)(initial_job_idx + i, list(ov), self.hydra_context, self.config,
                              self.task_function, state)
            for i, ov in enumerate(job_overrides)
        )  # fmt: skip
        runner = Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")
        for done, (idx, ret) in enumerate(runner(jobs), start=1):
            i = idx - initial_job_idx
            results[i] = ret
            ok = ret.status == JobStatus.COMPLETED
            said = ret.return_value if ok and isinstance(ret.return_value, str) else None
            elapsed = time.perf_counter() - start
            what = said or " ".join(job_overrides[i])
            print(f"[pool] {done}/{total} {'done' if ok else 'FAILED'} ({elapsed:.0f} s): "
                  f"{what}", flush=True)  # fmt: skip
        return [r for r in results if r is not None]
