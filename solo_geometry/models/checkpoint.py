"""Backbone and head rebuilt from a solo-learn or solo-geometry checkpoint, without solo-learn.

Keys are loaded by prefix (``backbone.*``, ``projector.*``) with ``strict=True``; a mismatch is an
error listing the missing and unexpected keys, never a silent partial load (STYLE.md rule 9).

Files are read by :func:`read_checkpoint`: ``.safetensors`` through safetensors, anything else
through ``torch.load(weights_only=True)`` (plain containers and tensors, plus the few plain data
classes checkpoints carry: omegaconf containers, ``argparse.Namespace``). A pickle that needs more
is refused with an error saying so, unless the caller passes ``trust_pickle=True`` for a file it
trusts (a full pickle can run code stored in the file).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import base as omegaconf_base
from omegaconf import nodes as omegaconf_nodes
from safetensors.torch import load_file
from torch import Tensor, nn

from solo_geometry.config import GeometryConfig, geometry_config
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import (
    MAX_CHECKPOINT_BYTES,
    MAX_JSON_BYTES,
    check_size,
    read_bytes,
    refuse_link,
)
from solo_geometry.inputs.datasets import MeanStd, mean_std_of
from solo_geometry.models.backbones import build_backbone, resolve_stem
from solo_geometry.models.heads import build_configured_head
from solo_geometry.models.init import pseudo_collapse_, pseudo_collapse_backbone_
from solo_geometry.models.solo_mlp import solo_projector

__all__ = [
    "SAFE_GLOBALS",
    "LoadedModel",
    "build_from_config",
    "build_untrained",
    "check_weights_only",
    "load_model",
    "load_prefixed",
    "read_checkpoint",
    "read_recipe",
    "stored_geometry",
]


@dataclass(frozen=True)
class LoadedModel:
    """Backbone and head rebuilt from a checkpoint, with where they came from.

    Attributes:
        backbone: images (N, 3, H, W) -> Z (N, d).
        head: Z (N, d) -> H (N, p).
        checkpoint: the checkpoint file read.
        run_dir: the run folder (outputs go here).
        mean_std: the input normalisation of the recipe's dataset.
        notes: human-readable facts about the loading (ignored key prefixes, head kind).
        untrained: ``() -> (backbone, head)``: the same constructors, untrained (the recipe's
            ``geometry.init`` initialisers applied), for the probes' random-init rows.
    """

    backbone: nn.Module
    head: nn.Module
    checkpoint: Path
    run_dir: Path
    mean_std: MeanStd
    notes: list[str]
    untrained: Callable[[], tuple[nn.Module, nn.Module]] | None = None


# What ``torch.load(weights_only=True)`` may rebuild besides tensors and plain containers:
# plain data classes whose rebuilding runs no code from the file.
SAFE_GLOBALS: tuple[Any, ...] = (
    argparse.Namespace,
    DictConfig,
    ListConfig,
    omegaconf_base.ContainerMetadata,
    omegaconf_base.Metadata,
    omegaconf_nodes.AnyNode,
    Any,
    dict,
    list,
    int,
    float,
    str,
    bool,
)


def read_checkpoint(path: str | Path, *, trust_pickle: bool = False) -> Any:
    """Read a checkpoint file without running code stored in it.

    Args:
        path: a ``.safetensors`` file, or a ``torch.save`` file (``.ckpt``, ``.pth``, ``.pt``).
        trust_pickle: read a ``torch.save`` file with a full pickle (``weights_only=False``);
            only for files you trust.

    Returns:
        The file's content: a flat ``{key: tensor}`` for safetensors, else what was saved.

    Raises:
        ValueError: for a missing or unreadable file, one over
            :data:`~solo_geometry.folder.safe_files.MAX_CHECKPOINT_BYTES`, or a pickle that needs
            more than a weights-only load (the message names ``trust_pickle``).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist or is not a file")
    check_size(path, path.stat().st_size, MAX_CHECKPOINT_BYTES, "checkpoint")
    if path.suffix == ".safetensors":
        try:
            return load_file(str(path), device="cpu")
        except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
            raise ValueError(f"cannot read checkpoint {str(path)!r}: {err}") from err
    try:
        if trust_pickle:
            return torch.load(path, map_location="cpu", weights_only=False)
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"cannot read checkpoint {str(path)!r} with a weights-only load "
            f"({_refusal(err)}); if you "
            f"trust the file, pass --trust-pickle (trust_pickle=True): a full pickle can run "
            f"code stored in it"
        ) from err
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ValueError(f"cannot read checkpoint {str(path)!r}: {err}") from err


