"""Hosts that run recipes with the geometry instrumentation, over a shared base.

* :mod:`solo_geometry.hosts.base`: capture, state guard and view assembly every host shares;
* :mod:`solo_geometry.hosts.solo`: solo-learn 1.0.6 itself (its ``main_pretrain.py``, its
  methods wrapped by the Hydra plugin);
* :mod:`solo_geometry.hosts.lightly`: the same recipes on lightly's losses, where solo-learn
  cannot be installed;
* :mod:`solo_geometry.hosts.pretrain`: ``pretrain()``, a recipe on the host chosen (or resumed);
* :mod:`solo_geometry.hosts.demo`: the demo, the main job end to end on the digits;
* :mod:`solo_geometry.hosts.sweeps`: sweeps on Hydra's launchers and their progress lines.
"""
