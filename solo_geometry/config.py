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

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "DTYPES",
    "GeometryConfig",
    "HeadConfig",
    "InitConfig",
    "MeasureConfig",
    "NORMS",
    "PARAMETRIZATIONS",
    "ProbesConfig",
    "as_bool",
    "build_configured_head",
    "geometry_config",
    "register_configs",
]

DTYPES = ("float64", "float32")
NORMS = ("bn", "ln", "none")
PARAMETRIZATIONS = ("spectral", "factor")
_TRUE = ("true", "on", "yes", "1")
_FALSE = ("false", "off", "no", "0")


@dataclass
class MeasureConfig:
    """Which measurements the monitor takes at its cadence."""

    # Spectra of H_eff, GN and M plus ||M||/||H_eff|| (DESIGN.md section 3): the headline numbers.
    hessian: bool = True
    # Normalised std, covariance condition number and effective rank of Z and of H: cheap.
    stats: bool = True
    # Metric singularity rho along augmentation tangents: one backbone JVP per family and
    # image, the costliest part, hence one colour family on 8 images by default (together with
    # max_samples=16 and lanczos_steps=12 this keeps the overhead near 2% at every_n_steps=50
    # on the CPU digits benchmark; add contrast, saturation, hue at will).
    augment: bool = True
    augment_families: list[str] = field(default_factory=lambda: ["brightness"])
    # Images used for the augmentation tangents (a backbone JVP each); <= max_samples.
    augment_samples: int = 8
    # SLQ probes for the H_eff density stored in the first and the final record.
    density_probes: int = 2
    # Negative-eigenvalue floor relative to max|lambda(H_eff)|; None: DESIGN.md's default.
    tau: float | None = None


@dataclass
class HeadConfig:
    """Projection head used while geometry is on."""

    # "projector": keep the recipe's own projector, so switching geometry on never changes the
    # experiment it measures (DESIGN.md section 5). Otherwise a key of solo_geometry.heads.HEADS.
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


@dataclass
class InitConfig:
    """Opt-in initialisers applied once, after the head is built."""

    # Multiply the head's Linear weights by alpha (the paper's "pseudo-collapse" start).
    pseudo_collapse: bool = False
    alpha: float = 0.1
    # Also scale the backbone's last layer.
    backbone: bool = False


@dataclass
class ProbesConfig:
    """Backbone-vs-head probes run once at the end of fit."""

    enabled: bool = True
    # Labelled image folder for the probes; None: the recipe's val folder.
    data: str | None = None
    batch_size: int = 256


