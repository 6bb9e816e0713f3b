"""``solo-geometry reproduce collapse``: the paper's collapse experiment as a Hydra multirun.

The paper (experiments.py, ``run_collapse_experiment``) starts SimSiam near collapse, the
projector's Linear weights x alpha = 0.1, projector and predictor sharing the activation
{linear, relu, gelu, swish} and the norm {bn, none}, with learning-rate ablations (0.1x, 1x, 10x)
over 3 seeds. Here each cell of that grid is one run of the SimSiam digits recipe
(``recipes/digits/simsiam.yaml``) on the solo-learn host when importable, else the lightly host:

* heads as the paper builds them (experiments.py ``ProjectionHead``): Linear layers without bias,
  BatchNorm after both Linears with ``bn``, "linear" the identity activation;
* the monitor every ``every_n_steps`` steps (spectra of H_eff and M, std and condition numbers of
  Z and H) and the update-size callback every step (:mod:`solo_geometry.runtime.updates`);
* the sweep is Hydra's multirun of :func:`run_cell` over ``head x norm x lr x seed``, its jobs run
  on Hydra's joblib launcher, or on the one an extra ``hydra/launcher=...`` override names
  (:mod:`solo_geometry.commands.sweeps`: ``submitit_local``, ``submitit_slurm``).

A cell is finished when its record ``<out>/cells/<cell>.json`` exists; a rerun skips it, so an
interrupted sweep resumes where it stopped. :func:`reproduce_collapse` then writes
``summary.json``, ``table.md``, the figures and ``index.html`` (:mod:`.collapse_page`) and prints
each claim's verdict (:mod:`.collapse_summary`), computed from the runs' numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
import torchvision
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.singleton import Singleton
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_geometry.commands.pretrain import HOSTS, pretrain, resolve_host
from solo_geometry.commands.sweeps import launch_overrides
from solo_geometry.inputs.datasets import make_digits
from solo_geometry.reproduce.collapse_page import FIGURES, page_body, write_compare, write_page
from solo_geometry.reproduce.collapse_protocol import (
    ALPHA,
    BASE_LR,
    GRIDS,
    HEADS,
    NORMS,
    QUICK,
    SCALES,
    Protocol,
    describe,
    protocol_of,
)
from solo_geometry.reproduce.collapse_summary import (
    cell_record,
    print_claims,
    summarise,
    write_summary,
)
from solo_geometry.reproduce.collapse_verdicts import load_runs, summary_runs

__all__ = [
    "DATA_CHOICES",
    "CellConfig",
    "add_parser",
    "cell_id",
    "collapse_experiment",
    "grid_overrides",
    "reproduce_collapse",
    "run_cell",
]

# Head name -> the activation of geometry.head (the paper's "linear" is the identity).
DATA_CHOICES = ("digits", "cifar10", "cifar100")
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "digits" / "simsiam.yaml"
# torchvision's folder of each CIFAR under --data-root, and a file it must hold.
CIFAR_FILES = {
    "cifar10": "cifar-10-batches-py/data_batch_1",
    "cifar100": "cifar-100-python/train",
}


@dataclass
class CellConfig:
    """One cell of the grid: the config node of :func:`run_cell` (Hydra app ``collapse``)."""

    head: str = "swish"  # a key of HEADS
    norm: str = "none"  # one of NORMS
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
    proj_hidden_dim: int = 512
    proj_output_dim: int = 512
    pred_hidden_dim: int = 128
    crop_size: int = 32
    factor: float = 2.0  # escape: first epoch mean >= factor x the epoch-0 mean
    threads: int = 1  # torch threads per cell
    alpha: float = ALPHA
    keep_checkpoints: bool = False


ConfigStore.instance().store(name="reproduce_collapse", node=CellConfig)


def cell_id(head: str, norm: str, lr: float, seed: int) -> str:
    """The cell's folder name, e.g. ``swish-bn-lr0.05-s0``."""
    return f"{head}-{norm}-lr{lr:g}-s{seed}"


