"""One cell of ``reproduce collapse``: its config node, its recipe overrides, its Hydra task.

A cell is one run of the SimSiam digits recipe (``recipes/digits/simsiam.yaml``) with the
paper's heads (experiments.py ``ProjectionHead``) from pseudo-collapse (docs/reproducing.md,
"Collapse"); :func:`cell_overrides` says how.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_geometry.folder.atomic import write_text
from solo_geometry.hosts.pretrain import pretrain
from solo_geometry.models.backbones import STEMS
from solo_geometry.reproduce.collapse.protocol import (
    ALPHA,
    BASE_LR,
    CELL_ACTIVATIONS,
    CELL_NORMS,
    QUICK,
    cell_id,
    paper_head,
)
from solo_geometry.reproduce.collapse.summary import cell_record
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR

__all__ = [
    "PROTOCOL_KEYS",
    "RECIPE",
    "CellConfig",
    "cell_file",
    "cell_overrides",
    "check_cell_overrides",
    "finished",
    "run_cell",
]

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits" / "simsiam.yaml"


@dataclass
class CellConfig:
    """One cell of the grid: the config node of :func:`run_cell` (Hydra app ``collapse``)."""

    head: str = "swish"  # a key of CELL_ACTIVATIONS
    norm: str = "none"  # one of CELL_NORMS
    lr: float = BASE_LR  # the optimiser's effective rate (after solo-learn's batch scaling)
    seed: int = 0
    out: str = "collapse"  # the sweep folder
    train_path: str = "data/digits/train"
    dataset: str = "custom"  # the recipe's data.dataset: custom (digits), cifar10, cifar100
    host: str = "auto"
    solo_root: str | None = None
    epochs: int = QUICK.epochs
    steps_per_epoch: int = QUICK.steps_per_epoch
    batch_size: int = QUICK.batch_size
    every_n_steps: int = QUICK.every_n_steps
    max_samples: int = 4  # samples in the Hessian operators' sub-block
    data: str = "digits"  # the data set's name in the rows (digits, cifar10, cifar100)
    backbone: str = "resnet18"
    stem: str = "auto"  # backbone.stem (lightly host): "auto" is the data set's (solo-learn's rule)
    proj_hidden_dim: int = 512
    proj_output_dim: int = 512
    pred_hidden_dim: int = 128
    crop_size: int = 32
    factor: float = ESCAPE_FACTOR  # escape: first epoch mean >= factor x the epoch-0 mean
    threads: int = 1  # torch threads per cell
    alpha: float = ALPHA
    keep_checkpoints: bool = False


ConfigStore.instance().store(name="reproduce_collapse", node=CellConfig)


def cell_overrides(cfg: CellConfig | DictConfig) -> list[str]:
    """The recipe overrides of one cell: the paper's heads, pseudo-collapse, measurements.

    Raises:
        ValueError: on an unknown head or norm.
    """
    if cfg.head not in CELL_ACTIVATIONS:
        raise ValueError(f"unknown head {cfg.head!r}; choose from {sorted(CELL_ACTIVATIONS)}")
    if cfg.norm not in CELL_NORMS:
        raise ValueError(f"unknown norm {cfg.norm!r}; choose from {list(CELL_NORMS)}")
    recipe_lr = cfg.lr * 256 / cfg.batch_size  # solo-learn multiplies by batch_size / 256
    return [
        "+geometry=on",
        f"name=collapse-{cell_id(cfg.head, cfg.norm, cfg.lr, cfg.seed)}",
        *paper_head(CELL_ACTIVATIONS[cfg.head], norm=cfg.norm),
        "geometry.predictor.name=smooth_mlp",  # follows the head's activation and norm
        "geometry.init.pseudo_collapse=true",
        f"geometry.init.alpha={cfg.alpha}",
        "geometry.probes.enabled=false",
        "geometry.measure.augment=false",
        "geometry.measure.updates=true",
        f"geometry.every_n_steps={cfg.every_n_steps}",
        "geometry.budget=null",
        f"geometry.spectrum.max_samples={cfg.max_samples}",
        "geometry.spectrum.density_probes=1",
        "geometry.report=false",
        f"++seed={cfg.seed}",
        f"optimizer.lr={recipe_lr!r}",
        f"optimizer.batch_size={cfg.batch_size}",
        f"max_epochs={cfg.epochs}",
        f"++limit_train_batches={cfg.steps_per_epoch}",
        f"backbone.name={cfg.backbone}",
        *([] if cfg.stem == "auto" else [f"++backbone.stem={cfg.stem}"]),  # the lightly host's
        f"method_kwargs.proj_hidden_dim={cfg.proj_hidden_dim}",
        f"method_kwargs.proj_output_dim={cfg.proj_output_dim}",
        f"method_kwargs.pred_hidden_dim={cfg.pred_hidden_dim}",
        f"augmentations.0.crop_size={cfg.crop_size}",
        f"data.dataset={cfg.dataset}",
        f"data.train_path={cfg.train_path}",
        "data.val_path=null",
        "++enable_progress_bar=false",
        "++enable_model_summary=false",
        "++log_every_n_steps=1",
    ]


# Settings a finished cell must share with the sweep to be skipped (else it is retrained).
PROTOCOL_KEYS = (
    "epochs",
    "steps_per_epoch",
    "batch_size",
    "every_n_steps",
    "max_samples",
    "alpha",
    "dataset",
    "train_path",
    "backbone",
    "stem",
    "proj_hidden_dim",
    "proj_output_dim",
    "pred_hidden_dim",
    "crop_size",
)


def cell_file(out: Path, cell: str) -> Path:
    """The record of a finished cell under the sweep folder ``out``."""
    return out / "cells" / f"{cell}.json"


def finished(record: Path, cfg: DictConfig) -> bool:
    """Whether the cell record ``record`` exists, trained with this sweep's protocol."""
    if not record.is_file():
        return False
    cell, default = json.loads(record.read_text()).get("cell", {}), CellConfig()
    return all(cell.get(k, getattr(default, k)) == cfg[k] for k in PROTOCOL_KEYS)  # lacked: default


