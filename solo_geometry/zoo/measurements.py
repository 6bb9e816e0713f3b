"""The geometry of a trained backbone + head on a labelled image folder, from the weights alone.

What ``solo-geometry analyse`` prints and what a zoo card records (and ``zoo verify``
recomputes), each following docs/design.md section 3:

* ``probes``: the backbone-vs-head probe table and orbit table of
  :func:`solo_geometry.analysis.evaluation.evaluate` (linear and MLP probes on Z and H per target);
* ``stats``: the ``stats`` part of a record, by the monitor's assembly
  (:func:`~solo_geometry.geometry.metrics.record_stats`: representation statistics, quality
  metrics, CKA, whitening score, a metric-linear head's spectrum) of Z and H over the first
  ``stats_images`` held-out images (one view: LiDAR is null);
* ``rho``: metric singularity rho_aug of the head along each colour family's tangent, on the
  first ``rho_images`` held-out images, the backbone on running statistics (eval mode).

:func:`flatten` turns the result into ``name -> number`` fields, the unit of ``zoo verify``.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from solo_geometry.analysis.evaluation import evaluate
from solo_geometry.config import (
    LinearProbeConfig,
    MlpProbeConfig,
    OrbitsConfig,
    ProbesConfig,
)
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.geometry import COLOUR_FAMILIES, augmentation_tangents, metric_singularity
from solo_geometry.geometry.metrics import Scalar, record_stats
from solo_geometry.geometry.stats import metric_spectrum
from solo_geometry.inputs.datasets import MeanStd, probe_splits
from solo_geometry.inputs.features import extract_features
from solo_geometry.inputs.sizes import check_one_size, probe_folders
from solo_geometry.models.heads import MetricLinearHead
from solo_geometry.state import preserved_state

__all__ = ["MeasureSettings", "check_data", "flatten", "measure_model", "probes_config"]


@dataclass(frozen=True)
class MeasureSettings:
    """Everything that defines the numbers of :func:`measure` (recorded with them).

    Attributes:
        probes: the probe and orbit-table options (``geometry.probes``) as a plain dict.
        stats_images: held-out images for the representation statistics.
        rho_families: colour families for rho_aug.
        rho_images: held-out images for rho_aug.
        rho_probes: random directions per sample for rho_aug's denominator.
        threads: torch's intra-op threads during the measurement (None: as found). The probes'
            L-BFGS path depends on it (reduction order can flip the chosen L2 strength), so a
            card records the count it was measured with and verification uses the same.
    """

    probes: dict[str, Any] = field(default_factory=lambda: dataclasses.asdict(ProbesConfig()))
    stats_images: int = 256
    rho_families: tuple[str, ...] = ("brightness", "contrast")
    rho_images: int = 32
    rho_probes: int = 8
    threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho_families", tuple(self.rho_families))
        bad = [f for f in self.rho_families if f not in COLOUR_FAMILIES]
        if bad:
            raise ValueError(f"rho_families {bad}: choose from {sorted(COLOUR_FAMILIES)}")
        for name in ("stats_images", "rho_images", "rho_probes"):
            if int(getattr(self, name)) < 2:
                raise ValueError(f"{name} must be >= 2; got {getattr(self, name)}")
        probes_config(self.probes)  # validated where it enters

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values."""
        out = dataclasses.asdict(self)
        out["rho_families"] = list(self.rho_families)
        return out


def probes_config(data: dict[str, Any]) -> ProbesConfig:
    """The :class:`ProbesConfig` a plain dict (``dataclasses.asdict`` of one) describes.

    Raises:
        ValueError: on an unknown or invalid option (named by the config's own checks).
    """
    plain: dict[str, Any] = dict(data)
    try:
        nested: dict[str, Any] = {
            "linear": LinearProbeConfig(**plain.pop("linear", {})),
            "mlp": MlpProbeConfig(**plain.pop("mlp", {})),
            "orbits": OrbitsConfig(**plain.pop("orbits", {})),
        }
        return ProbesConfig(**plain, **nested)
    except TypeError as err:
        raise ValueError(f"probe settings: {err}") from err


