"""The measurements of the paper's invariance experiments on one pretrained backbone and head.

Each follows the paper's reference code (experiments.py, head_depth_ablations.py) through this
package's own pieces:

* probes: :func:`solo_geometry.analysis.evaluation.evaluate` fits linear and MLP probes on Z and
  on H for the class and the 4-way rotation target (docs/design.md section 3, "Probes");
* orbits: the paper's protocol (5 classes x 3 images x 12 rotations) and its statistics, once
  per sampling seed, under both inputs of the head: unit z (the paper's code) and raw z (as in
  training), with the mean norm of raw training features and the cosine of H's rows with their
  mean (under unit z the head's BatchNorm statistics, set by features of that norm, add a common
  offset); the arrays are saved in the paper's layout
  (``orbits_z``, ``orbits_h``, ``orbit_ids``, ``orbit_labels``, ``orbit_angles``), so
  ``solo-geometry orbits FILE`` re-analyses them;
* curvature: 0 to 45 degree sweeps of held-out images drawn per seed (the paper draws 200 per
  seed, 3 seeds), kappa(Z), kappa(H) and their ratio per seed, then mean and std over seeds
  (population std, as the paper's ``np.std``);
* whitening: covariance spectra of Z and H on held-out images, the whitening score and the
  metric spectrum of a metric-linear head, per checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.analysis.evaluation import evaluate
from solo_geometry.config import MlpProbeConfig, OrbitsConfig, ProbesConfig
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.geometry.augment import apply_normalisation, deterministic_mode
from solo_geometry.geometry.curvature import curvature_comparison, sweep_representations
from solo_geometry.geometry.orbits import (
    OrbitImages,
    mean_std,
    orbit_comparison,
    orbit_images,
)
from solo_geometry.geometry.stats import metric_spectrum, representation_stats, whitening_score
from solo_geometry.inputs.datasets import load_image_folder
from solo_geometry.inputs.features import extract_features
from solo_geometry.models.checkpoint import LoadedModel
from solo_geometry.models.heads import MetricLinearHead
from solo_geometry.reproduce.invariance.orbit_evidence import OrbitSummary
from solo_geometry.reproduce.invariance.result import (
    Curvature,
    CurvatureSeed,
    OrbitReading,
    OrbitSeed,
    OrbitStats,
    OrbitTable,
    PaperProbes,
    ProbePair,
    Spectra,
)

__all__ = [
    "Splits",
    "READINGS",
    "curvature_seeds",
    "feature_norm",
    "orbit_readings",
    "orbit_seeds",
    "probe_rows",
    "spectra_of",
    "training_images",
]


@dataclass(frozen=True)
class Splits:
    """Probe-train and held-out image folders and the held-out images in memory.

    Attributes:
        train: probe-train class folders.
        test: held-out class folders.
        test_x: held-out images (N, 3, H, W) in [0, 1].
        test_y: their classes (N,).
    """

    train: Path
    test: Path
    test_x: Tensor
    test_y: Tensor


def probe_rows(
    model: LoadedModel,
    splits: Splits,
    run: Path,
    *,
    targets: Sequence[str],
    probes: Sequence[str],
    mlp_epochs: int,
    mlp_patience: int = MlpProbeConfig.patience,
) -> tuple[list[ProbePair], PaperProbes]:
    """This package's and the paper's probes of a run (``geometry.probes.protocol=both``).

    Args:
        model: the run's backbone and head.
        splits: probe-train and held-out folders.
        run: the run folder (``probes.json`` and the feature cache ``features.pt`` written there).
        targets: ``class`` and/or ``rotation``.
        probes: ``linear`` and/or ``mlp``.
        mlp_epochs: epoch cap of the MLP probe.
        mlp_patience: epochs without validation gain before the MLP probe stops.

    Returns:
        One row per (target, probe), and the paper's probes (``probes.json``'s ``paper``).
    """
    cfg = ProbesConfig(
        targets=list(targets),
        probes=list(probes),
        protocol="both",
        # early-stopped on validation, as the reproduction's patience was calibrated
        mlp=MlpProbeConfig(stop="val", max_epochs=mlp_epochs, patience=mlp_patience),
        orbits=OrbitsConfig(families=[]),  # the paper's orbits are measured per seed below
    )
    table = evaluate(
        model.backbone,
        model.head,
        (splits.train, splits.test),
        RunFolder(run),
        cfg,
        mean_std=model.mean_std,
        tag=run.name,
        progress=False,
    )
    chance = {r.target: r.chance for r in table.rows}
    out = []
    for target, probe in product(targets, probes):
        z, h = table.accuracy("z", probe, target), table.accuracy("h", probe, target)
        assert z is not None and h is not None  # evaluate fits every pair asked for
        out.append(ProbePair(target, probe, z, h, gap=z - h, chance=chance[target]))
    assert table.paper is not None  # protocol "both"
    return out, PaperProbes.from_json(table.paper, where="probes.json's paper")


# The two inputs of the head in an orbit table: the paper's code feeds unit z, training fed raw z.
READINGS = {"unit_z": "paper", "raw_z": "default"}  # reading -> orbit_representations protocol


@torch.no_grad()
def feature_norm(model: LoadedModel, images: Tensor, batch_size: int = 256) -> float:
    """Mean L2 norm of raw backbone features (eval mode) of ``images`` (N, 3, H, W) in [0, 1]."""
    with deterministic_mode(model.backbone, batch_stats=False):
        norms = [
            model.backbone(
                chunk if model.mean_std is None else apply_normalisation(chunk, model.mean_std)
            )
            .flatten(1)
            .norm(dim=1)
            for chunk in images.split(batch_size)
        ]
    return float(torch.cat(norms).double().mean())


def training_images(splits: Splits, limit: int = 256) -> Tensor:
    """Up to ``limit`` probe-train images (a fixed shuffle's first): data like the head's."""
    x, _, _ = load_image_folder(splits.train)
    pick = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:limit]
    return x[pick]


@torch.no_grad()
def orbit_readings(
    model: LoadedModel, images: Tensor, batch_size: int = 256
) -> dict[str, tuple[Tensor, Tensor]]:
    """Z and H (unit rows) of orbit images under each reading, from one backbone pass.

    The same numbers as ``orbit_representations(..., protocol=READINGS[reading])``; the
    backbone, the costly part, runs once for both readings.
    """
    zs: list[Tensor] = []
    hs: dict[str, list[Tensor]] = {name: [] for name in READINGS}
    with deterministic_mode(nn.ModuleList([model.backbone, model.head]), batch_stats=False):
        for chunk in images.split(batch_size):
            x = chunk if model.mean_std is None else apply_normalisation(chunk, model.mean_std)
            z = model.backbone(x).flatten(1)
            zn = F.normalize(z, dim=1)
            zs.append(zn)
            hs["unit_z"].append(F.normalize(model.head(zn), dim=1))
            hs["raw_z"].append(F.normalize(model.head(z), dim=1))
    Z = torch.cat(zs)
    return {name: (Z, torch.cat(h)) for name, h in hs.items()}


_STATS = ("spread", "d_intra", "d_inter", "separation")


def _over_seeds(per_seed: Sequence[OrbitSeed], space: str) -> OrbitStats:
    """Mean and std over seeds of each statistic's mean in ``space``."""
    pairs = {}
    for key in _STATS:
        means = [getattr(getattr(row, space), key)[0] for row in per_seed]
        pairs[key] = mean_std(torch.tensor(means, dtype=torch.float64))
    return OrbitStats(**pairs)


def _reading(
    draws: list[tuple[OrbitImages, Tensor, Tensor]], folder: Path, stem: str
) -> OrbitReading:
    per_seed: list[OrbitSeed] = []
    cosines: list[float] = []
    for seed, (orb, Z, H) in enumerate(draws):
        path = folder / f"{stem}_seed{seed}.npz"
        np.savez(
            path,
            orbits_z=Z.numpy(),
            orbits_h=H.numpy(),
            orbit_ids=orb.orbit_ids.numpy(),
            orbit_labels=orb.labels.numpy(),
            orbit_angles=orb.params.numpy(),
        )
        table = orbit_comparison(Z, H, orb.orbit_ids, orb.labels).paper_table()
        summary = OrbitSummary.from_arrays(
            Z.numpy(), H.numpy(), orb.orbit_ids.numpy(), orb.labels.numpy()
        )
        row = OrbitSeed.from_json(table, where=path.name)
        per_seed.append(replace(row, file=path.name, summary=summary))
        cosines.append(summary.h_cosine_to_mean)
    over = OrbitTable(
        z=_over_seeds(per_seed, "z"),
        h=_over_seeds(per_seed, "h"),
        compression=mean_std(torch.tensor([r.compression for r in per_seed])),
    )
    return OrbitReading(over, tuple(per_seed), h_cosine_to_mean=sum(cosines) / len(cosines))


def orbit_seeds(
    model: LoadedModel, splits: Splits, folder: Path, seeds: int, stem: str, norm: float
) -> dict[str, OrbitReading]:
    """The paper's orbit table once per image draw, under both inputs of the head.

    Args:
        model: backbone and head.
        splits: held-out images to draw the orbits from.
        folder: where ``<stem>_seed<s>.npz`` (unit z) and ``<stem>_raw_z_seed<s>.npz`` go.
        seeds: number of draws (seeds 0 .. seeds - 1).
        stem: file name stem.
        norm: mean norm of raw training features (:func:`feature_norm`), recorded per reading.

    Returns:
        ``unit_z`` (the head fed unit z, the paper's code) and ``raw_z`` (raw z, as in training),
        each with ``table`` (mean and std over seeds of each statistic's mean, and the
        compression), ``per_seed`` (the paper's table, ``file`` and an :class:`OrbitSummary`),
        ``feature_norm`` and ``h_cosine_to_mean`` (mean over seeds).
    """
    draws: dict[str, list[tuple[OrbitImages, Tensor, Tensor]]] = {name: [] for name in READINGS}
    for seed in range(seeds):
        orb = orbit_images(splits.test_x, splits.test_y, protocol="paper", seed=seed)
        for name, (Z, H) in orbit_readings(model, orb.images).items():
            draws[name].append((orb, Z, H))
    out = {}
    for name in READINGS:
        suffix = "" if name == "unit_z" else f"_{name}"
        out[name] = replace(_reading(draws[name], folder, f"{stem}{suffix}"), feature_norm=norm)
    return out


def curvature_seeds(
    model: LoadedModel, splits: Splits, folder: Path, seeds: int, images: int, stem: str
) -> Curvature:
    """Curvature of 0-45 degree rotation sweeps, Z vs H, per seed and over seeds.

    Args:
        model: backbone and head.
        splits: held-out images.
        folder: where ``<stem>_seed<s>.npz`` (``sweeps_z`` (S, 10, d), ``sweeps_h``) go.
        seeds: number of image draws.
        images: sweeps per draw (the paper's 200).
        stem: file name stem.

    Returns:
        ``per_seed`` (``kappa_z``, ``kappa_h``: mean over sweeps; ``ratio``; ``file``) and
        ``kappa_z``, ``kappa_h``, ``ratio``: (mean, std) over seeds, as the paper reports.
    """
    per_seed = []
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        pick = torch.randperm(len(splits.test_y), generator=gen)[:images]
        Rz, Rh = sweep_representations(
            model.backbone, model.head, splits.test_x[pick], normalise=model.mean_std
        )
        path = folder / f"{stem}_seed{seed}.npz"
        np.savez(path, sweeps_z=Rz.numpy(), sweeps_h=Rh.numpy())
        c = curvature_comparison(Rz, Rh)
        per_seed.append(CurvatureSeed(c.kappa_z[0], c.kappa_h[0], c.ratio, c.n_sweeps, path.name))
    over = {
        key: mean_std(torch.tensor([getattr(r, key) for r in per_seed], dtype=torch.float64))
        for key in ("kappa_z", "kappa_h", "ratio")
    }
    return Curvature(tuple(per_seed), **over)


def spectra_of(model: LoadedModel, splits: Splits, epoch: int = 0) -> Spectra:
    """Covariance spectra of Z and H on held-out images, whitening score, metric spectrum.

    Args:
        model: backbone and head (a metric-linear head adds its metric's spectrum).
        splits: held-out images.
        epoch: the checkpoint's epoch, recorded with the spectra.

    Returns:
        ``cov_z``, ``cov_h`` (eigenvalues, descending), ``whitening`` (score, rank, cond_z,
        cond_h), and for a metric-linear head ``metric`` (min, max, cond, rank, effective
        rank) and ``metric_eigenvalues`` (descending).
    """
    feats = extract_features(
        model.backbone,
        model.head,
        (splits.test_x, splits.test_y),
        mean_std=model.mean_std,
        progress=False,
    )
    score = whitening_score(feats.z, feats.h)
    out = Spectra(
        epoch=epoch,
        cov_z=representation_stats(feats.z).cov_eigenvalues,
        cov_h=representation_stats(feats.h).cov_eigenvalues,
        whitening=score,
        n_samples=int(feats.z.shape[0]),
    )
    if isinstance(model.head, MetricLinearHead):
        with torch.no_grad():
            eig = model.head.metric_spectrum().double()  # (d,) ascending
        spec = metric_spectrum(eig, dtype=next(model.head.parameters()).dtype)  # its floor
        metric = {
            k: float(getattr(spec, k)) for k in ("min", "max", "cond", "rank", "effective_rank")
        }
        out = replace(out, metric=metric, metric_eigenvalues=tuple(eig.flip(0).tolist()))
    return out
