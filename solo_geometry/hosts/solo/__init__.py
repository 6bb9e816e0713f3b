"""The solo-learn host: solo-learn 1.0.6's own methods, losses and ``main_pretrain.py``.

* :mod:`.launcher`: run a recipe through solo-learn's ``main_pretrain.py`` in a run folder;
* :mod:`.methods`: the geometry-aware subclasses wrapped into ``solo.methods.METHODS``;
* :mod:`.losses`: each supported method's loss rebuilt from ``solo.losses``.

solo-learn itself is imported only by the functions that need it (an optional extra).
"""

from solo_geometry.hosts.solo.launcher import (
    LaunchError,
    check_recipe,
    find_solo_root,
    launch,
    solo_command,
)
from solo_geometry.hosts.solo.losses import SUPPORTED, UNSUPPORTED
from solo_geometry.hosts.solo.methods import install

__all__ = [
    "SUPPORTED",
    "UNSUPPORTED",
    "LaunchError",
    "check_recipe",
    "find_solo_root",
    "install",
    "launch",
    "solo_command",
]
