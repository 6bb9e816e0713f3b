"""The global batch of R ranks as training saw it: per rank chunk, or whole under sync BatchNorm.

Under DDP the measurement evaluates the training loss on the global batch, the concatenation of
the ranks' chunks rank by rank (:mod:`solo_geometry.runtime.distributed`). What each rank
computes from its own chunk must then be computed per chunk:

* without sync BatchNorm, a rank's BatchNorm in training mode normalises with its own chunk's
  statistics: a head, predictor or momentum head with BatchNorm is applied per rank chunk
  (:func:`per_rank`, :class:`PerRankHead`), so the measured loss is the mean over ranks of
  each rank's training loss, whose gradient DDP averages;
* with sync BatchNorm (``Trainer(sync_batchnorm=True)``: Lightning converts every BatchNorm to
  ``torch.nn.SyncBatchNorm``), every BatchNorm normalised with the global batch's statistics:
  those modules are applied to the whole global batch in one call (:func:`batch_norm_synced`).

:func:`sync_batch_norm` says which one a module trained with. Losses that standardise inside
their own function (Barlow Twins' ``BatchNorm1d`` built per call, never converted) stay per
rank chunk either way (:func:`rank_chunks`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn

from solo_geometry.linalg.operators import has_batch_norm

__all__ = [
    "PerRankHead",
    "batch_norm_synced",
    "global_head",
    "per_rank",
    "rank_chunks",
    "ranks_of",
    "sync_batch_norm",
]

# (R, synced): the batch being measured is R rank chunks; synced: BatchNorm saw all of them.
_CHUNKS: ContextVar[tuple[int, bool]] = ContextVar("solo_geometry_rank_chunks", default=(1, False))


def rank_chunks() -> int:
    """Ranks whose chunks make up the batch being measured (1 outside :func:`ranks_of`)."""
    return _CHUNKS.get()[0]


def batch_norm_synced() -> bool:
    """Whether BatchNorm layers saw the whole batch being measured (sync BatchNorm)."""
    return _CHUNKS.get()[1]


@contextmanager
def ranks_of(n: int, synced: bool = False) -> Iterator[None]:
    """Within the block, batches are the concatenation of ``n`` equal rank chunks.

    Args:
        n: R, the number of ranks.
        synced: the module trained with sync BatchNorm (its BatchNorm layers saw all R chunks).
    """
    token = _CHUNKS.set((n, synced))
    try:
        yield
    finally:
        _CHUNKS.reset(token)


def sync_batch_norm(module: Any) -> bool:
    """Whether ``module``'s BatchNorm layers normalise with the global batch's statistics.

    In this order: the host's declaration (a ``geometry_sync_batchnorm`` attribute that is not
    None); any ``torch.nn.SyncBatchNorm`` in the module (what ``Trainer(sync_batchnorm=True)``
    converts the layers to); the attached trainer's strategy holding a layer sync plugin (the
    trainer said ``sync_batchnorm=True``, before its strategy converted the layers).

    Args:
        module: the LightningModule (or any ``nn.Module``).

    Returns:
        True under sync BatchNorm.
    """
    declared = getattr(module, "geometry_sync_batchnorm", None)
    if declared is not None:
        return bool(declared)
    if isinstance(module, nn.Module) and any(
        isinstance(m, nn.SyncBatchNorm) for m in module.modules()
    ):
        return True
    trainer = getattr(module, "_trainer", None)  # LightningModule.trainer raises when detached
    return getattr(getattr(trainer, "strategy", None), "_layer_sync", None) is not None


def per_rank(fn: Callable[[Tensor], Tensor], module: nn.Module, x: Tensor) -> Tensor:
    """``fn(x)`` for a module ``fn`` applies, per rank chunk when it has unsynced BatchNorm.

    Without sync BN, a rank's BatchNorm in training mode normalises with its own chunk's
    statistics; under sync BN (:func:`batch_norm_synced`) with the whole batch's; a module
    without BatchNorm acts per sample (InstanceNorm, GroupNorm and LayerNorm included:
    :func:`~solo_geometry.linalg.operators.has_batch_norm`), so one call gives the same.

    Args:
        fn: the module's forward (or a functional copy of it).
        module: the module (to look for BatchNorm).
        x: rows (R * N, ...) of the global batch, R = :func:`rank_chunks`.

    Returns:
        ``fn`` of each chunk, concatenated in rank order (``fn(x)`` under sync BN).
    """
    chunks = rank_chunks()
    if chunks == 1 or batch_norm_synced() or not has_batch_norm(module) or x.shape[0] % chunks:
        return fn(x)
    return torch.cat([fn(c) for c in x.chunk(chunks)])  # (R * N, ...)


class PerRankHead(nn.Module):
    """A head applied per rank chunk to the global batch's rows (BatchNorm as each rank had it).

    Inputs with any other number of rows (e.g. the few samples of augmentation tangents) go
    through the head in one call.

    Args:
        head: the measured head (it stays the same module: parameters are shared).
        ranks: R.
        rows: R * N, the global batch's rows per view.
    """

    def __init__(self, head: nn.Module, ranks: int, rows: int) -> None:
        super().__init__()
        self.head = head
        self.ranks, self.rows = ranks, rows

    def forward(self, x: Tensor) -> Tensor:
        """Apply the head per rank chunk ``(R * N, d) -> (R * N, p)``."""
        if x.shape[0] != self.rows:
            return self.head(x)
        return torch.cat([self.head(c) for c in x.chunk(self.ranks)])  # (R * N, p)


def global_head(head: nn.Module, ranks: int, rows: int, synced: bool = False) -> nn.Module:
    """The head as it acts on the global batch: per rank chunk if it has unsynced BatchNorm.

    Args:
        head: the measured head.
        ranks: R.
        rows: R * N, the global batch's rows per view.
        synced: sync BatchNorm (the head normalised with the global batch's statistics).

    Returns:
        ``head`` itself, or a :class:`PerRankHead` of it.
    """
    if ranks > 1 and not synced and has_batch_norm(head):
        return PerRankHead(head, ranks, rows)
    return head