def _refusal(err: pickle.UnpicklingError) -> str:
    """The line of torch's weights-only refusal that names what it refused."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    named = [line for line in lines if "GLOBAL" in line or "Unsupported" in line]
    return (named or lines or [type(err).__name__])[0]


def check_weights_only(path: str | Path) -> None:
    """Check that a checkpoint loads as Lightning's trainer loads it, before a resumed run starts.

    The trainer reads ``fit(ckpt_path=...)`` with ``torch.load``'s default, a weights-only
    load; this is the same load (memory-mapped: the tensors are not read), so a checkpoint
    holding a pickle payload is one error here instead of a traceback in the launched run.

    Raises:
        ValueError: naming the file and what the weights-only load refused; a symbolic link
            or a file over :data:`~solo_geometry.folder.safe_files.MAX_CHECKPOINT_BYTES`.
    """
    refuse_link(path, "checkpoint")
    check_size(path, Path(path).stat().st_size, MAX_CHECKPOINT_BYTES, "checkpoint")
    if os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") not in ("0", ""):
        return  # the user made torch's default a full pickle: the trainer will read it so
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"checkpoint {str(path)!r} cannot be resumed: a weights-only load, as the trainer's, "
            f"refuses it ({_refusal(err)}); expected a checkpoint this run's trainer wrote, "
            f"tensors and plain data only (a full pickle can run code stored in it)"
        ) from None
    except Exception:  # noqa: BLE001 - not a refusal: the trainer reports it as it would
        return


def _find_checkpoint(path: Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) for a run folder or a checkpoint path."""
    if path.is_dir():
        latest = RunFolder(path).latest_checkpoint()
        if latest is None:
            raise ValueError(f"run folder {str(path)!r} has no checkpoints/**/*.ckpt")
        return latest, path
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is neither a run folder nor a checkpoint file")
    # the run folder holds checkpoints/ (lightly: checkpoints/x.ckpt; solo: checkpoints/<m>/<id>/)
    runs = [p.parent for p in path.parents if p.name == RunFolder.CHECKPOINTS]
    return path, runs[0] if runs else path.parent


def read_recipe(path: str | Path) -> dict[str, Any]:
    """A recipe file (YAML, or JSON for ``args.json``) as a mapping, running nothing in it.

    Args:
        path: the file.

    Returns:
        The recipe's fields.

    Raises:
        ValueError: if the file does not parse as plain YAML/JSON (a tag building a Python
            object, ``!!python/object/apply:...``, is refused by the safe loader) or is not a
            mapping.
    """
    path = Path(path)
    try:
        text = read_bytes(path, MAX_JSON_BYTES, "recipe").decode("utf-8")
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as err:  # UnicodeDecodeError and JSON's are ValueErrors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"recipe {str(path)!r} is not plain YAML ({first}); expected a mapping "
            "of recipe fields, no tags building Python objects"
        ) from None
    if not isinstance(loaded, dict):
        raise ValueError(
            f"recipe {str(path)!r} holds a {type(loaded).__name__}, not a mapping "
            "of recipe fields (method, backbone, data, ...)"
        )
    return loaded


def _node(cfg: dict[str, Any], key: str, kind: type = dict) -> Any:
    """``cfg[key]`` (empty when absent or null), which must be a ``kind`` (a mapping or list)."""
    value = cfg.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ValueError(
            f"recipe field {key} must be a {'mapping' if kind is dict else 'list'}, "
            f"got {value!r:.80}"
        )
    return value


def _read_config(ckpt: dict[str, Any], ckpt_path: Path, run_dir: Path) -> dict[str, Any]:
    """The recipe config: checkpoint hyper-parameters, <run>/config.yaml or args.json."""
    hp = ckpt.get("hyper_parameters") or {}
    cfg = hp.get("cfg", hp) if isinstance(hp, dict) else {}
    if isinstance(cfg, dict) and "backbone" in cfg:
        return cfg
    for candidate in (RunFolder(run_dir).config, ckpt_path.parent / "args.json"):
        if candidate.is_file():
            return read_recipe(candidate)
    raise ValueError(
        f"no config for {str(ckpt_path)!r}: none in the checkpoint's hyper_parameters, "
        f"{str(RunFolder(run_dir).config)!r} or {str(ckpt_path.parent / 'args.json')!r}"
    )


def _load_prefix(module: nn.Module, state: dict[str, Tensor], prefix: str) -> None:
    """Load ``prefix.*`` keys strictly: a mismatch names the missing and unexpected keys."""
    sub = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}
    result = module.load_state_dict(sub, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"checkpoint keys {prefix}.* do not match the rebuilt module: missing "
            f"{result.missing_keys[:10]}, unexpected {result.unexpected_keys[:10]}"
        )


def stored_geometry(cfg: dict[str, Any]) -> GeometryConfig | None:
    """The ``geometry`` node of a config a run stored (checkpoint, zoo card's recipe.yaml).

    A key an older release wrote (:data:`~solo_geometry.config.MOVED_TO_SPECTRUM`) is read
    without its deprecation warning: the file is no one's to edit.
    """
    if "geometry" not in cfg:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return geometry_config(OmegaConf.create(cfg))


