"""What the solo-learn host checks in-process before it launches solo-learn's ``main_pretrain``.

solo-learn validates a recipe with bare ``assert`` statements inside the launched process, so a
wrong value there ends in two tracebacks and a failed launch. :func:`check_solo_recipe` finds
the same faults first, on the composed recipe, with a one-line ``ValueError`` naming the field,
the value and what was expected:

* the method is one of ``solo.methods.METHODS``; the nodes are mappings (``augmentations`` a
  list); the scalar fields solo-learn computes with have their types; dataset, backbone,
  optimizer and scheduler names are among solo-learn's;
* the data folders solo-learn and the probes will read pass
  :func:`solo_geometry.inputs.datasets.check_image_folder` (every class has an image, every image
  decodes) unless torchvision downloads the dataset;
* solo-learn's own config parsing (``solo.args.pretrain.parse_cfg`` and the method's
  ``add_and_assert_specific_cfg``) runs on a copy, its failed ``assert`` reported by its source.
"""

from __future__ import annotations

import copy
import sys
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_geometry.config import GeometryConfig, geometry_config
from solo_geometry.config.overrides import check_hydra_overrides
from solo_geometry.extras import require
from solo_geometry.inputs.datasets import check_image_folder
from solo_geometry.recipe import check_recipe_numbers
from solo_geometry.runtime.callbacks import check_probe_images

__all__ = ["CHOICES", "NODES", "SCALARS", "check_solo_recipe", "geometry_of"]

# Recipe nodes that must be mappings (solo-learn reads their keys).
NODES = ("backbone", "method_kwargs", "data", "optimizer", "scheduler", "checkpoint")
# Scalar fields solo-learn computes with, and their types (int accepts no bool; float an int).
SCALARS: tuple[tuple[str, type], ...] = (
    ("max_epochs", int),
    ("seed", int),
    ("optimizer.batch_size", int),
    ("optimizer.lr", float),
    ("optimizer.weight_decay", float),
    ("optimizer.classifier_lr", float),
    ("data.num_workers", int),
    ("data.fraction", float),
    ("method_kwargs.proj_hidden_dim", int),
    ("method_kwargs.proj_output_dim", int),
)
# Fields with a fixed set of values in solo-learn: the module and attribute holding them.
CHOICES = (
    ("data.dataset", "solo.args.pretrain", "_SUPPORTED_DATASETS"),
    ("backbone.name", "solo.methods.base", "BaseMethod._BACKBONES"),
    ("optimizer.name", "solo.methods.base", "BaseMethod._OPTIMIZERS"),
    ("scheduler.name", "solo.methods.base", "BaseMethod._SCHEDULERS"),
)
# Datasets torchvision downloads into data.train_path: no image folder to check.
_DOWNLOADED = ("cifar10", "cifar100", "stl10")


