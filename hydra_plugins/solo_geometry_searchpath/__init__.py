"""Hydra plugin package of solo-geometry (discovered in the ``hydra_plugins`` namespace)."""
