"""The models: projection heads, solo-learn-shaped MLPs, backbones, initialisers, checkpoints.

* :mod:`~solo_geometry.models.heads`: heads as declarative blocks and the ``HEADS`` registry;
* :mod:`~solo_geometry.models.solo_mlp`: ``build_mlp`` and solo-learn's inline projectors and
  predictors;
* :mod:`~solo_geometry.models.init`: in-place initialisers (pseudo-collapse);
* :mod:`~solo_geometry.models.backbones`: backbones by solo-learn's names, without solo-learn;
* :mod:`~solo_geometry.models.checkpoint`: backbone and head rebuilt from a checkpoint.

May import: :mod:`solo_geometry.config`, :mod:`solo_geometry.inputs` and
:mod:`solo_geometry.folder` (and what they may); never the analysis, the run-time core, a host or
a command.
"""