def _solo(module: str) -> ModuleType:
    """Import a solo-learn module without its import-time warnings.

    timm's deprecations and registry notes would otherwise stand between the command's progress
    and its error; the launched run shows them as before.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return require(module, extra="solo")


def _check_types(cfg: DictConfig) -> None:
    for key in NODES:
        node = OmegaConf.select(cfg, key, default=None)
        if node is not None and not isinstance(node, DictConfig):
            raise ValueError(f"recipe field {key} must be a mapping, got {node!r}")
    augs = OmegaConf.select(cfg, "augmentations", default=None)
    if augs is not None and not isinstance(augs, ListConfig):
        raise ValueError(f"recipe field augmentations must be a list of pipelines, got {augs!r}")
    for key, kind in SCALARS:
        value = OmegaConf.select(cfg, key, default=None)
        ok = isinstance(value, int) if kind is int else isinstance(value, int | float)
        if value is not None and (not ok or isinstance(value, bool)):
            raise ValueError(f"recipe field {key}={value!r} must be of type {kind.__name__}")


def _check_choices(cfg: DictConfig) -> None:
    for key, module, attr in CHOICES:
        value = OmegaConf.select(cfg, key, default=None)
        choices: Any = _solo(module)
        for part in attr.split("."):
            choices = getattr(choices, part)
        if value is not None and value not in choices:
            raise ValueError(
                f"recipe field {key}={value!r} is not known to solo-learn; choose from "
                f"{sorted(choices)}"
            )


def _check_folders(cfg: DictConfig) -> None:
    """The image folders solo-learn and the geometry probes will read."""
    dataset = OmegaConf.select(cfg, "data.dataset", default=None)
    fmt = OmegaConf.select(cfg, "data.format", default="image_folder")
    if dataset not in _DOWNLOADED and fmt in ("image_folder", "dali"):
        for key in ("data.train_path", "data.val_path"):
            path = OmegaConf.select(cfg, key, default=None)
            if path is not None or key == "data.train_path":
                check_image_folder(str(path), key)
    probes = OmegaConf.select(cfg, "geometry.probes.data", default=None)
    if probes and OmegaConf.select(cfg, "geometry.probes.enabled", default=True):
        check_image_folder(str(probes), "geometry.probes.data")
    geometry = geometry_config(cfg)
    if geometry is not None:  # the folders the probes will stack: one image size
        select = OmegaConf.select
        check_probe_images(
            geometry.probes,
            select(cfg, "data.train_path", default=None),
            select(cfg, "data.val_path", default=None),
        )


def _solo_parse(cfg: DictConfig, method: str) -> None:
    """solo-learn's own config parsing on a copy; a failed check becomes a ``ValueError``."""
    parse_cfg = _solo("solo.args.pretrain").parse_cfg
    methods = _solo("solo.methods").METHODS
    trial = copy.deepcopy(cfg)
    OmegaConf.set_struct(trial, False)
    try:
        methods[method].add_and_assert_specific_cfg(parse_cfg(trial))
    except (AssertionError, KeyError, AttributeError, TypeError, ValueError) as err:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        what = f"{type(err).__name__}: {err}" if str(err) else (frame.line or type(err).__name__)
        raise ValueError(
            f"recipe rejected by solo-learn's config checks ({what}, at "
            f"{Path(frame.filename).name}:{frame.lineno}); expected a recipe solo-learn's "
            f"main_pretrain accepts"
        ) from None


def check_solo_recipe(cfg: DictConfig) -> None:
    """Check a composed recipe for the solo-learn host before anything is launched or created.

    Args:
        cfg: the composed recipe (:func:`solo_geometry.recipe.load_recipe`).

    Raises:
        ValueError: an unknown method, a node or field of the wrong type, a class folder
            without an image, an image that does not decode, or a check of solo-learn's own
            that fails, naming the field and the value.
        FileNotFoundError: a data folder that does not exist or has no class subfolders.
        ModuleNotFoundError: solo-learn is not importable.
    """
    methods = _solo("solo.methods").METHODS
    method: Any = OmegaConf.select(cfg, "method", default=None)
    if method not in methods:
        raise ValueError(
            f"recipe field method={method!r} is not a solo-learn method; choose from "
            f"{sorted(methods)}"
        )
    _check_types(cfg)
    check_recipe_numbers(cfg)  # max_epochs=0 would end in solo-learn's scheduler
    _check_choices(cfg)
    _check_folders(cfg)
    _solo_parse(cfg, str(method))


def geometry_of(cfg: Any) -> GeometryConfig | None:
    """The recipe's geometry config (None: absent or off), its overrides checked as written.

    In a Hydra job (solo-learn's own ``main_pretrain.py`` with ``+geometry=on``) the raw
    ``geometry.*`` overrides Hydra recorded are checked first (OmegaConf has coerced the composed
    ones: ``geometry.alert.stop=2`` reads ``true``), and bad input ends the job as the CLI does:
    one line on stderr, exit status 2, no traceback. Elsewhere a ``ValueError`` is raised.
    """
    if not isinstance(cfg, DictConfig):
        return None
    try:
        if "geometry" in cfg:
            check_hydra_overrides()
        return geometry_config(cfg)
    except ValueError as err:
        if not HydraConfig.initialized():
            raise
        print(f"solo-geometry: error: {' '.join(str(err).split())}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
