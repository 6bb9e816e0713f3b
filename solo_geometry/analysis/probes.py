"""Linear and MLP probes on cached features, and the backbone-vs-head table.

A probe is fitted on features of a train split and scored on a held-out split. Both probes
standardise the features with train statistics (a constant feature stays 0, so pseudo-collapsed
features score at chance) and carve a stratified validation split from train with a seeded
generator: the linear probe picks its L2 strength there; the MLP probe fits every train row to
convergence (its ``stop="val"`` option stops early on such a split instead).
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
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.analysis.logreg import (
    SMALL_STEP_WORK,
    affine_logits,
    eigenbasis,
    fit_logistic,
    threads_for,
)
from solo_geometry.config import LinearProbeConfig, MlpProbeConfig
from solo_geometry.inputs.datasets import stratified_split
from solo_geometry.models.solo_mlp import build_mlp

__all__ = ["ProbeResult", "linear_probe", "mlp_probe", "standardise"]


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


def standardise(x_tr: Tensor, *others: Tensor, eps: float = 1e-8) -> tuple[Tensor, ...]:
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
    xtr, xte = standardise(x_tr.to(dev, dtype), x_te.to(dev, dtype))
    ytr, yte = y_tr.to(dev, torch.long), y_te.to(dev, torch.long)
    n_classes = int(max(int(ytr.max()), int(yte.max()) if len(yte) else 0)) + 1
    return dev, xtr, ytr, xte, yte, n_classes


def linear_probe(
    x_tr: Tensor,
    y_tr: Tensor,
    x_te: Tensor,
    y_te: Tensor,
    cfg: LinearProbeConfig | None = None,
    *,
    seed: int = 0,
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
        cfg: the probe's options (``geometry.probes.linear``): the L2 grid of strengths lam
            of ``mean CE + lam/2 ||W||^2`` (bias unpenalised), the L-BFGS tolerance and
            iterations, the validation share, the eigenbasis and path sizes; None: defaults.
        seed: fixes the validation split.
        device: where to fit (default: the features' device).
        dtype: compute dtype.

    Returns:
        ProbeResult with held-out accuracy and details ``l2``, ``val_accuracy`` (per strength),
        ``train_accuracy``, ``n_classes``, ``function_evals``.

    Raises:
        ValueError: on mismatched shapes (the config validates its own values).
    """
    cfg = cfg if cfg is not None else LinearProbeConfig()
    _check_inputs(x_tr, y_tr, x_te, y_te)
    dev, xtr, ytr, xte, yte, n_classes = _prepare(x_tr, y_tr, x_te, y_te, device, dtype)
    gen = torch.Generator().manual_seed(seed)
    fit_idx, val_idx = (i.to(dev) for i in stratified_split(ytr, cfg.val_fraction, gen))
    if len(fit_idx) > cfg.path_rows:  # the path only ranks strengths: a seeded subset of rows
        fit_idx = fit_idx[torch.randperm(len(fit_idx), generator=gen)[: cfg.path_rows].to(dev)]
    grid = sorted(set(float(g) for g in cfg.l2_grid), reverse=True)
    params, evals, val_acc, path = None, 0, {}, {}
    xfit, precond, basis = eigenbasis(xtr, cfg.max_rows, gen)  # dense and large: all threads
    fit = functools.partial(
        fit_logistic,
        precond=precond,
        max_iter=cfg.max_iter,
        to_features=basis.weights,
        n_features=xtr.shape[1],
    )
    x_path, y_path = xfit[fit_idx], ytr[fit_idx]  # gathered once for the whole path
    x_val, y_val = xfit[val_idx], ytr[val_idx]
    with threads_for(float(xfit.numel()) * n_classes if dev.type == "cpu" else math.inf):
        for lam in grid:  # the path only ranks strengths: looser tolerance
            params, n = fit(x_path, y_path, n_classes, lam, params, tol=cfg.path_tol * cfg.tol)
            evals, path[lam] = evals + n, params
            val_acc[lam] = _accuracy(affine_logits(params, x_val), y_val)
        best = max(grid, key=lambda lam: (val_acc[lam], lam))
        params, n = fit(xfit, ytr, n_classes, best, path[best], tol=cfg.tol)
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
        return build_mlp([d, hidden, n_classes]).to(dev)


def _epoch(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    gen: torch.Generator,
    batch_size: int,
) -> float:
    """One pass of Adam over shuffled minibatches; the epoch's mean training loss."""
    model.train()
    total = x.new_zeros(())
    for batch in torch.randperm(len(y), generator=gen).to(x.device).split(batch_size):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
        total += loss.detach() * len(batch)
    return float(total) / len(y)


