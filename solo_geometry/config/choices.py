"""The accepted values of every choice in the ``geometry`` tree, and the checks of its values.

Imports nothing of the package: the nodes (:mod:`solo_geometry.config.nodes`,
:mod:`solo_geometry.config.probes`) and the registries keyed by these names import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The accepted values of every choice in the tree (geometry.augment.FAMILIES is keyed by
# FAMILY_CHOICES' names).
DTYPE_CHOICES = ("float64", "float32")
# The heads the package builds, in the order of models.heads.HEADS; "projector" keeps the host's.
BUILT_HEADS = ("metric_linear", "smooth_mlp")
HEAD_CHOICES = ("projector", *BUILT_HEADS)
# "predictor": the method's own predictor (BYOL, SimSiam); smooth_mlp: this package's MLP.
PREDICTOR_CHOICES = ("predictor", "smooth_mlp", "identity")
# The one list of the heads' activations and norms, each with the torch.nn layer it names (by
# class name: this module imports no torch). models.heads builds its layers from them, the
# upstream template's tables are rendered from them, the tests read them. "none", no norm, is
# spelled so everywhere (the config, the heads, the template).
ACTIVATION_LAYERS: dict[str, str] = {
    "swish": "SiLU",
    "gelu": "GELU",
    "softplus": "Softplus",
    "tanh": "Tanh",
    "elu": "ELU",
    "relu": "ReLU",
    "identity": "Identity",
}
NO_NORM = "none"
NORM_LAYERS: dict[str, str | None] = {"bn": "BatchNorm1d", "ln": "LayerNorm", NO_NORM: None}
ACTIVATION_CHOICES = tuple(ACTIVATION_LAYERS)
# The activations whose second derivative vanishes almost everywhere: a head of them adds no
# curvature (their layers are in linalg.operators.PIECEWISE_LINEAR; a test holds the two equal).
FLAT_ACTIVATIONS = ("relu", "identity")
NORM_CHOICES = tuple(NORM_LAYERS)
PARAMETRIZATION_CHOICES = ("spectral", "factor")
FAMILY_CHOICES = ("brightness", "contrast", "saturation", "hue", "rotation", "scale", "translation")
TARGET_CHOICES = ("class", "rotation", "jitter")
PROBE_CHOICES = ("linear", "mlp")
MLP_STOP_CHOICES = ("loss", "val")
ORBIT_PROTOCOLS = ("default", "paper")
PROBE_PROTOCOLS = ("package", "paper", "both")
ALERT_FEATURES = ("h", "z")  # the representation the collapse alert watches
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
