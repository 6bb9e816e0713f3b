"""Typed configuration of the ``geometry`` node, shared by both hosts.

Every node of the ``geometry`` Hydra group is a dataclass here, turned into an OmegaConf
structured config, so a misspelt key or a badly typed value is an error that names it
(STYLE rule 11). :func:`geometry_config` is the one place where a recipe's ``geometry`` node is
read and validated; the hosts call it and get either a :class:`GeometryConfig` or ``None``
(geometry absent or switched off).

The package holds :mod:`~solo_geometry.config.choices` (the accepted values and their
checks), :mod:`~solo_geometry.config.nodes` (measurement, spectrum, statistics, alert, head,
predictor, initialiser),
:mod:`~solo_geometry.config.probes` (the ``probes`` node) and, here, the whole node, its Hydra
registration and its reader; every name stays importable from ``solo_geometry.config``, where
pickled configs of earlier runs look them up. It imports nothing else of the package, and
neither torch nor solo-learn: the Hydra plugin imports it at start-up of every Hydra
application to register the schemas.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_geometry.config.choices import (
    ACTIVATION_CHOICES,
    DTYPE_CHOICES,
    FALSE_WORDS,
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
    TRUE_WORDS,
    check_at_least,
)
from solo_geometry.config.nodes import (
    AlertConfig,
    HeadConfig,
    InitConfig,
    MeasureConfig,
    PredictorConfig,
    SpectrumConfig,
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
    "MOVED_TO_SPECTRUM",
    "LinearProbeConfig",
    "MeasureConfig",
    "MlpProbeConfig",
    "OrbitsConfig",
    "PredictorConfig",
    "ProbesConfig",
    "SpectrumConfig",
    "StatsConfig",
    "as_bool",
    "geometry_config",
    "register_configs",
]


# The spectrum's settings as they were keyed before the ``spectrum`` node, read for one release:
# old key (under ``geometry``) -> its field of :class:`SpectrumConfig`.
MOVED_TO_SPECTRUM = {
    "max_samples": "max_samples",
    "lanczos_max_steps": "max_steps",
    "lanczos_tol": "tol",
    "dtype": "dtype",
    "measure.density_probes": "density_probes",
    "measure.tau": "tau",
}
_WARNED: dict[Any, Any] = {}  # the registry that shows each key's warning once a process


@dataclass
class GeometryConfig:
    """The whole ``geometry`` node (``+geometry=on``); also the monitor's only configuration."""

    enabled: bool = True
    # Measurement cadence in optimiser steps; step 0 is before the first step.
    every_n_steps: int = 50
    # Seed of the monitor's own generator (Lanczos start vectors, random directions).
    seed: int = 0
    # Time budget: measurements may take at most this fraction of the training time so far; a
    # due measurement is deferred to a later step until it fits, its expected cost (the last
    # measurement's) included (the first and the final measurement always run). None: every
    # due measurement runs.
    budget: float | None = 0.02
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    spectrum: SpectrumConfig = field(default_factory=SpectrumConfig)
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
    # Deprecated, read for one release: geometry.spectrum.max_samples, .max_steps, .tol and
    # .dtype (a value given here is moved there, with a warning naming the new key).
    max_samples: int | None = None
    lanczos_max_steps: int | None = None
    lanczos_tol: float | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        check_at_least(self.every_n_steps, "geometry.every_n_steps")
        if self.budget is not None and not 0 < self.budget <= 1:
            raise ValueError(f"geometry.budget: must be in (0, 1] or null, got {self.budget!r}")
        self._move_to_spectrum()

    def _move_to_spectrum(self) -> None:
        """Move the values of :data:`MOVED_TO_SPECTRUM`'s old keys into ``spectrum``.

        Each old key given warns once (a :class:`FutureWarning` naming the new key) and reads
        null afterwards; a bad value is refused under the key it was given as, and so is an
        old key's value beside another value of its new key.
        """
        moved = _old_keys_given(self)
        if moved:
            self.max_samples = self.lanczos_max_steps = self.lanczos_tol = self.dtype = None
            self.measure = replace(self.measure, density_probes=None, tau=None)
            self.spectrum = _moved(self.spectrum, moved)


def _old_keys_given(cfg: GeometryConfig) -> dict[str, tuple[str, Any]]:
    """``new field -> (old key, value)`` of each old key given a value, each one warned."""
    moved: dict[str, tuple[str, Any]] = {}
    for old, new in MOVED_TO_SPECTRUM.items():
        node, name = (cfg.measure, old[8:]) if old.startswith("measure.") else (cfg, old)
        if getattr(node, name) is not None:
            moved[new] = (old, getattr(node, name))
            warnings.warn_explicit(
                f"geometry.{old} is deprecated, use geometry.spectrum.{new} (the old key goes "
                "in the next release)",
                FutureWarning,
                "solo-geometry",
                0,
                registry=_WARNED,
            )
    return moved


def _moved(spectrum: SpectrumConfig, moved: dict[str, tuple[str, Any]]) -> SpectrumConfig:
    """``spectrum`` with the old keys' values (:func:`_old_keys_given`).

    Raises:
        ValueError: an old key's value beside another value of its new key, or a bad value,
            named by the old key.
    """
    defaults = {f.name: f.default for f in fields(SpectrumConfig)}
    for new, (old, value) in moved.items():
        given = getattr(spectrum, new)
        if given not in (defaults[new], value):
            raise ValueError(
                f"geometry.{old}: {value!r} given beside geometry.spectrum.{new}={given!r}; "
                f"give geometry.spectrum.{new} alone (geometry.{old} is deprecated)"
            )
    try:
        return replace(spectrum, **{new: value for new, (_, value) in moved.items()})
    except ValueError as err:  # named as the user wrote it
        key, _, why = str(err).partition(":")
        new = key.removeprefix("geometry.spectrum.")
        raise ValueError(f"geometry.{moved.get(new, (f'spectrum.{new}',))[0]}:{why}") from None


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
    if isinstance(value, str | int) and str(value).strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return str(value).strip().lower() in TRUE_WORDS
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