def _train_to_convergence(
    model: nn.Module, x: Tensor, y: Tensor, gen: torch.Generator, cfg: MlpProbeConfig
) -> dict[str, Any]:
    """Adam on every row until the mean training loss stops improving (scikit-learn's rule).

    Stops once the epoch's loss has not fallen below the best so far minus ``cfg.tol`` for
    ``cfg.patience`` epochs in a row, or at ``cfg.max_epochs`` (then ``converged`` is False).
    """
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best, stale, epochs, loss = math.inf, 0, 0, math.inf
    while stale < cfg.patience and epochs < cfg.max_epochs:
        loss = _epoch(model, opt, x, y, gen, cfg.batch_size)
        stale = stale + 1 if loss > best - cfg.tol else 0
        best, epochs = min(best, loss), epochs + 1
    model.eval()
    return {"epochs": epochs, "train_loss": loss, "converged": stale >= cfg.patience}


def _train_early_stopped(
    model: nn.Module, x: Tensor, y: Tensor, gen: torch.Generator, cfg: MlpProbeConfig
) -> dict[str, Any]:
    """Adam with early stopping on a validation split; leaves the best-validation weights."""
    fit, val = (i.to(x.device) for i in stratified_split(y, cfg.val_fraction, gen))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best_acc, best_epoch, best_state = -1.0, 0, copy.deepcopy(model.state_dict())
    epoch = 0
    for epoch in range(1, cfg.max_epochs + 1):
        _epoch(model, opt, x[fit], y[fit], gen, cfg.batch_size)
        model.eval()
        with torch.no_grad():
            acc = _accuracy(model(x[val]), y[val])
        if acc > best_acc:
            best_acc, best_epoch, best_state = acc, epoch, copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= cfg.patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return {"epochs": epoch, "best_epoch": best_epoch, "val_accuracy": best_acc}


def mlp_probe(
    x_tr: Tensor,
    y_tr: Tensor,
    x_te: Tensor,
    y_te: Tensor,
    cfg: MlpProbeConfig | None = None,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> ProbeResult:
    """One-hidden-layer ReLU MLP trained with Adam, to convergence by default.

    ``cfg.stop="loss"`` (default): every train row is fitted until the mean training loss
    stops improving, the rule of scikit-learn's ``MLPClassifier``, which the probe matches on
    real features (tests/analysis/test_probes.py). ``cfg.stop="val"``: early stopping on a
    stratified validation split carved from train, the best-validation weights restored.

    Args:
        x_tr: train features (N, d).
        y_tr: train labels (N,).
        x_te: held-out features (M, d).
        y_te: held-out labels (M,).
        cfg: the probe's options (``geometry.probes.mlp``): hidden width, Adam learning rate
            and weight decay, minibatch size, stopping rule, epoch cap, patience, tolerance;
            None: defaults.
        seed: fixes the split, the initialisation and the minibatch order.
        device: where to fit (default: the features' device).
        dtype: compute dtype.

    Returns:
        ProbeResult with held-out accuracy and details ``epochs``, ``hidden``, ``stop``,
        ``train_accuracy`` and ``train_loss``, ``converged`` (stop="loss") or ``best_epoch``,
        ``val_accuracy`` (stop="val").

    Raises:
        ValueError: on mismatched shapes (the config validates its own values).
    """
    cfg = cfg if cfg is not None else MlpProbeConfig()
    _check_inputs(x_tr, y_tr, x_te, y_te)
    dev, xtr, ytr, xte, yte, n_classes = _prepare(x_tr, y_tr, x_te, y_te, device, dtype)
    gen = torch.Generator().manual_seed(seed)
    model = _make_mlp(xtr.shape[1], cfg.hidden, n_classes, seed, dev).to(dtype)
    work = float(cfg.batch_size) * cfg.hidden * (xtr.shape[1] + n_classes)
    train = _train_to_convergence if cfg.stop == "loss" else _train_early_stopped
    with threads_for(work if dev.type == "cpu" else math.inf, SMALL_STEP_WORK):
        details = train(model, xtr, ytr, gen, cfg)
        with torch.no_grad():
            accuracy = _accuracy(model(xte), yte)
            details["train_accuracy"] = _accuracy(model(xtr), ytr)
    details |= {"hidden": cfg.hidden, "stop": cfg.stop}
    return ProbeResult(accuracy, details)
