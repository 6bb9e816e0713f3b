"""solo-learn recipe files, loaded the way solo-learn's ``main_pretrain.py`` loads them.

A recipe is a YAML file in solo-learn's schema (``method``, ``backbone``, ``method_kwargs``,
``data``, ``optimizer``, ``scheduler``, ``augmentations``, ``max_epochs``, Lightning Trainer
keys, ...), usually with a Hydra ``defaults`` list that pulls files from folders next to it
(``augmentations: asymmetric.yaml``, ``wandb: private.yaml``). ``load_recipe`` composes it with
Hydra's compose API over the recipe's own folder, with this package's ``geometry`` config group
on the search path, so the same command-line overrides work as with solo-learn::

    load_recipe("byol.yaml", ["optimizer.batch_size=16", "+geometry=on",
                              "geometry.head.name=smooth_mlp"])

Both hosts call it: the lightly host to build its run, the solo host to hand the same
composed config to solo-learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_geometry.config import register_configs
from solo_geometry.config.groups import SEARCHPATH
from solo_geometry.config.overrides import check_geometry_overrides

__all__ = [
    "GEOMETRY_SEARCHPATH",
    "NUMBERS",
    "RecipeError",
    "check_recipe_numbers",
    "load_recipe",
    "recipe_from_yaml",
    "split_overrides",
]

# Where the ``geometry`` config group (on.yaml, off.yaml) lives: package data of this package.
GEOMETRY_SEARCHPATH = SEARCHPATH

# The defaults entries solo-learn recipes carry for Hydra's own logging; harmless under compose,
# listed here only so error messages can tell them apart from recipe content.
_HYDRA_ONLY_KEYS = ("hydra",)

# Recipe numbers with a range, its least value and a value besides the range that means
# something (Lightning's max_steps=-1: no limit): solo-learn's scheduler divides by max_epochs,
# Lightning refuses the rest at the trainer's start, in the launched process.
NUMBERS: tuple[tuple[str, type, float, float | None], ...] = (
    ("max_epochs", int, 1, None),
    ("max_steps", int, 1, -1),
    ("accumulate_grad_batches", int, 1, None),
    ("check_val_every_n_epoch", int, 1, None),
    ("num_nodes", int, 1, None),
    ("optimizer.batch_size", int, 1, None),
    ("optimizer.lr", float, 0, None),
    ("optimizer.classifier_lr", float, 0, None),
    ("optimizer.weight_decay", float, 0, None),
    ("data.num_workers", int, 0, None),
    ("method_kwargs.proj_hidden_dim", int, 1, None),
    ("method_kwargs.proj_output_dim", int, 1, None),
)


class RecipeError(ValueError):
    """A recipe file or an override could not be composed into a config."""


def _check_path(config: str | Path) -> Path:
    """Resolve and check the recipe path.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if it is not a ``.yaml``/``.yml`` file.
    """
    path = Path(config).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"recipe file {str(config)!r} not found (resolved to {path})")
    if path.suffix not in {".yaml", ".yml"}:
        raise ValueError(f"recipe must be a .yaml or .yml file, got {str(config)!r}")
    return path


def _searchpath_override(overrides: Sequence[str]) -> list[str]:
    """Return the overrides with this package's config group added to Hydra's search path.

    A user override of ``hydra.searchpath`` is kept and extended rather than replaced.
    """
    out = [o for o in overrides if not o.lstrip("+~").startswith("hydra.searchpath=")]
    user = [o for o in overrides if o.lstrip("+~").startswith("hydra.searchpath=")]
    paths: list[str] = []
    for item in user:
        value = item.split("=", 1)[1].strip()
        if value.startswith("[") and value.endswith("]"):
            paths.extend(p.strip() for p in value[1:-1].split(",") if p.strip())
        elif value:
            paths.append(value)
    if GEOMETRY_SEARCHPATH not in paths:
        paths.append(GEOMETRY_SEARCHPATH)
    return [*out, f"hydra.searchpath=[{','.join(paths)}]"]


def load_recipe(config: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """Compose a solo-learn recipe with Hydra-syntax overrides.

    The recipe's folder is the config directory (so its ``defaults`` list resolves as under
    solo-learn's ``main_pretrain.py --config-path ... --config-name ...``), and
    ``pkg://solo_geometry.config.groups`` is on the search path so ``+geometry=on`` composes.
    Hydra's own ``hydra:`` node is not returned. The result is not in struct mode, as solo-learn
    turns struct mode off before filling in its defaults.

    Args:
        config: path to the recipe YAML file.
        overrides: Hydra overrides, e.g. ``["optimizer.lr=0.1", "+geometry=on"]``.

    Returns:
        The composed config.

    Raises:
        FileNotFoundError: if the recipe file does not exist.
        RecipeError: if Hydra cannot compose the recipe with these overrides (the message
            names the override or the missing defaults entry, and OmegaConf's reason), or a
            ``geometry.*`` override of an unknown option or of a value of the wrong type, as
            written (:func:`~solo_geometry.config.overrides.check_geometry_overrides`).
    """
    register_configs()  # the group's YAML options extend the "schema" node
    path = _check_path(config)
    bad = [o for o in overrides if not isinstance(o, str) or not ("=" in o or o.startswith("~"))]
    if bad:
        raise RecipeError(f"overrides must look like key=value, +group=option or ~key; got {bad}")
    try:  # the values as written, before OmegaConf coerces them
        check_geometry_overrides(overrides)
    except ValueError as err:
        raise RecipeError(str(err)) from None
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.2"):
            cfg = compose(config_name=path.stem, overrides=_searchpath_override(overrides))
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as err:
        raise RecipeError(
            f"cannot compose recipe {str(path)!r} with overrides {list(overrides)}: {err}"
            + _reason(err)
        ) from err
    for key in _HYDRA_ONLY_KEYS:
        if key in cfg:
            del cfg[key]
    OmegaConf.set_struct(cfg, False)
    return cfg


def _reason(err: BaseException) -> str:
    """OmegaConf's reason behind Hydra's ``Error merging override ...`` (its first line), if any."""
    cause = err.__cause__
    if not isinstance(cause, OmegaConfBaseException) or not str(cause).strip():
        return ""
    return f" ({str(cause).strip().splitlines()[0]})"


def check_recipe_numbers(cfg: DictConfig) -> None:
    """Check the recipe numbers of :data:`NUMBERS` for their ranges, on either host.

    Args:
        cfg: the composed recipe; a field it lacks is left to the host's defaults.

    Raises:
        ValueError: naming the first field out of its range (``max_epochs=0``, a negative
            ``optimizer.lr``), its value and the range expected.
    """
    for key, kind, least, special in NUMBERS:
        value: Any = OmegaConf.select(cfg, key, default=None)
        if value is None or value == special and not isinstance(value, bool):
            continue
        ok = isinstance(value, int) if kind is int else isinstance(value, int | float)
        finite = not isinstance(value, float) or math.isfinite(value)
        if not ok or isinstance(value, bool) or not finite or value < least:
            what = "an integer" if kind is int else "a finite number"
            also = f" (or {special:g})" if special is not None else ""
            raise ValueError(f"recipe field {key}={value!r} must be {what} >= {least:g}{also}")


def recipe_from_yaml(text: str) -> DictConfig:
    """Parse a recipe given as YAML text (no ``defaults`` list, no overrides).

    Useful in tests and notebooks where the recipe is a string.

    Args:
        text: YAML text of a complete recipe.

    Returns:
        The config, not in struct mode.

    Raises:
        RecipeError: if the text is not a YAML mapping.
    """
    cfg = OmegaConf.create(text)
    if not isinstance(cfg, DictConfig):
        raise RecipeError(f"a recipe must be a YAML mapping, got {type(cfg).__name__}")
    if "defaults" in cfg:
        raise RecipeError("recipe text has a defaults list; write it to a file and use load_recipe")
    OmegaConf.set_struct(cfg, False)
    return cfg


def split_overrides(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split command-line leftovers into Hydra overrides and anything else.

    An override is ``key=value``, ``+key=value``, ``++key=value`` or ``~key``; everything else
    (a stray flag, a bare word) is returned second so the caller can report it.

    Args:
        args: the remaining command-line words.

    Returns:
        ``(overrides, others)``.
    """
    overrides: list[str] = []
    others: list[str] = []
    for arg in args:
        is_override = ("=" in arg and not arg.startswith("-")) or (
            arg.startswith("~") and len(arg) > 1
        )
        (overrides if is_override else others).append(arg)
    return overrides, others
