"""The model zoo and published checkpoints: cards, verification, key layouts, analysis.

* :mod:`~solo_geometry.zoo.layouts`: key layouts of solo-learn, lightly-host, VICReg,
  Barlow Twins and DINO checkpoints, loaded as backbone + head;
* :mod:`~solo_geometry.zoo.measurements`: probes, orbits, statistics and rho_aug from weights;
* :mod:`~solo_geometry.zoo.card`, :mod:`~solo_geometry.zoo.folder`: the card folder
  (Hugging Face Hub layout) and its schema;
* :mod:`~solo_geometry.zoo.verify`: recompute a card and name every field out of tolerance;
* :mod:`~solo_geometry.zoo.build`: the digits zoo's entries, build and list;
* :mod:`~solo_geometry.zoo.analyse`: the geometry of a published checkpoint.

The ``zoo`` and ``analyse`` commands' parsers are :mod:`solo_geometry.commands.zoo` and
:mod:`solo_geometry.commands.analyse`.
"""

from __future__ import annotations

from solo_geometry.zoo.folder import load_card_model, write_card
from solo_geometry.zoo.layouts import LAYOUTS, load_checkpoint
from solo_geometry.zoo.verify import verify_card

__all__ = ["LAYOUTS", "load_card_model", "load_checkpoint", "verify_card", "write_card"]
