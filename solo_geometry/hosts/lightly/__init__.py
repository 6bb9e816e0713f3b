"""The lightly host: solo-learn recipes trained on lightly's losses, torchvision and Lightning.

* :mod:`.launcher`: check a recipe, train it, write the run folder;
* :mod:`.recipe`: parse and validate solo-learn's recipe schema;
* :mod:`.nodes`: the recipe's typed nodes (frozen dataclasses, validated on construction);
* :mod:`.data`: datasets, augmentation pipelines and loaders;
* :mod:`.losses`: projectors, predictor, losses, optimisers and schedules;
* :mod:`.module`: the LightningModule.

lightly itself is imported only by :mod:`.losses` and :mod:`.module`, which the launcher loads
when it trains (an optional extra).
"""

from solo_geometry.hosts.lightly.launcher import HOST, launch, prepare, run_recipe

__all__ = ["HOST", "launch", "prepare", "run_recipe"]
