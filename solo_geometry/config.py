"""Typed configuration of the ``geometry`` node, shared by both hosts.

Every node of the ``geometry`` Hydra group is a dataclass here, turned into an OmegaConf
structured config, so a misspelt key or a badly typed value is an error that names it
(STYLE rule 11). :func:`geometry_config` is the one place where a recipe's ``geometry`` node is
read and validated; the hosts call it and get either a :class:`GeometryConfig` or ``None``
(geometry absent or switched off).

This module imports neither torch nor solo-learn at import time: the Hydra plugin imports it
at start-up of every Hydra application to register the schemas.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "ACTIVATION_CHOICES",
    "DTYPE_CHOICES",
    "FAMILY_CHOICES",
    "HEAD_CHOICES",
    "MLP_STOP_CHOICES",
    "NORM_CHOICES",
    "ORBIT_PROTOCOLS",
    "PARAMETRIZATION_CHOICES",
    "PREDICTOR_CHOICES",
    "PROBE_CHOICES",
    "PROBE_PROTOCOLS",
    "TARGET_CHOICES",
    "GeometryConfig",
    "HeadConfig",
    "InitConfig",
    "LinearProbeConfig",
    "MeasureConfig",
    "MlpProbeConfig",
    "OrbitsConfig",
    "PredictorConfig",
    "ProbesConfig",
    "StatsConfig",
    "as_bool",
    "geometry_config",
    "register_configs",
]

# The accepted values of every choice in the tree. The registries keyed by these names
# (heads.HEADS, heads.ACTIVATIONS, heads.NORMS, geometry.augment.FAMILIES) check at import that
# they hold exactly these keys, so a name is added in one place and caught in the other.
DTYPE_CHOICES = ("float64", "float32")
HEAD_CHOICES = ("projector", "metric_linear", "smooth_mlp")
# "predictor": the method's own predictor (BYOL, SimSiam); smooth_mlp: this package's MLP.
PREDICTOR_CHOICES = ("predictor", "smooth_mlp")
ACTIVATION_CHOICES = ("swish", "gelu", "softplus", "tanh", "elu", "relu", "identity")
NORM_CHOICES = ("bn", "ln", "none")
PARAMETRIZATION_CHOICES = ("spectral", "factor")
FAMILY_CHOICES = ("brightness", "contrast", "saturation", "hue", "rotation", "scale", "translation")
TARGET_CHOICES = ("class", "rotation", "jitter")
PROBE_CHOICES = ("linear", "mlp")
MLP_STOP_CHOICES = ("loss", "val")
ORBIT_PROTOCOLS = ("default", "paper")
PROBE_PROTOCOLS = ("package", "paper", "both")
_TRUE = ("true", "on", "yes", "1")
_FALSE = ("false", "off", "no", "0")


def _choice(value: Any, choices: Iterable[str], key: str) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{key}: unknown value {value!r}; choose from {sorted(choices)}")


def _choices(values: Iterable[Any], choices: Iterable[str], key: str) -> None:
    for value in values:
        _choice(value, choices, key)


def _at_least(value: Any, key: str, minimum: float = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ValueError(f"{key}: must be a number >= {minimum}, got {value!r}")


def _positive(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{key}: must be > 0, got {value!r}")


def _fraction(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{key}: must be in (0, 1), got {value!r}")


@dataclass
class MeasureConfig:
    """Which measurements the monitor takes at its cadence."""

    # Spectra of H_eff, GN and M plus ||M||/||H_eff|| (docs/design.md section 3): the headline
    # numbers.
    hessian: bool = True
    # Normalised std, covariance condition number and effective rank of Z and of H: cheap.
    stats: bool = True
    # Metric singularity rho along augmentation tangents: one backbone JVP per family and
    # image, the costliest part, hence one colour family on 8 images by default (add contrast,
    # saturation, hue at will).
    augment: bool = True
    augment_families: list[str] = field(default_factory=lambda: ["brightness"])
    # Images used for the augmentation tangents (a backbone JVP each).
    augment_samples: int = 8
    # SLQ probes for the H_eff density stored in the first and the final record.
    density_probes: int = 2
    # Negative-eigenvalue floor relative to max|lambda(H_eff)|; None: docs/design.md's default
    # (1e-10 in float64, 1e-5 in float32).
    tau: float | None = None
    # Per-epoch gradient norms and relative update sizes of head and backbone (the paper's
    # timescale separation) in <run>/updates.jsonl: a few parameter norms every step.
    updates: bool = False

    def __post_init__(self) -> None:
        _at_least(self.augment_samples, "geometry.measure.augment_samples")
        _at_least(self.density_probes, "geometry.measure.density_probes")
        _choices(self.augment_families, FAMILY_CHOICES, "geometry.measure.augment_families")
        if self.tau is not None:
            _positive(self.tau, "geometry.measure.tau")


@dataclass
class StatsConfig:
    """Representation statistics (normalised std, covariance spectrum, RankMe)."""

    # Also pool the features of the last `queue` training batches before a measurement (RankMe-
    # style), so rank and condition numbers mean something when the batch is smaller than d.
    # 0: the measured batch alone.
    queue: int = 0

    def __post_init__(self) -> None:
        _at_least(self.queue, "geometry.stats.queue", 0)


@dataclass
class HeadConfig:
    """Projection head used while geometry is on."""

    # "projector": keep the recipe's own projector, so switching geometry on never changes the
    # experiment it measures (docs/design.md section 5). Otherwise a key of
    # solo_geometry.heads.HEADS.
    name: str = "projector"
    # Smooth activations (swish, gelu, softplus) make collapse a strict saddle; relu cannot.
    activation: str = "swish"
    # None: the recipe's own proj_hidden_dim.
    hidden_dim: int | None = None
    depth: int = 2
    # "bn" as solo-learn's projectors; "none" for a head whose metric is per-sample.
    norm: str = "bn"
    # metric_linear only: how W is stored.
    parametrization: str = "spectral"
    # Softplus/Swish sharpness.
    beta: float = 1.0
    # smooth_mlp only: Linear biases where no norm follows (False: none at all, the paper's
    # heads), and the norm also after the last Linear (the paper's heads with BatchNorm).
    bias: bool = True
    out_norm: bool = False

    def __post_init__(self) -> None:
        _choice(self.name, HEAD_CHOICES, "geometry.head.name")
        _choice(self.activation, ACTIVATION_CHOICES, "geometry.head.activation")
        _choice(self.norm, NORM_CHOICES, "geometry.head.norm")
        _choice(self.parametrization, PARAMETRIZATION_CHOICES, "geometry.head.parametrization")
        _at_least(self.depth, "geometry.head.depth")
        _positive(self.beta, "geometry.head.beta")
        if self.hidden_dim is not None:
            _at_least(self.hidden_dim, "geometry.head.hidden_dim")


@dataclass
class PredictorConfig:
    """Predictor used while geometry is on (methods with one: BYOL, SimSiam).

    Every option left null takes the ``geometry.head`` node's value, so one override of the
    head sets projector and predictor together (the paper's SimSiam shares the activation and
    the norm between them).
    """

    # "predictor": keep the method's own predictor; "smooth_mlp": this package's MLP.
    name: str = "predictor"
    # null: the head's activation, norm, beta, bias and out_norm.
    activation: str | None = None
    norm: str | None = None
    beta: float | None = None
    bias: bool | None = None
    out_norm: bool | None = None
    # null: the recipe's own pred_hidden_dim.
    hidden_dim: int | None = None
    depth: int = 2

    def __post_init__(self) -> None:
        _choice(self.name, PREDICTOR_CHOICES, "geometry.predictor.name")
        if self.activation is not None:
            _choice(self.activation, ACTIVATION_CHOICES, "geometry.predictor.activation")
        if self.norm is not None:
            _choice(self.norm, NORM_CHOICES, "geometry.predictor.norm")
        if self.beta is not None:
            _positive(self.beta, "geometry.predictor.beta")
        if self.hidden_dim is not None:
            _at_least(self.hidden_dim, "geometry.predictor.hidden_dim")
        _at_least(self.depth, "geometry.predictor.depth")


@dataclass
class InitConfig:
    """Opt-in initialisers applied once, after the head is built."""

    # Multiply the head's Linear weights by alpha (the paper's "pseudo-collapse" start).
    pseudo_collapse: bool = False
    alpha: float = 0.1
    # Also scale the backbone's last layer.
    backbone: bool = False

    def __post_init__(self) -> None:
        _positive(self.alpha, "geometry.init.alpha")


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
        _positive(self.tol, "geometry.probes.linear.tol")
        _positive(self.path_tol, "geometry.probes.linear.path_tol")
        _fraction(self.val_fraction, "geometry.probes.linear.val_fraction")
        for key in ("max_iter", "max_rows", "path_rows"):
            _at_least(getattr(self, key), f"geometry.probes.linear.{key}")


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
        _choice(self.stop, MLP_STOP_CHOICES, "geometry.probes.mlp.stop")
        _fraction(self.val_fraction, "geometry.probes.mlp.val_fraction")
        for key in ("hidden", "batch_size", "max_epochs", "patience"):
            _at_least(getattr(self, key), f"geometry.probes.mlp.{key}")
        _positive(self.lr, "geometry.probes.mlp.lr")
        _positive(self.tol, "geometry.probes.mlp.tol")
        _at_least(self.weight_decay, "geometry.probes.mlp.weight_decay", 0)


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
        _choice(self.protocol, ORBIT_PROTOCOLS, "geometry.probes.orbits.protocol")
        _choices(self.families, FAMILY_CHOICES, "geometry.probes.orbits.families")
        _at_least(self.images, "geometry.probes.orbits.images", 2)
        _at_least(self.k, "geometry.probes.orbits.k", 2)


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
    # "package": the probes above; "paper": the paper's rotation probes (paper_probes.py)
    # instead; "both": both, the paper's under probes.json's "paper".
    protocol: str = "package"
    # The "jitter" target: brightness t uniform in [-jitter_max, jitter_max], binned.
    jitter_bins: int = 4
    jitter_max: float = 0.4
    linear: LinearProbeConfig = field(default_factory=LinearProbeConfig)
    mlp: MlpProbeConfig = field(default_factory=MlpProbeConfig)
    orbits: OrbitsConfig = field(default_factory=OrbitsConfig)

    def __post_init__(self) -> None:
        _at_least(self.batch_size, "geometry.probes.batch_size")
        _choices(self.targets, TARGET_CHOICES, "geometry.probes.targets")
        _choices(self.probes, PROBE_CHOICES, "geometry.probes.probes")
        _choice(self.protocol, PROBE_PROTOCOLS, "geometry.probes.protocol")
        _at_least(self.jitter_bins, "geometry.probes.jitter_bins", 2)
        _positive(self.jitter_max, "geometry.probes.jitter_max")


@dataclass
class GeometryConfig:
    """The whole ``geometry`` node (``+geometry=on``); also the monitor's only configuration."""

    enabled: bool = True
    # Measurement cadence in optimiser steps; step 0 is before the first step.
    every_n_steps: int = 50
    # Samples whose rows form the Hessian operators' principal sub-block (operator dim =
    # V * max_samples * d); the loss always sees the whole batch (docs/design.md section 3).
    max_samples: int = 16
    # Lanczos (full reorthogonalisation) runs per operator until both extreme Ritz values have a
    # residual bound under lanczos_tol times the operator's spectral scale (or under the floor),
    # or lanczos_max_steps is reached; an extreme that did not converge is recorded as null.
    lanczos_max_steps: int = 200
    lanczos_tol: float = 1e-3
    # Arithmetic of the operator products, never of training: float32 products cost about half
    # of float64's on a CPU, their round-off (about 1e-6 of the scale) is far under lanczos_tol,
    # and the Lanczos recurrences stay float64 whatever this says (so does the tridiagonal).
    dtype: str = "float32"
    # Seed of the monitor's own generator (Lanczos start vectors, random directions).
    seed: int = 0
    # Time budget: measurements may take at most this fraction of the training time so far; a
    # due measurement is deferred to a later step until it fits, its expected cost (the last
    # measurement's) included (the first and the final measurement always run). None: every
    # due measurement runs.
    budget: float | None = 0.02
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    init: InitConfig = field(default_factory=InitConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    # Run folder for geometry.jsonl; None: the host's (Hydra output dir or trainer root dir).
    out_dir: str | None = None
    # Write report/index.html at the end of fit (sweeps that draw their own page switch it off).
    report: bool = True

    def __post_init__(self) -> None:
        _at_least(self.every_n_steps, "geometry.every_n_steps")
        _at_least(self.max_samples, "geometry.max_samples", 2)
        _at_least(self.lanczos_max_steps, "geometry.lanczos_max_steps", 2)
        _positive(self.lanczos_tol, "geometry.lanczos_tol")
        _choice(self.dtype, DTYPE_CHOICES, "geometry.dtype")
        if self.budget is not None and not 0 < self.budget <= 1:
            raise ValueError(f"geometry.budget: must be in (0, 1] or null, got {self.budget!r}")


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore as ``geometry/schema`` (idempotent).

    The YAML options of the group (``on.yaml``, ``off.yaml``) extend this schema, so a
    misspelt override such as ``geometry.head.nme=x`` fails at composition.
    """
    ConfigStore.instance().store(group="geometry", name="schema", node=GeometryConfig)


def as_bool(value: Any, key: str) -> bool:
    """Interpret an on/off value explicitly.

    Args:
        value: a bool or one of the strings true/false, on/off, yes/no, 1/0 (any case).
        key: the config key, for the error message.

    Returns:
        The boolean meant.

    Raises:
        ValueError: for any other value (a bare ``'off'`` never means true).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str | int) and str(value).strip().lower() in _TRUE + _FALSE:
        return str(value).strip().lower() in _TRUE
    raise ValueError(f"{key}: expected a boolean (true/false, on/off), got {value!r}")


