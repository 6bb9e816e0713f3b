"""The ``geometry.probes`` node: backbone-vs-head probes and the orbit table."""

from __future__ import annotations

from dataclasses import dataclass, field

from solo_geometry.config.choices import (
    FAMILY_CHOICES,
    MLP_STOP_CHOICES,
    ORBIT_PROTOCOLS,
    PROBE_CHOICES,
    PROBE_PROTOCOLS,
    TARGET_CHOICES,
    check_at_least,
    check_choice,
    check_choices,
    check_fraction,
    check_positive,
)


@dataclass
class LinearProbeConfig:
    """Multinomial logistic regression (``probes.linear_probe``)."""

    # L2 strengths lam of mean CE + lam/2 ||W||^2, chosen on a validation split.
    l2_grid: list[float] = field(default_factory=lambda: [1e-1, 1e-2, 1e-3, 1e-4, 1e-5])
    # scikit-learn's stopping test: largest gradient entry at most tol.
    tol: float = 1e-4
    # L-BFGS iterations per fit.
    max_iter: int = 100
    # Share of each class of the train split used to choose the L2 strength.
    val_fraction: float = 0.2
    # Up to this many train rows the features are rotated into their covariance eigenbasis;
    # beyond, that many rows estimate the preconditioner.
    max_rows: int = 4096
    # The validation path only ranks strengths: tolerance path_tol * tol, at most path_rows
    # rows (a seeded subset); the chosen strength is refitted on all of train.
    path_tol: float = 3.0
    path_rows: int = 16384

    def __post_init__(self) -> None:
        if not self.l2_grid or min(self.l2_grid) < 0:
            raise ValueError(
                f"geometry.probes.linear.l2_grid: must be non-empty and >= 0, got {self.l2_grid}"
            )
        check_positive(self.tol, "geometry.probes.linear.tol")
        check_positive(self.path_tol, "geometry.probes.linear.path_tol")
        check_fraction(self.val_fraction, "geometry.probes.linear.val_fraction")
        for key in ("max_iter", "max_rows", "path_rows"):
            check_at_least(getattr(self, key), f"geometry.probes.linear.{key}")


@dataclass
class MlpProbeConfig:
    """One-hidden-layer ReLU MLP trained with Adam to convergence (``probes.mlp_probe``)."""

    hidden: int = 256
    lr: float = 1e-3
    # L2 on every parameter (Adam's coupled weight decay): mean CE + weight_decay/2 ||theta||^2.
    weight_decay: float = 1e-4
    batch_size: int = 256
    # "loss": fit every train row until the epoch's mean training loss has not improved by
    # `tol` for `patience` epochs (scikit-learn's MLPClassifier rule), i.e. to convergence;
    # early stopping on a validation split stopped 0.2 below a converged MLP on the demo's
    # head features. "val": the old rule, the best validation accuracy within `patience` epochs.
    stop: str = "loss"
    # Epochs cap; a fit that reaches it says converged=false in its details.
    max_epochs: int = 2000
    # Epochs without improvement (of the training loss by `tol`, or of validation accuracy).
    patience: int = 10
    tol: float = 1e-4
    # stop="val" only: share of each class of the train split used for early stopping.
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        check_choice(self.stop, MLP_STOP_CHOICES, "geometry.probes.mlp.stop")
        check_fraction(self.val_fraction, "geometry.probes.mlp.val_fraction")
        for key in ("hidden", "batch_size", "max_epochs", "patience"):
            check_at_least(getattr(self, key), f"geometry.probes.mlp.{key}")
        check_positive(self.lr, "geometry.probes.mlp.lr")
        check_positive(self.tol, "geometry.probes.mlp.tol")
        check_at_least(self.weight_decay, "geometry.probes.mlp.weight_decay", 0)


@dataclass
class OrbitsConfig:
    """The orbit table at the end of fit (docs/design.md section 3, "Orbits")."""

    # Augmentation families; [] skips the table.
    families: list[str] = field(default_factory=lambda: list(FAMILY_CHOICES))
    # Held-out images per family, and copies per orbit (t evenly spaced in [-t_max, t_max]).
    images: int = 32
    k: int = 8
    # "default": the families above on `images` held-out images, the head fed raw z as in
    # training. "paper": the paper's table (experiments.py): 5 classes x 3 images, rotations
    # 0, 30, ..., 330 degrees, the head fed L2-normalised z as its code does (families, images
    # and k unused).
    protocol: str = "default"

    def __post_init__(self) -> None:
        check_choice(self.protocol, ORBIT_PROTOCOLS, "geometry.probes.orbits.protocol")
        check_choices(self.families, FAMILY_CHOICES, "geometry.probes.orbits.families")
        check_at_least(self.images, "geometry.probes.orbits.images", 2)
        check_at_least(self.k, "geometry.probes.orbits.k", 2)


@dataclass
class ProbesConfig:
    """Backbone-vs-head probes and the orbit table, run once at the end of fit."""

    enabled: bool = True
    # Labelled image folder for the probes; None: the recipe's val folder.
    data: str | None = None
    batch_size: int = 256
    # Fixes splits, nuisance draws and probe initialisation.
    seed: int = 0
    targets: list[str] = field(default_factory=lambda: list(TARGET_CHOICES))
    probes: list[str] = field(default_factory=lambda: list(PROBE_CHOICES))
    # "package": the probes above; "paper": the paper's rotation probes (analysis/paper_probes.py)
    # instead; "both": both, the paper's under probes.json's "paper".
    protocol: str = "package"
    # The "jitter" target: brightness t uniform in [-jitter_max, jitter_max], binned.
    jitter_bins: int = 4
    jitter_max: float = 0.4
    linear: LinearProbeConfig = field(default_factory=LinearProbeConfig)
    mlp: MlpProbeConfig = field(default_factory=MlpProbeConfig)
    orbits: OrbitsConfig = field(default_factory=OrbitsConfig)

    def __post_init__(self) -> None:
        check_at_least(self.batch_size, "geometry.probes.batch_size")
        check_choices(self.targets, TARGET_CHOICES, "geometry.probes.targets")
        check_choices(self.probes, PROBE_CHOICES, "geometry.probes.probes")
        check_choice(self.protocol, PROBE_PROTOCOLS, "geometry.probes.protocol")
        check_at_least(self.jitter_bins, "geometry.probes.jitter_bins", 2)
        check_positive(self.jitter_max, "geometry.probes.jitter_max")
