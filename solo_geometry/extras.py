"""Optional extras: the one place where solo-learn, lightly and umap-learn are imported lazily.

The core of the package needs none of them. A function that does calls :func:`require` (or
imports the extra inside itself); a missing extra is a ``ModuleNotFoundError`` that names the pip
extra which installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "require"]

# top-level module -> (pip extra, what installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "solo": (
        "solo",
        "solo-learn 1.0.6 from its repository (see docs/getting-started.md, section solo-learn)",
    ),
    "lightly": ("lightly", "pip install 'solo-geometry[lightly]'"),
    "umap": ("umap", "pip install 'solo-geometry[umap]'"),
}


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import an optional extra's module (or a module of ours built on one), or fail naming it.

    Args:
        module: a dotted module name, e.g. ``"solo.methods"``, or a module of this package
            that needs an extra, e.g. ``"solo_geometry.hosts.lightly"`` with ``extra="lightly"``.
        extra: the key of :data:`EXTRAS` the module needs; None: its top-level package.

    Returns:
        The imported module.

    Raises:
        ValueError: if ``extra`` is not an optional extra.
        ModuleNotFoundError: if the extra is not installed; the message names the extra.
    """
    top = extra if extra is not None else module.split(".")[0]
    if top not in EXTRAS:
        raise ValueError(f"unknown optional extra {top!r}; choose from {sorted(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] != top:
            raise
        extra, how = EXTRAS[top]
        raise ModuleNotFoundError(
            f"{module!r} is part of the optional extra {extra!r}, not installed here: {how}",
            name=err.name,
        ) from err
