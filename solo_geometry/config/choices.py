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
# The spellings a boolean override accepts (any case).
TRUE_WORDS = ("true", "on", "yes", "1")
FALSE_WORDS = ("false", "off", "no", "0")


def check_choice(value: Any, choices: Iterable[str], key: str) -> None:
    """Raise ValueError naming ``key``, ``value`` and the choices when ``value`` is not one."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{key}: unknown value {value!r}; choose from {sorted(choices)}")


def check_choices(values: Iterable[Any], choices: Iterable[str], key: str) -> None:
    """:func:`check_choice` on each of ``values``."""
    for value in values:
        check_choice(value, choices, key)


def check_at_least(value: Any, key: str, minimum: float = 1) -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ValueError(f"{key}: must be a number >= {minimum}, got {value!r}")


def check_positive(value: Any, key: str) -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{key}: must be > 0, got {value!r}")


def check_fraction(value: Any, key: str) -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a number in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{key}: must be in (0, 1), got {value!r}")
