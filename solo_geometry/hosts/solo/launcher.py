"""The solo-learn host: run a recipe through solo-learn's own ``main_pretrain.py``.

:func:`launch` checks the recipe and the overrides in-process (so bad input fails before any
run folder exists), creates the run folder (docs/design.md section 7) and runs solo-learn's
``main_pretrain.py`` *by module* (``python -m main_pretrain``) from the solo-learn checkout, with
this package and the checkout on ``PYTHONPATH``: Hydra discovers the plugin, which wraps
``solo.methods.METHODS`` (:mod:`solo_geometry.hosts.solo.methods`), and DDP's re-launched ranks,
started the same way by Lightning, get the plugin too.

The checkout is found from ``solo_root``, else the ``SOLO_LEARN_ROOT`` environment variable,
else next to the installed ``solo`` package (an editable install of the repository).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from solo_geometry.config import geometry_config
from solo_geometry.folder.lock import writer_lock
from solo_geometry.folder.preempted import clear_marker, preempted_error, read_marker
from solo_geometry.folder.resume import ResumePoint
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.solo.checks import check_solo_recipe
from solo_geometry.hosts.solo.losses import SUPPORTED
from solo_geometry.recipe import load_recipe
from solo_geometry.runtime.sink import UNWRITTEN_STATUS

__all__ = [
    "ENTRY",
    "LaunchError",
    "check_recipe",
    "die_with_parent",
    "find_solo_root",
    "launch",
    "solo_command",
]

ENV_ROOT = "SOLO_LEARN_ROOT"
ENTRY = "main_pretrain"
# Signals passed on to the trainer's process group: a scheduler's stop and requeue, and Ctrl-C.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
PARENT_ENV = "SOLO_GEOMETRY_LAUNCHER_PID"  # the trainer dies with the launcher of this pid
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # holds solo_geometry/ and hydra_plugins/


class LaunchError(RuntimeError):
    """solo-learn's pretraining could not be started or did not finish."""


def find_solo_root(solo_root: Path | str | None = None) -> Path:
    """Locate the solo-learn checkout holding ``main_pretrain.py``.

    Args:
        solo_root: explicit checkout folder; else ``$SOLO_LEARN_ROOT``; else the parent of
            the installed ``solo`` package.

    Returns:
        The checkout folder.

    Raises:
        FileNotFoundError: if no candidate holds ``main_pretrain.py``; the message says how to
            point at the checkout.
    """
    tried: list[str] = []
    candidates: list[Path] = []
    if solo_root is not None:
        candidates.append(Path(solo_root))
    elif os.environ.get(ENV_ROOT):
        candidates.append(Path(os.environ[ENV_ROOT]))
    else:
        spec = importlib.util.find_spec("solo")
        if spec is not None and spec.origin is not None:
            candidates.append(Path(spec.origin).resolve().parents[1])
    for candidate in candidates:
        if (candidate / f"{ENTRY}.py").is_file():
            return candidate.resolve()
        tried.append(str(candidate))
    raise FileNotFoundError(
        f"cannot find solo-learn's {ENTRY}.py (tried: {tried or 'nothing: solo not installed'}); "
        f"pass --solo-root /path/to/solo-learn or set {ENV_ROOT}"
    )


def check_recipe(config: Path | str, overrides: list[str]) -> DictConfig:
    """Compose the recipe and validate its ``geometry`` node, before anything is created.

    Raises:
        FileNotFoundError: if the recipe file or a data folder is missing.
        ValueError: for a malformed recipe or override, a bad geometry option, geometry on
            for a method the adapter does not support, or a recipe solo-learn would reject
            (:func:`solo_geometry.hosts.solo.checks.check_solo_recipe`: unknown method, wrong
            type, a class folder without images, an image that does not decode).
    """
    cfg = load_recipe(config, overrides)
    method = OmegaConf.select(cfg, "method", default=None)
    if method is None:
        raise ValueError(f"recipe {str(config)!r} has no 'method' key")
    gcfg = geometry_config(cfg)
    if gcfg is not None and method not in SUPPORTED:
        raise ValueError(
            f"geometry is not supported for method {method!r}; choose from {sorted(SUPPORTED)}"
        )
    check_solo_recipe(cfg)
    return cfg


def quoted(path: Path) -> str:
    """``path`` as a quoted Hydra override value (an apostrophe in a folder name included).

    Hydra's grammar escapes a quote with a backslash, and backslashes only where they precede a
    quote or end the value; other backslashes stand as they are.
    """
    text = re.sub(
        r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), str(path)
    )
    return f"'{text}'"


def solo_command(config: Path, overrides: list[str], run: Path, cfg: DictConfig) -> list[str]:
    """The command line running solo-learn's ``main_pretrain`` module for one run."""
    extra = [
        f"hydra.run.dir={quoted(run)}",
        f"checkpoint.dir={quoted(RunFolder(run).checkpoints)}",
        f"++default_root_dir={quoted(run)}",  # Lightning's own logs, not in the caller's cwd
    ]
    if "geometry" in cfg:
        extra.append(f"geometry.out_dir={quoted(run)}")
    if not _cuda_available() and str(cfg.get("accelerator", "")) in ("gpu", "cuda"):
        print("solo-geometry: no GPU here, running on the CPU (accelerator=cpu)", flush=True)
        extra.append("accelerator=cpu")
    return [
        sys.executable,
        "-m",
        ENTRY,
        "--config-path",
        str(config.parent),
        "--config-name",
        config.stem,
        *overrides,
        *extra,
    ]


