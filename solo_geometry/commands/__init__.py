"""The single-run commands behind ``solo-geometry`` (:mod:`solo_geometry.cli` dispatches).

* :mod:`~solo_geometry.commands.pretrain`: ``solo-geometry pretrain`` on either host;
* :mod:`~solo_geometry.commands.demo`: ``solo-geometry demo`` (``make demo``);
* :mod:`~solo_geometry.commands.orbits`: ``solo-geometry orbits FILE``;
* :mod:`~solo_geometry.commands.sweeps`: sweeps on Hydra's launchers and their progress lines.

May import: :mod:`solo_geometry.hosts` and everything below it; never
:mod:`solo_geometry.reproduce`, :mod:`solo_geometry.zoo` or :mod:`solo_geometry.cli`, which
build on it.
"""
