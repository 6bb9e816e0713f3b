"""Hosts that run recipes with the geometry instrumentation, over a shared base.

* :mod:`solo_geometry.hosts.base`: capture, state guard and view assembly every host shares;
* :mod:`solo_geometry.hosts.solo`: solo-learn 1.0.6 itself (its ``main_pretrain.py``, its
  methods wrapped by the Hydra plugin);
* :mod:`solo_geometry.hosts.lightly`: the same recipes on lightly's losses, where solo-learn
  cannot be installed.
"""
