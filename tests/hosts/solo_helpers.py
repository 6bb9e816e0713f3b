"""Shared helpers of the solo-learn host tests (real solo-learn, real digits data)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:  # beside the host tests (tests/hosts on the path), else as a package module
    from warm_python import shared
except ModuleNotFoundError:
    from tests.hosts.warm_python import shared

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "zoo" / "recipes" / "digits"
METHODS4 = ("simclr", "byol", "vicreg", "barlow_twins")
SOLO_REASON = (
    "solo-learn 1.0.6 is not importable (pip install '.[solo]', see docs/getting-started.md, "
    "section solo-learn)"
)
# Tiny, CPU-sized runs: a few steps of batch 8 on 32x32 digits.
TINY = [
    "optimizer.batch_size=8",
    "data.num_workers=0",
    "data.val_path=null",
    "max_epochs=1",
    "+limit_train_batches=2",
    "checkpoint.enabled=False",
    "++enable_progress_bar=False",
    "method_kwargs.proj_hidden_dim=64",
    "method_kwargs.proj_output_dim=32",
    "++method_kwargs.pred_hidden_dim=64",
]
GEOMETRY_TINY = [
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.spectrum.max_samples=8",
    "geometry.spectrum.max_steps=60",
    "geometry.probes.enabled=false",
    "geometry.measure.augment_families=[brightness]",
    "geometry.measure.augment_samples=4",
    "geometry.spectrum.density_probes=1",
    "geometry.budget=null",  # every step, as the tests count
    "geometry.report=false",  # the report is checked by the 17 recipes' e2e and test_report
]
# The methods beyond SimCLR, BYOL, VICReg and Barlow Twins, and the cheapest geometry that still
# measures every operator (solo-learn's cifar recipes, several steps each).
NEW_METHODS = [
    "mocov2plus",
    "nnclr",
    "dino",
    "swav",
    "nnbyol",
    "nnsiam",
    "ressl",
    "deepclusterv2",
    "all4one",
]
GEOMETRY_CHEAP = [
    "+geometry=on",
    "geometry.probes.enabled=false",
    "geometry.spectrum.max_samples=2",
    "geometry.spectrum.max_steps=10",
    "geometry.spectrum.density_probes=1",
    "geometry.budget=null",
]
# What solo-learn's main_pretrain.py imports at its top, and umap-learn (1 s), which the report
# imports: warm_python's preload for the runs of main_pretrain.py.
MAIN_PRETRAIN_IMPORTS = (
    "hydra",
    "torch",
    "lightning.pytorch",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers.wandb",
    "lightning.pytorch.strategies.ddp",
    "omegaconf",
    "solo.args.pretrain",
    "solo.data.classification_dataloader",
    "solo.data.pretrain_dataloader",
    "solo.methods",
    "solo.utils.auto_resumer",
    "solo.utils.checkpointer",
    "solo.utils.misc",
    "umap",
)

# Variables the scripts above read when they run, never at an import (ddp_entry.py's).
READ_AT_RUN = ("DDP_HOST", "DDP_FAULT")


def solo_root() -> Path:
    """The solo-learn checkout: ``$SOLO_LEARN_ROOT``, else next to the installed ``solo``.

    A ``pip install`` (not editable) of the checkout, as CI does, puts ``solo`` in
    site-packages, away from ``main_pretrain.py``: CI names the checkout in the variable.
    Skips when solo-learn is not importable or no candidate holds ``main_pretrain.py``.
    """
    solo = pytest.importorskip("solo", reason=SOLO_REASON)
    named = os.environ.get("SOLO_LEARN_ROOT")
    candidates = [Path(named)] if named else []
    candidates.append(Path(solo.__file__).resolve().parents[1])
    for root in candidates:
        if (root / "main_pretrain.py").is_file():
            return root.resolve()
    pytest.skip(
        f"no solo-learn checkout with main_pretrain.py in {[str(c) for c in candidates]}; "
        "set SOLO_LEARN_ROOT"
    )


def env(block_plugin: bool = False) -> dict[str, str]:
    """Environment of a subprocess: this repository importable (or explicitly not)."""
    out = dict(os.environ)
    out["PYTHONPATH"] = "" if block_plugin else str(REPO)
    return out


def run(
    args: list[str], cwd: Path, timeout: int = 600, **kw: object
) -> subprocess.CompletedProcess:
    """Run a Python subprocess and capture its output.

    A ``main_pretrain.py`` (solo-learn's or this repository's launcher), ``ddp_entry.py`` (its
    rank 0; Lightning starts rank 1 as a new process) or ``-m solo_geometry.cli`` under this
    environment (but for ``READ_AT_RUN``) runs in a process forked from a warm interpreter
    (``warm_python``): a new process that has the libraries solo-learn's script imports at its
    top already imported (about 7 s of CPU).
    """
    environment = kw.pop("env", env())
    assert isinstance(environment, dict)
    script = str(args[0]).endswith(("main_pretrain.py", "ddp_entry.py"))
    if script or list(args[:2]) == ["-m", "solo_geometry.cli"]:
        warm = shared(MAIN_PRETRAIN_IMPORTS, env())
        if warm.takes(environment, READ_AT_RUN):
            return warm.run(args, cwd, environment, timeout, READ_AT_RUN)
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def main_pretrain(method: str, overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """solo-learn's unmodified ``main_pretrain.py`` on a digits recipe, as solo-learn runs it."""
    root = solo_root()
    cwd.mkdir(parents=True, exist_ok=True)
    args = [
        str(root / "main_pretrain.py"),
        "--config-path",
        str(RECIPES),
        "--config-name",
        method,
        f"hydra.run.dir={cwd}",
        *overrides,
    ]
    return run(args, cwd)


def tail(proc: subprocess.CompletedProcess) -> str:
    """The end of a subprocess's output, for assertion messages."""
    return proc.stdout[-3000:] + "\n--- stderr ---\n" + proc.stderr[-5000:]
