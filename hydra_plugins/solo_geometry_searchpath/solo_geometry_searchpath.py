"""Hydra SearchPathPlugin: the ``geometry`` config group for every Hydra application.

Follows hydra's ``examples/plugins/example_searchpath_plugin``. Hydra imports this module at
start-up of every application, so it is kept light: it imports neither torch nor solo-learn.
When solo-learn's methods are already imported (solo-learn's ``main_pretrain.py`` imports them
before ``@hydra.main`` runs), it also wraps the supported entries of ``solo.methods.METHODS``
in place so that ``+geometry=on`` builds geometry-aware models. It never raises: a failure is
a warning, and the application runs as without the plugin.
"""

from __future__ import annotations

import sys
import warnings

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

SEARCHPATH = "pkg://solo_geometry.config.groups"


def register_schemas() -> None:
    """Register the ``geometry`` schemas in Hydra's ConfigStore (light: omegaconf only)."""
    try:
        from solo_geometry.config import register_configs

        register_configs()
    except Exception as err:  # noqa: BLE001 - a plugin must never break the host application
        warnings.warn(f"solo-geometry: could not register its config schema: {err!r}", stacklevel=2)


def patch_solo_methods() -> None:
    """Wrap solo-learn's METHODS in place if solo-learn is already imported (idempotent)."""
    if "solo.methods" not in sys.modules:
        return
    try:
        from solo_geometry.hosts.solo import install

        install()
    except Exception as err:  # noqa: BLE001 - a plugin must never break the host application
        warnings.warn(f"solo-geometry: could not wrap solo.methods.METHODS: {err!r}", stacklevel=2)


class SoloGeometrySearchPathPlugin(SearchPathPlugin):
    """Append ``pkg://solo_geometry.config.groups`` (the ``geometry`` group) to the search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Add the group's package to Hydra's config search path.

        Args:
            search_path: Hydra's search path, modified in place.
        """
        search_path.append(provider="solo-geometry", path=SEARCHPATH)
        register_schemas()
        patch_solo_methods()


register_schemas()
patch_solo_methods()
