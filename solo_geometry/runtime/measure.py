"""One measurement: the contract a module offers the monitor, and the numbers taken from it.

A LightningModule offers a :class:`GeometryView` of a training batch (the backbone features of
the whole batch, the head, the loss closures); :func:`measure` takes every configured number of
docs/design.md section 3 from it and says which settings define them. It takes the config's
pieces it uses: the ``measure`` node (which numbers), the ``spectrum`` node (the spectra's
settings, passed on as :func:`spectrum_options`) and the seed.

* the extreme eigenvalues of H_eff, GN and M and ||M|| / ||H_eff||, on the principal sub-block
  of ``spectrum.max_samples`` evenly spaced samples' rows of the whole-batch loss's Hessian;
* normalised std, covariance condition number and RankMe of the L2-normalised rows of Z and of H
  (the ``stats`` entries of :data:`~solo_geometry.geometry.metrics.METRICS`), over the whole
  batch (all views), with the quality metrics RankMe, LiDAR, alpha-ReQ, lightly's collapse level
  and the linear CKA between Z and H; every rank among them at the precision of the dtype the
  backbone computed the features in (``features_dtype``: H inherits Z's round-off);
* the metric singularity rho of the head along colour-augmentation tangents;
* on request, the SLQ spectral density of H_eff.

Nothing here touches training state; the monitor runs :func:`measure` inside the state guard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from solo_geometry.config import MeasureConfig, SpectrumConfig
from solo_geometry.folder.records import Scalar, Settings
from solo_geometry.geometry.augment import augmentation_tangents, metric_singularity
from solo_geometry.geometry.metrics import assemble, record_stats
from solo_geometry.geometry.precision import round_off_eps
from solo_geometry.geometry.spectrum import (
    DEFAULT_TAU,
    SpectrumSettings,
    effective_hessian_spectrum,
)
from solo_geometry.geometry.stats import metric_spectrum
from solo_geometry.models.heads import MetricLinearHead
from solo_geometry.runtime.precision import full_precision
from solo_geometry.runtime.view import GeometryView

__all__ = [
    "Measurement",
    "RunContext",
    "checked",
    "measure",
    "outputs",
    "record_settings",
    "spectrum_options",
]


@dataclass(frozen=True)
class Measurement:
    """The outcome of :func:`measure`.

    Attributes:
        metrics: flat ``name -> value`` (None where undefined, e.g. ``<op>/cond`` with no
            eigenvalue above the floor).
        settings: what defines the numbers.
        density: H_eff's SLQ density (``nodes``, ``weights``) or None.
        parts: which of :data:`~solo_geometry.folder.records.PARTS` were taken.
        failed: ``part -> reason`` for each due part that raised or came out non-finite; the
            other parts are kept.
    """

    metrics: dict[str, Scalar]
    settings: Settings
    density: dict[str, list[float]] | None
    parts: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunContext:
    """What a record's settings say of the run rather than of the batch (the monitor knows it).

    Attributes:
        precision: the trainer's precision (``32-true``, ``bf16-mixed``, ...).
        user_matmul: the user's float32 matmul settings, off during the measurement.
        budget: the monitor's time budget, None when off.
        deferred: steps the measurement was deferred by to keep the budget.
    """

    precision: str | None = None
    user_matmul: dict[str, Any] | None = None
    budget: float | None = None
    deferred: int | None = None


def record_settings(
    what: MeasureConfig,
    config: SpectrumConfig,
    *,
    seed: int,
    features_dtype: str,
    n_batch: int,
    n_views: int,
    spectrum: SpectrumSettings | None,
    augment: bool,
    run: RunContext | None = None,
) -> Settings:
    """The one place a record's :class:`~solo_geometry.folder.records.Settings` are built.

    Args:
        what: the ``measure`` node (which numbers).
        config: the spectra's settings (``dtype`` and ``tau`` are recorded without a spectrum).
        seed: the seed of the measurement's generator.
        features_dtype: the dtype the backbone computed the measured features in.
        n_batch: samples N of the measured batch.
        n_views: views V of the measured batch.
        spectrum: the spectra's settings, None where no spectrum was taken.
        augment: whether rho along augmentation tangents was due.
        run: what the monitor knows of the run; None (a measurement outside a run): unset.
    """
    tau = DEFAULT_TAU[getattr(torch, config.dtype)] if config.tau is None else config.tau
    eps_c, eps_w = round_off_eps(getattr(torch, features_dtype))
    fields: dict[str, Any] = dict(
        dtype=config.dtype,
        features_dtype=features_dtype,
        rank_eps=eps_c if what.stats else None,
        rank_work_eps=eps_w if what.stats else None,
        tau=tau,
        n_batch=n_batch,
        recurrence_dtype="float64" if spectrum is not None else None,
        n_views=n_views,
        augment_samples=what.augment_samples if augment else None,
        seed=seed,
        **asdict(run or RunContext()),
    )
    fields.update(asdict(spectrum) if spectrum is not None else {})  # the same names, its values
    return Settings(**fields)


def spectrum_options(config: SpectrumConfig, *, density: bool) -> dict[str, Any]:
    """The keyword arguments of :func:`effective_hessian_spectrum` that ``config`` sets.

    One to one its fields, ``dtype`` as the torch dtype it names; no density probes in a
    measurement without a density.
    """
    options = asdict(config)  # the field names are the keyword arguments' (SpectrumConfig)
    options["dtype"] = getattr(torch, config.dtype)
    options["density_probes"] = config.density_probes if density else 0
    return options


def _hessian(
    view: GeometryView, Z: Tensor, config: SpectrumConfig, gen: torch.Generator, density: bool
) -> tuple[dict[str, Scalar], SpectrumSettings, dict[str, list[float]] | None]:
    """Spectra of H_eff (and GN, M when the view splits the loss): metrics, settings, density.

    The loss is the view's whole-batch loss; ``max_samples`` restricts the operators to a
    principal sub-block of rows. H_eff's density (of that sub-block) comes from the same runs.
    """
    options = {**spectrum_options(config, density=density), "generator": gen}
    if view.loss_of_outputs is None:  # no split into GN + M possible: H_eff alone

        def loss(Z_: Tensor) -> Tensor:  # the closure runs in the features' own dtype
            return view.loss_of_features(Z_.to(Z.dtype)).to(Z_.dtype)

        spec = effective_hessian_spectrum(nn.Identity(), loss, Z, operators=("heff",), **options)
    else:
        spec = effective_hessian_spectrum(view.head, view.loss_of_outputs, Z, **options)
    dens = spec.heff.density
    stored = {"nodes": dens.nodes.tolist(), "weights": dens.weights.tolist()} if density else None
    return assemble("hessian", spec, spec.operators), spec.settings, stored


def outputs(view: GeometryView) -> tuple[Tensor, Tensor]:
    """Z and H = head(Z) of a view, pooled over its views: (V * N, d), (V * N, p)."""
    Z = view.features.detach()
    with torch.no_grad():
        H = torch.stack([view.head(Z[v]) for v in range(Z.shape[0])])  # (V, N, p)
    return Z.flatten(0, 1), H.flatten(0, 1)


def _stats(
    view: GeometryView, history: Sequence[tuple[Tensor, Tensor]], features_dtype: torch.dtype
) -> dict[str, Scalar]:
    """Statistics of Z and H pooled over the whole batch, all views, and the queued batches.

    The quality metrics (:mod:`~solo_geometry.geometry.quality`) join them; LiDAR takes the
    measured batch's views alone (a queued batch's views are pooled). Every rank is read at the
    precision of ``features_dtype``, the dtype the backbone computed Z in (raised to float32
    here): H = h(Z) carries Z's round-off, so it is read at the same precision.
    """
    Zb, Hb = outputs(view)  # (V * N, d), (V * N, p)
    Zp, Hp = Zb, Hb
    if history:
        Zp = torch.cat([Zp, *(z.to(Zp) for z, _ in history)])  # (M, d)
        Hp = torch.cat([Hp, *(h.to(Hp) for _, h in history)])  # (M, p)
    V = view.features.shape[0]
    metric = None
    if isinstance(view.head, MetricLinearHead):
        with torch.no_grad():  # the floor at the dtype the head computed its eigenvalues in
            metric = metric_spectrum(view.head.metric_spectrum())
    views = (Zb.unflatten(0, (V, -1)), Hb.unflatten(0, (V, -1)))  # (V, N, d), (V, N, p)
    return record_stats(Zp, Hp, views=views, metric=metric, features_dtype=features_dtype)


def _rho(view: GeometryView, Z: Tensor, what: MeasureConfig, gen: torch.Generator) -> dict:
    """Metric singularity along colour tangents taken in pixel space at the batch's point.

    The tangents differentiate the whole first view's pipeline in the backbone's own mode (batch
    statistics in a training step), so the point is the training step's; rho averages over the
    first ``augment_samples`` images.
    """
    if view.backbone is None or view.images is None:
        return {}
    m = min(what.augment_samples, Z.shape[1])
    z0 = Z[0, :m]  # (m, d)
    rho = {}
    for family in what.augment_families:
        tangents = augmentation_tangents(
            view.backbone, view.images, family, normalise=view.normalisation
        )[:m]  # (m, d)
        rho[family] = float(metric_singularity(view.head, z0, tangents, generator=gen))
    return assemble("augment", rho, rho)


def checked(metrics: dict[str, Scalar]) -> dict[str, Scalar]:
    """The metrics as they are; raise on a non-finite number.

    None stands for a number that is undefined or not known to the required accuracy (an extreme
    that did not converge, ``cond`` of an indefinite operator): recorded as null, not a failure.
    """
    out = dict(metrics)
    bad = sorted(k for k, v in out.items() if isinstance(v, float) and not math.isfinite(v))
    if bad:
        raise FloatingPointError(f"non-finite measurement(s): {bad}")
    return out


def _check_finite(Z: Tensor) -> None:
    """Refuse non-finite features Z (V, N, d): no part of a record can be taken from them.

    Raises:
        FloatingPointError: naming what is non-finite, so a skipped record says why.
    """
    bad = int((~torch.isfinite(Z)).sum())
    if bad:
        raise FloatingPointError(f"non-finite backbone features: {bad} of {Z.numel()} entries")


def _check_loss(view: GeometryView, Z: Tensor) -> None:
    """Refuse a non-finite loss at Z, before the spectra are taken of it.

    Raises:
        FloatingPointError: with the loss's value.
    """
    with torch.no_grad():
        value = view.loss_of_features(Z)
    if not bool(torch.isfinite(value).all()):
        raise FloatingPointError(f"non-finite loss at the measured batch: {value.tolist()}")


def _taken(part: str, take: Callable[[], Any], failed: dict[str, str]) -> Any:
    """``take()``, or None with the reason in ``failed[part]`` if it raised: a part fails alone."""
    try:
        return take()
    except Exception as err:  # noqa: BLE001 - one part's failure keeps the others
        failed[part] = f"{type(err).__name__}: {err}"
        return None


def _spectra(
    view: GeometryView, Z: Tensor, config: SpectrumConfig, gen: torch.Generator, density: bool
) -> tuple[dict[str, Scalar], SpectrumSettings, dict[str, list[float]] | None]:
    """The spectra's part: the loss checked finite, :func:`_hessian`, its metrics checked."""
    _check_loss(view, Z)
    spectra, spectral, dens = _hessian(view, Z, config, gen, density)
    return checked(spectra), spectral, dens


