"""Linear and MLP probes on cached features, and the backbone-vs-head table.

A probe is fitted on features of a train split and scored on a held-out split. Both probes
standardise the features with train statistics (a constant feature stays 0, so pseudo-collapsed
features score at chance) and carve a stratified validation split from train with a seeded
generator: the linear probe picks its L2 strength there, the MLP probe stops early there.
Nothing touches the global RNG, so every result is a deterministic function of the seed.

References:
    - [0]: Alain and Bengio, 2016, Understanding intermediate layers using linear classifier
      probes, arXiv 1610.01644
    - [1]: Chen et al., 2020, A Simple Framework for Contrastive Learning (SimCLR),
      arXiv 2002.05709 (probing before vs after the projection head)
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.features import Features, extract_features
from solo_geometry.logreg import (
    SMALL_STEP_WORK,
    affine_logits,
    eigenbasis,
    fit_logistic,
    threads_for,
)

__all__ = [
    "L2_GRID",
    "Features",
    "ProbeResult",
    "extract_features",
    "linear_probe",
    "mlp_probe",
    "probe_report",
    "standardize",
    "stratified_split",
]

# L2 strengths (per-sample mean loss + lam/2 ||W||^2), strongest first so warm starts move from
# the flat, well-conditioned end of the path; lam = 1 / (C * N) in scikit-learn's units.

L2_GRID: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one probe fit.

    Attributes:
        accuracy: fraction of correctly classified held-out samples, in [0, 1].
        details: probe-specific facts (chosen L2, validation accuracies, epochs, ...), JSON-safe.
    """

    accuracy: float
    details: dict[str, Any] = field(default_factory=dict)


def _check_inputs(x_tr: Tensor, y_tr: Tensor, x_te: Tensor, y_te: Tensor) -> None:
    if x_tr.ndim != 2 or x_te.ndim != 2 or x_tr.shape[1] != x_te.shape[1]:
        raise ValueError(
            f"features must be (N, d) with the same d; got {tuple(x_tr.shape)} and "
            f"{tuple(x_te.shape)}"
        )
    if y_tr.shape != (x_tr.shape[0],) or y_te.shape != (x_te.shape[0],):
        raise ValueError(
            f"labels must be (N,) matching features; got {tuple(y_tr.shape)} for "
            f"{tuple(x_tr.shape)} and {tuple(y_te.shape)} for {tuple(x_te.shape)}"
        )
    if x_tr.shape[0] < 2:
        raise ValueError(f"need at least 2 train samples; got {x_tr.shape[0]}")


def standardize(x_tr: Tensor, *others: Tensor, eps: float = 1e-8) -> tuple[Tensor, ...]:
    """Standardise with the train split's mean and std (constant columns become 0).

    Args:
        x_tr: train features (N, d), defines the statistics.
        *others: further feature tensors (M, d) transformed with the same statistics.
        eps: a column whose std is below ``eps * (1 + |mean|)`` is treated as constant.

    Returns:
        ``(x_tr, *others)`` standardised, each with its input's shape and dtype.
    """
    mean = x_tr.mean(0, keepdim=True)  # (1, d)
    std = x_tr.std(0, keepdim=True, unbiased=False)  # (1, d)
    constant = std <= eps * (1.0 + mean.abs())
    scale = torch.where(constant, torch.full_like(std, math.inf), std)
    return tuple((x - mean) / scale for x in (x_tr, *others))


