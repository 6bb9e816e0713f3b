"""Typed configuration of the ``geometry`` node, shared by both hosts.

Every node of the ``geometry`` Hydra group is a dataclass here, turned into an OmegaConf
structured config, so a misspelt key or a badly typed value is an error that names it
(STYLE rule 11). :func:`geometry_config` is the one place where a recipe's ``geometry`` node is
read and validated; the hosts call it and get either a :class:`GeometryConfig` or ``None``
(geometry absent or switched off).

The package holds :mod:`~solo_geometry.config.choices` (the accepted values and their
checks), :mod:`~solo_geometry.config.nodes` (measurement, head, predictor, initialiser),
:mod:`~solo_geometry.config.probes` (the ``probes`` node) and, here, the whole node, its Hydra
registration and its reader; every name stays importable from ``solo_geometry.config``, where
pickled configs of earlier runs look them up. It imports nothing else of the package, and
neither torch nor solo-learn: the Hydra plugin imports it at start-up of every Hydra
application to register the schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_geometry.config.choices import (
    _FALSE,
    _TRUE,
    ACTIVATION_CHOICES,
    DTYPE_CHOICES,
    FAMILY_CHOICES,
    HEAD_CHOICES,
    MLP_STOP_CHOICES,
    NORM_CHOICES,
    ORBIT_PROTOCOLS,
    PARAMETRIZATION_CHOICES,
    PREDICTOR_CHOICES,
    PROBE_CHOICES,
    PROBE_PROTOCOLS,
    TARGET_CHOICES,
    _at_least,
    _choice,
    _positive,
)
from solo_geometry.config.nodes import (
    AlertConfig,
    HeadConfig,
    InitConfig,
    MeasureConfig,
    PredictorConfig,
    StatsConfig,
)
from solo_geometry.config.probes import (
    LinearProbeConfig,
    MlpProbeConfig,
    OrbitsConfig,
    ProbesConfig,
)

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
    "AlertConfig",
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
    alert: AlertConfig = field(default_factory=AlertConfig)
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
    for sub, key in (
        ("init", "pseudo_collapse"),
        ("init", "backbone"),
        ("probes", "enabled"),
        ("head", "bias"),
        ("head", "out_norm"),
        ("predictor", "bias"),
        ("predictor", "out_norm"),
        ("measure", "updates"),
        ("alert", "enabled"),
        ("alert", "stop"),
        ("alert", "read_z"),
    ):
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
