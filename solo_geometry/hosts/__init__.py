"""Hosts that run recipes with the geometry instrumentation.

* :mod:`solo_geometry.hosts.solo`: solo-learn 1.0.6 itself (its ``main_pretrain.py``, its
  methods wrapped by the Hydra plugin);
* :mod:`solo_geometry.hosts.lightly`: the same recipes on lightly's losses, where solo-learn
  cannot be installed.

Nothing is imported here: each host imports its framework lazily.
"""
