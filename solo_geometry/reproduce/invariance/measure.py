"""The measurements of the paper's invariance experiments on one pretrained backbone and head.

Each follows the paper's reference code (experiments.py, head_depth_ablations.py) through this
package's own pieces, as docs/reproducing.md ("Invariance") lists them; spreads over draws are
population stds, as the paper's ``np.std``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from itertools import product
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from solo_geometry.analysis.evaluation import evaluate
from solo_geometry.config import MlpProbeConfig, OrbitsConfig, ProbesConfig
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.geometry.augment import apply_normalisation, deterministic_mode
from solo_geometry.geometry.curvature import curvature_comparison, sweep_representations
from solo_geometry.geometry.orbits import (
    OrbitImages,
    Pair,
    mean_std,
    orbit_comparison,
    orbit_images,
    orbit_representations,
)
from solo_geometry.geometry.stats import metric_spectrum, representation_stats, whitening_score
from solo_geometry.inputs.datasets import load_image_folder
from solo_geometry.inputs.features import extract_features
from solo_geometry.models.checkpoint import LoadedModel
from solo_geometry.models.heads import MetricLinearHead
from solo_geometry.reproduce.invariance.evidence import OrbitSummary
from solo_geometry.reproduce.invariance.result import (
    READINGS,
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
from solo_geometry.reproduce.invariance.settings import InvarianceSettings

__all__ = [
    "Splits",
    "READINGS",
    "curvature_seeds",
    "feature_norm",
    "orbit_seeds",
    "probe_rows",
    "spectra_of",
    "training_images",
]


@dataclass(frozen=True)
class Splits:
    """Probe-train and held-out class folders, and the held-out images in memory."""

    train: Path
    test: Path
    test_x: Tensor  # (N, 3, H, W) in [0, 1]
    test_y: Tensor  # (N,) classes


def probe_rows(
    model: LoadedModel,
    splits: Splits,
    run: Path,
    targets: Sequence[str],
    probes: Sequence[str],
    s: InvarianceSettings,
) -> tuple[list[ProbePair], PaperProbes]:
    """This package's and the paper's probes of a run (``geometry.probes.protocol=both``).

    ``probes.json`` and the feature cache are written in the run folder ``run``; the MLP probe
    is capped and stopped by ``s.mlp_epochs`` and ``s.mlp_patience``.

    Returns:
        One row per (target, probe), and the paper's probes (``probes.json``'s ``paper``).
    """
    cfg = ProbesConfig(
        targets=list(targets),
        probes=list(probes),
        protocol="both",
        # early-stopped on validation, as the reproduction's patience was calibrated
        mlp=MlpProbeConfig(stop="val", max_epochs=s.mlp_epochs, patience=s.mlp_patience),
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


@torch.no_grad()
def feature_norm(model: LoadedModel, images: Tensor, batch_size: int = 256) -> float:
    """Mean L2 norm of raw backbone features (eval mode) of ``images`` (N, 3, H, W) in [0, 1]."""
    x = images if model.mean_std is None else apply_normalisation(images, model.mean_std)
    with deterministic_mode(model.backbone, batch_stats=False):
        norms = [model.backbone(chunk).flatten(1).norm(dim=1) for chunk in x.split(batch_size)]
    return float(torch.cat(norms).double().mean())


def training_images(splits: Splits, limit: int = 256) -> Tensor:
    """Up to ``limit`` probe-train images (a fixed shuffle's first): data like the head's."""
    x, _, _ = load_image_folder(splits.train)
    pick = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:limit]
    return x[pick]


def _over(values: Sequence[float | None], dtype: torch.dtype = torch.float64) -> Pair:
    """Mean and population std over seeds."""
    return mean_std(torch.tensor(values, dtype=dtype))


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
    spaces = {  # each statistic's mean, over seeds
        sp: OrbitStats(
            **{
                k.name: _over([getattr(getattr(r, sp), k.name)[0] for r in per_seed])
                for k in fields(OrbitStats)
            }
        )
        for sp in ("z", "h")
    }
    over = OrbitTable(**spaces, compression=_over([r.compression for r in per_seed], torch.float32))
    return OrbitReading(over, tuple(per_seed), h_cosine_to_mean=sum(cosines) / len(cosines))


def orbit_seeds(
    model: LoadedModel, splits: Splits, folder: Path, seeds: int, stem: str, norm: float
) -> dict[str, OrbitReading]:
    """The paper's orbit table for draws 0 .. ``seeds`` - 1 of held-out images, per reading.

    The arrays go to ``folder/<stem>_seed<s>.npz`` (unit z) and ``<stem>_raw_z_seed<s>.npz``;
    ``norm`` (:func:`feature_norm`) is recorded with each reading.
    """
    draws: dict[str, list[tuple[OrbitImages, Tensor, Tensor]]] = {name: [] for name in READINGS}
    for seed in range(seeds):
        orb = orbit_images(splits.test_x, splits.test_y, protocol="paper", seed=seed)
        for name, protocol in READINGS.items():
            Z, H = orbit_representations(
                model.backbone, model.head, orb.images, protocol=protocol, normalise=model.mean_std
            )
            draws[name].append((orb, Z, H))
    out = {}
    for name in READINGS:
        suffix = "" if name == "unit_z" else f"_{name}"
        out[name] = replace(_reading(draws[name], folder, f"{stem}{suffix}"), feature_norm=norm)
    return out


def curvature_seeds(
    model: LoadedModel, splits: Splits, folder: Path, seeds: int, images: int, stem: str
) -> Curvature:
    """Curvature of 0-45 degree rotation sweeps of ``images`` held-out images per draw.

    The sweeps go to ``folder/<stem>_seed<s>.npz`` (``sweeps_z`` (S, 10, d), ``sweeps_h``).
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
        key: _over([getattr(r, key) for r in per_seed]) for key in ("kappa_z", "kappa_h", "ratio")
    }
    return Curvature(tuple(per_seed), **over)


def spectra_of(model: LoadedModel, splits: Splits, epoch: int = 0) -> Spectra:
    """Covariance spectra of Z and H on held-out images, whitening score, metric spectrum.

    ``epoch`` is the checkpoint's; a metric-linear head adds its metric's spectrum.
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
        metric = {k.removeprefix("metric/"): v for k, v in spec.as_record().items()}
        out = replace(out, metric=metric, metric_eigenvalues=tuple(eig.flip(0).tolist()))
    return out