def _held_out(data: Path, seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = probe_splits(data, seed)["test"]
    return x[:n], y[:n]  # (n, C, H, W), (n,)


def _stats(
    backbone: nn.Module,
    head: nn.Module,
    data: Path,
    s: MeasureSettings,
    mean_std: MeanStd,
    seed: int,
) -> dict[str, Scalar]:
    x, y = _held_out(data, seed, s.stats_images)
    feats = extract_features(backbone, head, (x, y), mean_std=mean_std, progress=False)
    metric = None
    if isinstance(head, MetricLinearHead):
        with torch.no_grad():
            metric = metric_spectrum(head.metric_spectrum())
    return record_stats(feats.z, feats.h, metric=metric)


def _rho(
    backbone: nn.Module,
    head: nn.Module,
    data: Path,
    s: MeasureSettings,
    mean_std: MeanStd,
    seed: int,
) -> dict[str, float]:
    x, _ = _held_out(data, seed, s.rho_images)
    out = {}
    with preserved_state(backbone, head):
        backbone.eval()
        head.eval()
        z = backbone((x - _t(mean_std[0])) / _t(mean_std[1])).flatten(1).detach()  # (n, d)
        for family in s.rho_families:
            v = augmentation_tangents(
                backbone, x, family, normalise=mean_std, images_normalised=False, bn_training=False
            )
            gen = torch.Generator().manual_seed(seed)
            out[family] = metric_singularity(head, z, v, generator=gen, probes=s.rho_probes)
    return out


def _t(values: Any) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.float32).view(1, -1, 1, 1)


def check_data(data: Path, settings: MeasureSettings) -> None:
    """Before any work: the data folder exists and its images have one size.

    Raises:
        ValueError: a missing folder, or images of two sizes (non-square ones with the
            rotation target), naming the files.
    """
    if not data.is_dir():
        raise ValueError(f"--data {str(data)!r} does not exist or is not a directory")
    targets = probes_config(settings.probes).targets
    check_one_size(probe_folders(data), f"--data {str(data)!r}", square="rotation" in targets)


def measure_model(
    backbone: nn.Module,
    head: nn.Module,
    data: str | Path,
    settings: MeasureSettings,
    *,
    mean_std: MeanStd,
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Probes, orbit table, representation statistics and rho_aug of a model on a data folder.

    Args:
        backbone: images (N, 3, H, W) -> Z (N, d); modes restored afterwards.
        head: Z (N, d) -> H (N, p).
        data: labelled image folder (``train/`` + ``val/`` class folders, or one split 50/50).
        settings: what defines the numbers.
        mean_std: the input normalisation the model was trained with.
        out_dir: folder for ``probes.json`` and ``features.pt``; None: a temporary folder.
        progress: progress bars on stderr.

    Returns:
        ``{"probes": ProbeTable dict, "stats": {...}, "rho": {family: value}}``.

    Raises:
        ValueError: on a missing or empty data folder, images of more than one size (checked
            before any work), or invalid settings.
    """
    data = Path(data)
    check_data(data, settings)
    cfg = probes_config(settings.probes)
    found = torch.get_num_threads()
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    try:
        return _measure(backbone, head, data, settings, cfg, mean_std, out_dir, progress)
    finally:
        torch.set_num_threads(found)


def _measure(
    backbone: nn.Module,
    head: nn.Module,
    data: Path,
    settings: MeasureSettings,
    cfg: ProbesConfig,
    mean_std: MeanStd,
    out_dir: str | Path | None,
    progress: bool,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run = RunFolder(Path(out_dir) if out_dir is not None else Path(tmp))
        run.path.mkdir(parents=True, exist_ok=True)
        table = evaluate(
            backbone,
            head,
            data,
            run,
            cfg,
            mean_std=mean_std,
            device="cpu",
            tag=None,
            progress=progress,
        )
    return {
        "probes": table.to_dict(),
        "stats": _stats(backbone, head, data, settings, mean_std, cfg.seed),
        "rho": _rho(backbone, head, data, settings, mean_std, cfg.seed),
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def flatten(result: dict[str, Any]) -> dict[str, float | None]:
    """``name -> number`` fields of a :func:`measure` result (NaN and null kept as None).

    Names: ``stats/<key>``, ``rho/<family>``, ``probe/<z|h>/<probe>/<target>``,
    ``orbit/<family>/<z|h>/<metric>`` (the mean of each metric) and
    ``orbit/<family>/compression``.
    """
    out: dict[str, float | None] = {}
    for key, value in result["stats"].items():
        out[f"stats/{key}"] = _number(value)
    for key, value in result["rho"].items():
        out[f"rho/{key}"] = _number(value)
    for row in result["probes"]["rows"]:
        out[f"probe/{row['features']}/{row['probe']}/{row['target']}"] = _number(row["accuracy"])
    for row in result["probes"]["orbits"]:
        fam = row["family"]
        for space in ("z", "h"):
            for metric, value in row[space].items():
                mean = value[0] if isinstance(value, list) else value
                out[f"orbit/{fam}/{space}/{metric}"] = _number(mean)
        out[f"orbit/{fam}/compression"] = _number(row["compression"])
    return {k: (v if v is None or math.isfinite(v) else None) for k, v in out.items()}
