"""Backbone-vs-head evaluation of a trained model on a labelled image folder.

:func:`evaluate` fits the probes of :mod:`solo_geometry.analysis.probes` on Z and on H for every
configured target (class, quarter-turn rotation, binned brightness jitter), and, given the
network's constructor, the same probes on the same architecture at random initialisation
(built under ``torch.manual_seed(geometry.probes.seed)``), so each row says whether training
helped; and it measures the orbit table (docs/design.md section 3, "Orbits") on held-out
images, then writes both into the run folder's ``probes.json`` as a
:class:`~solo_geometry.folder.probe_table.ProbeTable`. Features go through the run's feature cache
(the random-init network's too, under ``random_init/seed<seed>/``), so evaluating again costs
no forward pass.

References:
    - [0]: Alain and Bengio, 2016, Understanding intermediate layers using linear classifier
      probes, arXiv 1610.01644
    - [1]: Chen et al., 2020, A Simple Framework for Contrastive Learning (SimCLR),
      arXiv 2002.05709 (probing before vs after the projection head)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from solo_geometry.analysis.paper_probes import PaperProbeSettings, paper_rotation_probes
from solo_geometry.analysis.probes import ProbeResult, linear_probe, mlp_probe
from solo_geometry.config import OrbitsConfig, ProbesConfig
from solo_geometry.folder.probe_table import OrbitRow, ProbeRow, ProbeTable
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.geometry.orbits import (
    PAPER_ORBIT_DEGREES,
    make_orbits,
    orbit_comparison,
    orbit_images,
    orbit_representations,
)
from solo_geometry.inputs.datasets import (
    IMAGENET_MEAN_STD,
    ORBIT_T_MAX,
    MeanStd,
    probe_splits,
    stratified_split,
    target_set,
)
from solo_geometry.inputs.features import Features, extract_features
from solo_geometry.models.checkpoint import LoadedModel

__all__ = [
    "RANDOM_INIT_SETS",
    "evaluate",
    "evaluate_model",
    "orbit_table",
    "random_init_modules",
]

Extract = Callable[[Any, str, dict[str, Tensor] | None], Features]
Build = Callable[[], tuple[nn.Module, nn.Module]]
# Feature-cache sets of the random-init network: ``random_init/seed<seed>/<split>/<target>``.
RANDOM_INIT_SETS = "random_init"


def _plain(metrics: Any) -> dict[str, Any]:
    """A dataclass of (mean, std) pairs as JSON writes it: pairs as lists."""
    return {
        k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(metrics).items()
    }


def orbit_table(
    extract: Extract, images: Tensor, labels: Tensor, cfg: OrbitsConfig
) -> list[OrbitRow]:
    """Orbit statistics of Z and H per family, ``cfg.k`` copies of each image along t.

    Args:
        extract: ``extract(data, name, extras) -> Features`` (cached extraction).
        images: held-out images (n, C, H, W) in [0, 1].
        labels: their classes (n,).
        cfg: families and orbit size; t evenly spaced in [-t_max, t_max] (``ORBIT_T_MAX``).

    Returns:
        One :class:`OrbitRow` per family.
    """
    rows = []
    for family in cfg.families:
        t_max = ORBIT_T_MAX[family]
        x, orbit, t = make_orbits(images, family, cfg.k, t_max)  # (n*K, C, H, W), (n*K,), (K,)
        t_all = t.repeat(images.shape[0])  # (n * K,), orbit-major like x
        feats = extract((x, labels[orbit]), f"test/orbit/{family}", {"orbit": orbit, "t": t_all})
        cmp = orbit_comparison(feats.z, feats.h, orbit, feats.labels)
        rows.append(
            OrbitRow(
                family,
                t_max,
                cfg.k,
                _plain(cmp.z),
                _plain(cmp.h),
                cmp.compression,
                list(cmp.compression_per_orbit),
            )
        )
    return rows


def _fit(
    probe: str, train: Features, test: Features, space: str, cfg: ProbesConfig, device: Any
) -> ProbeResult:
    """One probe on one feature space, fitted on ``train`` and scored on ``test``."""
    x_tr, x_te = getattr(train, space), getattr(test, space)
    if probe == "linear":
        return linear_probe(
            x_tr, train.labels, x_te, test.labels, cfg.linear, seed=cfg.seed, device=device
        )
    return mlp_probe(x_tr, train.labels, x_te, test.labels, cfg.mlp, seed=cfg.seed, device=device)


def _probe_rows(
    extract: Extract,
    splits: dict[str, tuple[Tensor, Tensor]],
    cfg: ProbesConfig,
    device: Any,
    extract_random: Extract | None = None,
) -> list[ProbeRow]:
    """Every configured probe on Z and H, and beside it the same fit at random initialisation.

    The random-init features are of the same images (the same seeded nuisance draws), so each
    pair of fits shares its split, its probe options and its seed.
    """
    rows = []
    for target in cfg.targets:
        feats, rand = {}, {}
        for split in ("train", "test"):
            gen = torch.Generator().manual_seed(cfg.seed + (split == "test"))
            x, y = target_set(*splits[split], target, gen, cfg.jitter_bins, cfg.jitter_max)
            feats[split] = extract((x, y), f"{split}/{target}", None)
            if extract_random is not None:
                rand[split] = extract_random((x, y), f"{split}/{target}", None)
        tr, te = feats["train"], feats["test"]
        chance = float(torch.bincount(te.labels).max()) / len(te.labels)
        for space in ("z", "h"):
            for probe in cfg.probes:
                res = _fit(probe, tr, te, space, cfg, device)
                base = (
                    _fit(probe, rand["train"], rand["test"], space, cfg, device) if rand else None
                )
                rows.append(
                    ProbeRow(
                        space,
                        probe,
                        target,
                        res.accuracy,
                        chance,
                        res.details,
                        None if base is None else base.accuracy,
                        {} if base is None else base.details,
                    )
                )
    return rows


def _extractor(
    modules: tuple[nn.Module, nn.Module], prefix: str, options: dict[str, Any]
) -> Extract:
    """Cached extraction through ``modules``, its sets named ``prefix + name``."""

    def extract(data: Any, name: str, extras: dict[str, Tensor] | None) -> Features:
        return extract_features(*modules, data, name=prefix + name, extras=extras, **options)

    return extract


def random_init_modules(
    build: Build, seed: int, device: str | torch.device | None = None
) -> tuple[nn.Module, nn.Module]:
    """The same architecture at random initialisation: ``build()`` under a fixed seed.

    The caller's RNG state is left as it was (``torch.random.fork_rng``); ``build`` must make
    its modules on the CPU (their draws come from the CPU generator seeded here).

    Args:
        build: the constructor of the probed network, ``() -> (backbone, head)``, untrained.
        seed: ``torch.manual_seed`` before ``build()`` (``geometry.probes.seed``).
        device: where the modules go (None: stay on the CPU).

    Returns:
        ``(backbone, head)`` in eval mode.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        backbone, head = build()
    return backbone.to(device).eval(), head.to(device).eval()


