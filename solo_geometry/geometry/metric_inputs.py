"""The inputs a record's ``stats`` part computes its metrics from (:mod:`.metrics`).

:class:`Representation` holds one representation's features and computes the statistics and the
alpha-ReQ fit that several entries of :data:`~.metrics.METRICS` read, once; :class:`StatsInputs`
holds Z and H of the same samples (and a metric-linear head's spectrum), with their whitening
score. :func:`head_weight_norm` is the ``head`` part's one number.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor, nn

from solo_geometry.geometry.quality import AlphaReq, alpha_req
from solo_geometry.geometry.stats import (
    MetricSpectrum,
    RepresentationStats,
    WhiteningScore,
    representation_stats,
    whitening_score,
)

__all__ = ["Representation", "StatsInputs", "head_weight_norm"]


class Representation:
    """One representation's features and the statistics several entries share.

    Args:
        X: features (M, d) or (V, N, d) (views pooled; a queue of earlier batches may be in).
        views: the batch's features (V, N, d) for LiDAR; None: X itself if 3-D.
        features_dtype: the dtype the features were captured in (every rank's tolerance);
            None: X's own.
    """

    def __init__(
        self, X: Tensor, views: Tensor | None = None, features_dtype: torch.dtype | None = None
    ) -> None:
        self.X = X
        self.views = views if views is not None else (X if X.ndim == 3 else None)
        self.features_dtype = features_dtype

    @cached_property
    def stats(self) -> RepresentationStats:
        """:func:`~solo_geometry.geometry.stats.representation_stats` of X."""
        return representation_stats(self.X, features_dtype=self.features_dtype)

    @cached_property
    def fit(self) -> AlphaReq:
        """:func:`~solo_geometry.geometry.quality.alpha_req` of X."""
        return alpha_req(self.X, features_dtype=self.features_dtype)


class StatsInputs:
    """The ``stats`` part's inputs: Z and H of the same samples, and a metric head's spectrum.

    Args:
        z: the backbone's features.
        h: the head's outputs of the same samples, in the same order.
        metric: a metric-linear head's :class:`~.stats.MetricSpectrum`; None for other heads.
    """

    def __init__(
        self, z: Representation, h: Representation, metric: MetricSpectrum | None = None
    ) -> None:
        self.spaces = {"z": z, "h": h}
        self.metric = metric

    def __getitem__(self, space: str) -> Representation:
        return self.spaces[space]

    @cached_property
    def whitening(self) -> WhiteningScore:
        """:func:`~solo_geometry.geometry.stats.whitening_score` of Z and H."""
        z, h = self.spaces["z"], self.spaces["h"]
        return whitening_score(z.X, h.X, features_dtype=z.features_dtype)


def head_weight_norm(head: nn.Module) -> float:
    """Frobenius norm of the head's Linear weights (of all its parameters if it has none)."""
    weights = [m.weight for m in head.modules() if isinstance(m, nn.Linear)]
    weights = weights or list(head.parameters())
    with torch.no_grad():
        return float(sum(w.detach().double().pow(2).sum() for w in weights) ** 0.5)