def cell_overrides(cfg: CellConfig | DictConfig, data_val: str | None = None) -> list[str]:
    """The recipe overrides of one cell: the paper's heads, pseudo-collapse, measurements.

    Raises:
        ValueError: on an unknown head or norm.
    """
    if cfg.head not in HEADS:
        raise ValueError(f"unknown head {cfg.head!r}; choose from {sorted(HEADS)}")
    if cfg.norm not in NORMS:
        raise ValueError(f"unknown norm {cfg.norm!r}; choose from {list(NORMS)}")
    recipe_lr = cfg.lr * 256 / cfg.batch_size  # solo-learn multiplies by batch_size / 256
    return [
        "+geometry=on",
        f"name=collapse-{cell_id(cfg.head, cfg.norm, cfg.lr, cfg.seed)}",
        "geometry.head.name=smooth_mlp", f"geometry.head.activation={HEADS[cfg.head]}",
        f"geometry.head.norm={cfg.norm}", "geometry.head.bias=false",
        f"geometry.head.out_norm={str(cfg.norm == 'bn').lower()}",
        "geometry.predictor.name=smooth_mlp",  # follows the head's activation and norm
        "geometry.init.pseudo_collapse=true", f"geometry.init.alpha={cfg.alpha}",
        "geometry.probes.enabled=false", "geometry.measure.augment=false",
        "geometry.measure.updates=true", f"geometry.every_n_steps={cfg.every_n_steps}",
        "geometry.budget=null", f"geometry.max_samples={cfg.max_samples}",
        "geometry.measure.density_probes=1", "geometry.report=false",
        f"++seed={cfg.seed}", f"optimizer.lr={recipe_lr!r}",
        f"optimizer.batch_size={cfg.batch_size}",
        f"max_epochs={cfg.epochs}", f"++limit_train_batches={cfg.steps_per_epoch}",
        f"backbone.name={cfg.backbone}", f"method_kwargs.proj_hidden_dim={cfg.proj_hidden_dim}",
        f"method_kwargs.proj_output_dim={cfg.proj_output_dim}",
        f"method_kwargs.pred_hidden_dim={cfg.pred_hidden_dim}",
        f"augmentations.0.crop_size={cfg.crop_size}",
        f"data.dataset={cfg.dataset}", f"data.train_path={cfg.train_path}",
        f"data.val_path={data_val}" if data_val else "data.val_path=null",
        "++enable_progress_bar=false", "++enable_model_summary=false", "++log_every_n_steps=1",
    ]  # fmt: skip


# Settings a finished cell must share with the sweep to be skipped (else it is retrained).
PROTOCOL_KEYS = ("epochs", "steps_per_epoch", "batch_size", "every_n_steps", "max_samples",
                 "alpha", "dataset", "train_path", "backbone", "proj_hidden_dim",
                 "proj_output_dim", "pred_hidden_dim", "crop_size")  # fmt: skip


def _cell_file(out: Path, cell: str) -> Path:
    return out / "cells" / f"{cell}.json"


def _finished(record: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """The stored result of a cell trained with this sweep's protocol, else None."""
    if not record.is_file():
        return None
    stored = json.loads(record.read_text())
    same = all(stored.get("cell", {}).get(k) == cfg[k] for k in PROTOCOL_KEYS)
    return stored if same else None


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
    record = _cell_file(out, cell)
    stored = _finished(record, cfg)
    if stored is not None:
        return f"{cell}: finished earlier, skipped"
    torch.set_num_threads(int(cfg.threads))
    os.environ["OMP_NUM_THREADS"] = str(cfg.threads)  # the solo host's subprocess
    runs_root = out / "runs" / cell
    shutil.rmtree(runs_root, ignore_errors=True)
    start = time.perf_counter()
    with _outside_hydra():
        host, run = pretrain(RECIPE, cell_overrides(cfg), host=cfg.host, runs_root=runs_root,
                             solo_root=cfg.solo_root)  # fmt: skip
    seconds = time.perf_counter() - start
    if not cfg.keep_checkpoints:
        shutil.rmtree(Path(run) / "checkpoints", ignore_errors=True)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    cell_cfg = {str(k): v for k, v in container.items()}
    result = cell_record(Path(run), cell_cfg, host=host, seconds=seconds, root=out,
                         factor=float(cfg.factor))  # fmt: skip
    result["cell"] = cell_cfg
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, record)
    row = result["row"]
    return (f"{cell}: std(H) epoch 0 {row['baseline_std']:.3g} -> last "
            f"{row['std_curve'][-1]:.3g}, {row['outcome']} (epoch {row['escape_epoch']}, "
            f"{row['steps']} steps, {seconds:.0f} s)")  # fmt: skip


# The Hydra application: run_cell stays importable by name (launchers pickle it by reference).
_app = hydra.main(version_base=None, config_path=None, config_name="reproduce_collapse")(run_cell)


def grid_overrides(protocol: Protocol, base_lr: float = BASE_LR) -> list[list[str]]:
    """Each factorial block as Hydra multirun overrides (``head=a,b norm=... lr=... seed=...``)."""
    seeds = ",".join(str(s) for s in protocol.seeds)
    return [[f"head={','.join(b.heads)}", f"norm={','.join(b.norms)}",
             f"lr={','.join(f'{base_lr * f:g}' for f in b.lr_factors)}", f"seed={seeds}"]
            for b in protocol.grid]  # fmt: skip