def evaluate(
    backbone: nn.Module,
    head: nn.Module,
    data: str | Path | tuple[Path, Path],
    run: RunFolder,
    cfg: ProbesConfig | None = None,
    *,
    mean_std: MeanStd = IMAGENET_MEAN_STD,
    device: str | torch.device | None = None,
    tag: str | None = None,
    progress: bool = True,
    random_init: Build | None = None,
) -> ProbeTable:
    """Backbone-vs-head probes and the orbit table; writes the run's ``probes.json``.

    ``cfg.protocol`` picks the probes: this package's (``package``, the default), the paper's
    rotation probes (``paper``: :mod:`solo_geometry.analysis.paper_probes`, under ``probes.json``'s
    ``paper``, no package rows) or ``both``.

    Args:
        backbone: images (N, 3, H, W) -> Z (N, d); put in eval mode, mode restored.
        head: Z (N, d) -> H (N, p); same.
        data: a pair (probe-train folder, held-out folder) of class folders;
            ``<dir>/train`` + ``<dir>/val`` (or ``test``) class folders; or one class
            folder split 50/50 (stratified, seeded) into probe-train and held-out.
        run: the run folder (``probes.json`` and the feature cache ``features.pt``).
        cfg: targets, probes and their options, orbit table (``geometry.probes``).
        mean_std: input normalisation: the recipe's (``datasets.mean_std_of``).
        device: where to run the model and the probes (default: the backbone's device).
        tag: identifies the model in the feature cache (another tag: cache rebuilt).
        progress: progress bars on stderr.
        random_init: the constructor of this network, ``() -> (backbone, head)`` untrained:
            each probe row then also holds the same probe on the same architecture at random
            initialisation, built by :func:`random_init_modules` under
            ``torch.manual_seed(cfg.seed)`` (``settings.random_init``). None: not measured.

    Returns:
        The :class:`ProbeTable` written.

    Raises:
        ValueError: on a missing or empty data folder.
    """
    cfg = cfg if cfg is not None else ProbesConfig()
    splits = probe_splits(data if isinstance(data, tuple) else Path(data), cfg.seed)
    options = {
        "batch_size": cfg.batch_size,
        "device": device,
        "cache": run.features,
        "tag": tag,
        "mean_std": mean_std,
        "progress": progress,
    }
    extract = _extractor((backbone, head), "", options)
    rows: list[ProbeRow] = []
    if cfg.protocol != "paper":
        untrained = None
        if random_init is not None:  # built once; its features cached beside the trained ones
            modules = random_init_modules(random_init, cfg.seed, _device_of(backbone, device))
            untrained = _extractor(modules, f"{RANDOM_INIT_SETS}/seed{cfg.seed}/", options)
        rows = _probe_rows(extract, splits, cfg, device, untrained)
    paper = None
    if cfg.protocol in ("paper", "both"):  # the authors' probes, on the same two splits
        paper = paper_rotation_probes(
            backbone,
            head,
            splits["train"][0],
            splits["test"][0],
            normalise=mean_std,
            settings=PaperProbeSettings(seed=cfg.seed),
        )
    test_x, test_y = splits["test"]
    if cfg.orbits.protocol == "paper":
        orbits = [_paper_orbits(backbone, head, test_x, test_y, mean_std, cfg.seed)]
        return _write(run, cfg, (rows, orbits, paper), data, mean_std, splits, 15)
    n_orbit = min(cfg.orbits.images, len(test_y) - 1)
    pick = stratified_split(
        test_y, min(0.99, n_orbit / len(test_y)), torch.Generator().manual_seed(cfg.seed)
    )[1][:n_orbit]
    orbits = orbit_table(extract, test_x[pick], test_y[pick], cfg.orbits)
    return _write(run, cfg, (rows, orbits, paper), data, mean_std, splits, len(pick))