@contextlib.contextmanager
def _outside_hydra() -> Iterator[None]:
    """Let the recipe be composed (Hydra's compose API) from inside this Hydra job."""
    global_hydra = GlobalHydra.instance()
    saved = global_hydra.hydra if global_hydra.is_initialized() else None
    global_hydra.clear()
    try:
        yield
    finally:
        global_hydra.clear()
        if saved is not None:
            global_hydra.initialize(saved)


def run_cell(cfg: DictConfig) -> str:
    """Hydra task: train one cell unless its record exists; return a one-line account of it.

    The record ``<out>/cells/<cell>.json`` (row and per-epoch series, from the run folder's
    own ``geometry.jsonl`` and ``updates.jsonl``) is written last, atomically: it marks the cell
    finished. A cell without it is trained afresh (an interrupted run folder is removed).
    """
    out = Path(cfg.out)
    cell = cell_id(cfg.head, cfg.norm, float(cfg.lr), int(cfg.seed))
    record = cell_file(out, cell)
    if finished(record, cfg):
        return f"{cell}: finished earlier, skipped"
    torch.set_num_threads(int(cfg.threads))
    os.environ["OMP_NUM_THREADS"] = str(cfg.threads)  # the solo host's subprocess
    runs_root = out / "runs" / cell
    shutil.rmtree(runs_root, ignore_errors=True)
    start = time.perf_counter()
    with _outside_hydra():
        host, run = pretrain(
            RECIPE, cell_overrides(cfg), host=cfg.host, runs_root=runs_root, solo_root=cfg.solo_root
        )
    seconds = time.perf_counter() - start
    if not cfg.keep_checkpoints:
        shutil.rmtree(Path(run) / "checkpoints", ignore_errors=True)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    cell_cfg = {str(k): v for k, v in container.items()}
    result = cell_record(
        Path(run), cell_cfg, host=host, seconds=seconds, root=out, factor=float(cfg.factor)
    )
    write_text(record, json.dumps(result.to_json(finite=False), indent=1))
    row = result.row
    return (
        f"{cell}: std(H) epoch 0 {row.baseline_std:.3g} -> last "
        f"{row.std_curve[-1]:.3g}, {row.outcome} (epoch {row.escape_epoch}, "
        f"{row.steps} steps, {seconds:.0f} s)"
    )


def check_cell_overrides(extra: Sequence[str]) -> dict[str, str]:
    """Check overrides of the cell config (``epochs=2``) before the sweep writes anything.

    Returns:
        Each cell option's value (its last), by key.

    Raises:
        ValueError: naming an override that is not ``key=value`` for a key of
            :class:`CellConfig` with a value of its type (a head or norm among the choices),
            and the keys or values there are.
    """
    cell = [o for o in extra if not o.lstrip("+~").startswith("hydra")]
    keys = sorted(CellConfig.__dataclass_fields__)
    bad = [o for o in cell if "=" not in o or o.split("=", 1)[0].lstrip("+") not in keys]
    if bad:
        raise ValueError(f"unknown cell option(s) {bad}; choose from {keys}")
    choices = {"head": sorted(CELL_ACTIVATIONS), "norm": list(CELL_NORMS), "stem": list(STEMS)}
    options = [o.lstrip("+").split("=", 1) for o in cell]
    for key, value in options:
        wrong = [v for v in value.split(",") if key in choices and v.strip() not in choices[key]]
        if wrong:  # a sweep (head=a,b) is checked value by value
            raise ValueError(f"cell option {key}={wrong[0]!r} unknown; choose from {choices[key]}")
    try:
        OmegaConf.merge(OmegaConf.structured(CellConfig), OmegaConf.from_dotlist(cell))
    except OmegaConfBaseException as err:
        raise ValueError(f"bad cell option in {cell}: {err.msg}") from err
    return {key: value for key, value in options}
