"""Pretrain a solo-learn recipe on the solo-learn or the lightly host, or resume a killed run.

``--host auto`` (the default of ``solo-geometry pretrain``) uses solo-learn when it is importable
and the lightly host otherwise; :func:`pretrain` says which host it used and prints the run
folder. Overrides use Hydra's syntax, exactly as with solo-learn's ``main_pretrain.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from solo_geometry.extras import require
from solo_geometry.folder.resume import resume_point
from solo_geometry.folder.run_folder import RunFolder, slurm_job_id
from solo_geometry.hosts import solo as solo_host
from solo_geometry.models.checkpoint import check_weights_only

__all__ = ["DEFAULT_RUNS_ROOT", "HOSTS", "pretrain", "resolve_host", "solo_available"]

HOSTS = ("auto", "solo", "lightly")
DEFAULT_RUNS_ROOT = Path("runs")


def solo_available() -> bool:
    """Whether solo-learn (1.0.6, the ``solo`` package) can be imported here."""
    try:
        require("solo.methods")
    except Exception:  # noqa: BLE001 - any failure to import means "not usable here"
        return False
    return True


def resolve_host(host: str) -> tuple[str, str]:
    """Choose the host.

    Args:
        host: ``auto``, ``solo`` or ``lightly``.

    Returns:
        ``(host, reason)``: the host to use and a short reason for ``auto``'s choice.

    Raises:
        ValueError: on an unknown host name.
        ModuleNotFoundError: for ``solo`` when solo-learn is not importable.
    """
    if host not in HOSTS:
        raise ValueError(f"unknown host {host!r}; choose from {list(HOSTS)}")
    if host == "lightly":
        return "lightly", "asked for"
    available = solo_available()
    if host == "solo":
        if not available:
            raise ModuleNotFoundError(
                "--host solo needs solo-learn 1.0.6 (pip install 'solo-geometry[solo]'); "
                "use --host lightly or --host auto"
            )
        return "solo", "asked for"
    if available:
        return "solo", "auto: solo-learn is importable"
    return "lightly", "auto: solo-learn is not importable"


def pretrain(
    config: str | Path | None,
    overrides: Sequence[str] = (),
    *,
    host: str = "auto",
    runs_root: str | Path = DEFAULT_RUNS_ROOT,
    solo_root: str | Path | None = None,
    resume: str | Path | None = None,
) -> tuple[str, Path]:
    """Pretrain a recipe on the chosen host, or resume a killed run.

    Args:
        config: the recipe YAML (solo-learn's schema); with ``resume`` None means the run's
            own copy.
        overrides: Hydra overrides (``+geometry=on`` ...).
        host: ``auto``, ``solo`` or ``lightly``; with ``resume``, ``auto`` is the run's host.
        runs_root: folder under which the run folder is created.
        solo_root: solo-learn checkout for the solo host (None: found automatically).
        resume: a run folder to continue from its newest checkpoint, in place.

    Returns:
        ``(host used, run folder)``.

    Raises:
        ValueError: unknown host, bad recipe field or override, a run folder that cannot be
            resumed (no checkpoint, a truncated one, another host's).
        FileNotFoundError: missing recipe or data folder.
        ModuleNotFoundError: ``--host solo`` without solo-learn.
    """
    if resume is None and (requeued := RunFolder.of_requeued_job(runs_root)) is not None:
        print(
            f"solo-geometry pretrain: Slurm requeued job {slurm_job_id()}: resuming its run "
            f"{requeued.path} with the run's own recipe",
            flush=True,
        )
        resume, config, overrides = requeued.path, None, ()
    point = None if resume is None else resume_point(resume, config, host)
    if point is not None:
        check_weights_only(point.checkpoint)  # as the trainer will load it
        config, host = point.recipe, point.host
    if config is None:
        raise ValueError("--config is required (or --resume RUN)")
    chosen, reason = resolve_host(host)
    print(f"solo-geometry pretrain: host {chosen} ({reason})", flush=True)
    if not Path(config).is_file():
        raise FileNotFoundError(f"recipe file {str(config)!r} not found")
    if point is not None:
        print(f"solo-geometry pretrain: resuming {point.run.path} from {point.checkpoint}")
    if chosen == "solo":
        run = solo_host.launch(
            Path(config),
            list(overrides),
            solo_root=None if solo_root is None else Path(solo_root),
            runs_root=Path(runs_root),
            resume=point,
        )
    else:
        lightly_host = require("solo_geometry.hosts.lightly", extra="lightly")
        run = lightly_host.launch(config, list(overrides), runs_root=runs_root, resume=point)
    print(f"solo-geometry pretrain: host {chosen}, run folder {run}", flush=True)
    return chosen, run
