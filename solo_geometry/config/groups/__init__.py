"""Hydra config groups shipped as package data (``pkg://solo_geometry.config.groups``).

The YAML side of :mod:`solo_geometry.config`: the ``geometry`` group's options extend the
dataclasses beside it.

Importing this package (Hydra does, to read the group) registers the typed schemas the YAML
options extend, so the group composes even where the search-path plugin is not discovered.
"""

from solo_geometry.config import register_configs

# This package as Hydra's search path names it (the Hydra plugin spells it out, so that it stays
# importable when this package is not: tests/test_hydra_plugin.py holds the two equal).
SEARCHPATH = f"pkg://{__name__}"

register_configs()