def stratified_split(
    y: Tensor, fraction: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Split indices into (fit, validation), taking ``fraction`` of every class for validation.

    Args:
        y: integer labels (N,).
        fraction: share of each class held out, in (0, 1); each class with at least two samples
            keeps one sample on each side.
        generator: CPU generator that fixes the permutation.

    Returns:
        Index tensors ``(fit_idx, val_idx)``, both sorted.

    Raises:
        ValueError: if ``fraction`` is not in (0, 1).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1); got {fraction}")
    y_cpu = y.detach().cpu()
    fit, val = [], []
    for c in torch.unique(y_cpu).tolist():
        idx = torch.nonzero(y_cpu == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_val = min(max(round(fraction * len(idx)), 1), len(idx) - 1) if len(idx) > 1 else 0
        val.append(idx[:n_val])
        fit.append(idx[n_val:])
    return torch.cat(fit).sort().values, torch.cat(val).sort().values


def _accuracy(logits: Tensor, y: Tensor) -> float:
    return float((logits.argmax(1) == y).double().mean()) if len(y) else math.nan


def _prepare(
    x_tr: Tensor,
    y_tr: Tensor,
    x_te: Tensor,
    y_te: Tensor,
    device: str | torch.device | None,
    dtype: torch.dtype,
) -> tuple[torch.device, Tensor, Tensor, Tensor, Tensor, int]:
    """Device, standardised features, long labels and the class count shared by both probes."""
    dev = torch.device(device) if device is not None else x_tr.device
    xtr, xte = standardize(x_tr.to(dev, dtype), x_te.to(dev, dtype))
    ytr, yte = y_tr.to(dev, torch.long), y_te.to(dev, torch.long)
    n_classes = int(max(int(ytr.max()), int(yte.max()) if len(yte) else 0)) + 1
    return dev, xtr, ytr, xte, yte, n_classes


def linear_probe(
    x_tr: Tensor,
    y_tr: Tensor,
    x_te: Tensor,
    y_te: Tensor,
    *,
    seed: int = 0,
    l2_grid: Sequence[float] = L2_GRID,
    val_fraction: float = 0.2,
    max_iter: int = 100,
    tol: float = 1e-4,
    max_rows: int = 4096,
    path_tol: float = 3.0,
    path_rows: int = 16384,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> ProbeResult:
    """Multinomial logistic regression on standardised features, L2 chosen on validation.

    The L2 path (``l2_grid``, strongest first) is fitted on the fit part of train with warm
    starts and scored on the validation part; the best strength (ties to the stronger) is
    refitted on the whole train split, warm-started from its path solution, and scored on the
    held-out split. L-BFGS runs in the covariance eigenbasis, damped-preconditioned, and stops on
    scikit-learn's gradient test (see ``fit_logistic``).

    Args:
        x_tr: train features (N, d).
        y_tr: train labels (N,), integers in [0, C).
        x_te: held-out features (M, d).
        y_te: held-out labels (M,).
        seed: fixes the validation split.
        l2_grid: candidate strengths lam of ``mean CE + lam/2 ||W||^2`` (bias unpenalised).
        val_fraction: share of each class of train used for validation.
        max_iter: L-BFGS iterations per fit.
        tol: gradient tolerance of the final L-BFGS fit (max-abs, on the mean loss, as
            scikit-learn's).
        max_rows: with at most this many train rows the features are rotated into their
            covariance eigenbasis; with more, that many rows estimate the preconditioner.
        path_tol: the validation path's tolerance is ``path_tol * tol`` (it only ranks).
        path_rows: at most this many rows of the fit part (a seeded subset) fit the path; the
            chosen strength is then refitted on all of train.
        device: where to fit (default: the features' device).
        dtype: compute dtype.

    Returns:
        ProbeResult with held-out accuracy and details ``l2``, ``val_accuracy`` (per strength),
        ``train_accuracy``, ``n_classes``, ``function_evals``.

    Raises:
        ValueError: on mismatched shapes, an empty ``l2_grid`` or a bad ``val_fraction``.
    """
    _check_inputs(x_tr, y_tr, x_te, y_te)
    if not l2_grid or min(l2_grid) < 0:
        raise ValueError(f"l2_grid must be non-empty and non-negative; got {list(l2_grid)}")
    dev, xtr, ytr, xte, yte, n_classes = _prepare(x_tr, y_tr, x_te, y_te, device, dtype)
    gen = torch.Generator().manual_seed(seed)
    fit_idx, val_idx = (i.to(dev) for i in stratified_split(ytr, val_fraction, gen))
    if len(fit_idx) > path_rows:  # the path only ranks strengths: a seeded subset of rows
        fit_idx = fit_idx[torch.randperm(len(fit_idx), generator=gen)[:path_rows].to(dev)]
    grid = sorted(set(float(g) for g in l2_grid), reverse=True)
    params, evals, val_acc, path = None, 0, {}, {}
    xfit, precond, basis = eigenbasis(xtr, max_rows, gen)  # dense and large: all threads
    fit = functools.partial(fit_logistic, precond=precond, max_iter=max_iter,
                            to_features=basis.weights, n_features=xtr.shape[1])  # fmt: skip
    x_path, y_path = xfit[fit_idx], ytr[fit_idx]  # gathered once for the whole path
    x_val, y_val = xfit[val_idx], ytr[val_idx]
    with threads_for(float(xfit.numel()) * n_classes if dev.type == "cpu" else math.inf):
        for lam in grid:  # the path only ranks strengths: looser tolerance
            params, n = fit(x_path, y_path, n_classes, lam, params, tol=path_tol * tol)
            evals, path[lam] = evals + n, params
            val_acc[lam] = _accuracy(affine_logits(params, x_val), y_val)
        best = max(grid, key=lambda lam: (val_acc[lam], lam))
        params, n = fit(xfit, ytr, n_classes, best, path[best], tol=tol)
    details = {
        "l2": best,
        "val_accuracy": {f"{lam:g}": acc for lam, acc in val_acc.items()},
        "train_accuracy": _accuracy(affine_logits(params, xfit), ytr),
        "n_classes": n_classes,
        "function_evals": evals + n,
    }
    return ProbeResult(_accuracy(affine_logits(params, basis.features(xte)), yte), details)


def _make_mlp(d: int, hidden: int, n_classes: int, seed: int, dev: torch.device) -> nn.Module:
    devices = [dev] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # leave the caller's RNG state untouched
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)).to(dev)