@dataclass
class GeometryConfig:
    """The whole ``geometry`` node (``+geometry=on``)."""

    enabled: bool = True
    # Measurement cadence in optimiser steps; step 0 is before the first step.
    every_n_steps: int = 50
    # Samples of the batch measured (operator dim = V * max_samples * d); the monitor's cost
    # grows linearly with it (benchmarks/bench_overhead.py).
    max_samples: int = 16
    # Lanczos steps per operator (full reorthogonalisation): the extreme eigenvalues, which
    # are what is recorded, converge first; raise it for the density's interior.
    lanczos_steps: int = 12
    # Arithmetic of the measurements, never of training.
    dtype: str = "float64"
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    init: InitConfig = field(default_factory=InitConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    # Run folder for geometry.jsonl; None: the host's (Hydra output dir or trainer root dir).
    out_dir: str | None = None


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore as ``geometry/schema`` (idempotent).

    The YAML options of the group (``on.yaml``, ``off.yaml``) extend this schema, so a
    misspelt override such as ``geometry.head.nme=x`` fails at composition.
    """
    from hydra.core.config_store import ConfigStore

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
    if not raw["enabled"]:
        return None
    for sub, key in (("init", "pseudo_collapse"), ("init", "backbone"), ("probes", "enabled")):
        if isinstance(raw.get(sub), dict) and key in raw[sub]:
            raw[sub][key] = as_bool(raw[sub][key], f"geometry.{sub}.{key}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(GeometryConfig), raw)
        gcfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        full_key = getattr(err, "full_key", None)
        raise ValueError(f"geometry.{full_key}: {err.msg if hasattr(err, 'msg') else err}") from err
    assert isinstance(gcfg, GeometryConfig)
    _validate(gcfg)
    return gcfg


def as_bool_or_none(value: Any) -> bool | None:
    """Like :func:`as_bool` but None for a value that is not an on/off word."""
    try:
        return as_bool(value, "geometry")
    except ValueError:
        return None


def _choice(value: Any, choices: Any, key: str) -> None:
    if value not in choices:
        raise ValueError(f"{key}: unknown value {value!r}; choose from {sorted(choices)}")


def _positive(value: int, key: str, minimum: int = 1) -> None:
    if value < minimum:
        raise ValueError(f"{key}: must be >= {minimum}, got {value!r}")


def _families() -> set[str]:
    """Names of the augmentation families the geometry engine knows."""
    try:
        families = importlib.import_module("solo_geometry.geometry").FAMILIES
    except (ImportError, AttributeError):  # engine not importable: its documented families
        return {"brightness", "contrast", "saturation", "hue", "rotation", "scale", "translation"}
    return set(families)


def _validate(g: GeometryConfig) -> None:
    """Check values whose type OmegaConf cannot check (names, ranges)."""
    _positive(g.every_n_steps, "geometry.every_n_steps")
    _positive(g.max_samples, "geometry.max_samples", 2)
    _positive(g.lanczos_steps, "geometry.lanczos_steps", 2)
    _positive(g.measure.augment_samples, "geometry.measure.augment_samples")
    _positive(g.measure.density_probes, "geometry.measure.density_probes")
    _choice(g.dtype, DTYPES, "geometry.dtype")
    _choice(g.head.norm, NORMS, "geometry.head.norm")
    _choice(g.head.parametrization, PARAMETRIZATIONS, "geometry.head.parametrization")
    _positive(g.head.depth, "geometry.head.depth")
    if g.head.hidden_dim is not None:
        _positive(g.head.hidden_dim, "geometry.head.hidden_dim")
    if not 0.0 < g.init.alpha:
        raise ValueError(f"geometry.init.alpha: must be > 0, got {g.init.alpha!r}")
    from solo_geometry import heads

    _choice(g.head.name, {"projector", *heads.HEADS}, "geometry.head.name")
    _choice(g.head.activation, set(heads.ACTIVATIONS), "geometry.head.activation")
    if g.measure.augment:
        for family in g.measure.augment_families:
            _choice(family, _families(), "geometry.measure.augment_families")


def build_configured_head(
    hcfg: HeadConfig, in_dim: int, out_dim: int, default_hidden: int | None = None
) -> nn.Module:
    """Build the head a :class:`HeadConfig` names.

    Args:
        hcfg: the head node; ``name`` must not be ``"projector"`` (the host keeps its own).
        in_dim: backbone feature dimension d.
        out_dim: head output dimension p.
        default_hidden: hidden width when ``hcfg.hidden_dim`` is None (the recipe's
            ``proj_hidden_dim``); None falls back to ``in_dim``.

    Returns:
        The head, mapping (N, in_dim) to (N, out_dim).

    Raises:
        ValueError: for ``"projector"`` or an unknown head name.
    """
    from solo_geometry.heads import build_head

    if hcfg.name == "projector":
        raise ValueError("geometry.head.name='projector' keeps the host's own projector")
    if hcfg.name == "metric_linear":
        return build_head(hcfg.name, in_dim, out_dim, parametrization=hcfg.parametrization)
    hidden = next(h for h in (hcfg.hidden_dim, default_hidden, in_dim) if h is not None)
    return build_head(
        hcfg.name,
        in_dim,
        out_dim,
        hidden_dim=hidden,
        depth=hcfg.depth,
        activation=hcfg.activation,
        norm=None if hcfg.norm == "none" else hcfg.norm,
        beta=hcfg.beta,
    )