def _multirun(overrides: Sequence[str]) -> None:
    """Run the Hydra app as ``--multirun`` with ``overrides`` (in this process).

    Raises:
        RuntimeError: if Hydra reports a failed job or a bad override.
    """
    argv = sys.argv
    sys.argv = ["solo-geometry-reproduce-collapse", "--multirun", *overrides]
    state = Singleton.get_state()  # joblib runs a single job in this process: leave no trace
    try:
        _app()
    except SystemExit as err:
        if err.code not in (0, None):
            raise RuntimeError(f"the collapse sweep failed (Hydra exit {err.code})") from None
    finally:
        sys.argv = argv
        Singleton.set_state(state)


def _data(data: str, data_root: Path | None, out: Path) -> tuple[str, str]:
    """``(data.dataset, data.train_path)`` of the cells; digits are written under ``out``.

    Raises:
        ValueError: for an unknown data set, or CIFAR without ``--data-root``.
        FileNotFoundError: when CIFAR's torchvision files are not under ``data_root``, or fail
            torchvision's md5 check (nothing is downloaded).
    """
    if data not in DATA_CHOICES:
        raise ValueError(f"unknown data {data!r}; choose from {list(DATA_CHOICES)}")
    if data == "digits":
        root = make_digits(out / "data" / "digits")
        return "custom", str(root / "train")
    if data_root is None:
        raise ValueError(f"--data {data} needs --data-root DIR holding torchvision's files")
    needed = Path(data_root) / CIFAR_FILES[data]
    if not needed.is_file():
        raise FileNotFoundError(
            f"--data {data}: torchvision's files are not in {str(data_root)!r} (no "
            f"{CIFAR_FILES[data]}); nothing is downloaded: fetch them first, e.g. "
            f"torchvision.datasets.{data.upper()}({str(data_root)!r}, download=True)"
        )
    try:  # torchvision checks its files' md5 sums: a cell would fail on them, deep in a worker
        vars(torchvision.datasets)[data.upper()](str(data_root), train=True, download=False)
    except RuntimeError as err:
        raise FileNotFoundError(
            f"--data {data}: torchvision rejects the files in {str(data_root)!r} ({err}); "
            "nothing is downloaded"
        ) from None
    return data, str(data_root)


def check_cell_overrides(extra: Sequence[str]) -> None:
    """Check overrides of the cell config (``epochs=2``) before the sweep writes anything.

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
    choices = {"head": sorted(HEADS), "norm": list(NORMS)}
    for key, value in (o.lstrip("+").split("=", 1) for o in cell):
        wrong = [v for v in value.split(",") if key in choices and v.strip() not in choices[key]]
        if wrong:  # a sweep (head=a,b) is checked value by value
            raise ValueError(f"cell option {key}={wrong[0]!r} unknown; choose from {choices[key]}")
    try:
        OmegaConf.merge(OmegaConf.structured(CellConfig), OmegaConf.from_dotlist(cell))
    except OmegaConfBaseException as err:
        raise ValueError(f"bad cell option in {cell}: {err.msg}") from err


def reproduce_collapse(
    out: str | Path,
    *,
    quick: bool = False,
    scale: str = "cpu",
    grid: str = "paper",
    data: str | None = None,
    data_root: str | Path | None = None,
    host: str = "auto",
    jobs: int | None = None,
    threads: int = 1,
    factor: float = 2.0,
    compare: str | Path | None = None,
    trust_pickle: bool = False,
    protocol: Protocol | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Run (or resume) the sweep, then summarise it, draw the page and print the verdicts.

    Args:
        out: the sweep folder (``runs/``, ``cells/``, ``summary.json``, ``index.html``).
        quick: the four heads without BN at the base lr, one seed, at the CPU scale's sizes.
        scale: ``cpu`` (:data:`CPU`) or ``paper`` (:data:`PAPER`, the authors' setup).
        grid: ``paper`` (their 14 configurations) or ``full`` (heads x norms x lrs).
        data: ``digits`` (embedded) or ``cifar10``/``cifar100`` (files on disk); None: the
            scale's.
        data_root: the folder holding torchvision's CIFAR files.
        host: ``auto``, ``solo`` or ``lightly``.
        jobs: cells run at once (None: the cores available // ``threads``).
        threads: torch threads per cell.
        factor: the escape factor (x the epoch-0 mean), > 1.
        compare: the authors' results (``.npy`` with ``trust_pickle``, or their curves as JSON)
            to draw beside ours (``fig1_compare.png``).
        trust_pickle: allow loading ``compare`` when it is a pickle.
        protocol: sizes, steps and grid (None: from ``quick``, ``scale`` and ``grid``).
        extra: further Hydra overrides of the cell config (e.g. ``epochs=2``).

    Returns:
        The summary (also written to ``<out>/summary.json``).

    Raises:
        ValueError: bad data, scale, grid, factor, host, jobs or threads, before anything is
            written.
        FileNotFoundError: CIFAR files missing.
    """
    resolve_host(host)  # an unknown host or solo without solo-learn fails here
    if threads < 1 or (jobs is not None and jobs < 1):
        raise ValueError(f"--jobs and --threads must be >= 1, got jobs={jobs}, threads={threads}")
    protocol = protocol or protocol_of(quick, scale, grid)
    data = data or protocol.data
    if data not in DATA_CHOICES:
        raise ValueError(f"unknown data {data!r}; choose from {list(DATA_CHOICES)}")
    if not factor > 1:
        raise ValueError(f"--factor must be > 1, got {factor}")
    check_cell_overrides(extra)
    theirs = None if compare is None else load_runs(compare, trust_pickle=trust_pickle)
    out = Path(out).resolve()
    dataset, train_path = _data(data, None if data_root is None else Path(data_root), out)
    hidden, output, pred = protocol.widths
    common = [
        f"out={out}", f"train_path={train_path}", f"dataset={dataset}", f"data={data}",
        f"host={host}", f"epochs={protocol.epochs}", f"steps_per_epoch={protocol.steps_per_epoch}",
        f"batch_size={protocol.batch_size}", f"every_n_steps={protocol.every_n_steps}",
        f"proj_hidden_dim={hidden}", f"proj_output_dim={output}", f"pred_hidden_dim={pred}",
        f"crop_size={protocol.crop_size}", f"factor={factor}",
        f"threads={threads}", *launch_overrides(jobs, threads, extra),
        f"hydra.sweep.dir={out / 'hydra'}",
        "hydra.sweep.subdir=${hydra.job.num}", "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled", *extra,
    ]  # fmt: skip
    for block in grid_overrides(protocol):
        _multirun([*block, *common])
    cells = sorted(cell_id(*c) for c in protocol.cells())
    records = [json.loads(_cell_file(out, c).read_text()) for c in cells]
    summary = summarise(records, quick=quick, protocol=describe(protocol), factor=factor)
    write_summary(out, summary)
    extra_figures = [] if theirs is None else [
        write_compare(out, summary_runs(summary), theirs, str(compare))]  # fmt: skip
    write_page(out, summary, records, extra_figures)
    print_claims(summary)
    print(f"summary: {out / 'summary.json'}\npage:    {out / 'index.html'}", flush=True)
    return summary