def _cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def _environment(solo_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(solo_root), str(_PACKAGE_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@contextmanager
def _forwarding() -> Iterator[dict[str, Any]]:
    """Forward SIGTERM, SIGINT and SIGUSR1 to the trainer's process group while it runs.

    Yields a dict: set ``child`` to the started process; ``received`` lists the signals this
    process got (one that arrives before the child starts is forwarded once it has).
    """
    state: dict[str, Any] = {"child": None, "received": []}

    def forward(signum: int, frame: FrameType | None) -> None:
        state["received"].append(signum)
        if state["child"] is not None:
            with suppress(ProcessLookupError):
                os.killpg(state["child"].pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        yield state
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def die_with_parent() -> None:
    """In the trainer process: be killed when the launcher dies (even by SIGKILL).

    The launcher starts the trainer in a session of its own (so that it forwards each signal
    once), which a kill of the launcher's process group no longer reaches: the kernel's parent
    death signal (Linux) stands in. Called by :func:`~solo_geometry.hosts.solo.methods.install`
    in the process whose environment holds the launcher's pid; elsewhere it does nothing.
    """
    parent = os.environ.pop(PARENT_ENV, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(parent):  # the launcher died before the call: as if after it
        os.kill(os.getpid(), signal.SIGKILL)


def _run_trainer(argv: list[str], env: dict[str, str]) -> tuple[int, int | None]:
    """Run solo-learn's trainer in its own session; its status and the first signal received."""
    if threading.current_thread() is not threading.main_thread():  # no signal handlers here
        return subprocess.run(argv, env=env, check=False).returncode, None
    with _forwarding() as state:
        env = {**env, PARENT_ENV: str(os.getpid())}
        child = subprocess.Popen(argv, env=env, start_new_session=True)
        state["child"] = child
        for signum in state["received"]:  # arrived while it was starting
            os.killpg(child.pid, signum)
        status = child.wait()
    return status, (state["received"] or [None])[0]


def _train(
    folder: RunFolder, config: Path, overrides: list[str], root: Path, cfg: DictConfig
) -> None:
    """Run solo-learn's trainer into ``folder``; on failure keep the folder only with results.

    Raises:
        Preempted: the trainer was stopped by a signal (checkpointed at it when the recipe has
            geometry on); the message names the checkpoint and the resume command.
        LaunchError: the trainer failed.
    """
    run, ok = folder.path, False
    print(f"solo-geometry: run folder {run}", flush=True)
    clear_marker(folder)
    try:
        argv = solo_command(config, overrides, run, cfg)
        status, received = _run_trainer(argv, _environment(root))
        if received is not None or read_marker(folder) is not None:
            raise preempted_error(folder, received)
        if status not in (0, UNWRITTEN_STATUS):
            raise LaunchError(f"solo-learn's {ENTRY}.py exited with status {status}")
        if not folder.config.exists():
            hydra_cfg = run / ".hydra" / "config.yaml"
            loaded = OmegaConf.load(hydra_cfg) if hydra_cfg.exists() else cfg
            assert isinstance(loaded, DictConfig)
            folder.write_config(loaded)
        ok = True
    finally:
        kept = folder.finish(ok=ok)
        if not ok:
            print(f"solo-geometry: run stopped; folder {'kept' if kept else 'removed'}: {run}")
    if status == UNWRITTEN_STATUS:  # the trainer said which write failed, in one line
        raise SystemExit(UNWRITTEN_STATUS)


def launch(
    config: Path,
    overrides: list[str],
    *,
    solo_root: Path | None,
    runs_root: Path,
    resume: ResumePoint | None = None,
) -> Path:
    """Pretrain a recipe with solo-learn's ``main_pretrain.py`` in a new run folder.

    Args:
        config: the recipe YAML (solo-learn's schema).
        overrides: Hydra overrides, e.g. ``["+geometry=on", "geometry.every_n_steps=10"]``.
        solo_root: the solo-learn checkout (None: ``$SOLO_LEARN_ROOT`` or next to ``solo``).
        runs_root: folder under which the run folder is created.
        resume: continue this run folder from its newest checkpoint instead (solo-learn's
            ``resume_from_checkpoint``, Lightning's ``ckpt_path``).

    Returns:
        The run folder (config.yaml, geometry.jsonl, checkpoints/, ...).

    Raises:
        FileNotFoundError: no recipe or no solo-learn checkout.
        ValueError: a malformed recipe, override or geometry option (no run folder created).
        LaunchError: solo-learn's run failed (the run folder is removed unless it holds
            checkpoints or geometry records).
    """
    config = Path(config).expanduser().resolve()
    root = find_solo_root(solo_root)
    cfg = check_recipe(config, list(overrides))
    name = str(cfg.get("name") or config.stem)  # the recipe's name, as the lightly host names runs
    if resume is None:
        folder = RunFolder.create(Path(runs_root).expanduser().resolve(), name)
    else:
        folder = RunFolder(resume.run.path.resolve())
        # hydra.output_subdir=null: the folder's .hydra/*.yaml are left as the run wrote them
        overrides = [
            *overrides,
            f"++resume_from_checkpoint='{resume.checkpoint.resolve()}'",
            "hydra.output_subdir=null",
        ]
    with writer_lock(folder):  # held for the trainer's life: one writer per run folder
        if resume is not None:
            folder.mark_incomplete("resuming")
        _train(folder, config, list(overrides), root, cfg)
    print(f"solo-geometry: finished, run folder {folder.path}", flush=True)
    return folder.path