def _train_mlp(
    model: nn.Module,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    gen: torch.Generator,
    lr: float,
    weight_decay: float,
    batch_size: int,
    max_epochs: int,
    patience: int,
) -> tuple[float, int, int]:
    """Adam with early stopping; leaves the best-validation weights in eval mode."""
    xf, yf, xv, yv = data
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best_acc, best_epoch, best_state = -1.0, 0, copy.deepcopy(model.state_dict())
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        for batch in torch.randperm(len(yf), generator=gen).to(xf.device).split(batch_size):
            opt.zero_grad()
            F.cross_entropy(model(xf[batch]), yf[batch]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = _accuracy(model(xv), yv)
        if acc > best_acc:
            best_acc, best_epoch, best_state = acc, epoch, copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return best_acc, best_epoch, epoch


def mlp_probe(
    x_tr: Tensor,
    y_tr: Tensor,
    x_te: Tensor,
    y_te: Tensor,
    *,
    seed: int = 0,
    hidden: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    batch_size: int = 256,
    max_epochs: int = 200,
    patience: int = 15,
    val_fraction: float = 0.2,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> ProbeResult:
    """One-hidden-layer ReLU MLP trained with Adam, early-stopped on a validation split.

    The weights of the epoch with the best validation accuracy (ties to the earlier epoch)
    are restored before scoring the held-out split.

    Args:
        x_tr: train features (N, d).
        y_tr: train labels (N,).
        x_te: held-out features (M, d).
        y_te: held-out labels (M,).
        seed: fixes the split, the initialisation and the minibatch order.
        hidden: width of the hidden layer.
        lr: Adam learning rate.
        weight_decay: Adam (L2) weight decay.
        batch_size: minibatch size.
        max_epochs: upper bound on epochs.
        patience: epochs without validation improvement before stopping.
        val_fraction: share of each class of train used for validation.
        device: where to fit (default: the features' device).
        dtype: compute dtype.

    Returns:
        ProbeResult with held-out accuracy and details ``best_epoch``, ``epochs``,
        ``val_accuracy``, ``hidden``.

    Raises:
        ValueError: on mismatched shapes or non-positive sizes.
    """
    _check_inputs(x_tr, y_tr, x_te, y_te)
    for name, value in (("hidden", hidden), ("batch_size", batch_size), ("max_epochs", max_epochs)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {value}")
    dev, xtr, ytr, xte, yte, n_classes = _prepare(x_tr, y_tr, x_te, y_te, device, dtype)
    gen = torch.Generator().manual_seed(seed)
    fit_idx, val_idx = (i.to(dev) for i in stratified_split(ytr, val_fraction, gen))
    model = _make_mlp(xtr.shape[1], hidden, n_classes, seed, dev).to(dtype)
    work = float(batch_size) * hidden * (xtr.shape[1] + n_classes)
    with threads_for(work if dev.type == "cpu" else math.inf, SMALL_STEP_WORK):
        best_acc, best_epoch, epoch = _train_mlp(
            model, (xtr[fit_idx], ytr[fit_idx], xtr[val_idx], ytr[val_idx]), gen,
            lr, weight_decay, batch_size, max_epochs, patience,
        )  # fmt: skip
        with torch.no_grad():
            accuracy = _accuracy(model(xte), yte)
    details = {
        "best_epoch": best_epoch,
        "epochs": epoch,
        "val_accuracy": best_acc,
        "hidden": hidden,
    }
    return ProbeResult(accuracy, details)


TARGETS = ("class", "rotation", "jitter")
PROBES = ("linear", "mlp")


def _gaps(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    acc = {(r["features"], r["probe"], r["target"]): r["accuracy"] for r in rows}
    z_h = {f"{p}/{t}": acc[("z", p, t)] - acc[("h", p, t)] for (f, p, t) in acc if f == "z"
           and ("h", p, t) in acc}  # fmt: skip
    mlp_lin = {f"{f}/{t}": acc[(f, "mlp", t)] - acc[(f, "linear", t)] for (f, p, t) in acc
               if p == "mlp" and (f, "linear", t) in acc}  # fmt: skip
    return {"z_minus_h": z_h, "mlp_minus_linear": mlp_lin}


def probe_report(
    backbone: nn.Module,
    head: nn.Module,
    data_dir: str | Path | tuple[Path, Path],
    out_dir: str | Path,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    seed: int = 0,
    targets: Sequence[str] = TARGETS,
    probes: Sequence[str] = PROBES,
    orbit_families: Sequence[str] | None = None,
    orbit_images: int = 32,
    orbit_k: int = 8,
    jitter_bins: int = 4,
    jitter_max: float = 0.4,
    mean_std: Any = None,
    tag: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Backbone-vs-head probes and the orbit table; writes ``out_dir/probes.json``.

    Args:
        backbone: images (N, 3, H, W) -> Z (N, d); put in eval mode, mode restored.
        head: Z (N, d) -> H (N, p); same.
        data_dir: a pair (probe-train folder, held-out folder) of class folders;
            ``<dir>/train`` + ``<dir>/val`` (or ``test``) class folders; or one class
            folder split 50/50 (stratified, seeded) into probe-train and held-out.
        out_dir: run folder for ``probes.json`` and the feature cache ``features.pt``.
        batch_size: images per forward pass.
        device: where to run the model and the probes (default: the backbone's device).
        seed: fixes nuisance draws, splits, probe initialisation.
        targets: subset of ``class``, ``rotation`` (which of 4 quarter turns), ``jitter``
            (brightness t uniform in [-jitter_max, jitter_max], ``jitter_bins`` equal bins).
        probes: subset of ``linear``, ``mlp``.
        orbit_families: augmentation families for the orbit table (default: all); () skips it.
        orbit_images: held-out images per orbit family.
        orbit_k: copies per orbit, t evenly spaced in [-t_max, t_max] (``features.ORBIT_T_MAX``).
        jitter_bins: number of brightness bins of the ``jitter`` target.
        jitter_max: brightness range of the ``jitter`` target.
        mean_std: input normalisation (default: ImageNet statistics, solo-learn's default).
        tag: identifies the model in the feature cache (another tag: cache rebuilt).
        progress: progress bars on stderr.

    Returns:
        ``{"probes": [{"features", "probe", "target", "accuracy", "chance", "details"}, ...],
        "gaps": {"z_minus_h": {"<probe>/<target>": float}, "mlp_minus_linear":
        {"<features>/<target>": float}}, "orbits": {family: orbit_compression dict},
        "meta": {...}}``.

    Raises:
        ValueError: on an unknown target, probe or family, or a missing data folder.
    """
    from solo_geometry.features import IMAGENET_MEAN_STD, orbit_table, probe_splits, target_set
    from solo_geometry.geometry.augment import FAMILIES

    for kind, given, choices in (
        ("target", targets, TARGETS),
        ("probe", probes, PROBES),
        ("family", orbit_families or (), tuple(FAMILIES)),
    ):
        bad = [g for g in given if g not in choices]
        if bad:
            raise ValueError(f"unknown {kind} {bad[0]!r}; choose from {sorted(choices)}")
    out = Path(out_dir)
    splits = probe_splits(data_dir if isinstance(data_dir, tuple) else Path(data_dir), seed)
    cache = out / "features.pt"

    def extract(data: Any, name: str, extras: dict[str, Tensor] | None = None) -> Any:
        return extract_features(
            backbone, head, data, batch_size=batch_size, device=device, cache=cache, name=name,
            tag=tag, mean_std=mean_std or IMAGENET_MEAN_STD, extras=extras, progress=progress,
        )  # fmt: skip

    rows = []
    for target in targets:
        feats = {}
        for split in ("train", "test"):
            gen = torch.Generator().manual_seed(seed + (split == "test"))
            x, y = target_set(*splits[split], target, gen, jitter_bins, jitter_max)
            feats[split] = extract((x, y), f"{split}/{target}")
        for space, probe in ((s, p) for s in ("z", "h") for p in probes):
            fit = linear_probe if probe == "linear" else mlp_probe
            tr, te = feats["train"], feats["test"]
            res = fit(getattr(tr, space), tr.labels, getattr(te, space), te.labels, seed=seed,
                      device=device)  # fmt: skip
            chance = float(torch.bincount(te.labels).max()) / len(te.labels)
            rows.append(
                {
                    "features": space,
                    "probe": probe,
                    "target": target,
                    "accuracy": res.accuracy,
                    "chance": chance,
                    "details": res.details,
                }
            )
    fams = list(FAMILIES) if orbit_families is None else list(orbit_families)
    test_x, test_y = splits["test"]
    pick = stratified_split(test_y, min(0.99, orbit_images / len(test_y)),
                            torch.Generator().manual_seed(seed))[1][:orbit_images]  # fmt: skip
    orbits = orbit_table(extract, test_x[pick], test_y[pick], fams, orbit_k) if fams else {}
    result = {"probes": rows, "gaps": _gaps(rows), "orbits": orbits, "meta": {
        "data_dir": str(data_dir), "seed": seed, "n_train": len(splits["train"][1]),
        "n_test": len(test_y), "orbit_images": len(pick), "orbit_k": orbit_k,
        "jitter_bins": jitter_bins, "jitter_max": jitter_max}}  # fmt: skip
    _write_json(out / "probes.json", result)
    return result


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (temporary file, then rename): nothing half-written is left behind."""
    import json
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=True))
    os.replace(tmp, path)