def collapse_experiment(out: Path, quick: bool) -> tuple[str, str]:
    """Run the sweep into ``out/collapse``; its page section for ``reproduce all``."""
    summary = reproduce_collapse(out / "collapse", quick=quick)
    figures = [f for f in FIGURES if (out / "collapse" / f).is_file()]
    return "Collapse (pseudo-collapse, alpha 0.1)", page_body(summary, figures, "collapse/")


def _run(args: argparse.Namespace) -> int:
    """Entry of ``solo-geometry reproduce collapse``."""
    reproduce_collapse(args.out, quick=args.quick, scale=args.scale, grid=args.grid,
                       data=args.data, data_root=args.data_root, host=args.host, jobs=args.jobs,
                       threads=args.threads, factor=args.factor, compare=args.compare,
                       trust_pickle=args.trust_pickle, extra=args.overrides)  # fmt: skip
    return 0


def add_parser(actions: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``collapse`` action on the ``reproduce`` parser."""
    parser = actions.add_parser(
        "collapse",
        help="SimSiam from pseudo-collapse: heads x norms x lrs x seeds (Hydra multirun)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true",
                        help="the four heads without BN at the base lr, one seed")  # fmt: skip
    parser.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="cpu",
        help="cpu (default; docs/reproducing.md) or paper (the authors' setup, for a GPU)",
    )
    parser.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="paper",
        help="paper: the authors' 14 configurations (default); full: factorial",
    )
    parser.add_argument(
        "--factor",
        type=float,
        default=2.0,
        help="escape at the first epoch mean >= FACTOR x the epoch-0 mean",
    )
    parser.add_argument("--compare", type=Path, default=None, metavar="FILE",
                        help="the authors' collapse_results.npy (or their curves as JSON) to "
                             "draw beside ours")  # fmt: skip
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow --compare to load a .npy (a pickle: it runs code)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/reproduce/collapse"),
                        help="sweep folder (default: runs/reproduce/collapse)")  # fmt: skip
    parser.add_argument("--data", choices=DATA_CHOICES, default=None,
                        help="digits (embedded; the cpu scale's) or CIFAR files already on disk "
                             "(cifar10: the paper scale's)")  # fmt: skip
    parser.add_argument("--data-root", type=Path, default=None,
                        help="torchvision's CIFAR folder (never downloaded)")  # fmt: skip
    parser.add_argument("--host", choices=HOSTS, default="auto",
                        help="auto: solo-learn when importable, else lightly")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=None,
                        help="cells at once (default: available cores // threads)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides of the cell config, e.g. epochs=2")  # fmt: skip
    parser.set_defaults(func=_run)
    return parser