def measure(
    view: GeometryView,
    what: MeasureConfig,
    spectrum: SpectrumConfig,
    *,
    seed: int,
    density: bool,
    history: Sequence[tuple[Tensor, Tensor]] = (),
    stats_only: bool = False,
    run: RunContext | None = None,
) -> Measurement:
    """Take every configured measurement of one view.

    The head and the loss run in full precision (:func:`~solo_geometry.runtime.precision.
    full_precision`: float32 copies of half-precision modules). Each part (statistics, spectra,
    rho) fails alone: its reason goes to ``failed``, the other parts are kept.

    Args:
        view: the module's view of a whole training batch.
        what: the ``geometry.measure`` node: which numbers.
        spectrum: the ``geometry.spectrum`` node: the spectra's settings.
        seed: seed of the measurement's own generator (start vectors, random directions).
        density: also compute H_eff's SLQ density.
        history: pooled (Z, H) of earlier batches (``geometry.stats.queue``) that join the
            representation statistics.
        stats_only: take the representation statistics (and the head's weight norm) alone:
            the cheap part of a record, which never waits for the time budget.
        run: what the record's settings say of the run (:func:`record_settings`).

    Returns:
        The metrics (each part's checked finite), the settings that define them, the density
        (or None), the parts taken and the parts failed.

    Raises:
        FloatingPointError: for non-finite features.
        RuntimeError: when every due part failed, naming each one's reason.
    """
    gen = torch.Generator().manual_seed(seed)  # CPU generator, the engine's convention
    features_dtype = view.features_dtype or str(view.features.dtype).removeprefix("torch.")
    captured = getattr(torch, features_dtype)
    view = full_precision(view)
    Z = view.features.detach()  # (V, N, d)
    hessian, augment = (what.hessian, what.augment) if not stats_only else (0, 0)
    augment = augment and view.backbone is not None and view.images is not None
    _check_finite(Z)
    failed: dict[str, str] = {}
    metrics: dict[str, Scalar] = assemble("head", view.head)
    taken = hessian and _taken("hessian", lambda: _spectra(view, Z, spectrum, gen, density), failed)
    spectra, spectral, dens = taken or ({}, None, None)  # metrics, SpectrumSettings, density
    metrics.update(spectra)
    if what.stats:
        metrics.update(
            _taken("stats", lambda: checked(_stats(view, history, captured)), failed) or {}
        )
    if augment:
        metrics.update(_taken("augment", lambda: checked(_rho(view, Z, what, gen)), failed) or {})
    due = [p for p, on in (("stats", what.stats), ("hessian", hessian), ("augment", augment)) if on]
    if due and all(p in failed for p in due):
        raise RuntimeError("; ".join(f"{p}: {why}" for p, why in failed.items()))
    parts = [p for p in due if p not in failed] + (["density"] if dens is not None else [])
    settings = record_settings(
        what,
        spectrum,
        seed=seed,
        features_dtype=features_dtype,
        n_batch=Z.shape[1],
        n_views=Z.shape[0],
        spectrum=spectral,
        augment=bool(augment),
        run=run,
    )
    return Measurement(metrics, settings, dens, parts, failed)