def _build_head(cfg: dict[str, Any], d: int) -> tuple[nn.Module, str]:
    kwargs = _node(cfg, "method_kwargs")
    hidden, out = kwargs.get("proj_hidden_dim"), kwargs.get("proj_output_dim")
    if hidden is None or out is None:
        raise ValueError("config lacks method_kwargs.proj_hidden_dim / proj_output_dim")
    gcfg = stored_geometry(cfg)
    if gcfg is not None and gcfg.head.name != "projector":
        head = build_configured_head(gcfg.head, d, int(out), default_hidden=int(hidden))
        return head, f"head {gcfg.head.name} (geometry.head)"
    method = str(cfg.get("method"))
    return solo_projector(method, d, int(hidden), int(out)), f"{method} projector"


def build_from_config(cfg: dict[str, Any]) -> tuple[nn.Module, nn.Module, MeanStd, list[str]]:
    """Backbone and head a recipe config describes (untrained), and its input normalisation.

    Args:
        cfg: the resolved recipe (``backbone.name``, ``method``, ``method_kwargs``, ``data``,
            optionally ``geometry.head``).

    Returns:
        ``(backbone, head, mean_std, notes)``; the head's keys are those of ``projector.*``.

    Raises:
        ValueError: an unknown backbone or method, missing projector widths, or a node of the
            wrong type (``data``, ``backbone``, ``method_kwargs``: mappings; ``augmentations``:
            a list).
    """
    if not isinstance(cfg, dict):
        raise ValueError(f"a recipe must be a mapping of fields, got {cfg!r:.80}")
    data, node = _node(cfg, "data"), _node(cfg, "backbone")
    dataset = str(data.get("dataset", ""))
    name = str(node.get("name"))
    stem = resolve_stem(str(node.get("stem", "auto")), dataset)
    backbone, d = build_backbone(name, stem=stem)
    head, kind = _build_head(cfg, d)
    notes = [f"backbone {name} (stem: {stem})", kind]
    augs = _node(cfg, "augmentations", list) or [{}]
    first = augs[0] if isinstance(augs[0], dict) else {}
    mean_std = mean_std_of(  # as the recipe trained it
        dataset, first.get("mean"), first.get("std"), normalise=bool(data.get("normalize", True))
    )
    return backbone, head, mean_std, notes


def build_untrained(cfg: dict[str, Any]) -> tuple[nn.Module, nn.Module]:
    """Backbone and head as :func:`build_from_config` builds them, the recipe's initialisers on.

    ``geometry.init.pseudo_collapse`` scales them as the hosts do at construction; seed the
    global RNG before calling for a reproducible draw (``evaluation.random_init_modules``).
    """
    backbone, head, _, _ = build_from_config(cfg)
    gcfg = stored_geometry(cfg)
    if gcfg is not None and gcfg.init.pseudo_collapse:
        pseudo_collapse_(head, gcfg.init.alpha)
        if gcfg.init.backbone:
            pseudo_collapse_backbone_(backbone, gcfg.init.alpha)
    return backbone, head


def load_prefixed(backbone: nn.Module, head: nn.Module, state: dict[str, Tensor]) -> None:
    """Load ``backbone.*`` and ``projector.*`` keys strictly (a mismatch names the keys).

    Raises:
        ValueError: if the keys under either prefix do not match the module.
    """
    _load_prefix(backbone, state, "backbone")
    _load_prefix(head, state, "projector")


def load_model(run_or_checkpoint: str | Path, *, trust_pickle: bool = False) -> LoadedModel:
    """Rebuild backbone and head from a run folder or checkpoint, without solo-learn.

    Args:
        run_or_checkpoint: a run folder (newest ``checkpoints/**/*.ckpt``) or a ``.ckpt`` file.
        trust_pickle: read the checkpoint with a full pickle (see :func:`read_checkpoint`).

    Returns:
        The loaded model, in eval mode on CPU.

    Raises:
        ValueError: for a missing path, an unreadable checkpoint, no config, an unknown
            backbone or method, or checkpoint keys that do not match.
    """
    ckpt_path, run_dir = _find_checkpoint(Path(run_or_checkpoint))
    ckpt = read_checkpoint(ckpt_path, trust_pickle=trust_pickle)
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {str(ckpt_path)!r} is not a dictionary")
    state = ckpt.get("state_dict", ckpt)
    cfg = _read_config(ckpt, ckpt_path, run_dir)
    backbone, head, mean_std, notes = build_from_config(cfg)
    load_prefixed(backbone, head, state)
    ignored = sorted({k.split(".")[0] for k in state} - {"backbone", "projector"})
    notes = [f"checkpoint {ckpt_path}", *notes, f"ignored key prefixes: {ignored}"]
    untrained = functools.partial(build_untrained, cfg)
    return LoadedModel(backbone.eval(), head.eval(), ckpt_path, run_dir, mean_std, notes, untrained)
