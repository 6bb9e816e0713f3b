"""The paper's invariance findings from one command (``solo-geometry reproduce invariance``).

Five experiments (docs/reproducing.md, "Invariance"), each pretraining SimCLR on the lightly
host with the paper's protocol (``recipes/digits/simclr_invariance.yaml``), measured by
:mod:`.measure`; everything lands in ``--out``. Seeds follow the paper's code: one pretraining,
then ``seeds`` draws of the orbit images and of the curvature sweeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from solo_geometry.extras import require
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import load_image_folder
from solo_geometry.inputs.digits import make_digits
from solo_geometry.models.checkpoint import load_model
from solo_geometry.reproduce.collapse.protocol import paper_head
from solo_geometry.reproduce.data import (
    check_data_root,
    export_cifar,
    subset_folders,
    train_size,
)
from solo_geometry.reproduce.invariance.measure import (
    Splits,
    curvature_seeds,
    feature_norm,
    orbit_seeds,
    probe_rows,
    spectra_of,
    training_images,
)
from solo_geometry.reproduce.invariance.page import invariance_section, write_invariance_page
from solo_geometry.reproduce.invariance.result import (
    DepthRow,
    Guillotine,
    InvarianceResult,
    Numbers,
    Whitening,
)
from solo_geometry.reproduce.invariance.settings import FULL, QUICK, InvarianceSettings
from solo_geometry.reproduce.invariance.verdicts import run_evidence, verdicts
from solo_geometry.reproduce.results import write_result

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "FULL",
    "QUICK",
    "RECIPE",
    "InvarianceSettings",
    "geometry_on",
    "invariance_experiment",
    "run_invariance_experiment",
]

RECIPE = Path(str(files("solo_geometry") / "recipes" / "digits" / "simclr_invariance.yaml"))
PAPER_LR = 1e-3  # the paper's Adam rate; solo-learn's schema scales the recipe's by batch / 256
SCHEMA = 1
_DEPTHS = (1, 2, 3)  # the head depths of the ablation
_STAGES = {  # each experiment, as announced
    "guillotine": "guillotine: SimCLR (ReLU + BN head), probes, orbits, curvature",
    "depth": "head depth 1, 2, 3 (Swish + BN heads)",
    "whitening": "whitening: metric-linear head",
}
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Data:
    """Where pretraining and probes read their images."""

    dataset: str  # the recipe's data.dataset
    train_path: Path
    splits: Splits
    norm_images: Tensor  # probe-train images whose raw feature norm each model records


def _stage(text: str) -> float:
    print(f"[reproduce invariance] {text}", flush=True)
    return time.perf_counter()


def _timed(seconds: dict[str, float], key: str, step: Callable[[], _T]) -> _T:
    """``step()``, announced as ``_STAGES[key]``; its duration recorded as ``seconds[key]``."""
    t0 = _stage(_STAGES[key])
    value = step()
    seconds[key] = time.perf_counter() - t0
    return value


def _overrides(data: _Data, s: InvarianceSettings, epochs: int, extra: list[str]) -> list[str]:
    """Hydra overrides turning the recipe into one run of this reproduction."""
    limit = (
        []
        if s.limit_batches is None
        else [f"++limit_train_batches={s.limit_batches}", f"++limit_val_batches={s.limit_batches}"]
    )
    return [
        f"data.dataset={data.dataset}",
        f"data.train_path={data.train_path.resolve()}",
        f"data.val_path={data.splits.test.resolve()}",
        f"data.num_workers={s.num_workers}",
        f"max_epochs={epochs}",
        f"optimizer.batch_size={s.batch_size}",
        f"optimizer.lr={PAPER_LR * 256 / s.batch_size}",
        f"method_kwargs.proj_hidden_dim={s.width}",
        f"method_kwargs.proj_output_dim={s.width}",
        "++log_every_n_steps=1",
        *limit,
        *([f"augmentations.0.crop_size={s.digits_size}"] if data.dataset == "custom" else []),
        *extra,
    ]


def geometry_on(head: list[str], every: int) -> list[str]:
    """Geometry on for a swapped head: statistics only, no budget, no end-of-fit probes.

    No run report either: the reproduction draws its own page.
    """
    return [
        "+geometry=on",
        *head,
        f"geometry.every_n_steps={every}",
        "geometry.budget=null",
        "geometry.probes.enabled=false",
        "geometry.report=false",
        "geometry.stats.queue=4",
        "geometry.measure.hessian=false",
        "geometry.measure.augment=false",
    ]


def _pretrain(out: Path, data: _Data, s: InvarianceSettings, epochs: int, extra: list[str]) -> Path:
    lightly_host = require("solo_geometry.hosts.lightly", extra="lightly")
    run: Path = lightly_host.launch(
        RECIPE, _overrides(data, s, epochs, extra), runs_root=out / "runs"
    )
    return run


def _measured(out: Path, data: _Data, s: InvarianceSettings, depth: int = 0) -> Guillotine:
    """Pretrain with the paper's head and measure it.

    Depth 0: the guillotine (the ReLU head of depth 2; class and rotation, linear and MLP
    probes); else the depth ablation's Swish head of that depth (the rotation linear probe).
    """
    targets: tuple[str, ...] = ("class", "rotation")
    probes: tuple[str, ...] = ("linear", "mlp")
    head, epochs, stem = paper_head("relu", 2), s.epochs, ""
    if depth:
        head, epochs, stem = paper_head("swish", depth), s.depth_epochs, f"_depth{depth}"
        targets, probes = ("rotation",), ("linear",)
    run = _pretrain(out, data, s, epochs, geometry_on(head, every=10**6))
    model = load_model(run)
    rows, paper = probe_rows(model, data.splits, run, targets, probes, s)
    norm = feature_norm(model, data.norm_images)
    return Guillotine(
        run=str(run),
        head="relu_bn",
        probes=tuple(rows),
        probes_paper=paper,
        n_test=len(data.splits.test_y),
        orbits=orbit_seeds(model, data.splits, out, s.seeds, f"orbits{stem}", norm),
        curvature=curvature_seeds(
            model, data.splits, out, s.seeds, s.curvature_images, f"sweeps{stem}"
        ),
    )


def _whitening(out: Path, data: _Data, s: InvarianceSettings) -> Whitening:
    per_epoch = train_size(data.dataset, data.train_path) // s.batch_size  # last batch dropped
    steps = s.whitening_epochs * min(per_epoch, s.limit_batches or per_epoch)
    every = max(1, steps // 8)  # about 8 measurements over training, and the final one
    extra = geometry_on(["geometry.head.name=metric_linear"], every=every)
    run = _pretrain(out, data, s, s.whitening_epochs, [*extra, "++checkpoint.keep_prev=true"])
    folder = RunFolder(run)
    keys = (
        "whitening/score",
        "whitening/cond_z",
        "whitening/cond_h",
        "metric/min",
        "metric/max",
        "metric/cond",
        "metric/effective_rank",
        "z/cond",
        "h/cond",
        "z/rankme_l2",
        "h/rankme_l2",
    )
    records = list(folder.records(ok_only=True))
    series: dict[str, Numbers] = {"step": tuple(r.step for r in records)}
    series |= {k: tuple(r.value(k) for r in records) for k in keys}
    ckpts = sorted(folder.checkpoints.glob("epoch=*.ckpt"), key=lambda p: int(p.stem[6:]))
    epochs = tuple(spectra_of(load_model(p), data.splits, int(p.stem[6:])) for p in ckpts)
    return Whitening(str(run), series, epochs)


def _prepare(dataset: str, out: Path, data_root: Path | None, s: InvarianceSettings) -> _Data:
    if dataset == "digits":
        root = make_digits(out / "data" / "digits", size=s.digits_size)
        folders = (root / "train", root / "val")
        train, test = subset_folders(folders, out / "data" / "digits_probes", s.probe_images)
        name, pretrain = "custom", root / "train"
    else:
        assert data_root is not None  # checked before anything was written
        train, test = export_cifar(dataset, data_root, out / "data" / dataset, s.probe_images)
        name, pretrain = dataset, data_root
    test_x, test_y, _ = load_image_folder(test)
    splits = Splits(train, test, test_x, test_y)
    return _Data(name, pretrain, splits, training_images(splits))


def run_invariance_experiment(
    out: str | Path,
    settings: InvarianceSettings = FULL,
    *,
    dataset: str = "digits",
    data_root: str | Path | None = None,
) -> InvarianceResult:
    """Run the five experiments and write ``invariance.json`` and ``invariance.html``.

    Args:
        out: output folder (created).
        settings: sizes (``FULL`` or ``QUICK``, or a variant).
        dataset: ``digits`` (embedded), ``cifar10`` or ``cifar100`` (read from ``data_root``).
        data_root: folder holding torchvision's CIFAR files (never downloaded).

    Returns:
        The content of ``invariance.json``.

    Raises:
        ValueError: on an unknown dataset or fewer than one seed.
        FileNotFoundError: CIFAR asked for and its files are not under ``data_root``.
    """
    if settings.seeds < 1:
        raise ValueError(f"seeds must be at least 1; got {settings.seeds}")
    root = check_data_root(dataset, data_root)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    start = _stage(f"data: {dataset}")
    data = _prepare(dataset, out, root, settings)
    guillotine = _timed(seconds, "guillotine", lambda: _measured(out, data, settings))
    depth = _timed(
        seconds,
        "depth",
        lambda: tuple(DepthRow.of(d, _measured(out, data, settings, d)) for d in _DEPTHS),
    )
    whitening = _timed(seconds, "whitening", lambda: _whitening(out, data, settings))
    result = InvarianceResult(
        schema=SCHEMA,
        dataset=dataset,
        host="lightly",
        settings=asdict(settings),
        recipe=str(RECIPE),
        guillotine=guillotine,
        depth=depth,
        whitening=whitening,
    )
    result = replace(result, claims=tuple(verdicts(run_evidence(result))))
    seconds["total"] = time.perf_counter() - start
    result = replace(result, seconds=seconds)
    write_result(out, "invariance", result)
    page = write_invariance_page(out, result)
    _stage(f"wrote {out / 'invariance.json'} and {page} in {seconds['total']:.0f} s")
    return result


def invariance_experiment(out: Path, quick: bool) -> tuple[str, str]:
    """Run the reproduction into ``out`` and return its page section (for ``reproduce all``)."""
    result = run_invariance_experiment(out, QUICK if quick else FULL)
    return invariance_section(out, result)
