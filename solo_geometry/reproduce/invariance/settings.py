"""Sizes of ``reproduce invariance``: :class:`InvarianceSettings` and its two forms.

``FULL`` is the CPU scale (``benchmarks/bench_invariance.py --full``: under 45 minutes on 2
shared cores; docs/reproducing.md gives the arithmetic), ``QUICK`` the CI form (under 4
minutes: a handful of steps per run, everything else at its smallest meaningful size).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FULL", "QUICK", "InvarianceSettings"]


@dataclass(frozen=True)
class InvarianceSettings:
    """Sizes of one reproduction (everything else is the recipe's and the paper's).

    Attributes:
        batch_size: images per step (two views each); the paper's 256.
        width: hidden and output width of every head; the paper's 2048.
        epochs: guillotine pretraining epochs (the paper's 50).
        depth_epochs: epochs of each head-depth run.
        whitening_epochs: epochs of the metric-linear run (one checkpoint per epoch).
        limit_batches: batches per epoch (None: the whole training set).
        seeds: draws of orbit images and curvature sweeps (the paper's 3).
        curvature_images: sweeps per draw (the paper's 200; 100 in its depth ablation).
        mlp_epochs: epoch cap of the MLP probes (early-stopped on validation).
        mlp_patience: epochs without validation gain before an MLP probe stops. With a few
            thousand probe images an epoch is a few Adam steps; 15 stopped the digits' probes
            3 to 11 points below scikit-learn's MLPClassifier on the same features.
        probe_images: images per probe split (train, held-out): CIFAR's exported subsets; on
            the digits a stratified subset where smaller than the split (quick form only).
        num_workers: data-loading workers.
        digits_size: side in pixels of the embedded digits' images (CIFAR's are 32): the
            recipe's crop size too. 32 in both forms; a test may take 16, a quarter of the
            convolutions.
    """

    batch_size: int
    width: int
    epochs: int
    depth_epochs: int
    whitening_epochs: int
    limit_batches: int | None
    seeds: int
    curvature_images: int
    mlp_epochs: int
    mlp_patience: int
    probe_images: tuple[int, int]
    num_workers: int
    digits_size: int = 32


FULL = InvarianceSettings(
    batch_size=64,
    width=512,
    epochs=3,
    depth_epochs=1,
    whitening_epochs=1,
    limit_batches=None,
    seeds=3,
    curvature_images=50,
    mlp_epochs=400,
    mlp_patience=100,
    probe_images=(10000, 2000),
    num_workers=2,
)
QUICK = InvarianceSettings(
    batch_size=16,
    width=64,
    epochs=1,
    depth_epochs=1,
    whitening_epochs=2,
    limit_batches=2,
    seeds=2,
    curvature_images=8,
    mlp_epochs=5,
    mlp_patience=15,
    probe_images=(200, 100),
    num_workers=0,
)
