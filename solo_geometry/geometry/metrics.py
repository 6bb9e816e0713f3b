"""The registry of record metrics: :data:`METRICS`, one :class:`Metric` per key of a record.

Every number a ``geometry.jsonl`` record (and a zoo card's ``stats``) holds is an entry here: its
key pattern (``{part}`` stands for each of its ``parts``), label, unit, range, what it is
measured with (:data:`MEASURED_WITH`: the record part whose inputs it is computed from, ``stats``,
``hessian``, ``augment``, ``heldout`` for the fixed held-out batch, or ``head``, the head itself,
in every record), the function that computes it from those inputs and its reference (paper or
closed form). The monitor (:mod:`solo_geometry.runtime.measure`), the zoo's measurements and the
invariance reproduction assemble records through :func:`assemble` (:func:`record_stats` for the
statistics); the report's panels and the alert read keys and labels from here;
docs/run-folder.md's table is :func:`metrics_table`. Adding a metric is one entry here, its
function, and its test (docs/design.md section 9).

The ``stats`` part's inputs are :class:`~.metric_inputs.StatsInputs` (Z and H, their
representation statistics and alpha-ReQ fit computed once and shared by the entries that read
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from solo_geometry.geometry.augment import COLOUR_FAMILIES
from solo_geometry.geometry.metric_inputs import Representation, StatsInputs, head_weight_norm
from solo_geometry.geometry.quality import (
    collapse_level,
    lidar,
    linear_cka,
    rankme,
)
from solo_geometry.geometry.spectrum import OPERATORS
from solo_geometry.geometry.stats import MetricSpectrum

__all__ = [
    "METRICS",
    "Scalar",
    "MEASURED_WITH",
    "SPACES",
    "HELDOUT",
    "Metric",
    "assemble",
    "metric",
    "metrics_table",
    "record_stats",
    "registered",
    "unregistered",
]

Scalar = float | int | bool | None
# What a metric is computed from: the inputs of a record part (folder.records.PARTS; ``density``
# holds the SLQ nodes, no metric), or ``head``: the head itself, in every record, whatever parts.
MEASURED_WITH = ("stats", "hessian", "augment", "head", "heldout")
# The held-out batch's statistics (runtime/heldout.py), keys ``heldout/<z|h>/<name>``: what the
# collapse alert and the benchmark's peers read on clean images of a fixed number of rows.
HELDOUT = (
    "normalized_std",
    "rankme_l2",
    "rankme",
    "n_samples",
    "dim",
    "alpha_req",
    "collapse_level",
)
SPACES = ("z", "h")  # the representations of the ``stats`` part: backbone Z, head output H


@dataclass(frozen=True)
class Metric:
    """One record metric.

    Attributes:
        name: the short name code looks it up by (:func:`metric`), unique.
        key: the record key, ``{part}`` standing for each of ``parts``.
        label: what a plot or table calls it.
        unit: its unit ("1" for a pure number).
        range: its range, in words.
        measured_with: what it is computed from, one of :data:`MEASURED_WITH`.
        compute: ``(inputs, part) -> value`` from that part's inputs (``part`` is ``""`` for a
            key without ``{part}``).
        reference: the paper or closed form it follows.
        parts: the values of ``{part}`` (empty for a key without one).
        applies: for a key without ``{part}``, whether the inputs hold it (None: always).
    """

    name: str
    key: str
    label: str
    unit: str
    range: str
    measured_with: str
    compute: Callable[[Any, str], Scalar] = field(repr=False, compare=False)
    reference: str
    parts: tuple[str, ...] = ()
    applies: Callable[[Any], bool] | None = field(default=None, repr=False, compare=False)

    @property
    def per_part(self) -> bool:
        """Whether the key holds ``{part}``."""
        return "{part}" in self.key

    def key_for(self, part: str = "") -> str:
        """The record key for one part (e.g. ``"h"`` -> ``"h/rankme"``).

        Raises:
            ValueError: if ``part`` is not one of :attr:`parts` of a per-part key.
        """
        if not self.per_part:
            return self.key
        if part not in self.parts:
            raise ValueError(f"{self.name}: part {part!r} unknown; choose from {self.parts}")
        return self.key.format(part=part)

    def keys(self) -> tuple[str, ...]:
        """Every record key this entry stands for."""
        return tuple(self.key_for(p) for p in self.parts) if self.per_part else (self.key,)


_RANKME = "Garrido et al. 2023, arXiv 2210.02885 (RankMe)"
_LANCZOS = "Lanczos extremes, docs/design.md section 3"
_SLQ = "stochastic Lanczos quadrature, docs/design.md section 3"
_WHITE = "cond_k(H) / cond_k(Z) on the shared numerical rank k, docs/design.md section 3"
_LOSS = "loss / feature^2"
_NULL = "real; null unconverged"

# fmt: off
# name, label, unit, range, (representation -> value), reference: keys ``<z|h>/<name>``
_REPRESENTATION: tuple[tuple[str, str, str, str, Callable[[Representation], Scalar], str], ...] = (
    ("normalized_std", "normalised std", "1", "[0, 1/sqrt(d)]", lambda r: r.stats.normalized_std,
     "std over samples of the L2-normalised rows, mean over dimensions (the paper's code)"),
    ("cond", "condition number", "1", ">= 1; NaN at rank 0", lambda r: r.stats.cond,
     "lambda_1 / lambda_rank of the covariance of the L2-normalised rows"),
    ("cond_paper", "condition number (paper's clamp)", "1", ">= 1", lambda r: r.stats.cond_paper,
     "lambda_max / max(lambda_min, 1e-7) (the paper's code)"),
    ("rank", "numerical rank", "dimensions", "[0, min(M, d)]", lambda r: r.stats.rank,
     "singular values above the features' rank tolerance (docs/design.md section 3)"),
    ("rankme_l2", "RankMe of L2-normalised rows", "dimensions", "[1, min(M, d)]",
     lambda r: r.stats.rankme_l2, f"{_RANKME}'s formula on the L2-normalised rows"),
    ("n_samples", "samples", "rows", ">= 2", lambda r: r.stats.n_samples,
     "rows the statistics saw (views and queue pooled)"),
    ("rankme_eps", "RankMe's epsilon", "1", "> 0", lambda r: r.stats.eps, _RANKME),
    ("rankme", "RankMe", "dimensions", "[1, min(M, d)]",
     lambda r: rankme(r.X, features_dtype=r.features_dtype), f"{_RANKME}, raw uncentred rows"),
    ("lidar", "LiDAR", "dimensions", "[1, min(N - 1, d)]; null with one view",
     lambda r: lidar(r.views) if r.views is not None else None,
     "Thilak et al. 2024, arXiv 2312.04000 (LiDAR)"),
    ("alpha_req", "alpha-ReQ", "1", ">= 0 in practice", lambda r: r.fit.alpha,
     "Agrawal et al. 2022, NeurIPS (alpha-ReQ)"),
    ("alpha_req_r2", "alpha-ReQ fit R^2", "1", "[0, 1]", lambda r: r.fit.r2,
     "coefficient of determination of alpha-ReQ's least-squares line"),
    ("collapse_level", "collapse level (lightly)", "1", "[0, 1]", lambda r: collapse_level(r.X),
     "1 - sqrt(d) x lightly's std_of_l2_normalized (Chen and He 2021)"),
    ("dim", "width", "dimensions", ">= 1", lambda r: float(r.X.shape[-1]), "d, the width"),
)
# name, key, label, unit, range, (stats inputs -> value), reference
_PAIR: tuple[tuple[str, str, str, str, str, Callable[[StatsInputs], Scalar], str], ...] = (
    ("cka", "cka/z_h", "linear CKA of Z and H", "1", "[0, 1]",
     lambda s: linear_cka(s["z"].X, s["h"].X), "Kornblith et al. 2019, arXiv 1905.00414 (CKA)"),
    ("whitening_score", "whitening/score", "whitening score", "1", "> 0; < 1 whitens",
     lambda s: s.whitening.score, _WHITE),
    ("whitening_rank", "whitening/rank", "shared numerical rank", "dimensions", "[0, min(d, p)]",
     lambda s: s.whitening.rank, _WHITE),
    ("whitening_cond_z", "whitening/cond_z", "cond_k of Cov(Z)", "1", ">= 1",
     lambda s: s.whitening.cond_z, _WHITE),
    ("whitening_cond_h", "whitening/cond_h", "cond_k of Cov(H)", "1", ">= 1",
     lambda s: s.whitening.cond_h, _WHITE),
    ("stats_n_samples", "stats/n_samples", "samples of the statistics", "rows", ">= 2",
     lambda s: s["z"].stats.n_samples, "rows the statistics saw (views and queue pooled)"),
)
# field of MetricSpectrum, label, unit, range: keys ``metric/<field>``
_METRIC_HEAD = (
    ("min", "smallest eigenvalue of W^T W", "1", "real"),
    ("max", "largest eigenvalue of W^T W", "1", ">= 0"),
    ("cond", "condition number of W^T W", "1", ">= 1"),
    ("rank", "rank of W^T W", "dimensions", "[0, d]"),
    ("effective_rank", "RankMe of W", "dimensions", "[1, d]"),
)
# field of OperatorSpectrum, label, unit, range, reference: keys ``<heff|gn|m>/<field>``
_OPERATOR = (
    ("lambda_min", "smallest eigenvalue", _LOSS, _NULL, _LANCZOS),
    ("lambda_max", "largest eigenvalue", _LOSS, _NULL, _LANCZOS),
    ("ritz_min", "smallest Ritz value", _LOSS, ">= lambda_min", _LANCZOS),
    ("ritz_max", "largest Ritz value", _LOSS, "<= lambda_max", _LANCZOS),
    ("residual_min", "residual bound of ritz_min", _LOSS, ">= 0", _LANCZOS),
    ("residual_max", "residual bound of ritz_max", _LOSS, ">= 0", _LANCZOS),
    ("converged_min", "ritz_min converged", "bool", "true/false", _LANCZOS),
    ("converged_max", "ritz_max converged", "bool", "true/false", _LANCZOS),
    ("steps", "Lanczos steps", "products", ">= 1", _LANCZOS),
    ("cond", "condition number", "1", ">= 1; null unless definite", _LANCZOS),
    ("neg_fraction", "negative fraction", "1", "[0, 1]", _SLQ),
    ("neg_fraction_std", "negative fraction's standard error", "1", ">= 0", _SLQ),
    ("neg_fraction_quad", "negative fraction's quadrature bound", "1", ">= 0", _SLQ),
    ("seconds", "operator wall time", "s", ">= 0", "measured"),
)
# fmt: on


def _of_space(read: Callable[[Representation], Scalar]) -> Callable[[StatsInputs, str], Scalar]:
    return lambda inputs, space: read(inputs[space])


def _whole(read: Callable[[Any], Scalar]) -> Callable[[Any, str], Scalar]:
    return lambda inputs, _: read(inputs)


def _attr(*path: str) -> Callable[[Any], Any]:
    def read(obj: Any) -> Any:
        for name in path:
            obj = getattr(obj, name)
        return obj

    return read


def _of_operator(name: str) -> Callable[[Any, str], Scalar]:
    return lambda spectrum, op: getattr(spectrum.operators[op], name)


def _entries() -> list[Metric]:
    """Every entry, in the order a record lists them."""
    out = [
        Metric("weight_norm", "head/weight_norm", "head weight norm", "1", ">= 0", "head",
               _whole(head_weight_norm), "Frobenius norm of the head's Linear weights"),
    ]  # fmt: skip
    out += [
        Metric(("operator_cond" if n == "cond" else n), f"{{part}}/{n}", label, unit, rng,
               "hessian", _of_operator(n), ref, OPERATORS)
        for n, label, unit, rng, ref in _OPERATOR
    ]  # fmt: skip
    out += [
        Metric("interaction_ratio", "interaction_ratio", "interaction ratio ||M|| / ||H_eff||",
               "1", ">= 0", "hessian", _whole(_attr("interaction_ratio")), _LANCZOS,
               applies=lambda spectrum: "m" in spectrum.operators),
        Metric("gn_is_heff", "gn_is_heff", "GN = H_eff (M = 0)", "bool", "true/false", "hessian",
               _whole(_attr("gn_is_heff")), "a chain of Linear layers and ReLUs, no BatchNorm",
               applies=lambda spectrum: "gn" in spectrum.operators),
    ]  # fmt: skip
    out += [
        Metric(n, f"{{part}}/{n}", label, unit, rng, "stats", _of_space(read), ref, SPACES)
        for n, label, unit, rng, read, ref in _REPRESENTATION
    ]
    out += [
        Metric(f"heldout_{n}", f"heldout/{{part}}/{n}", f"{label} (held-out batch)", unit, rng,
               "heldout", _of_space(read), f"{ref}; the fixed held-out batch", SPACES)
        for n, label, unit, rng, read, ref in _REPRESENTATION
        if n in HELDOUT
    ]  # fmt: skip
    out += [
        Metric(n, key, label, unit, rng, "stats", _whole(read), ref)
        for n, key, label, unit, rng, read, ref in _PAIR
    ]
    out += [
        Metric(f"metric_{n}", f"metric/{n}", label, unit, rng, "stats",
               _whole(_attr("metric", n)), "eigenvalues of W^T W of a metric-linear head",
               applies=lambda inputs: inputs.metric is not None)
        for n, label, unit, rng in _METRIC_HEAD
    ]  # fmt: skip
    rho_ref = "mean v^T G v / v^T v over random directions' (docs/design.md section 3)"
    return out + [
        Metric("rho", "rho/{part}", "metric singularity rho_aug", "1", ">= 0; 1 as random",
               "augment", lambda rho, family: rho[family], rho_ref, COLOUR_FAMILIES),
    ]  # fmt: skip


METRICS: dict[str, Metric] = {m.name: m for m in _entries()}


def metric(name: str) -> Metric:
    """The entry of :data:`METRICS` called ``name``.

    Raises:
        ValueError: for an unknown name, naming the known ones.
    """
    if name not in METRICS:
        raise ValueError(f"metric {name!r} unknown; choose from {sorted(METRICS)}")
    return METRICS[name]


def registered(key: str) -> Metric | None:
    """The entry standing for the record key ``key``, None when none does."""
    return next((m for m in METRICS.values() if key in m.keys()), None)


def unregistered(keys: Iterable[str]) -> list[str]:
    """The keys among ``keys`` that no entry of :data:`METRICS` stands for, sorted."""
    known = {k for m in METRICS.values() for k in m.keys()}
    return sorted(set(keys) - known)


def assemble(
    measured_with: str, inputs: Any, parts: Iterable[str] | None = None
) -> dict[str, Scalar]:
    """The metrics measured with ``measured_with``, each computed by its entry's function.

    Args:
        measured_with: one of :data:`MEASURED_WITH`.
        inputs: that part's inputs: :class:`StatsInputs` (``stats``), a
            :class:`~solo_geometry.geometry.spectrum.HessianSpectrum` (``hessian``), the rho
            values by family (``augment``), the head (``head``).
        parts: the parts measured (operators, families); None: every part of each entry.

    Returns:
        ``key -> value`` in :data:`METRICS`' order (None where undefined).

    Raises:
        ValueError: for an unknown ``measured_with``.
    """
    if measured_with not in MEASURED_WITH:
        raise ValueError(f"measured_with {measured_with!r} unknown; choose from {MEASURED_WITH}")
    wanted = None if parts is None else set(parts)
    out: dict[str, Scalar] = {}
    for m in METRICS.values():
        if m.measured_with != measured_with:
            continue
        if not m.per_part:
            if m.applies is None or m.applies(inputs):
                out[m.key] = m.compute(inputs, "")
            continue
        for part in m.parts:
            if wanted is None or part in wanted:
                out[m.key_for(part)] = m.compute(inputs, part)
    return out


def record_stats(
    Z: Tensor,
    H: Tensor,
    *,
    views: tuple[Tensor | None, Tensor | None] = (None, None),
    metric: MetricSpectrum | None = None,
    features_dtype: torch.dtype | None = None,
    part: str = "stats",
) -> dict[str, Scalar]:
    """The ``stats`` part of a record, the one assembly the monitor and the zoo share.

    Args:
        Z: backbone features (M, d) or (V, N, d) (views pooled; a queue may be pooled in).
        H: head outputs of the same samples (M, p) or (V, N, p).
        views: the batch's (V, N, d) and (V, N, p) for LiDAR; None: Z and H if 3-D.
        metric: a metric-linear head's spectrum (``metric/...``); None for other heads.
        features_dtype: the dtype the features were captured in; None: each tensor's own.
        part: ``"stats"``, or ``"heldout"`` for the held-out batch's (``heldout/<z|h>/...``).

    Returns:
        ``key -> value`` of every ``part`` entry of :data:`METRICS`, numbers as floats (None
        where undefined).

    Raises:
        ValueError: if Z or H have the wrong shape or too few samples.
    """
    z = Representation(Z, views[0], features_dtype)
    h = Representation(H, views[1], features_dtype)
    out = assemble(part, StatsInputs(z, h, metric))
    return {k: float(v) if type(v) is int else v for k, v in out.items()}  # counts as floats


def metrics_table() -> str:
    """docs/run-folder.md's table of :data:`METRICS` (markdown, one row per entry)."""
    rows = [
        "| key | parts | label | unit | range | measured with | reference |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in METRICS.values():
        parts = ", ".join(m.parts) if m.parts else "-"
        cells = (f"`{m.key}`", parts, m.label, m.unit, m.range, m.measured_with, m.reference)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)