def geometry_config(cfg: DictConfig) -> GeometryConfig | None:
    """Read and validate the ``geometry`` node of a recipe.

    Args:
        cfg: the whole recipe config (solo-learn's schema).

    Returns:
        The validated config, or None when the node is absent or switched off.

    Raises:
        ValueError: for a scalar ``geometry: on`` without the plugin's group, a misspelt key
            or a bad value; the message names the key.
    """
    node = OmegaConf.select(cfg, "geometry", default=None) if cfg is not None else None
    if node is None:
        return None
    if not isinstance(node, DictConfig):
        if isinstance(node, bool | str | int) and not as_bool_or_none(node):
            return None  # an explicit off value (false, "off", ...)
        raise ValueError(
            f"geometry: got the plain value {node!r}; geometry is a config group: use "
            '`+geometry=on` on the command line or `- geometry: "on"` in the recipe\'s defaults '
            "list (is the solo-geometry Hydra plugin importable, i.e. on PYTHONPATH?)"
        )
    raw = OmegaConf.to_container(node, resolve=True)
    assert isinstance(raw, dict)
    raw["enabled"] = as_bool(raw.get("enabled", True), "geometry.enabled")
    if raw.get("report") is not None:
        raw["report"] = as_bool(raw["report"], "geometry.report")
    if not raw["enabled"]:
        return None
    for sub, key in (("init", "pseudo_collapse"), ("init", "backbone"), ("probes", "enabled"),
                     ("head", "bias"), ("head", "out_norm"), ("predictor", "bias"),
                     ("predictor", "out_norm"), ("measure", "updates")):  # fmt: skip
        if isinstance(raw.get(sub), dict) and raw[sub].get(key) is not None:
            raw[sub][key] = as_bool(raw[sub][key], f"geometry.{sub}.{key}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(GeometryConfig), raw)
        gcfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        full_key = getattr(err, "full_key", None)
        raise ValueError(f"geometry.{full_key}: {err.msg if hasattr(err, 'msg') else err}") from err
    assert isinstance(gcfg, GeometryConfig)
    return gcfg


def as_bool_or_none(value: Any) -> bool | None:
    """Like :func:`as_bool` but None for a value that is not an on/off word."""
    try:
        return as_bool(value, "geometry")
    except ValueError:
        return None
