"""Hydra config groups shipped as package data (``pkg://solo_geometry.config.groups``).

The YAML side of :mod:`solo_geometry.config`: the ``geometry`` group's options extend the
dataclasses beside it.

Importing this package (Hydra does, to read the group) registers the typed schemas the YAML
options extend, so the group composes even where the search-path plugin is not discovered.
"""

from solo_geometry.config import register_configs

register_configs()