def evaluate_model(
    model: LoadedModel,
    data: Path,
    cfg: ProbesConfig,
    *,
    out: Path | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> tuple[ProbeTable, RunFolder]:
    """:func:`evaluate` a loaded run or checkpoint (``solo-geometry probe``), beside its weights.

    Args:
        model: the run's backbone and head (:func:`~solo_geometry.models.checkpoint.load_model`);
            its constructor gives the random-initialisation rows.
        data: the labelled image folder.
        cfg: targets, probes, seed and orbit table.
        out: the run folder to write (default: the model's own).
        device: where to run the model and the probes.
        progress: progress bars on stderr.

    Returns:
        The table written, and the run folder holding it.
    """
    run = RunFolder(out if out is not None else model.run_dir)
    ckpt = model.checkpoint.stat()  # the cache's tag: this checkpoint's bytes, this data
    tag = f"{model.checkpoint.resolve()}:{ckpt.st_size}:{ckpt.st_mtime_ns}:{data.resolve()}"
    table = evaluate(
        model.backbone,
        model.head,
        data,
        run,
        cfg,
        mean_std=model.mean_std,
        device=device,
        tag=tag,
        progress=progress,
        random_init=model.untrained,
    )
    return table, run


def _write(
    run: RunFolder,
    cfg: ProbesConfig,
    parts: tuple[list[ProbeRow], list[OrbitRow], dict[str, Any] | None],
    data: Any,
    mean_std: MeanStd,
    splits: dict[str, tuple[Tensor, Tensor]],
    orbit_images: int,
) -> ProbeTable:
    settings = {
        "data": str(data),
        "mean_std": [list(m) for m in mean_std],
        "n_train": len(splits["train"][1]),
        "n_test": len(splits["test"][1]),
        "orbit_images": orbit_images,
        "probes": dataclasses.asdict(cfg),
        "random_init": {  # how the rows' random_init were measured (None: they were not)
            "measured": any(r.random_init is not None for r in parts[0]),
            "seed": cfg.seed,
        },
    }
    rows, orbits, paper = parts
    table = ProbeTable(rows, orbits, settings, paper)
    run.write_probes(table)
    return table


def _device_of(module: nn.Module, device: str | torch.device | None) -> torch.device:
    """``device``, else where ``module``'s parameters are (the CPU for a parameterless one)."""
    if device is not None:
        return torch.device(device)
    return next((p.device for p in module.parameters()), torch.device("cpu"))


def _paper_orbits(
    backbone: nn.Module,
    head: nn.Module,
    images: Tensor,
    labels: Tensor,
    mean_std: MeanStd,
    seed: int,
) -> OrbitRow:
    """The paper's orbit table (``protocol="paper"``): 5 classes x 3 images x 12 rotations.

    The row's family is ``rotation-paper`` and its ``t_max`` is in degrees (330), unlike the
    default protocol's parameters (see ``geometry/augment.py``).
    """
    orbit = orbit_images(images, labels, protocol="paper", seed=seed)
    Z, H = orbit_representations(backbone, head, orbit.images, protocol="paper", normalise=mean_std)
    cmp = orbit_comparison(Z, H, orbit.orbit_ids, orbit.labels)
    k = len(PAPER_ORBIT_DEGREES)
    return OrbitRow(
        "rotation-paper",
        max(PAPER_ORBIT_DEGREES),
        k,
        _plain(cmp.z),
        _plain(cmp.h),
        cmp.compression,
        list(cmp.compression_per_orbit),
    )
