"""Run folders (DESIGN.md section 7): creation, the resolved config, clean-up on failure.

A run folder is ``<root>/<name>-<YYYYmmdd-HHMMSS>``. While a run is being set up or trained it
holds a ``.incomplete`` marker; :func:`finish_run_dir` removes the marker on success, and on
failure removes the whole folder unless something useful (a checkpoint or geometry records)
was written, so a failed launch never leaves a half-written run behind.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "INCOMPLETE",
    "finish_run_dir",
    "has_results",
    "new_run_dir",
    "write_config",
]

INCOMPLETE = ".incomplete"
CONFIG = "config.yaml"


def new_run_dir(root: Path, name: str) -> Path:
    """Create ``<root>/<name>-<YYYYmmdd-HHMMSS>`` (a numeric suffix if it exists already).

    Args:
        root: the runs folder (created if missing).
        name: the run's name, e.g. ``byol-digits``; no path separators.

    Returns:
        The new folder, holding a ``.incomplete`` marker.

    Raises:
        ValueError: if ``name`` is empty or holds a path separator.
    """
    if not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise ValueError(f"run name must be a plain folder name, got {name!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        run = root / (f"{name}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            run.mkdir()
        except FileExistsError:
            continue
        (run / INCOMPLETE).write_text("setting up\n")
        return run
    raise FileExistsError(f"could not create a fresh run folder for {name!r} under {root}")


def has_results(run: Path) -> bool:
    """Whether a run folder holds anything worth keeping (checkpoints or geometry records)."""
    run = Path(run)
    if any(run.rglob("*.ckpt")):
        return True
    geometry = run / "geometry.jsonl"
    return geometry.is_file() and geometry.stat().st_size > 0


def finish_run_dir(run: Path, *, ok: bool) -> bool:
    """Close a run folder: drop the marker on success, remove a useless folder on failure.

    Args:
        run: the folder from :func:`new_run_dir`.
        ok: whether the run succeeded.

    Returns:
        Whether the folder still exists.
    """
    run = Path(run)
    if ok:
        (run / INCOMPLETE).unlink(missing_ok=True)
        return True
    if not has_results(run):
        shutil.rmtree(run, ignore_errors=True)
        return False
    (run / INCOMPLETE).write_text("failed; partial results kept\n")
    return True


def write_config(run: str | Path, cfg: DictConfig | dict[str, Any]) -> Path:
    """Write the resolved config to ``<run>/config.yaml``.

    Args:
        run: the run folder (created if missing).
        cfg: the config; interpolations are resolved, unresolvable ones kept as text.

    Returns:
        The written file.
    """
    path = Path(run) / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
    try:
        text = OmegaConf.to_yaml(node, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation: keep it unresolved
        text = OmegaConf.to_yaml(node)
    path.write_text(text)
    return path
